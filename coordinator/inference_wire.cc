#include "coordinator/inference_wire.h"

namespace tpserve {

SamplingParams FromProto(const v1::Sampling& s, SamplingParams p) {
  if (s.has_temperature()) p.temperature = s.temperature();
  if (s.has_top_k()) p.top_k = s.top_k();
  if (s.has_top_p()) p.top_p = s.top_p();
  if (s.has_min_p()) p.min_p = s.min_p();
  if (s.has_repetition_penalty()) p.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) p.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) p.frequency_penalty = s.frequency_penalty();
  p.seed = s.has_seed() ? s.seed() : RandomSamplingSeed();
  return p;
}

OutputConstraint FromProto(const v1::OutputConstraint& c) {
  OutputConstraint out;
  switch (c.kind_case()) {
    case v1::OutputConstraint::kJsonObject:
      if (c.json_object()) out.kind = OutputConstraint::Kind::kJson;
      out.param = "constraint.json_object";
      break;
    case v1::OutputConstraint::kJsonSchema:
      out.kind = OutputConstraint::Kind::kJsonSchema;
      out.spec = c.json_schema();
      out.param = "constraint.json_schema";
      break;
    case v1::OutputConstraint::kRegex:
      out.kind = OutputConstraint::Kind::kRegex;
      out.spec = c.regex();
      out.param = "constraint.regex";
      break;
    case v1::OutputConstraint::kChoice:
      out.kind = OutputConstraint::Kind::kChoice;
      out.choices.assign(c.choice().choices().begin(), c.choice().choices().end());
      out.param = "constraint.choice";
      break;
    case v1::OutputConstraint::kGrammar:
      out.kind = OutputConstraint::Kind::kGrammar;
      out.spec = c.grammar();
      out.param = "constraint.grammar";
      break;
    case v1::OutputConstraint::KIND_NOT_SET:
      break;
  }
  return out;
}

v1::GenerateResponse ToChunk(const StreamUpdate& update) {
  v1::GenerateResponse chunk;
  chunk.set_index(update.index);
  chunk.mutable_token_ids()->Add(update.token_ids.begin(), update.token_ids.end());
  chunk.set_text(update.text);
  for (const TokenLogprob& logprob : update.logprobs) {
    v1::TokenLogprob* out = chunk.add_logprobs();
    out->set_token_id(logprob.token_id);
    out->set_logprob(logprob.logprob);
    for (const auto& [id, value] : logprob.top) {
      v1::TokenLogprob::Alternative* alternative = out->add_top();
      alternative->set_token_id(id);
      alternative->set_logprob(value);
    }
  }
  if (update.done) {
    chunk.set_finish_reason(FinishReasonName(*update.finish_reason));
    chunk.mutable_usage()->set_prompt_tokens(update.prompt_tokens);
    chunk.mutable_usage()->set_completion_tokens(update.completion_tokens);
    chunk.mutable_usage()->set_cached_prompt_tokens(update.cached_prompt_tokens);
  }
  return chunk;
}

}  // namespace tpserve
