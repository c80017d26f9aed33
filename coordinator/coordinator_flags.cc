#include "coordinator/coordinator_flags.h"

#include <algorithm>

#include "common/cluster_token.h"
#include "coordinator/bearer_keys.h"
#include "coordinator/ngram_flags.h"

namespace tpserve {

void AddCoordinatorFlags(CLI::App& app, CoordinatorFlags* flags) {
  app.add_option("--model", flags->model,
                 "GGUF model file or Hugging Face folder (tokenizer and config are read here)")
      ->required()
      ->check(CLI::ExistingPath);
  app.add_option("--chat-template", flags->chat_template,
                 "Jinja chat template file to use instead of the model's tokenizer.chat_template")
      ->check(CLI::ExistingFile);
  app.add_option("--reasoning-parser", flags->reasoning_parser,
                 "how the model marks its thinking, which replies carry as reasoning_content: "
                 "none, deepseek_r1, qwen3, or auto (from the chat template)")
      ->check(CLI::IsMember({"none", "auto", "deepseek_r1", "qwen3"}))
      ->capture_default_str();
  app.add_option("--sampling-defaults", flags->sampling_defaults,
                 "what a request's absent sampling fields take: 'model' (the model's recommended "
                 "sampling: general.sampling.* or generation_config.json) or 'builtin' "
                 "(temperature 1, every filter off)")
      ->check(CLI::IsMember({"model", "builtin"}))
      ->capture_default_str();
  app.add_option("--world-size", flags->world_size,
                 "number of worker ranks: the tensor-parallel size times the pipeline stages")
      ->required()
      ->check(CLI::Range(1, 1024));
  app.add_option(
         "--pipeline-parallel-size,--pp", flags->pipeline_parallel_size,
         "pipeline stages: the ranks form this many stages of world-size / this "
         "tensor-parallel ranks, rank = stage × that + tensor-parallel rank; each stage runs "
         "a balanced share of the layers (CPU workers)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--steps-in-flight", flags->steps_in_flight,
                 "steps sent to the workers before the oldest returns, from 1 to the pipeline "
                 "stages, so that every stage works on a step of its own; 0 (the default): one per "
                 "stage")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option(
         "--metrics-names", flags->metrics_names,
         "the names /metrics gives the series vLLM also has: 'tpserve' (tpserve:...) or "
         "'vllm' (vllm:num_requests_waiting, vllm:kv_cache_usage_perc, ...: what vLLM's "
         "dashboards, the Gateway API Inference Extension's endpoint picker and autoscalers "
         "read); tpserve's own series keep tpserve:")
      ->check(CLI::IsMember({"tpserve", "vllm"}))
      ->capture_default_str();
  app.add_option("--host", flags->host, "address to listen on")->capture_default_str();
  app.add_option("--port", flags->port, "port to listen on; 0 picks a free one")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--port-file", flags->port_file, "write the chosen port to this file");
  app.add_option("--startup-timeout", flags->startup_timeout_s,
                 "seconds to wait for every rank to register (and for Init)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--shutdown-timeout", flags->shutdown_timeout_s,
                 "on SIGTERM or SIGINT: readiness turns 503 and new requests are refused at "
                 "once; the requests in flight get this many seconds to finish, then the rest "
                 "end with an error (streams with an error event) and the workers are stopped")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--step-timeout", flags->step_timeout_s,
                 "the least time, in seconds, a step may take before the cluster is degraded; a "
                 "step of more work gets proportionally longer (dead ranks are found by the "
                 "heartbeats)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--recovery-grace", flags->recovery_grace_s,
                 "seconds requests in flight are held after a rank is lost, waiting for the group "
                 "to re-form, before they fail; they then recompute and go on streaming where they "
                 "stopped. New requests meanwhile queue up to --max-queued-requests (refused with "
                 "503 when it is 0). 0 = requests in flight fail at once")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--heartbeat-interval", flags->heartbeat_interval_s,
                 "seconds between heartbeats to every rank; a rank that does not answer within "
                 "half of it has missed one, which fails the step in flight and degrades the "
                 "cluster")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 60.0));
  app.add_option("--kv-cache-blocks", flags->kv_cache_blocks,
                 "KV blocks per rank; 0 sizes the pool from --kv-cache-memory")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-cache-memory", flags->kv_cache_memory_mib,
                 "MiB of KV cache per rank when --kv-cache-blocks is 0; 0 = the worker's default")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--kv-cache-dtype", flags->kv_cache_dtype,
                 "the KV cache's element type: auto (fp32 on CPU workers, bf16 on CUDA), or fp8 "
                 "(= fp8_e4m3: E4M3 codes, a quarter of the CPU's bytes per token and half of "
                 "CUDA's)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "fp8", "fp8_e4m3"}));
  app.add_option("--quantization", flags->quantization,
                 "none (the model file's own weights), or fp8: CUDA workers quantize every "
                 "linear's weights at load to FP8 E4M3 with per-output-channel scales and its "
                 "activations per token (W8A8; half the bytes of bf16 weights)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "fp8"}));
  app.add_option("--max-num-batched-tokens", flags->max_num_batched_tokens,
                 "tokens run per step: decodes plus prefill chunks")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-step-attention", flags->max_step_attention,
                 "attention work per step, in tokens times the context they attend to: a long "
                 "prompt's later chunks get shorter so that no step runs long")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
  app.add_option("--max-num-seqs", flags->max_num_seqs, "sequences running at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_flag("--no-prefix-cache", flags->no_prefix_cache,
               "turn off the RadixAttention prefix cache");
  app.add_flag("--no-jump-forward", flags->no_jump_forward,
               "sample every token of constrained output, also where the constraint forces it");
  app.add_flag("--no-step-relay", flags->no_step_relay,
               "send every step to every rank, also where the ranks share memory (by default "
               "rank 0 alone gets it and relays it to the others through the segment)");
  app.add_option("--speculative", flags->speculative,
                 "speculative decoding: 'ngram' proposes the tokens that followed the latest "
                 "earlier occurrence of a sequence's last tokens (prompt lookup), verified "
                 "losslessly by rank 0; 'draft' has rank 0 run --draft-model, a smaller model "
                 "with the same tokenizer, to propose them; 'self' has it run the model's own "
                 "first --self-spec-layers layers; 'none' to decode one token per step")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "ngram", "draft", "self"}));
  app.add_option("--lora-modules", flags->lora_modules,
                 "LoRA adapters (PEFT folders) served beside the model, as name=path: a request "
                 "whose \"model\" is the name runs with the adapter; every worker must be "
                 "started with the path too (tpserve-worker --lora-path); repeatable");
  app.add_option("--max-loras", flags->max_loras,
                 "adapter slots on the workers (0: as many as --lora-modules names)")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  app.add_option("--max-lora-rank", flags->max_lora_rank,
                 "the largest LoRA rank (r) an adapter may have")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--draft-model", flags->draft_model,
                 "--speculative draft: the draft model (GGUF file or Hugging Face folder), which "
                 "every worker must be started with too (tpserve-worker --draft-model)");
  app.add_option("--self-spec-layers", flags->self_spec_layers,
                 "--speculative self: the draft is the model's first this many layers, then its "
                 "final norm and output head (0: a quarter of its layers)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--num-speculative-tokens", flags->num_speculative_tokens,
                 "most tokens proposed per sequence and step")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  app.add_option("--spec-min-acceptance", flags->spec_min_acceptance,
                 "a request whose share of accepted proposals falls below this, once it has "
                 "proposed 16 tokens, speculates no more (0: never switched off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--spec-disable-batch-size", flags->spec_disable_batch_size,
                 "no proposals in steps with more decoding sequences than this")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  AddNgramFlags(app, &flags->ngram);
  app.add_option("--block-size", flags->block_size, "tokens per KV block")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--http-port", flags->http_port,
                 "port of the OpenAI-compatible HTTP API; 0 picks a free one, -1 turns it off")
      ->capture_default_str()
      ->check(CLI::Range(-1, 65535));
  app.add_option("--http-host", flags->http_host,
                 "address the HTTP API listens on (default: --host)");
  app.add_option("--http-port-file", flags->http_port_file,
                 "write the chosen HTTP port to this file");
  app.add_option("--http-max-connections", flags->http_max_connections,
                 "open HTTP connections beyond which new ones get 503 (idle and slow ones count)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--http-io-threads", flags->http_io_threads,
                 "threads writing HTTP responses and streams (0: a quarter of the cores, 2 to 4)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--http-max-body-bytes", flags->http_max_body_bytes,
                 "largest request body accepted; larger ones get 413 before they are read")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 32));
  app.add_option("--http-header-timeout", flags->http_header_timeout_s,
                 "seconds a request's head may take to arrive (and an idle connection may stay "
                 "open) before the connection is closed")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--served-model-name", flags->served_model_name,
                 "the model name clients pass in OpenAI requests (default: the model file's name "
                 "without .gguf)");
  app.add_option("--max-queued-requests", flags->max_queued_requests,
                 "requests waiting to start beyond which new ones get 429 / RESOURCE_EXHAUSTED; "
                 "0 = no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--device", flags->device,
                 "where the workers run the model: cpu, or cuda (one GPU per rank)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--enforce-eager", flags->enforce_eager,
               "cuda: every worker runs every step eagerly, without decode CUDA graphs");
  app.add_option("--cluster-token-file", flags->cluster_token_file,
                 "file holding the token every coordinator-worker call carries (default: $" +
                     std::string(kClusterTokenEnv) + "; neither: an open cluster)");
  app.add_option("--api-key", flags->api_keys,
                 "a key clients must send as 'Authorization: Bearer' (HTTP /v1/*) or gRPC "
                 "metadata 'authorization' (InferenceService); repeatable");
  app.add_option("--api-key-file", flags->api_key_file,
                 "file of API keys, one per line (also $" + std::string(kApiKeyEnv) + ")");
  app.add_option("--admin-key-file", flags->admin_key_file,
                 "file of keys (one per line) that AdminService's Drain, Undrain and "
                 "FlushPrefixCache need as 'authorization: Bearer' (also $" +
                     std::string(kAdminKeyEnv) + "; tpctl --admin-key-file)");
  app.add_option("--admin-port", flags->admin_port,
                 "port of AdminService (tpctl); 0 picks a free one")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--admin-host", flags->admin_host,
                 "address AdminService listens on (default: --host)");
  app.add_option("--admin-port-file", flags->admin_port_file,
                 "write the chosen admin port to this file");
  AddTlsFlags(app, &flags->tls);
  AddRequestLimitFlags(app, &flags->limits);
}

std::vector<std::string> GivenCoordinatorArgs(const CLI::App& app,
                                              const std::vector<std::string>& except) {
  // The names come from the registration itself, so a flag added there passes through.
  CLI::App registry;
  CoordinatorFlags unused;
  AddCoordinatorFlags(registry, &unused);
  std::vector<std::string> args;
  for (const CLI::Option* known : registry.get_options()) {
    if (known->get_lnames().empty()) continue;
    const std::string name = "--" + known->get_lnames().front();
    if (name == "--help" || std::find(except.begin(), except.end(), name) != except.end()) {
      continue;
    }
    const CLI::Option* given = app.get_option_no_throw(name);
    if (given == nullptr || given->count() == 0) continue;
    if (given->get_expected_max() == 0) {
      args.push_back(name);
      continue;
    }
    for (const std::string& value : given->results()) args.push_back(name + "=" + value);
  }
  return args;
}

}  // namespace tpserve
