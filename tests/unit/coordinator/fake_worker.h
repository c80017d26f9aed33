// A WorkerService for coordinator tests: serves on 127.0.0.1, runs a deterministic stand-in
// "model" (the next token is a function of the whole sequence), and checks that the steps it
// receives are consistent: step ids consecutive, positions continuing each sequence, block
// tables covering the tokens, a cached prefix (a first step past position 0) found in its blocks
// exactly as an earlier step wrote it, and no write into a block slot another live sequence
// still reads. Init starts a new group, as a real worker's does: no sequences, no KV, step ids
// from 1.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "grpcpp/grpcpp.h"
#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve::testing {

struct FakeWorkerOptions {
  int64_t kv_cache_blocks = 64;
  int64_t vocab_size = 1000;
  int64_t context_length = 256;
  uint64_t model_file_size = 1000;
  std::string fingerprint = "fingerprint";
  std::string load_error;  // LoadShard fails with NOT_FOUND and this message
  // Step answers UNAVAILABLE "injected failure" the first time it sees this step id.
  uint64_t fail_at_step = 0;
  // Step answers UNAVAILABLE "injected failure" whenever it is given a new sequence holding this
  // token: a request that kills its step each time it runs (-1: none).
  int32_t poison_token = -1;
  // Step refuses the step for a new sequence holding this token (StepResponse.refused, nothing of
  // the step applied but its finished ids), as a worker refuses one sequence's data (-1: none).
  int32_t refuse_token = -1;
  uint64_t hang_at_step = 0;      // Step does not answer this step id until the worker goes away
  std::string state = "serving";  // what Status reports
  // Status stops answering (until the worker goes away) after this many answers; -1: never.
  int silent_after_heartbeats = -1;
  absl::Duration status_delay;  // each Status answers this late
  absl::Duration step_delay;    // each Step answers this late (after its checks)
};

class FakeWorker final : public v1::WorkerService::Service {
 public:
  explicit FakeWorker(FakeWorkerOptions options);
  ~FakeWorker() override;

  const std::string& address() const { return address_; }
  // When Status last answered (InfinitePast before the first answer).
  absl::Time last_status_answer() const;
  // Waits until Status has answered `n` times, or `deadline`; true when it has.
  bool AwaitStatusAnswers(int n, absl::Time deadline) const;
  // Inconsistencies seen in the steps so far.
  std::vector<std::string> errors() const;
  // The most Step calls this worker held at once (a step waits for the one before it to have run,
  // as a real worker's does).
  int max_steps_at_once() const;

  // The stand-in model.
  static int32_t NextToken(const std::vector<int32_t>& context);
  static float Logit(int32_t token, int64_t v) { return token * 0.25f + v * 0.001f; }

  grpc::Status Init(grpc::ServerContext*, const v1::InitRequest* request,
                    v1::InitResponse* response) override;
  grpc::Status LoadShard(grpc::ServerContext*, const v1::LoadShardRequest*,
                         v1::LoadShardResponse* response) override;
  grpc::Status Step(grpc::ServerContext*, const v1::StepRequest* request,
                    v1::StepResponse* response) override;
  grpc::Status Status(grpc::ServerContext*, const v1::WorkerStatusRequest*,
                      v1::WorkerStatusResponse* response) override;
  grpc::Status Shutdown(grpc::ServerContext*, const v1::ShutdownRequest*,
                        v1::ShutdownResponse*) override;

 private:
  struct Seq {
    std::vector<int32_t> tokens;  // known: prompt, earlier output, then every token run
    std::vector<int32_t> blocks;
    int64_t num_computed = -1;  // -1 before the first step
  };
  // Step's checks and answer, in step-id order.
  grpc::Status RunStep(const v1::StepRequest* request, v1::StepResponse* response);
  void Error(std::string message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Checks and records the K/V writes of `seq_id` for positions [start, start + tokens.size()).
  void Write(uint64_t seq_id, const Seq& seq, int64_t start, absl::Span<const int32_t> tokens)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const FakeWorkerOptions options_;
  absl::Notification release_;  // ends a hang
  std::unique_ptr<grpc::Server> server_;
  std::string address_;

  mutable absl::Mutex mutex_;
  int rank_ ABSL_GUARDED_BY(mutex_) = -1;
  int64_t block_size_ ABSL_GUARDED_BY(mutex_) = 16;
  uint64_t last_step_ ABSL_GUARDED_BY(mutex_) = 0;
  int steps_now_ ABSL_GUARDED_BY(mutex_) = 0;
  int max_steps_at_once_ ABSL_GUARDED_BY(mutex_) = 0;
  bool failed_ ABSL_GUARDED_BY(mutex_) = false;  // fail_at_step has answered
  int status_answers_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Time last_status_answer_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
  std::map<uint64_t, Seq> seqs_ ABSL_GUARDED_BY(mutex_);
  // What each block's slots hold: the token whose K/V was written there (-1: nothing yet).
  std::map<int32_t, std::vector<int32_t>> slots_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace tpserve::testing
