#include "worker/step_batch.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace tpserve {
namespace {

// Checks one scheduled sequence against its cached state and the limits; on success fills
// `table` with its block table after this step.
absl::Status CheckScheduled(const v1::ScheduledSequence& s, const SequenceState& state,
                            const BatchLimits& limits, std::vector<int32_t>* table) {
  const std::string where = absl::StrCat("sequence ", s.seq_id(), ": ");
  if (s.token_ids().empty()) return absl::InvalidArgumentError(where + "token_ids is empty");
  for (int j = 0; j < s.token_ids_size(); ++j) {
    if (s.token_ids(j) < 0 || s.token_ids(j) >= limits.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(where, "token_ids[", j, "] = ", s.token_ids(j),
                                                     " is outside the vocabulary of ",
                                                     limits.vocab_size));
    }
  }
  const int64_t start = s.start_position();
  const int64_t known = static_cast<int64_t>(state.tokens.size());
  if (start < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "start_position ", start, " is negative"));
  }
  if (state.num_computed < 0 && start > known) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "start_position ", start, " is past the ", known,
                     " tokens the workers know (prompt_token_ids must cover the cached prefix)"));
  }
  if (state.num_computed >= 0 && start != state.num_computed) {
    return absl::InvalidArgumentError(absl::StrCat(where, "start_position ", start, " but ",
                                                   state.num_computed, " positions are computed"));
  }
  const int64_t end = start + s.token_ids_size();
  if (end > limits.context_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "positions up to ", end, " exceed the context length of ", limits.context_length));
  }
  *table = state.block_table;
  for (int j = 0; j < s.new_block_ids_size(); ++j) {
    const int32_t block = s.new_block_ids(j);
    if (block < 0 || block >= limits.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat(where, "new_block_ids[", j, "] = ", block,
                                                     " is outside the KV pool of ",
                                                     limits.num_blocks, " blocks"));
    }
    table->push_back(block);
  }
  const int64_t capacity = static_cast<int64_t>(table->size()) * limits.block_size;
  if (capacity < end) {
    return absl::InvalidArgumentError(absl::StrCat(where, "its ", table->size(), " blocks hold ",
                                                   capacity, " positions but the step runs to ",
                                                   end, " (missing new_block_ids?)"));
  }
  return absl::OkStatus();
}

// Log-softmax of the raw logits at `token` and at the `top` most likely tokens.
void WriteLogprobs(absl::Span<const float> logits, int32_t token, int32_t top,
                   v1::SequenceOutput* out) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x - max));
  const float log_sum = max + static_cast<float>(std::log(sum));
  out->set_logprob(logits[token] - log_sum);
  if (top == 0) return;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const auto k = std::min<size_t>(top, ids.size());
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (size_t i = 0; i < k; ++i) {
    out->add_top_token_ids(ids[i]);
    out->add_top_logprobs(logits[ids[i]] - log_sum);
  }
}

}  // namespace

absl::StatusOr<StepPlan> BuildForwardBatch(const v1::StepRequest& request,
                                           const SequenceMap& sequences,
                                           const BatchLimits& limits) {
  StepPlan plan;
  ForwardBatchBuilder builder(limits.block_size);
  absl::flat_hash_set<uint64_t> scheduled;
  int64_t rows = 0;
  for (const v1::ScheduledSequence& s : request.sequences()) {
    const auto it = sequences.find(s.seq_id());
    if (it == sequences.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s.seq_id(),
                       " is unknown: it was never sent in new_sequences, or it has finished"));
    }
    if (!scheduled.insert(s.seq_id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s.seq_id(), " is scheduled twice in step ", request.step_id()));
    }
    std::vector<int32_t>& table = plan.block_tables.emplace_back();
    RETURN_IF_ERROR(CheckScheduled(s, it->second, limits, &table));
    builder.AddSequence(s.token_ids(), s.start_position(), table, s.all_logits());
    plan.first_logits_row.push_back(rows);
    rows += s.all_logits() ? s.token_ids_size() : 1;
  }
  plan.batch = builder.Build();
  return plan;
}

void CommitStep(const v1::StepRequest& request, StepPlan& plan, SequenceMap* sequences) {
  for (int i = 0; i < request.sequences_size(); ++i) {
    const v1::ScheduledSequence& s = request.sequences(i);
    SequenceState& state = sequences->at(s.seq_id());
    state.block_table = std::move(plan.block_tables[i]);
    int64_t position = s.start_position();
    for (int32_t token : s.token_ids()) {
      if (position < static_cast<int64_t>(state.tokens.size())) {
        state.tokens[position] = token;
      } else {
        TP_CHECK(position == static_cast<int64_t>(state.tokens.size()));
        state.tokens.push_back(token);
      }
      ++position;
    }
    state.num_computed = position;
  }
}

void WriteStepOutputs(const v1::StepRequest& request, const StepPlan& plan,
                      absl::Span<const float> logits, int64_t vocab_size, SequenceMap* sequences,
                      v1::StepResponse* response) {
  for (int i = 0; i < request.sequences_size(); ++i) {
    const v1::ScheduledSequence& s = request.sequences(i);
    if (!s.sample() && !s.all_logits()) continue;
    const int64_t first = plan.first_logits_row[i];
    const int64_t rows = s.all_logits() ? s.token_ids_size() : 1;
    TP_CHECK((first + rows) * vocab_size <= static_cast<int64_t>(logits.size()));
    v1::SequenceOutput* out = response->add_outputs();
    out->set_seq_id(s.seq_id());
    out->set_token_id(-1);
    if (s.all_logits()) {
      out->mutable_logits()->Add(logits.begin() + first * vocab_size,
                                 logits.begin() + (first + rows) * vocab_size);
    }
    if (s.sample()) {
      SequenceState& state = sequences->at(s.seq_id());
      const absl::Span<const float> last =
          logits.subspan((first + rows - 1) * vocab_size, vocab_size);
      const int32_t token = state.sampler->Sample(last, state.prompt(), state.output());
      out->set_token_id(token);
      if (state.return_logprobs) WriteLogprobs(last, token, state.top_logprobs, out);
    }
  }
}

}  // namespace tpserve
