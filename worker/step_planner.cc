#include "worker/step_planner.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace tpserve {
namespace {

SamplingParams FromProto(const v1::SamplingParams& p) {
  SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p();
  s.min_p = p.min_p();
  s.repetition_penalty = p.repetition_penalty();
  s.presence_penalty = p.presence_penalty();
  s.frequency_penalty = p.frequency_penalty();
  s.seed = p.seed();
  return s;
}

absl::Status Invalid(uint64_t seq_id, absl::string_view message) {
  return RefuseSequence(seq_id, absl::StrCat("sequence ", seq_id, ": ", message));
}

}  // namespace

absl::Status RefuseSequence(uint64_t seq_id, absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kRefusedSequencePayload, absl::Cord(absl::StrCat(seq_id)));
  return status;
}

std::optional<uint64_t> RefusedSequenceId(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) return std::nullopt;
  const auto payload = status.GetPayload(kRefusedSequencePayload);
  uint64_t id;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &id)) return std::nullopt;
  return id;
}

StepPlanner::StepPlanner(int64_t vocab_size, int64_t context_length, const KvCacheShape& kv,
                         bool samples, int32_t num_lora_slots)
    : vocab_size_(vocab_size),
      context_length_(context_length),
      kv_(kv),
      samples_(samples),
      num_lora_slots_(num_lora_slots) {}

absl::StatusOr<StepPlanner::Plan> StepPlanner::Begin(const v1::StepRequest& request) {
  for (uint64_t id : request.finished_seq_ids()) sequences_.erase(id);  // Unknown ids: no-op.

  std::vector<std::pair<uint64_t, SequenceState>> added;
  for (const v1::NewSequence& s : request.new_sequences()) {
    const bool duplicate = std::any_of(added.begin(), added.end(),
                                       [&](const auto& a) { return a.first == s.seq_id(); });
    if (sequences_.contains(s.seq_id()) || duplicate) {
      return RefuseSequence(s.seq_id(), absl::StrCat("new sequence ", s.seq_id(),
                                                     " already exists (finish it first)"));
    }
    ASSIGN_OR_RETURN(SequenceState state, NewSequence(s));
    added.emplace_back(s.seq_id(), std::move(state));
  }
  std::vector<uint64_t> added_ids;
  for (auto& [id, state] : added) {
    sequences_.emplace(id, std::move(state));
    added_ids.push_back(id);
  }
  if (request.sequences().empty()) return Plan();

  absl::StatusOr<Plan> plan = PlanStep(request);
  if (!plan.ok()) {
    for (uint64_t id : added_ids) sequences_.erase(id);
    return plan.status();
  }
  plan->added = std::move(added_ids);
  return plan;
}

void StepPlanner::Abandon(const Plan& plan) {
  for (uint64_t id : plan.added) sequences_.erase(id);
}

absl::StatusOr<SequenceState> StepPlanner::NewSequence(const v1::NewSequence& s) const {
  const uint64_t id = s.seq_id();
  SequenceState state;
  state.sampling = FromProto(s.sampling());
  if (auto error = state.sampling.FirstInvalidField()) {
    return RefuseSequence(id, absl::StrCat("new sequence ", id, ": ", error->message));
  }
  if (s.top_logprobs() < 0 || s.top_logprobs() > kMaxTopLogprobs) {
    return RefuseSequence(id, absl::StrCat("new sequence ", id, ": top_logprobs = ",
                                           s.top_logprobs(), " is outside [0, ", kMaxTopLogprobs,
                                           "]"));
  }
  if (s.adapter() < 0 || s.adapter() > num_lora_slots_) {
    return RefuseSequence(id, absl::StrCat("new sequence ", id, ": adapter ", s.adapter(),
                                           " is outside [0, ", num_lora_slots_, "]"));
  }
  state.adapter = s.adapter();
  state.return_logprobs = s.return_logprobs();
  state.top_logprobs = s.top_logprobs();
  if (s.logit_bias_ids_size() != s.logit_bias_values_size() ||
      s.logit_bias_ids_size() > kMaxLogitBias) {
    return RefuseSequence(id, absl::StrCat("new sequence ", id, ": ", s.logit_bias_ids_size(),
                                           " logit_bias_ids and ", s.logit_bias_values_size(),
                                           " values; they must pair up, at most ",
                                           kMaxLogitBias));
  }
  for (int i = 0; i < s.logit_bias_ids_size(); ++i) {
    const int32_t token = s.logit_bias_ids(i);
    const float bias = s.logit_bias_values(i);
    const bool repeated = std::any_of(state.logit_bias.begin(), state.logit_bias.end(),
                                      [token](const auto& b) { return b.first == token; });
    if (token < 0 || token >= vocab_size_ || repeated || !(bias >= -100 && bias <= 100)) {
      return RefuseSequence(id, absl::StrCat("new sequence ", id, ": logit bias ", bias,
                                             " for token ", token,
                                             " (a token of the vocabulary, once, a bias in "
                                             "[-100, 100])"));
    }
    state.logit_bias.emplace_back(token, bias);
  }
  state.tokens.assign(s.prompt_token_ids().begin(), s.prompt_token_ids().end());
  state.prompt_len = static_cast<int64_t>(state.tokens.size());
  state.tokens.insert(state.tokens.end(), s.output_token_ids().begin(), s.output_token_ids().end());
  const int64_t vocab = vocab_size_;
  for (int64_t i = 0; i < static_cast<int64_t>(state.tokens.size()); ++i) {
    if (state.tokens[i] < 0 || state.tokens[i] >= vocab) {
      const bool prompt = i < state.prompt_len;
      return RefuseSequence(id, absl::StrCat(
          "new sequence ", id, ": ", prompt ? "prompt_token_ids[" : "output_token_ids[",
          prompt ? i : i - state.prompt_len, "] = ", state.tokens[i],
          " is outside the vocabulary of ", vocab));
    }
  }
  return state;
}

absl::Status StepPlanner::CheckScheduled(const v1::ScheduledSequence& s, const SequenceState& state,
                                         std::vector<int32_t>* table) const {
  const uint64_t id = s.seq_id();
  const int64_t vocab = vocab_size_;
  if (s.token_ids().empty()) return Invalid(id, "token_ids is empty");
  for (int j = 0; j < s.token_ids_size(); ++j) {
    if (s.token_ids(j) < 0 || s.token_ids(j) >= vocab) {
      return Invalid(id, absl::StrCat("token_ids[", j, "] = ", s.token_ids(j),
                                      " is outside the vocabulary of ", vocab));
    }
  }
  const int64_t start = s.start_position();
  const int64_t known = static_cast<int64_t>(state.tokens.size());
  if (start < 0) return Invalid(id, absl::StrCat("start_position ", start, " is negative"));
  if (state.num_computed < 0 && start > known) {
    return Invalid(id, absl::StrCat("start_position ", start, " is past the ", known,
                                    " tokens the workers know (prompt_token_ids must cover the "
                                    "cached prefix)"));
  }
  const int64_t verified = state.num_computed - state.num_unverified;
  if (state.num_computed >= 0 && (start < verified || start > state.num_computed)) {
    return Invalid(id, state.num_unverified == 0
                           ? absl::StrCat("start_position ", start, " but ", state.num_computed,
                                          " positions are computed")
                           : absl::StrCat("start_position ", start, " is outside [", verified, ", ",
                                          state.num_computed,
                                          "]: the positions computed before the last step's "
                                          "drafts, up to all of them"));
  }
  const int64_t end = start + s.token_ids_size() + s.draft_token_ids_size();
  if (end > context_length_) {
    return Invalid(id, absl::StrCat("positions up to ", end, " exceed the context length of ",
                                    context_length_));
  }
  *table = state.block_table;
  if (s.has_kept_blocks()) {
    const int64_t kept = s.kept_blocks();
    if (kept < 0 || kept > static_cast<int64_t>(table->size()) || kept * kv_.block_size < start) {
      return Invalid(
          id, absl::StrCat("kept_blocks ", kept, " is outside [",
                           (start + kv_.block_size - 1) / kv_.block_size, ", ", table->size(),
                           "]: the blocks of the positions before "
                           "start_position, up to the whole table"));
    }
    table->resize(kept);
  }
  for (int j = 0; j < s.new_block_ids_size(); ++j) {
    const int32_t block = s.new_block_ids(j);
    if (block < 0 || block >= kv_.num_blocks) {
      return Invalid(id, absl::StrCat("new_block_ids[", j, "] = ", block,
                                      " is outside the KV pool of ", kv_.num_blocks, " blocks"));
    }
    table->push_back(block);
  }
  const int64_t capacity = static_cast<int64_t>(table->size()) * kv_.block_size;
  if (capacity < end) {
    return Invalid(
        id, absl::StrCat("its ", table->size(), " blocks hold ", capacity,
                         " positions but the step runs to ", end, " (missing new_block_ids?)"));
  }
  if (s.draft_token_ids_size() > 0 && (!s.sample() || s.all_logits())) {
    return Invalid(id, "draft_token_ids need `sample` and no `all_logits`");
  }
  if (s.num_proposals() < 0) {
    return Invalid(id, absl::StrCat("num_proposals ", s.num_proposals(), " is negative"));
  }
  if (s.num_proposals() > 0 && (!s.sample() || s.all_logits())) {
    return Invalid(id, "num_proposals needs `sample` and no `all_logits`");
  }
  return absl::OkStatus();
}

absl::StatusOr<StepPlanner::Plan> StepPlanner::PlanStep(const v1::StepRequest& request) const {
  Plan plan;
  const int64_t vocab = vocab_size_;
  ForwardBatchBuilder builder(kv_.block_size);
  absl::flat_hash_set<uint64_t> scheduled;
  std::vector<int32_t> run;  // token_ids then draft_token_ids of one sequence
  int64_t num_rows = 0;      // logits rows of the sequences so far
  for (const v1::ScheduledSequence& s : request.sequences()) {
    const auto it = sequences_.find(s.seq_id());
    if (it == sequences_.end()) {
      return RefuseSequence(
          s.seq_id(), absl::StrCat("sequence ", s.seq_id(),
                                   " is unknown: it was never sent in new_sequences, or it has "
                                   "finished"));
    }
    if (!scheduled.insert(s.seq_id()).second) {
      return RefuseSequence(s.seq_id(), absl::StrCat("sequence ", s.seq_id(),
                                                     " is scheduled twice in step ",
                                                     request.step_id()));
    }
    const SequenceState& state = it->second;
    std::vector<int32_t>& table = plan.block_tables.emplace_back();
    RETURN_IF_ERROR(CheckScheduled(s, state, &table));
    run.assign(s.token_ids().begin(), s.token_ids().end());
    run.insert(run.end(), s.draft_token_ids().begin(), s.draft_token_ids().end());
    const int64_t rows =
        s.all_logits() ? static_cast<int64_t>(run.size()) : s.draft_token_ids_size() + 1;
    LogitsRequest& logits = plan.logits.emplace_back();
    logits.first_row = num_rows;
    logits.num_rows = rows;
    logits.sample = s.sample();
    logits.return_logits = s.all_logits();
    builder.AddSequenceWithLogits(run, s.start_position(), table, rows, state.adapter);
    num_rows += rows;
    if (!s.sample()) continue;
    // The next token follows the prompt, the output before start and this step's tokens.
    logits.params = &state.sampling;
    logits.output_len = s.start_position() + s.token_ids_size() - state.prompt_len;
    logits.drafts = absl::MakeConstSpan(s.draft_token_ids().data(), s.draft_token_ids_size());
    logits.draft_probs = absl::MakeConstSpan(s.draft_probs().data(), s.draft_probs_size());
    logits.bitmask = absl::MakeConstSpan(s.token_bitmask().data(), s.token_bitmask_size());
    logits.logprobs = state.return_logprobs;
    logits.logit_bias = state.logit_bias;
    logits.top_logprobs = state.top_logprobs;
    if (logits.output_len < 0) {
      return Invalid(s.seq_id(),
                     "samples inside its prompt (start_position + len(token_ids) "
                     "is before the prompt's end)");
    }
    if (state.sampling.has_penalties() && samples_) {
      std::vector<int32_t>& history = plan.histories.emplace_back(
          state.tokens.begin(), state.tokens.begin() + s.start_position());
      history.insert(history.end(), s.token_ids().begin(), s.token_ids().end());
    }
  }
  plan.batch = builder.Build();
  // Every rank refuses the same steps, or the others would wait in a collective for this one.
  for (size_t i = 0; i < plan.logits.size(); ++i) {
    const absl::Status status = CheckLogitsRequest(plan.logits[i], num_rows, vocab);
    if (!status.ok()) return Invalid(request.sequences(i).seq_id(), status.message());
  }
  if (!samples_) return plan;
  // The histories are complete (no more reallocation): point the penalized requests at them.
  size_t next_history = 0;
  for (LogitsRequest& logits : plan.logits) {
    if (!logits.sample || !logits.params->has_penalties()) continue;
    const std::vector<int32_t>& history = plan.histories[next_history++];
    const int64_t prompt_len = static_cast<int64_t>(history.size()) - logits.output_len;
    logits.prompt = absl::MakeConstSpan(history).subspan(0, prompt_len);
    logits.output = absl::MakeConstSpan(history).subspan(prompt_len);
  }
  return plan;
}

void StepPlanner::Commit(const v1::StepRequest& request, Plan& plan) {
  for (int i = 0; i < request.sequences_size(); ++i) {
    const v1::ScheduledSequence& s = request.sequences(i);
    SequenceState& state = sequences_.at(s.seq_id());
    state.block_table = std::move(plan.block_tables[i]);
    // Tokens past start are the last step's rejected drafts (or a recompute's known output,
    // which this step's tokens repeat).
    const int64_t start = s.start_position();
    if (state.num_unverified > 0) state.tokens.resize(start);
    int64_t position = start;
    auto append = [&](int32_t token) {
      if (position < static_cast<int64_t>(state.tokens.size())) {
        state.tokens[position] = token;
      } else {
        TP_CHECK(position == static_cast<int64_t>(state.tokens.size()));
        state.tokens.push_back(token);
      }
      ++position;
    };
    for (int32_t token : s.token_ids()) append(token);
    for (int32_t token : s.draft_token_ids()) append(token);
    state.num_computed = position;
    state.num_unverified = s.draft_token_ids_size();
  }
}

}  // namespace tpserve
