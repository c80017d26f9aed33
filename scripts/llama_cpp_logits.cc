// Teacher-forced logits of a GGUF model as llama.cpp computes them, for scripts/make-golden.py's
// architecture goldens (a developer tool, built by make-golden.py against the llama.cpp that
// bench/compare_llama_server.py builds for this CPU; tests only read its output).
//
//   llama_cpp_logits MODEL.gguf TOP_K THREADS < prompts
//
// Each line of stdin is one prompt's token ids, space-separated; for each, one JSON line on stdout:
// [[[id, logit] × TOP_K] per position], largest first. The KV cache is F32 and each prompt runs
// in one batch on a cleared cache, so the only roundings are llama.cpp's matrix kernels'.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf TOP_K THREADS < prompts\n", argv[0]);
    return 2;
  }
  const int top_k = std::atoi(argv[2]);
  llama_backend_init();
  llama_model_params model_params = llama_model_default_params();
  model_params.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], model_params);
  if (model == nullptr) {
    std::fprintf(stderr, "llama_cpp_logits: cannot load %s\n", argv[1]);
    return 1;
  }
  llama_context_params params = llama_context_default_params();
  params.n_ctx = 2048;
  params.n_batch = 2048;
  params.n_ubatch = 2048;
  params.n_threads = params.n_threads_batch = std::atoi(argv[3]);
  params.type_k = GGML_TYPE_F32;
  params.type_v = GGML_TYPE_F32;
  params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  params.no_perf = true;
  llama_context* ctx = llama_init_from_model(model, params);
  if (ctx == nullptr) {
    std::fprintf(stderr, "llama_cpp_logits: cannot make a context\n");
    return 1;
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::vector<llama_token> ids;
    for (llama_token id; in >> id;) ids.push_back(id);
    if (ids.empty()) continue;
    llama_memory_clear(llama_get_memory(ctx), true);
    llama_batch batch = llama_batch_init(static_cast<int32_t>(ids.size()), 0, 1);
    for (size_t i = 0; i < ids.size(); ++i) {
      batch.token[i] = ids[i];
      batch.pos[i] = static_cast<llama_pos>(i);
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = 1;
    }
    batch.n_tokens = static_cast<int32_t>(ids.size());
    if (llama_decode(ctx, batch) != 0) {
      std::fprintf(stderr, "llama_cpp_logits: llama_decode failed\n");
      return 1;
    }
    std::vector<int> order(vocab);
    std::printf("[");
    for (size_t i = 0; i < ids.size(); ++i) {
      const float* row = llama_get_logits_ith(ctx, static_cast<int32_t>(i));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [row](int a, int b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
      });
      std::printf("%s[", i == 0 ? "" : ",");
      for (int k = 0; k < top_k; ++k) {
        std::printf("%s[%d,%.6g]", k == 0 ? "" : ",", order[k], row[order[k]]);
      }
      std::printf("]");
    }
    std::printf("]\n");
    std::fflush(stdout);
    llama_batch_free(batch);
  }
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
