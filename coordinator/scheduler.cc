#include "coordinator/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/logging.h"
#include "coordinator/sample_mask.h"

namespace tpserve {
namespace {

// The prefix cache's key of `tokens` under a LoRA adapter: K/V computed with one adapter are not
// another's, so each adapter's ids live in a range of their own (t + adapter × vocab); the base
// model's are the tokens themselves.
absl::Span<const int32_t> CacheKey(absl::Span<const int32_t> tokens, int32_t adapter, int64_t vocab,
                                   std::vector<int32_t>* storage) {
  if (adapter == 0) return tokens;
  storage->resize(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    (*storage)[i] = static_cast<int32_t>(tokens[i] + adapter * vocab);
  }
  return *storage;
}

constexpr char kLog[] = "scheduler";

int32_t TokensLeft(const Sequence& seq) {
  return static_cast<int32_t>(seq.tokens.size()) - seq.num_computed;
}

// The sequence runs one token this step: it samples, or it ends its prompt's last chunk.
bool Decoding(const Sequence& seq) { return TokensLeft(seq) == 1; }

// The most tokens from `start` whose StepAttention stays within `attention`.
int32_t TokensWithinAttention(int64_t attention, int64_t start) {
  if (attention <= 0) return 0;
  const double s = static_cast<double>(start);
  int64_t n = static_cast<int64_t>((std::sqrt(s * s + 4.0 * attention) - s) / 2);
  while (n > 0 && StepAttention(start, n) > attention) --n;
  while (StepAttention(start, n + 1) <= attention) ++n;
  return static_cast<int32_t>(std::min<int64_t>(n, std::numeric_limits<int32_t>::max()));
}

}  // namespace

int32_t Scheduler::JumpLimit(const Sequence& seq) const {
  // The sampled token is not appended yet: it counts against both limits.
  int64_t limit = std::min<int64_t>(
      kMaxJumpForwardTokens, options_.context_length - static_cast<int64_t>(seq.tokens.size()));
  if (seq.params.max_tokens > 0) {
    limit = std::min<int64_t>(limit, seq.params.max_tokens - seq.num_generated());
  }
  return static_cast<int32_t>(std::max<int64_t>(limit, 0));
}

Scheduler::Scheduler(SchedulerOptions options, BlockPool* pool, PrefixCache* cache)
    : options_(std::move(options)), pool_(pool), cache_(cache) {
  TP_CHECK(options_.block_size > 0 && options_.max_num_seqs > 0);
  TP_CHECK(options_.max_num_batched_tokens > 0 && options_.max_logit_rows > 0);
  TP_CHECK(options_.max_step_attention > 0);
  TP_CHECK(options_.context_length > 0);
  TP_CHECK(cache_ != nullptr);
  if (options_.num_speculative_tokens > 0) {
    counters_.spec_acceptance_lengths.assign(options_.num_speculative_tokens + 1, 0);
  }
}

Scheduler::~Scheduler() { TakeAll(); }

int32_t Scheduler::BlocksFor(int64_t num_tokens) const {
  return static_cast<int32_t>((num_tokens + options_.block_size - 1) / options_.block_size);
}

void Scheduler::Add(std::unique_ptr<Sequence> seq) {
  TP_CHECK(seq->block_ids.empty() && seq->cache_node == nullptr);
  waiting_.push_back(std::move(seq));
}

std::optional<std::vector<int32_t>> Scheduler::AllocateBlocks(int32_t n) {
  if (n <= 0) return std::vector<int32_t>();
  const int32_t missing = n - pool_->num_free();
  if (missing > 0) {
    // Evicting is only worth it when it makes the allocation succeed.
    if (cache_->num_evictable_blocks() < missing) return std::nullopt;
    cache_->Evict(missing);
  }
  return pool_->Allocate(n);
}

int32_t Scheduler::ChunkSize(const Sequence& seq, int32_t budget, int64_t attention,
                             int32_t logit_rows, bool first_prefill) const {
  int32_t n = std::min(TokensLeft(seq), budget);
  if (n > 1) {
    const int32_t floor = first_prefill ? std::min(n, options_.block_size) : 0;
    n = std::max(floor, std::min(n, TokensWithinAttention(attention, seq.num_computed)));
  }
  if (seq.kind == Sequence::Kind::kScore) n = std::min(n, logit_rows);
  return n;
}

void Scheduler::TakeCachedPrefix(Sequence& seq) {
  TP_CHECK(seq.block_ids.empty());
  seq.num_computed = 0;
  // Scoring needs every position's logits, so it computes everything.
  if (seq.kind == Sequence::Kind::kScore) return;
  // The last token always runs, so that the step has logits to sample from.
  const absl::Span<const int32_t> usable =
      absl::MakeConstSpan(seq.tokens).first(seq.tokens.size() - 1);
  std::vector<int32_t> key;
  PrefixCache::MatchResult match =
      cache_->Match(CacheKey(usable, seq.params.adapter, options_.vocab_size, &key));
  if (match.block_ids.empty()) return;
  pool_->Ref(match.block_ids);
  cache_->Lock(match.node);  // not null: some blocks matched
  seq.cache_node = match.node;
  seq.num_cached_blocks = static_cast<int32_t>(match.block_ids.size());
  seq.num_computed = seq.num_cached_blocks * options_.block_size;
  seq.block_ids = std::move(match.block_ids);
}

void Scheduler::ReleaseBlocks(Sequence& seq) {
  if (seq.cache_node != nullptr) cache_->Unlock(seq.cache_node);
  pool_->Release(seq.block_ids);
  seq.block_ids.clear();
  seq.cache_node = nullptr;
  seq.num_cached_blocks = 0;
  seq.num_computed = 0;
}

void Scheduler::LeaveGroup(Sequence& seq) {
  // The others must not wait for a prompt that this sample will not compute.
  if (seq.group_leader) seq.group->prompt_cached = true;
}

std::unique_ptr<Sequence> Scheduler::TakeRunning(size_t index) {
  std::unique_ptr<Sequence> seq = std::move(running_[index]);
  running_.erase(running_.begin() + index);
  seq->in_flight = false;
  if (seq->known_to_workers) finished_seq_ids_.push_back(seq->seq_id);
  seq->known_to_workers = false;
  ReleaseBlocks(*seq);
  return seq;
}

void Scheduler::Requeue(std::unique_ptr<Sequence> seq) {
  seq->score_logits.clear();
  seq->proposals.clear();
  seq->draft_behind = false;
  seq->kept_blocks = -1;  // it starts anew on the workers
  waiting_.push_front(std::move(seq));
}

Scheduler::Preemption Scheduler::PreemptLast(size_t from) {
  size_t last = running_.size() - 1;
  while (last > from && running_[last]->in_flight) --last;
  // Newer sequences in flight keep their blocks until they land: the one at `from` waits for them
  // rather than lose its KV to them.
  if (last == from && from + 1 < running_.size()) return Preemption::kNone;
  std::unique_ptr<Sequence> seq = TakeRunning(last);
  ++counters_.num_preemptions;
  LogInfo(kLog, "request %d: preempted for lack of KV blocks; %d tokens to recompute",
          seq->request_id, seq->tokens.size());
  Requeue(std::move(seq));
  return last == from ? Preemption::kItself : Preemption::kNewer;
}

void Scheduler::RequeueAll() {
  while (!running_.empty()) Requeue(TakeRunning(running_.size() - 1));
  finished_seq_ids_.clear();
}

ScheduledBatch Scheduler::Schedule() {
  ScheduledBatch batch;
  int32_t budget = options_.max_num_batched_tokens;
  int64_t attention = options_.max_step_attention;
  int32_t logit_rows = options_.max_logit_rows;
  bool prefill_taken = false;
  auto take = [&](const Sequence& seq, int32_t n) {
    budget -= n;
    attention -= StepAttention(seq.num_computed, n);
    if (n > 1) prefill_taken = true;
    if (seq.kind == Sequence::Kind::kScore) logit_rows -= n;
  };
  // With steps in flight, each takes its share of the sequences that can run (see the class
  // comment): the queue beyond max_num_seqs waits whatever the steps.
  size_t max_entries =
      running_.size() + std::min(waiting_.size(), static_cast<size_t>(std::max<int64_t>(
                                                      0, options_.max_num_seqs - num_running())));
  if (options_.steps_in_flight > 1) {
    max_entries = (max_entries + options_.steps_in_flight - 1) / options_.steps_in_flight;
  }
  // What the decodes not yet passed will take, set aside from a prefill chunk's share.
  int32_t decode_tokens = 0;
  int64_t decode_attention = 0;
  for (const auto& seq : running_) {
    if (seq->in_flight || !Decoding(*seq)) continue;
    ++decode_tokens;
    decode_attention += StepAttention(seq->num_computed, 1);
  }

  // Speculation pays where the batch leaves the products short of rows.
  const bool speculate =
      options_.num_speculative_tokens > 0 && decode_tokens <= options_.spec_disable_batch_size;

  // Running sequences first: decodes and the next chunks of prefills.
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0 && batch.entries.size() < max_entries; ++i) {
    Sequence& seq = *running_[i];
    if (seq.in_flight) continue;
    int32_t n;
    if (Decoding(seq)) {
      --decode_tokens;
      decode_attention -= StepAttention(seq.num_computed, 1);
      n = ChunkSize(seq, budget, attention, logit_rows, !prefill_taken);
    } else {
      n = ChunkSize(seq, budget - decode_tokens, attention - decode_attention, logit_rows,
                    !prefill_taken);
    }
    if (n <= 0) continue;
    std::vector<int32_t> drafts;
    if (speculate && Decoding(seq)) drafts = Proposals(seq, budget - n);
    const int32_t k = static_cast<int32_t>(drafts.size());
    const int32_t num_proposals = ProposalsAsked(seq, n, speculate);
    const int32_t needed = BlocksFor(seq.num_computed + n + k + num_proposals) -
                           static_cast<int32_t>(seq.block_ids.size());
    std::optional<std::vector<int32_t>> ids;
    while (!(ids = AllocateBlocks(needed))) {
      preempted = true;
      if (PreemptLast(i) != Preemption::kNewer) break;
    }
    if (!ids.has_value()) break;  // every sequence after it is gone or in flight
    seq.block_ids.insert(seq.block_ids.end(), ids->begin(), ids->end());
    batch.entries.push_back({&seq, false, seq.num_computed, n, std::move(*ids), drafts,
                             num_proposals, seq.kept_blocks});
    seq.kept_blocks = -1;
    NoteProposalsAsked(seq, n, num_proposals);
    take(seq, n);
    budget -= k;
    attention -= StepAttention(seq.num_computed, n + k) - StepAttention(seq.num_computed, n);
  }

  // Then waiting sequences, FCFS. Not in a step that had to preempt: the pool is full and
  // admitting would only thrash. Samples waiting for their first sample's prompt are passed over.
  for (auto it = waiting_.begin(); !preempted && it != waiting_.end() && budget > 0 &&
                                   batch.entries.size() < max_entries &&
                                   static_cast<int32_t>(running_.size()) < options_.max_num_seqs;) {
    Sequence& seq = **it;
    if (seq.group != nullptr && !seq.group_leader && !seq.group->prompt_cached) {
      ++it;
      continue;
    }
    TakeCachedPrefix(seq);
    const int32_t n = ChunkSize(seq, budget, attention, logit_rows, !prefill_taken);
    const int32_t num_proposals = n > 0 ? ProposalsAsked(seq, n, speculate) : 0;
    const int32_t needed = BlocksFor(seq.num_computed + n + num_proposals) -
                           static_cast<int32_t>(seq.block_ids.size());
    std::optional<std::vector<int32_t>> ids;
    if (n <= 0 || !(ids = AllocateBlocks(needed))) {
      ReleaseBlocks(seq);
      break;
    }
    if (seq.cached_prompt_tokens < 0) {
      seq.cached_prompt_tokens = std::min(seq.num_computed, seq.prompt_len);
    }
    seq.block_ids.insert(seq.block_ids.end(), ids->begin(), ids->end());
    seq.seq_id = next_seq_id_++;
    seq.known_to_workers = true;
    // A new sequence's table on the workers starts empty: send all of it, cached prefix too.
    batch.entries.push_back(
        {&seq, true, seq.num_computed, n, seq.block_ids, {}, num_proposals, -1});
    NoteProposalsAsked(seq, n, num_proposals);
    take(seq, n);
    running_.push_back(std::move(*it));
    it = waiting_.erase(it);
  }

  if (!batch.empty()) {
    batch.finished_seq_ids = std::move(finished_seq_ids_);
    finished_seq_ids_.clear();
  }
  for (const ScheduledBatch::Entry& entry : batch.entries) entry.seq->in_flight = true;
  return batch;
}

std::vector<SequenceUpdate> Scheduler::Postprocess(const ScheduledBatch& batch,
                                                   const StepOutputs& step) {
  Commit(batch);
  absl::flat_hash_map<uint64_t, const SequenceStepOutput*> outputs;
  for (const SequenceStepOutput& output : step.sequences) outputs[output.seq_id] = &output;
  std::vector<SequenceUpdate> updates;
  for (const ScheduledBatch::Entry& entry : batch.entries) {
    Sequence& seq = *entry.seq;
    const auto it = outputs.find(seq.seq_id);
    const SequenceStepOutput* output = it == outputs.end() ? nullptr : it->second;
    SequenceUpdate update;
    update.seq = &seq;
    const bool produced = seq.kind == Sequence::Kind::kScore
                              ? PostprocessScore(entry, output, &update)
                              : entry.completes() && PostprocessGenerate(entry, output, &update);
    if (!produced) continue;
    if (!update.error.ok()) {
      update.error = absl::InternalError(
          absl::StrCat("rank 0 ", update.error.message(), " for step ", step.step_id));
    } else if (seq.kind == Sequence::Kind::kGenerate && !seq.finish_reason.has_value()) {
      update.error = UpdateSampleMask(seq, options_.end_of_generation_ids, options_.vocab_size);
    }
    // The entries point at the sequences themselves, so taking one out of running_ is safe here.
    if (!update.error.ok() || seq.finish_reason.has_value() || seq.kind == Sequence::Kind::kScore) {
      update.finished = Finish(&seq);
    } else if (!entry.drafts.empty() || entry.num_proposals > 0) {
      FreeRejectedBlocks(seq);
    }
    updates.push_back(std::move(update));
  }
  return updates;
}

bool Scheduler::PostprocessScore(const ScheduledBatch::Entry& entry,
                                 const SequenceStepOutput* output, SequenceUpdate* update) {
  Sequence& seq = *entry.seq;
  const int64_t expected = static_cast<int64_t>(entry.num_tokens) * options_.vocab_size;
  const int64_t returned = output == nullptr ? 0 : static_cast<int64_t>(output->logits.size());
  if (returned != expected) {
    update->error =
        absl::InternalError(absl::StrCat("returned ", returned, " logits, expected ", expected));
    return true;
  }
  seq.score_logits.insert(seq.score_logits.end(), output->logits.begin(), output->logits.end());
  return seq.num_computed == static_cast<int32_t>(seq.tokens.size());
}

int32_t Scheduler::ProposalLimit(const Sequence& seq, int64_t run) const {
  // Drafts are verified over rows no allow-list covers.
  if (seq.kind != Sequence::Kind::kGenerate || seq.token_matcher != nullptr || !seq.mask.empty() ||
      !seq.params.speculate) {
    return 0;
  }
  const int64_t after = static_cast<int64_t>(seq.tokens.size()) + run;
  int64_t k = seq.spec_k >= 0 ? seq.spec_k : options_.num_speculative_tokens;
  if (seq.params.max_tokens > 0) {
    k = std::min<int64_t>(k, seq.params.max_tokens - (after - seq.prompt_len) - 1);
  }
  k = std::min<int64_t>(k, options_.context_length - after - 1);
  return static_cast<int32_t>(std::max<int64_t>(k, 0));
}

int32_t Scheduler::ProposalsAsked(const Sequence& seq, int32_t n, bool speculate) const {
  // Every sequence running or waiting now decodes in the next step, or waits behind them.
  const size_t next_decodes = running_.size() + waiting_.size();
  if (!options_.draft_model || !speculate || seq.draft_behind ||
      next_decodes > static_cast<size_t>(options_.spec_disable_batch_size) ||
      seq.num_computed + n != static_cast<int32_t>(seq.tokens.size())) {
    return 0;
  }
  // At least the sampled token follows; more accepted drafts only lower the next step's cap.
  return ProposalLimit(seq, 1);
}

void Scheduler::NoteProposalsAsked(Sequence& seq, int32_t n, int32_t num_proposals) {
  if (options_.draft_model && num_proposals == 0 &&
      seq.num_computed + n == static_cast<int32_t>(seq.tokens.size())) {
    seq.draft_behind = true;
  }
}

void Scheduler::FreeRejectedBlocks(Sequence& seq) {
  // The next step runs the tokens not yet computed and writes the draft's proposals after them.
  const int32_t keep = BlocksFor(static_cast<int64_t>(seq.tokens.size() + seq.proposals.size()));
  if (static_cast<int32_t>(seq.block_ids.size()) <= keep) return;
  TP_CHECK(seq.num_cached_blocks <= keep);
  pool_->Release(absl::MakeConstSpan(seq.block_ids).subspan(keep));
  seq.block_ids.resize(keep);
  seq.kept_blocks = keep;
}

void Scheduler::AdaptSpeculation(Sequence& seq, int32_t proposed, int32_t accepted) {
  seq.spec_proposed += proposed;
  seq.spec_accepted += accepted;
  const int32_t k = seq.spec_k >= 0 ? seq.spec_k : options_.num_speculative_tokens;
  seq.spec_k =
      accepted == proposed ? std::min(k + 1, options_.num_speculative_tokens) : std::max(k - 1, 1);
  if (seq.spec_proposed >= kSpecJudgedAfter &&
      seq.spec_accepted < options_.spec_min_acceptance * seq.spec_proposed) {
    seq.spec_k = 0;
    LogInfo(kLog, "request %d: speculation off, %d of %d proposed tokens accepted", seq.request_id,
            seq.spec_accepted, seq.spec_proposed);
  }
}

std::vector<int32_t> Scheduler::Proposals(const Sequence& seq, int32_t budget) const {
  const int32_t k = std::min(ProposalLimit(seq, 0), budget);
  if (k <= 0) return {};
  if (!options_.draft_model) return ProposeNgram(seq.tokens, options_.ngram, k);
  return std::vector<int32_t>(seq.proposals.begin(),
                              seq.proposals.begin() + std::min<size_t>(k, seq.proposals.size()));
}

bool Scheduler::PostprocessGenerate(const ScheduledBatch::Entry& entry,
                                    const SequenceStepOutput* output, SequenceUpdate* update) {
  Sequence& seq = *update->seq;
  if (output == nullptr || output->token_ids.empty()) {
    update->error = absl::InternalError("returned no token");
    return true;
  }
  for (int32_t token : output->token_ids) {
    if (token < 0 || token >= options_.vocab_size) {
      update->error = absl::InternalError(absl::StrCat("returned token ", token));
      return true;
    }
  }
  // Rank 0 returns the proposals it accepted, in order, then the token after them; the accepted
  // ones are computed (their K/V written at their positions), the rejected ones' positions are
  // written again by the next step.
  const int32_t accepted = static_cast<int32_t>(output->token_ids.size()) - 1;
  if (accepted > static_cast<int32_t>(entry.drafts.size()) ||
      !std::equal(entry.drafts.begin(), entry.drafts.begin() + accepted,
                  output->token_ids.begin())) {
    update->error = absl::InternalError(absl::StrCat(
        "returned ", output->token_ids.size(), " tokens that are not the accepted prefix of ",
        entry.drafts.size(), " proposals and one more"));
    return true;
  }
  if (output->proposal_token_ids.size() > static_cast<size_t>(entry.num_proposals)) {
    update->error =
        absl::InternalError(absl::StrCat("returned ", output->proposal_token_ids.size(),
                                         " proposals, asked for ", entry.num_proposals));
    return true;
  }
  for (int32_t token : output->proposal_token_ids) {
    if (token < 0 || token >= options_.vocab_size) {
      update->error = absl::InternalError(absl::StrCat("proposed token ", token));
      return true;
    }
  }
  seq.proposals.assign(output->proposal_token_ids.begin(), output->proposal_token_ids.end());
  if (!entry.drafts.empty()) {
    ++counters_.spec_drafts;
    counters_.spec_draft_tokens += static_cast<int64_t>(entry.drafts.size());
    counters_.spec_accepted_tokens += accepted;
    ++counters_.spec_acceptance_lengths[accepted];
    AdaptSpeculation(seq, static_cast<int32_t>(entry.drafts.size()), accepted);
  }
  seq.num_computed += accepted;
  for (int i = 0; i < static_cast<int>(output->token_ids.size()); ++i) {
    const int32_t token = output->token_ids[i];
    std::vector<int32_t> appended = {token};
    if (seq.token_matcher != nullptr) {
      // Rank 0 sampled under the matcher's mask, so a refusal is the cluster's fault.
      if (!seq.token_matcher->Accept(token)) {
        if (!seq.token_matcher->status().ok()) return true;  // Postprocess reports the matcher
        update->error = absl::InternalError(
            absl::StrCat("returned token ", token, ", which the output constraint does not allow"));
        return true;
      }
      if (options_.jump_forward != nullptr && seq.params.logprobs < 0) {
        std::vector<int32_t> extended =
            options_.jump_forward->Extend(*seq.token_matcher, token, JumpLimit(seq));
        if (!extended.empty()) {
          counters_.jump_forward_tokens += static_cast<int64_t>(extended.size()) - 1;
          appended = std::move(extended);
        }
      }
    }
    std::optional<FinishReason> finish;
    for (size_t k = 0; k < appended.size(); ++k) {
      // Only a sampled token has log-probabilities (and a jump replaces no token when they are
      // asked for).
      finish = Emit(seq, appended[k], k == 0 && appended[k] == token ? output : nullptr, i, update);
      if (finish.has_value()) break;
    }
    if (!finish.has_value()) continue;
    if (seq.output != nullptr) update->tail = seq.output->Flush();
    seq.finish_reason = finish;
    break;
  }
  return true;
}

std::optional<FinishReason> Scheduler::Emit(Sequence& seq, int32_t token,
                                            const SequenceStepOutput* output, int row,
                                            SequenceUpdate* update) {
  std::optional<FinishReason> finish =
      AppendToken(seq, token, options_.end_of_generation_ids.contains(token));
  // The constraint ended (its stop token, even with ignore_eos): so does the output.
  if (seq.token_matcher != nullptr && seq.token_matcher->terminated()) {
    finish = FinishReason::kStop;
  }
  ++update->num_sampled;
  if (finish == FinishReason::kStop) return finish;
  // A stop token's text is not part of the output; every other token's is, up to a stop string
  // (the sequence's TokenText searches from min_tokens on).
  SequenceUpdate::Token& out = update->tokens.emplace_back();
  out.id = token;
  if (seq.output != nullptr && seq.output->Add(token, seq.num_generated(), &out.text)) {
    finish = FinishReason::kStop;
  }
  if (output != nullptr && seq.params.logprobs >= 0 &&
      static_cast<size_t>(row) < output->logprobs.size()) {
    out.logprob = output->logprobs[row];
  }
  return finish;
}

void Scheduler::Returned(const ScheduledBatch& batch) {
  for (const ScheduledBatch::Entry& entry : batch.entries) entry.seq->in_flight = false;
}

void Scheduler::Commit(const ScheduledBatch& batch) {
  Returned(batch);
  for (const ScheduledBatch::Entry& entry : batch.entries) {
    Sequence& seq = *entry.seq;
    TP_CHECK(entry.start == seq.num_computed);
    seq.num_computed += entry.num_tokens;
    if (seq.group_leader && seq.num_computed >= seq.prompt_len) seq.group->prompt_cached = true;
    if (seq.kind == Sequence::Kind::kScore) continue;
    const int32_t full = seq.num_computed / options_.block_size;
    if (full <= seq.num_cached_blocks) continue;
    std::vector<int32_t> key;
    const PrefixCache::InsertResult inserted =
        cache_->Insert(CacheKey(absl::MakeConstSpan(seq.tokens).first(full * options_.block_size),
                                seq.params.adapter, options_.vocab_size, &key),
                       absl::MakeConstSpan(seq.block_ids).first(full));
    if (inserted.node != nullptr) cache_->Lock(inserted.node);
    if (seq.cache_node != nullptr) cache_->Unlock(seq.cache_node);
    seq.cache_node = inserted.node;
    seq.num_cached_blocks = full;
  }
}

std::optional<FinishReason> Scheduler::AppendToken(Sequence& seq, int32_t token,
                                                   bool end_of_generation) {
  TP_CHECK(seq.kind == Sequence::Kind::kGenerate);
  seq.tokens.push_back(token);
  const GenerateParams& p = seq.params;
  if ((!p.ignore_eos && end_of_generation) ||
      std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) !=
          p.stop_token_ids.end()) {
    return FinishReason::kStop;
  }
  const int64_t n = static_cast<int64_t>(seq.tokens.size());
  if ((p.max_tokens > 0 && seq.num_generated() >= p.max_tokens) || n >= options_.context_length ||
      BlocksFor(n) > pool_->num_blocks()) {
    return FinishReason::kLength;
  }
  return std::nullopt;
}

std::unique_ptr<Sequence> Scheduler::Finish(Sequence* seq) {
  auto it = std::find_if(running_.begin(), running_.end(),
                         [seq](const auto& s) { return s.get() == seq; });
  TP_CHECK(it != running_.end());
  LeaveGroup(*seq);
  return TakeRunning(it - running_.begin());
}

std::vector<std::unique_ptr<Sequence>> Scheduler::TakeCancelled() {
  return TakeIf([](const Sequence& seq) { return seq.handle && seq.handle->cancelled(); });
}

std::vector<std::unique_ptr<Sequence>> Scheduler::TakeIf(
    absl::FunctionRef<bool(const Sequence&)> take) {
  std::vector<std::unique_ptr<Sequence>> taken;
  for (size_t i = 0; i < running_.size();) {
    if (!running_[i]->in_flight && take(*running_[i])) {
      LeaveGroup(*running_[i]);
      taken.push_back(TakeRunning(i));
    } else {
      ++i;
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (take(**it)) {
      LeaveGroup(**it);
      taken.push_back(std::move(*it));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

std::vector<std::unique_ptr<Sequence>> Scheduler::TakeAll() {
  std::vector<std::unique_ptr<Sequence>> all;
  while (!running_.empty()) all.push_back(TakeRunning(running_.size() - 1));
  std::reverse(all.begin(), all.end());
  for (auto& seq : waiting_) all.push_back(std::move(seq));
  waiting_.clear();
  finished_seq_ids_.clear();
  return all;
}

}  // namespace tpserve
