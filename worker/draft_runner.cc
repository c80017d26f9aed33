#include "worker/draft_runner.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/sampling.h"
#include "worker/forward_batch.h"

namespace tpserve {
namespace {

// Proposals draw from streams apart from the target's (which SampleStreamSeed(seed, k) seeds), so
// the draws that verify a proposal are independent of the draw that made it.
constexpr uint64_t kDraftStreamSalt = 0x6472616674ULL;  // "draft"

}  // namespace

absl::StatusOr<std::unique_ptr<DraftRunner>> DraftRunner::Create(const ModelRunnerOptions& target,
                                                                 const KvCacheShape& target_kv,
                                                                 int64_t target_vocab) {
  const std::string& path = target.draft_model_path;
  ModelRunnerOptions options;
  options.model_path = path;
  options.num_layers = target.draft_num_layers;
  options.device = Device::kCpu;
  options.block_size = target_kv.block_size;
  options.kv_cache_blocks = target_kv.num_blocks;
  options.cpu_weights = target.cpu_weights;
  auto comm = std::make_unique<SingleRankCommunicator>();
  absl::StatusOr<std::unique_ptr<LoadedShard>> loaded = LoadShard(options, comm.get());
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat("draft model: ", loaded.status().message()));
  }
  if ((*loaded)->config().vocab_size != target_vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "draft model ", path, " has ", (*loaded)->config().vocab_size, " tokens, the target ",
        target_vocab, ": a draft needs the target's tokenizer"));
  }
  return std::unique_ptr<DraftRunner>(new DraftRunner(std::move(comm), *std::move(loaded)));
}

DraftRunner::DraftRunner(std::unique_ptr<SingleRankCommunicator> comm,
                         std::unique_ptr<LoadedShard> loaded)
    : comm_(std::move(comm)), loaded_(std::move(loaded)) {}

absl::Span<const float> DraftRunner::ProposalProbs(uint64_t seq_id,
                                                   absl::Span<const int32_t> drafts) const {
  const auto it = sequences_.find(seq_id);
  if (it == sequences_.end()) return {};
  const Sequence& seq = it->second;
  if (seq.probs.empty() || drafts.size() > seq.proposals.size() ||
      !std::equal(drafts.begin(), drafts.end(), seq.proposals.begin())) {
    return {};
  }
  return absl::MakeConstSpan(seq.probs).subspan(0, drafts.size() * loaded_->config().vocab_size);
}

absl::Status DraftRunner::Propose(const v1::StepRequest& request, const StepPlanner& planner,
                                  absl::Span<const LogitsResult> results,
                                  v1::StepResponse* response) {
  for (uint64_t id : request.finished_seq_ids()) sequences_.erase(id);
  const ModelConfig& config = loaded_->config();
  const int64_t block_size = loaded_->kv_shape().block_size;
  std::vector<Drafting> drafting;
  std::vector<int32_t> known;
  for (int i = 0; i < request.sequences_size(); ++i) {
    const v1::ScheduledSequence& s = request.sequences(i);
    if (s.num_proposals() <= 0 || !s.sample() || results[i].tokens.empty()) continue;
    const SequenceState* state = planner.Find(s.seq_id());
    if (state == nullptr) continue;
    // What is known now: the verified tokens, then this step's accepted drafts and sample.
    const int64_t verified = static_cast<int64_t>(state->tokens.size()) - state->num_unverified;
    known.assign(state->tokens.begin(), state->tokens.begin() + verified);
    known.insert(known.end(), results[i].tokens.begin(), results[i].tokens.end());
    Sequence& seq = sequences_[s.seq_id()];
    // The draft's KV holds its own tokens; it stays valid as far as they agree with the known ones.
    const auto [mismatch, _] =
        std::mismatch(seq.tokens.begin(), seq.tokens.end(), known.begin(), known.end());
    // The last known token runs again even when its KV is there: its logits draw the first
    // proposal (the draft may have run it already as an earlier proposal that the target chose).
    seq.computed = std::min<int64_t>(
        {seq.computed, mismatch - seq.tokens.begin(), static_cast<int64_t>(known.size()) - 1});
    seq.tokens = known;
    seq.proposals.clear();
    seq.probs.clear();
    // Proposal j is run at position |known| + j - 1 (the last one is not run): inside the block
    // table, the draft's context, and the target's context where it will be verified.
    const int64_t length = static_cast<int64_t>(known.size());
    const int64_t capacity = static_cast<int64_t>(state->block_table.size()) * block_size;
    const int64_t wanted =
        std::min({static_cast<int64_t>(s.num_proposals()), capacity - length + 1,
                  config.context_length - length + 1, planner.context_length() - length});
    if (wanted <= 0) continue;
    drafting.push_back({s.seq_id(), &seq, &state->sampling, state->block_table, state->prompt_len,
                        static_cast<int32_t>(wanted)});
  }
  while (!drafting.empty()) {
    RETURN_IF_ERROR(DraftOnce(drafting));
    std::erase_if(drafting, [&](const Drafting& d) {
      if (static_cast<int32_t>(d.seq->proposals.size()) < d.wanted) return false;
      for (v1::SequenceOutput& out : *response->mutable_outputs()) {
        if (out.seq_id() != d.seq_id) continue;
        out.mutable_proposal_token_ids()->Add(d.seq->proposals.begin(), d.seq->proposals.end());
        break;
      }
      return true;
    });
  }
  return absl::OkStatus();
}

absl::Status DraftRunner::DraftOnce(std::vector<Drafting>& drafting) {
  const int64_t vocab = loaded_->config().vocab_size;
  ForwardBatchBuilder builder(loaded_->kv_shape().block_size);
  for (const Drafting& d : drafting) {
    const absl::Span<const int32_t> run =
        absl::MakeConstSpan(d.seq->tokens).subspan(d.seq->computed);
    builder.AddSequence(run, static_cast<int32_t>(d.seq->computed), d.table, false);
  }
  RETURN_IF_ERROR(loaded_->forward_pass().Forward(builder.Build(), &logits_));
  for (size_t j = 0; j < drafting.size(); ++j) {
    const Drafting& d = drafting[j];
    Sequence& seq = *d.seq;
    const float* row = logits_.data() + static_cast<int64_t>(j) * vocab;
    int32_t token;
    if (cpu::IsGreedy(*d.params)) {
      token = cpu::Argmax(row, vocab);  // q is a point mass: verified as one
    } else {
      const size_t offset = seq.probs.size();
      seq.probs.resize(offset + vocab);
      float* q = seq.probs.data() + offset;
      cpu::SamplingDistribution(row, vocab, *d.params, q);
      const int64_t output_position = static_cast<int64_t>(seq.tokens.size()) - d.prompt_len;
      std::mt19937_64 rng(SampleStreamSeed(d.params->seed ^ kDraftStreamSalt, output_position));
      token = cpu::SampleFromWeights(q, vocab, rng);
    }
    seq.computed = static_cast<int64_t>(seq.tokens.size());
    seq.tokens.push_back(token);
    seq.proposals.push_back(token);
  }
  return absl::OkStatus();
}

}  // namespace tpserve
