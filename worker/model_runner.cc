#include "worker/model_runner.h"

#include <utility>

#include "common/logging.h"
#include "common/status_macros.h"

namespace tpserve {

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(const ModelRunnerOptions& options,
                                                                 Communicator* comm,
                                                                 DeviceCommunicator* device_comm) {
  if (options.pipeline_stages > 1 && !options.draft_model_path.empty()) {
    return absl::InvalidArgumentError("speculative decoding does not run with pipeline stages");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LoadedShard> loaded, LoadShard(options, comm, device_comm));
  // The rank that turns logits into tokens: tensor-parallel rank 0 of the last stage.
  const bool samples = loaded->layout().last_stage() && comm->rank() == 0;
  std::unique_ptr<DraftRunner> draft;
  if (samples && !options.draft_model_path.empty()) {
    ASSIGN_OR_RETURN(draft,
                     DraftRunner::Create(options, loaded->kv_shape(), loaded->config().vocab_size));
  }
  return std::unique_ptr<ModelRunner>(
      new ModelRunner(std::move(loaded), std::move(draft), samples));
}

ModelRunner::ModelRunner(std::unique_ptr<LoadedShard> loaded, std::unique_ptr<DraftRunner> draft,
                         bool samples)
    : loaded_(std::move(loaded)),
      draft_(std::move(draft)),
      samples_(samples),
      planner_(loaded_->config().vocab_size, loaded_->config().context_length, loaded_->kv_shape(),
               samples, loaded_->loras().num_slots()) {}

absl::StatusOr<v1::StepResponse> ModelRunner::Step(const v1::StepRequest& request) {
  ASSIGN_OR_RETURN(StepPlanner::Plan plan, planner_.Begin(request));
  v1::StepResponse response;
  if (request.sequences().empty()) return response;
  if (draft_ != nullptr) {
    // Drafts this rank proposed are verified against the draft's q, which never left it.
    for (int i = 0; i < request.sequences_size(); ++i) {
      LogitsRequest& logits = plan.logits[i];
      if (logits.drafts.empty() || !logits.draft_probs.empty()) continue;
      logits.draft_probs = draft_->ProposalProbs(request.sequences(i).seq_id(), logits.drafts);
    }
  }

  const absl::Status status =
      loaded_->forward_pass().ForwardAndProcess(plan.batch, plan.logits, &results_);
  if (!status.ok()) {
    planner_.Abandon(plan);
    return status;
  }
  planner_.Commit(request, plan);
  if (samples_) WriteOutputs(request, results_, &response);
  if (draft_ != nullptr) {
    // The step itself is done on every rank: a draft that fails costs only its proposals.
    const absl::Status drafted = draft_->Propose(request, planner_, results_, &response);
    if (!drafted.ok()) {
      LogWarning("runner", "step %llu: no proposals: %s",
                 static_cast<unsigned long long>(request.step_id()), drafted.message());
      draft_->Clear();
      for (v1::SequenceOutput& out : *response.mutable_outputs()) out.clear_proposal_token_ids();
    }
  }
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
