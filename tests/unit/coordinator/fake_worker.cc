#include "tests/unit/coordinator/fake_worker.h"

#include <algorithm>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tpserve::testing {

FakeWorker::FakeWorker(FakeWorkerOptions options) : options_(std::move(options)) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.SetMaxSendMessageSize(256 << 20);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
  address_ = absl::StrCat("127.0.0.1:", port);
}

FakeWorker::~FakeWorker() {
  release_.Notify();
  server_->Shutdown(std::chrono::system_clock::now());
}

std::vector<std::string> FakeWorker::errors() const {
  absl::MutexLock lock(&mutex_);
  return errors_;
}

void FakeWorker::Error(std::string message) {
  errors_.push_back(absl::StrCat("rank ", rank_, ": ", message));
}

int32_t FakeWorker::NextToken(const std::vector<int32_t>& context) {
  int64_t h = static_cast<int64_t>(context.size());
  for (int32_t t : context) h = (h * 31 + t) % 1000003;
  return static_cast<int32_t>(100 + h % 900);
}

grpc::Status FakeWorker::Init(grpc::ServerContext*, const v1::InitRequest* request,
                              v1::InitResponse* response) {
  absl::MutexLock lock(&mutex_);
  rank_ = request->rank();
  block_size_ = request->block_size();
  last_step_ = 0;
  seqs_.clear();
  slots_.clear();
  response->set_hostname("fake");
  response->set_device_name("cpu");
  return grpc::Status::OK;
}

grpc::Status FakeWorker::LoadShard(grpc::ServerContext*, const v1::LoadShardRequest*,
                                   v1::LoadShardResponse* response) {
  if (!options_.load_error.empty()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, options_.load_error);
  }
  response->set_weight_bytes(100);
  response->set_kv_cache_blocks(options_.kv_cache_blocks);
  response->set_model_file_size(options_.model_file_size);
  response->set_model_fingerprint(options_.fingerprint);
  response->set_vocab_size(options_.vocab_size);
  response->set_context_length(options_.context_length);
  return grpc::Status::OK;
}

grpc::Status FakeWorker::Step(grpc::ServerContext*, const v1::StepRequest* request,
                              v1::StepResponse* response) {
  if (request->step_id() == options_.hang_at_step) {
    release_.WaitForNotificationWithTimeout(absl::Seconds(20));
    return grpc::Status(grpc::StatusCode::ABORTED, "released");
  }
  {
    absl::MutexLock lock(&mutex_);
    max_steps_at_once_ = std::max(max_steps_at_once_, ++steps_now_);
  }
  const grpc::Status status = RunStep(request, response);
  absl::SleepFor(options_.step_delay);
  absl::MutexLock lock(&mutex_);
  --steps_now_;
  return status;
}

int FakeWorker::max_steps_at_once() const {
  absl::MutexLock lock(&mutex_);
  return max_steps_at_once_;
}

grpc::Status FakeWorker::RunStep(const v1::StepRequest* request, v1::StepResponse* response) {
  absl::MutexLock lock(&mutex_);
  // The step before this one may still be on its way (several steps in flight).
  auto turn = [this, request]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return last_step_ + 1 >= request->step_id();
  };
  mutex_.AwaitWithTimeout(absl::Condition(&turn), absl::Seconds(10));
  if (request->step_id() != last_step_ + 1) {
    Error(absl::StrCat("step ", request->step_id(), " after ", last_step_));
  }
  last_step_ = request->step_id();  // a failed step is consumed too, as on a real worker
  if (request->step_id() == options_.fail_at_step && !failed_) {
    failed_ = true;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "injected failure");
  }
  for (const v1::NewSequence& added : request->new_sequences()) {
    if (absl::c_linear_search(added.prompt_token_ids(), options_.poison_token)) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "injected failure");
    }
  }
  response->set_step_id(request->step_id());
  for (uint64_t id : request->finished_seq_ids()) {
    if (seqs_.erase(id) == 0) Error(absl::StrCat("finished unknown sequence ", id));
  }
  for (const v1::NewSequence& added : request->new_sequences()) {
    if (absl::c_linear_search(added.prompt_token_ids(), options_.refuse_token)) {
      response->mutable_refused()->set_seq_id(added.seq_id());
      response->mutable_refused()->set_message("injected refusal");
      return grpc::Status::OK;
    }
  }
  for (const v1::NewSequence& added : request->new_sequences()) {
    if (seqs_.contains(added.seq_id())) Error(absl::StrCat("sequence ", added.seq_id(), " again"));
    Seq& seq = seqs_[added.seq_id()];
    seq.tokens.assign(added.prompt_token_ids().begin(), added.prompt_token_ids().end());
    seq.tokens.insert(seq.tokens.end(), added.output_token_ids().begin(),
                      added.output_token_ids().end());
  }
  for (const v1::ScheduledSequence& s : request->sequences()) {
    auto it = seqs_.find(s.seq_id());
    if (it == seqs_.end()) {
      Error(absl::StrCat("scheduled unknown sequence ", s.seq_id()));
      continue;
    }
    Seq& seq = it->second;
    if (s.has_kept_blocks()) {
      if (s.kept_blocks() > static_cast<int64_t>(seq.blocks.size()) ||
          s.kept_blocks() * block_size_ < s.start_position()) {
        Error(absl::StrCat("sequence ", s.seq_id(), " keeps ", s.kept_blocks(), " of its ",
                           seq.blocks.size(), " blocks and starts at ", s.start_position()));
      } else {
        seq.blocks.resize(s.kept_blocks());
      }
    }
    seq.blocks.insert(seq.blocks.end(), s.new_block_ids().begin(), s.new_block_ids().end());
    const int64_t start = s.start_position();
    const int64_t end = start + s.token_ids_size();
    if (static_cast<int64_t>(seq.blocks.size()) * block_size_ < end) {
      Error(absl::StrCat("sequence ", s.seq_id(), " runs to ", end, " in ", seq.blocks.size(),
                         " blocks"));
      continue;
    }
    if (seq.num_computed < 0) {
      if (start > static_cast<int64_t>(seq.tokens.size())) {
        Error(absl::StrCat("sequence ", s.seq_id(), " starts at ", start, " past its ",
                           seq.tokens.size(), " known tokens"));
        continue;
      }
      for (int64_t pos = 0; pos < start; ++pos) {  // the cached prefix
        const std::vector<int32_t>& slots = slots_[seq.blocks[pos / block_size_]];
        if (slots.empty() || slots[pos % block_size_] != seq.tokens[pos]) {
          Error(absl::StrCat("sequence ", s.seq_id(), ": cached block ",
                             seq.blocks[pos / block_size_], " does not hold token ",
                             seq.tokens[pos], " at position ", pos));
          break;
        }
      }
    } else if (start != seq.num_computed) {
      Error(absl::StrCat("sequence ", s.seq_id(), " starts at ", start, " after ", seq.num_computed,
                         " computed positions"));
    }
    Write(s.seq_id(), seq, start, s.token_ids());
    seq.tokens.resize(start);
    seq.tokens.insert(seq.tokens.end(), s.token_ids().begin(), s.token_ids().end());
    seq.num_computed = end;
    if (rank_ != 0 || (!s.sample() && !s.all_logits())) continue;
    v1::SequenceOutput* out = response->add_outputs();
    out->set_seq_id(s.seq_id());
    if (s.sample()) out->add_token_ids(NextToken(seq.tokens));
    if (s.all_logits()) {
      for (int32_t t : s.token_ids()) {
        for (int64_t v = 0; v < options_.vocab_size; ++v) out->add_logits(Logit(t, v));
      }
    }
  }
  return grpc::Status::OK;
}

void FakeWorker::Write(uint64_t seq_id, const Seq& seq, int64_t start,
                       absl::Span<const int32_t> tokens) {
  for (size_t j = 0; j < tokens.size(); ++j) {
    const int64_t pos = start + static_cast<int64_t>(j);
    const int32_t block = seq.blocks[pos / block_size_];
    const int64_t slot = pos % block_size_;
    for (const auto& [other_id, other] : seqs_) {
      if (other_id == seq_id) continue;
      for (size_t k = 0; k < other.blocks.size(); ++k) {
        const int64_t read = static_cast<int64_t>(k) * block_size_ + slot;
        if (other.blocks[k] == block && read < other.num_computed) {
          Error(absl::StrCat("sequence ", seq_id, " writes block ", block, " slot ", slot,
                             " that sequence ", other_id, " reads"));
        }
      }
    }
    std::vector<int32_t>& slots = slots_[block];
    if (slots.empty()) slots.assign(block_size_, -1);
    slots[slot] = tokens[j];
  }
}

absl::Time FakeWorker::last_status_answer() const {
  absl::MutexLock lock(&mutex_);
  return last_status_answer_;
}

bool FakeWorker::AwaitStatusAnswers(int n, absl::Time deadline) const {
  absl::MutexLock lock(&mutex_);
  auto answered = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return status_answers_ >= n; };
  return mutex_.AwaitWithDeadline(absl::Condition(&answered), deadline);
}

grpc::Status FakeWorker::Status(grpc::ServerContext*, const v1::WorkerStatusRequest*,
                                v1::WorkerStatusResponse* response) {
  bool silent;
  {
    absl::MutexLock lock(&mutex_);
    silent = options_.silent_after_heartbeats >= 0 &&
             status_answers_ >= options_.silent_after_heartbeats;
  }
  if (silent) {
    release_.WaitForNotification();
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the fake worker is going away");
  }
  absl::SleepFor(options_.status_delay);
  absl::MutexLock lock(&mutex_);
  ++status_answers_;
  last_status_answer_ = absl::Now();
  response->set_rank(rank_);
  response->set_state(options_.state);
  if (options_.state == "failed") response->set_error("injected fault");
  return grpc::Status::OK;
}

grpc::Status FakeWorker::Shutdown(grpc::ServerContext*, const v1::ShutdownRequest*,
                                  v1::ShutdownResponse*) {
  return grpc::Status::OK;
}

}  // namespace tpserve::testing
