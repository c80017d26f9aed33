#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/check.h"

namespace tpserve::cpu {
namespace {

struct Candidate {
  float logit;
  float weight;  // exp((logit - max_logit) / temperature), in [0, 1]
  int32_t id;
};

// Descending logit, then ascending id: the order of top-k and top-p.
bool Before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Buffers reused by every call on a thread. Vocabulary-sized vectors allocated per call would be
// mmapped and page-faulted afresh each time (glibc serves blocks over 128 KiB with mmap).
struct Scratch {
  std::vector<float> weights;         // [n], by token id
  std::vector<Candidate> candidates;  // the top-k set or the top-p superset
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// The k (< n) best tokens sorted by Before, through a size-k heap whose front is the worst kept
// token: one comparison per token once the heap has settled, O(n log k) at worst, O(k) memory.
void SelectTopK(const float* logits, int64_t n, int64_t k, std::vector<Candidate>* out) {
  out->clear();
  for (int64_t i = 0; i < n; ++i) {
    const Candidate c{logits[i], 0.0f, static_cast<int32_t>(i)};
    if (static_cast<int64_t>(out->size()) < k) {
      out->push_back(c);
      std::push_heap(out->begin(), out->end(), Before);
    } else if (c.logit > out->front().logit) {  // on a tie the kept token has the lower id
      std::pop_heap(out->begin(), out->end(), Before);
      out->back() = c;
      std::push_heap(out->begin(), out->end(), Before);
    }
  }
  std::sort_heap(out->begin(), out->end(), Before);
}

}  // namespace

bool IsGreedy(const SamplingParams& params) {
  constexpr float kGreedyTemperature = 1e-5f;
  return params.temperature < kGreedyTemperature || params.top_k == 1;
}

int32_t Argmax(const float* logits, int64_t n) {
  TP_CHECK(n > 0);
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: the first maximum wins ties
  }
  return static_cast<int32_t>(best);
}

int32_t Sample(const float* logits, int64_t n, const SamplingParams& params, std::mt19937_64& rng) {
  TP_CHECK(n > 0);
  TP_CHECK(params.temperature >= 0.0f && params.top_k >= 0);
  TP_CHECK(params.top_p > 0.0f && params.top_p <= 1.0f);
  TP_CHECK(params.min_p >= 0.0f && params.min_p <= 1.0f);
  if (IsGreedy(params)) return Argmax(logits, n);

  const bool use_top_k = params.top_k > 0 && params.top_k < n;
  const bool use_top_p = params.top_p < 1.0f;
  // min-p keeps p >= min_p * p_max, i.e. weight >= min_p: weights are probabilities relative to
  // the most likely token, which survives every filter, so renormalizing does not move the cut.
  const float min_weight = params.min_p;
  const float inv_temperature = 1.0f / params.temperature;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  Scratch& scratch = ThreadScratch();
  std::vector<Candidate>& candidates = scratch.candidates;

  // After this block: `candidates` is sorted by Before, holds the nucleus (or the top-k set),
  // and carries weights; `mass` is the total weight top-p is measured against.
  double mass = 0.0;
  if (use_top_k) {
    SelectTopK(logits, n, params.top_k, &candidates);
    const float max_logit = candidates.front().logit;
    // An infinite or NaN maximum leaves no distribution to draw from; the argmax is the answer.
    if (!std::isfinite(max_logit)) return Argmax(logits, n);
    for (Candidate& c : candidates) {
      c.weight = std::exp((c.logit - max_logit) * inv_temperature);
      mass += c.weight;
    }
  } else {
    const int32_t best = Argmax(logits, n);
    const float max_logit = logits[best];
    if (!std::isfinite(max_logit)) return best;
    std::vector<float>& weights = scratch.weights;
    weights.resize(n);
    double kept = 0.0;  // mass that passes min-p
    for (int64_t i = 0; i < n; ++i) {
      const float w = std::exp((logits[i] - max_logit) * inv_temperature);
      weights[i] = w;
      mass += w;
      if (w >= min_weight) kept += w;
    }
    if (!use_top_p) {  // No ordering needed: draw in id order over what passes min-p.
      const double target = uniform(rng) * kept;
      double cumulative = 0.0;
      int64_t last = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (weights[i] < min_weight || weights[i] == 0.0f) continue;
        cumulative += weights[i];
        last = i;
        if (target < cumulative) return static_cast<int32_t>(i);
      }
      return static_cast<int32_t>(last);  // unreachable: the same sum in the same order > target
    }
    // The nucleus is a prefix of the sorted order, so it lies inside {weight >= threshold} once
    // that set holds top_p of the mass. Lower the threshold until it does, then sort only that
    // set: each try is one linear pass, and a peaked distribution needs few candidates. min-p
    // keeps a prefix too, so the threshold never needs to go below min_weight.
    const double target = params.top_p * mass;
    float threshold = std::max(1.0f / 64, min_weight);
    while (true) {
      candidates.clear();
      double collected = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        if (weights[i] >= threshold) {
          collected += weights[i];
          candidates.push_back({logits[i], weights[i], static_cast<int32_t>(i)});
        }
      }
      if (collected >= target || threshold <= min_weight || threshold == 0.0f) break;
      threshold = threshold > 1e-30f ? std::max(threshold / 64, min_weight) : 0.0f;
    }
    std::sort(candidates.begin(), candidates.end(), Before);
  }

  int64_t keep = static_cast<int64_t>(candidates.size());
  if (use_top_p) {  // the shortest prefix holding top_p of the mass
    const double target = params.top_p * mass;
    double cumulative = 0.0;
    keep = 0;
    while (keep < static_cast<int64_t>(candidates.size())) {
      cumulative += candidates[keep++].weight;
      if (cumulative >= target) break;
    }
  }
  // min-p, on the sorted prefix; also drops banned (-inf) tokens that a large top-k let in.
  while (keep > 1 &&
         (candidates[keep - 1].weight < min_weight || candidates[keep - 1].weight == 0.0f)) {
    --keep;
  }

  if (keep == 0) return Argmax(logits, n);
  // The draw walks the kept tokens in id order, as the id-order path above and the CUDA sampler
  // do, so that one uniform number picks the same token on both devices.
  std::sort(candidates.begin(), candidates.begin() + keep,
            [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  double total = 0.0;
  for (int64_t i = 0; i < keep; ++i) total += candidates[i].weight;
  const double target = uniform(rng) * total;
  double cumulative = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    cumulative += candidates[i].weight;
    if (target < cumulative) return candidates[i].id;
  }
  return candidates[keep - 1].id;  // unreachable: the same sum in the same order exceeds target
}

void SamplingDistribution(const float* logits, int64_t n, const SamplingParams& params,
                          float* probs) {
  TP_CHECK(n > 0);
  std::fill(probs, probs + n, 0.0f);
  const int32_t best = Argmax(logits, n);
  const float max_logit = logits[best];
  if (IsGreedy(params) || !std::isfinite(max_logit)) {
    probs[best] = 1.0f;
    return;
  }
  const float inv_temperature = 1.0f / params.temperature;
  std::vector<Candidate> sorted(n);
  for (int64_t i = 0; i < n; ++i) {
    sorted[i] = {logits[i], std::exp((logits[i] - max_logit) * inv_temperature),
                 static_cast<int32_t>(i)};
  }
  std::sort(sorted.begin(), sorted.end(), Before);
  int64_t keep = params.top_k > 0 ? std::min<int64_t>(params.top_k, n) : n;
  double mass = 0.0;
  for (int64_t i = 0; i < keep; ++i) mass += sorted[i].weight;
  if (params.top_p < 1.0f) {  // the shortest prefix holding top_p of the mass, as Sample cuts it
    const double target = params.top_p * mass;
    double cumulative = 0.0;
    int64_t prefix = 0;
    while (prefix < keep) {
      cumulative += sorted[prefix++].weight;
      if (cumulative >= target) break;
    }
    keep = prefix;
  }
  // min-p (weights are relative to the most likely token, which always passes it).
  auto kept = [&](const Candidate& c) { return c.weight > 0.0f && c.weight >= params.min_p; };
  double total = 0.0;
  for (int64_t i = 0; i < keep; ++i) total += kept(sorted[i]) ? sorted[i].weight : 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    if (kept(sorted[i])) probs[sorted[i].id] = static_cast<float>(sorted[i].weight / total);
  }
}

int32_t SampleFromWeights(const float* weights, int64_t n, std::mt19937_64& rng) {
  TP_CHECK(n > 0);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += weights[i];
  TP_CHECK(total > 0.0);
  const double target = std::uniform_real_distribution<double>(0.0, 1.0)(rng) * total;
  double cumulative = 0.0;
  int64_t last = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (weights[i] <= 0.0f) continue;
    cumulative += weights[i];
    last = i;
    if (target < cumulative) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last);  // rounding: the last token with weight
}

}  // namespace tpserve::cpu
