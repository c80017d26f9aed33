// tpserve-coordinator's flags: what they hold and how the command line fills them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include "common/tls_flags.h"
#include "coordinator/http_message.h"
#include "coordinator/ngram_proposer.h"
#include "coordinator/request_limits.h"

namespace tpserve {

// The coordinator's command line (tpserve-coordinator --help says what each does).
struct CoordinatorFlags {
  std::string model;
  std::string chat_template;  // a Jinja file that replaces the model's tokenizer.chat_template
  std::string reasoning_parser =
      "auto";  // none, auto, deepseek_r1, qwen3 (coordinator/reasoning.h)
  std::string sampling_defaults = "model";  // "model": the file's recommended sampling; "builtin"
  int world_size = 0;
  int pipeline_parallel_size = 1;
  int steps_in_flight = 0;  // 0: one per pipeline stage
  std::string metrics_names = "tpserve";  // or "vllm" (Metrics' MetricNames)
  std::string host = "127.0.0.1";
  int port = 0;
  std::string port_file;
  double startup_timeout_s = 60;
  double shutdown_timeout_s = 30;
  double step_timeout_s = 30;
  double heartbeat_interval_s = 1;
  double recovery_grace_s = 60;
  int64_t kv_cache_blocks = 0;
  int64_t kv_cache_memory_mib = 0;
  std::string kv_cache_dtype = "auto";
  std::string quantization = "none";
  int block_size = 16;
  int max_num_batched_tokens = 2048;
  int64_t max_step_attention = int64_t{2048} * 2048;
  int max_num_seqs = 256;
  bool no_prefix_cache = false;
  bool no_jump_forward = false;
  bool no_step_relay = false;
  // "ngram": prompt-lookup proposals; "draft": a draft model; "self": the model's first layers
  std::string speculative = "none";
  std::string draft_model;
  std::vector<std::string> lora_modules;  // name=path (coordinator/lora_modules.h)
  int32_t max_loras = 0;                  // adapter slots; 0: as many as --lora-modules names
  int32_t max_lora_rank = 64;
  int self_spec_layers = 0;  // 0: a quarter of the model's layers
  int num_speculative_tokens = 4;
  int spec_disable_batch_size = 8;
  double spec_min_acceptance = 0.2;
  NgramOptions ngram;
  int http_port = 8000;   // -1: no HTTP
  std::string http_host;  // empty: --host
  std::string http_port_file;
  int http_max_connections = HttpLimits().max_connections;
  int http_io_threads = HttpLimits().io_threads;
  int64_t http_max_body_bytes = HttpLimits().max_body_bytes;
  double http_header_timeout_s = absl::ToDoubleSeconds(HttpLimits().header_timeout);
  std::string served_model_name;  // empty: the model file's (or folder's) name without ".gguf"
  int max_queued_requests = 0;
  std::string device = "cpu";
  bool enforce_eager = false;
  std::string cluster_token_file;
  std::vector<std::string> api_keys;
  std::string api_key_file;
  std::string admin_key_file;
  std::string admin_host;  // empty: --host
  int admin_port = 0;
  std::string admin_port_file;
  TlsFiles tls;
  RequestLimits limits;
};

void AddCoordinatorFlags(CLI::App& app, CoordinatorFlags* flags);

// The coordinator flags given on the command line `app` parsed (where AddCoordinatorFlags
// registered them, less any removed), as "--name=value" ("--name" for a switch), one per value
// given, but those named in `except`: what a launcher passes through to its coordinator
// unchanged.
std::vector<std::string> GivenCoordinatorArgs(const CLI::App& app,
                                              const std::vector<std::string>& except);

}  // namespace tpserve
