// ModelRunner: one rank's step, in one place. It owns the loaded model and what every rank caches
// about the running sequences, and turns a StepRequest into a StepResponse (DESIGN.md "Worker
// protocol"; the field semantics are in worker.proto):
//   drop finished → add new → plan the forward batch and the logits requests (StepPlanner) →
//   forward and process the logits (ForwardPass::ForwardAndProcess) → commit → write the
//   sampling rank's outputs (rank 0 of the last pipeline stage) → (that rank, with a draft model)
//   the next step's proposals (DraftRunner).
//
// Finished sequences are dropped whatever happens next; the rest is all or nothing: a refused
// step (INVALID_ARGUMENT naming the sequence and field) adds no sequence and changes no state.
//
// Not thread-safe: the worker's execution thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "tpserve/v1/worker.pb.h"
#include "worker/draft_runner.h"
#include "worker/loaded_shard.h"
#include "worker/step_planner.h"

namespace tpserve {

class ModelRunner {
 public:
  // Loads the model (LoadShard, which says what `comm` and `device_comm` are for); both must
  // outlive the runner.
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(
      const ModelRunnerOptions& options, Communicator* comm,
      DeviceCommunicator* device_comm = nullptr);

  // Runs one step. Beyond INVALID_ARGUMENT for a bad request, the model's own errors pass
  // through (another code than INVALID_ARGUMENT: the group is broken).
  absl::StatusOr<v1::StepResponse> Step(const v1::StepRequest& request);

  // Forgets every sequence (a re-formed group starts from none).
  void DropSequences() {
    planner_.Clear();
    if (draft_ != nullptr) draft_->Clear();
  }

  LoadedShard& shard() { return *loaded_; }
  bool samples() const { return samples_; }
  size_t num_sequences() const { return planner_.num_sequences(); }

 private:
  ModelRunner(std::unique_ptr<LoadedShard> loaded, std::unique_ptr<DraftRunner> draft,
              bool samples);

  static void WriteOutputs(const v1::StepRequest& request, std::vector<LogitsResult>& results,
                           v1::StepResponse* response);

  const std::unique_ptr<LoadedShard> loaded_;
  const std::unique_ptr<DraftRunner> draft_;  // the sampling rank with a draft model only
  const bool samples_;  // this rank turns logits into tokens and writes the outputs
  StepPlanner planner_;
  std::vector<LogitsResult> results_;  // reused between steps
};

}  // namespace tpserve
