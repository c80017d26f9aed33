#include "coordinator/step_wire.h"

#include <algorithm>

namespace tpserve {
namespace {

void ToProto(const SamplingParams& s, v1::SamplingParams* p) {
  p->set_temperature(s.temperature);
  p->set_top_k(s.top_k);
  p->set_top_p(s.top_p);
  p->set_min_p(s.min_p);
  p->set_repetition_penalty(s.repetition_penalty);
  p->set_presence_penalty(s.presence_penalty);
  p->set_frequency_penalty(s.frequency_penalty);
  p->set_seed(s.seed);
}

}  // namespace

v1::StepRequest ToStepRequest(const ScheduledBatch& batch, uint64_t step_id, int64_t deadline_ms) {
  v1::StepRequest request;
  request.set_step_id(step_id);
  request.set_deadline_ms(deadline_ms);
  for (const ScheduledBatch::Entry& entry : batch.entries) {
    const Sequence& seq = *entry.seq;
    if (entry.is_new) {
      v1::NewSequence* added = request.add_new_sequences();
      added->set_seq_id(seq.seq_id);
      ToProto(seq.params.sampling, added->mutable_sampling());
      added->mutable_prompt_token_ids()->Add(seq.tokens.begin(),
                                             seq.tokens.begin() + seq.prompt_len);
      added->mutable_output_token_ids()->Add(seq.tokens.begin() + seq.prompt_len, seq.tokens.end());
      if (seq.params.logprobs >= 0) {
        added->set_return_logprobs(true);
        added->set_top_logprobs(seq.params.logprobs);
      }
      added->set_adapter(seq.params.adapter);
      for (const auto& [token, bias] : seq.params.logit_bias) {
        added->add_logit_bias_ids(token);
        added->add_logit_bias_values(bias);
      }
    }
    v1::ScheduledSequence* scheduled = request.add_sequences();
    scheduled->set_seq_id(seq.seq_id);
    scheduled->mutable_token_ids()->Add(seq.tokens.begin() + entry.start,
                                        seq.tokens.begin() + entry.start + entry.num_tokens);
    scheduled->set_start_position(entry.start);
    scheduled->mutable_new_block_ids()->Add(entry.new_block_ids.begin(), entry.new_block_ids.end());
    if (entry.kept_blocks >= 0) scheduled->set_kept_blocks(entry.kept_blocks);
    const bool score = seq.kind == Sequence::Kind::kScore;
    scheduled->set_sample(!score && entry.completes());
    scheduled->set_all_logits(score);
    scheduled->mutable_draft_token_ids()->Add(entry.drafts.begin(), entry.drafts.end());
    scheduled->set_num_proposals(entry.num_proposals);
    if (scheduled->sample() && !seq.mask.empty()) {
      scheduled->mutable_token_bitmask()->Add(seq.mask.begin(), seq.mask.end());
    }
  }
  request.mutable_finished_seq_ids()->Add(batch.finished_seq_ids.begin(),
                                          batch.finished_seq_ids.end());
  return request;
}

StepOutputs FromStepResponse(v1::StepResponse* response) {
  StepOutputs outputs;
  outputs.step_id = response->step_id();
  outputs.sequences.reserve(response->outputs_size());
  for (v1::SequenceOutput& wire : *response->mutable_outputs()) {
    SequenceStepOutput& out = outputs.sequences.emplace_back();
    out.seq_id = wire.seq_id();
    out.token_ids.assign(wire.token_ids().begin(), wire.token_ids().end());
    // The alternatives come flattened, [tokens, top_logprobs].
    const int rows = std::min(wire.logprobs_size(), wire.token_ids_size());
    const int top =
        rows > 0 ? std::min(wire.top_token_ids_size(), wire.top_logprobs_size()) / rows : 0;
    out.logprobs.resize(rows);
    for (int r = 0; r < rows; ++r) {
      TokenLogprob& logprob = out.logprobs[r];
      logprob.token_id = wire.token_ids(r);
      logprob.logprob = wire.logprobs(r);
      logprob.top.reserve(top);
      for (int j = r * top; j < (r + 1) * top; ++j) {
        logprob.top.emplace_back(wire.top_token_ids(j), wire.top_logprobs(j));
      }
    }
    out.logits.assign(wire.logits().begin(), wire.logits().end());
    {
      // Frees the wire copy now: a Score step's logits are then held once, not twice.
      google::protobuf::RepeatedField<float> freed;
      wire.mutable_logits()->Swap(&freed);
    }
    out.proposal_token_ids.assign(wire.proposal_token_ids().begin(),
                                  wire.proposal_token_ids().end());
  }
  response->clear_outputs();
  return outputs;
}

}  // namespace tpserve
