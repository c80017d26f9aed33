#include "worker/model_runner.h"

#include <utility>

#include "common/status_macros.h"

namespace tpserve {

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(const ModelRunnerOptions& options,
                                                                 Communicator* comm,
                                                                 DeviceCommunicator* device_comm) {
  ASSIGN_OR_RETURN(std::unique_ptr<RankModel> loaded, LoadRankModel(options, comm, device_comm));
  return std::unique_ptr<ModelRunner>(new ModelRunner(std::move(loaded), comm->rank()));
}

ModelRunner::ModelRunner(std::unique_ptr<RankModel> loaded, int rank)
    : loaded_(std::move(loaded)),
      rank_(rank),
      planner_(loaded_->config().vocab_size, loaded_->config().context_length, loaded_->kv_shape(),
               rank) {}

absl::StatusOr<v1::StepResponse> ModelRunner::Step(const v1::StepRequest& request) {
  ASSIGN_OR_RETURN(StepPlanner::Plan plan, planner_.Begin(request));
  v1::StepResponse response;
  if (request.sequences().empty()) return response;

  const absl::Status status =
      loaded_->model().ForwardAndProcess(plan.batch, plan.logits, &results_);
  if (!status.ok()) {
    planner_.Abandon(plan);
    return status;
  }
  planner_.Commit(request, plan);
  if (rank_ == 0) WriteOutputs(request, results_, &response);
  return response;
}

void ModelRunner::WriteOutputs(const v1::StepRequest& request, std::vector<LogitsResult>& results,
                               v1::StepResponse* response) {
  for (int i = 0; i < request.sequences_size(); ++i) {
    const v1::ScheduledSequence& s = request.sequences(i);
    if (!s.sample() && !s.all_logits()) continue;
    LogitsResult& result = results[i];
    v1::SequenceOutput* out = response->add_outputs();
    out->set_seq_id(s.seq_id());
    out->mutable_logits()->Add(result.logits.begin(), result.logits.end());
    out->mutable_token_ids()->Add(result.tokens.begin(), result.tokens.end());
    out->mutable_logprobs()->Add(result.logprobs.begin(), result.logprobs.end());
    out->mutable_top_token_ids()->Add(result.top_token_ids.begin(), result.top_token_ids.end());
    out->mutable_top_logprobs()->Add(result.top_logprobs.begin(), result.top_logprobs.end());
  }
}

}  // namespace tpserve
