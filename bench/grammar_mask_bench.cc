// Time to fill one structured-output allow-list row (TokenMatcher::FillBitmask) per generated
// token, over a vocabulary from a GGUF file, while walking a JSON schema's output: at each step a
// seeded draw among the allowed tokens is accepted, as a sampler under the mask would. Reports
// the compile time and the per-token fill time (p50, p99, mean) over every walk.
//   tpserve-bench-grammar MODEL_OR_VOCAB.gguf [walks] [max_tokens]
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/latency_stats.h"
#include "coordinator/grammar.h"
#include "model/gguf_file.h"
#include "model/tokenizer.h"

namespace {

// Nested objects, arrays, enums, ranges, patterns: the structured_output test's kind of schema.
constexpr char kSchema[] = R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 24},
  "age": {"type": "integer", "minimum": 0, "maximum": 120},
  "email": {"type": "string", "pattern": "^[a-z]{1,10}@[a-z]{1,10}\\.com$"},
  "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
  "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
    "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city", "zip"]},
  "role": {"enum": ["admin", "user", "guest"]}},
  "required": ["name", "age", "email", "tags", "address", "role"]})";

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

int main(int argc, char** argv) {
  using tpserve::GrammarCompiler;
  using tpserve::TokenMatcher;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_OR_VOCAB.gguf [walks] [max_tokens]\n", argv[0]);
    return 2;
  }
  const int walks = argc > 2 ? std::stoi(argv[2]) : 20;
  const int max_tokens = argc > 3 ? std::stoi(argv[3]) : 200;
  auto file = tpserve::GgufFile::Open(argv[1]);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", std::string(file.status().message()).c_str());
    return 1;
  }
  auto tokenizer = tpserve::Tokenizer::FromGguf(**file);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  const int32_t vocab = (*tokenizer)->vocab_size();
  std::fprintf(stderr, "grammar bench: vocabulary of %d tokens, %d walks\n", vocab, walks);

  auto start = std::chrono::steady_clock::now();
  GrammarCompiler compiler(**tokenizer, int64_t{256} << 20, int64_t{64} << 10);
  const double index_s = Seconds(std::chrono::steady_clock::now() - start);
  tpserve::OutputConstraint constraint;
  constraint.kind = tpserve::OutputConstraint::Kind::kJsonSchema;
  constraint.spec = kSchema;
  constraint.param = "schema";
  start = std::chrono::steady_clock::now();
  auto compiled = compiler.Compile(constraint);
  const double compile_s = Seconds(std::chrono::steady_clock::now() - start);
  if (!compiled.ok()) {
    std::fprintf(stderr, "%s\n", std::string(compiled.status().message()).c_str());
    return 1;
  }

  std::vector<double> fills;
  int64_t tokens = 0;
  std::mt19937_64 rng(1);
  for (int walk = 0; walk < walks; ++walk) {
    TokenMatcher matcher(*compiled);
    std::vector<uint32_t> row(matcher.bitmask_words());
    for (int t = 0; t < max_tokens && !matcher.terminated(); ++t) {
      const auto begin = std::chrono::steady_clock::now();
      matcher.FillBitmask(absl::MakeSpan(row));
      fills.push_back(Seconds(std::chrono::steady_clock::now() - begin) * 1e6);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab; ++id) {
        if ((row[id / 32] >> (id % 32)) & 1) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      const int32_t token = allowed[rng() % allowed.size()];
      if (!matcher.Accept(token)) {
        std::fprintf(stderr, "the matcher refused token %d it allowed\n", token);
        return 1;
      }
      ++tokens;
    }
  }
  const tpserve::bench::LatencySummary fill = tpserve::bench::Summarize(fills);
  std::printf(
      "vocabulary %d: index %.2f s, schema compile %.3f s, %lld tokens; mask fill per "
      "token p50 %.1f us, p99 %.1f us, mean %.1f us\n",
      vocab, index_s, compile_s, static_cast<long long>(tokens), fill.p50, fill.p99, fill.mean);
  return 0;
}
