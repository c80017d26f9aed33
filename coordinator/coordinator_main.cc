// tpserve-coordinator: serves InferenceService and ClusterService on one port, AdminService on
// another (--admin-port) and the OpenAI-compatible HTTP API on a third, waits for the --world-size
// workers to register, initializes and loads them, then runs the engine until SIGTERM/SIGINT. Exits
// 1 when start-up fails (bad flags, unsplittable model, missing ranks, Init or LoadShard errors), 0
// after a signal.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/auth_refusal.h"
#include "common/cluster_token.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/tls_flags.h"
#include "coordinator/admin_service.h"
#include "coordinator/bearer_keys.h"
#include "coordinator/cluster_service.h"
#include "coordinator/engine.h"
#include "coordinator/group_reformer.h"
#include "coordinator/heartbeat_monitor.h"
#include "coordinator/http_server.h"
#include "coordinator/inference_service.h"
#include "coordinator/metrics.h"
#include "coordinator/ngram_flags.h"
#include "coordinator/worker_pool.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "model/chat_template.h"
#include "model/gguf_file.h"
#include "model/hf_folder.h"
#include "model/model_config.h"
#include "model/sampling_defaults.h"
#include "model/shard_layout.h"
#include "model/tokenizer.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "coordinator";
constexpr absl::Duration kLoadTimeout = absl::Minutes(10);
constexpr absl::Duration kShutdownTimeout = absl::Seconds(5);
constexpr absl::Duration kRegisterProbeTimeout = absl::Seconds(1);

struct Flags {
  std::string model;
  std::string chat_template;  // a Jinja file that replaces the model's tokenizer.chat_template
  std::string sampling_defaults = "model";  // "model": the file's recommended sampling; "builtin"
  int world_size = 0;
  std::string host = "127.0.0.1";
  int port = 0;
  std::string port_file;
  double startup_timeout_s = 60;
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
  int self_spec_layers = 0;  // 0: a quarter of the model's layers
  int num_speculative_tokens = 4;
  int spec_disable_batch_size = 8;
  double spec_min_acceptance = 0.2;
  NgramOptions ngram;
  int http_port = 8000;   // -1: no HTTP
  std::string http_host;  // empty: --host
  std::string http_port_file;
  int http_max_connections = HttpLimits().max_connections;
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
};

std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

// Written to a temporary name and renamed, so a reader never sees a partial file.
bool WritePortFile(const std::string& path, int port) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp);
    out << port << "\n";
    if (!out.good()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

// Blocks SIGINT/SIGTERM in every thread (call before starting any) and notifies `stop` from a
// dedicated thread when one arrives.
void HandleSignals(absl::Notification* stop) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread([signals, stop] {
    int signal = 0;
    sigwait(&signals, &signal);
    LogInfo(kLog, "received %s; shutting down", signal == SIGINT ? "SIGINT" : "SIGTERM");
    stop->Notify();
  }).detach();
}

// Tells the workers that did register to exit, when start-up fails before a pool exists.
void ShutdownRegistered(const std::vector<RegisteredWorker>& workers) {
  for (const RegisteredWorker& w : workers) {
    auto stub = v1::WorkerService::NewStub(ClusterChannel(w.address));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kShutdownTimeout));
    v1::ShutdownRequest request;
    v1::ShutdownResponse response;
    stub->Shutdown(&context, request, &response);
  }
}

int Fail(const std::string& message) {
  LogError(kLog, "%s", message);
  return 1;
}

std::string ServedModelName(const Flags& flags) {
  if (!flags.served_model_name.empty()) return flags.served_model_name;
  std::filesystem::path path = std::filesystem::path(flags.model).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();  // a folder given as "dir/"
  std::string name = path.filename().string();
  if (absl::EndsWith(name, ".gguf")) name.resize(name.size() - 5);
  return name;
}

// The model's chat template (--chat-template overrides the file's), or null when the file has
// none or the interpreter cannot run it: chat requests are then refused, and the log names the
// construct. A --chat-template that cannot be used stops the start.
// A draft's proposals are token ids the target verifies: both must mean the same text by them.
absl::Status CheckDraftTokenizer(const std::string& path, const Tokenizer& target) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = OpenModel(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> draft = Tokenizer::FromGguf(**file);
  if (!draft.ok()) return draft.status();
  if ((*draft)->vocab_size() != target.vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat("its tokenizer has ", (*draft)->vocab_size(),
                                                   " tokens, the model's ", target.vocab_size(),
                                                   ": a draft must share the model's tokenizer"));
  }
  for (int32_t id = 0; id < target.vocab_size(); ++id) {
    if ((*draft)->TokenText(id) != target.TokenText(id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "its token ", id, " is '", absl::CEscape((*draft)->TokenText(id)), "', the model's '",
          absl::CEscape(target.TokenText(id)), "': a draft must share the model's tokenizer"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> LoadChatTemplate(const GgufFile& file,
                                                               const Tokenizer& tokenizer,
                                                               const std::string& override_path) {
  absl::StatusOr<ChatTemplate> chat_template = ChatTemplate::Load(file, tokenizer, override_path);
  if (!chat_template.ok()) {
    if (!override_path.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--chat-template ", override_path, ": ", chat_template.status().message()));
    }
    LogWarning(kLog, "/v1/chat/completions is off: %s", chat_template.status().message());
    return nullptr;
  }
  return std::make_unique<ChatTemplate>(*std::move(chat_template));
}

// Serves `services` on host:port (0: a free one) with the process's TLS; reports the address as
// "tpserve-coordinator <what>listening on ADDRESS" and in `port_file`. Null when it cannot.
std::unique_ptr<grpc::Server> Listen(const std::string& host, int port,
                                     const std::vector<grpc::Service*>& services,
                                     const std::string& what, const std::string& port_file,
                                     std::string* address) {
  grpc::ServerBuilder builder;
  int chosen = 0;
  builder.AddListeningPort(JoinHostPort(host, port), ProcessTls().ServerCredentials(), &chosen);
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || chosen == 0) return nullptr;
  *address = JoinHostPort(host, chosen);
  std::printf("tpserve-coordinator %slistening on %s\n", what.c_str(), address->c_str());
  std::fflush(stdout);
  if (!port_file.empty() && !WritePortFile(port_file, chosen)) {
    LogError(kLog, "cannot write the port file %s", port_file);
    server->Shutdown(absl::ToChronoTime(absl::Now()));
    return nullptr;
  }
  return server;
}

int Run(const Flags& flags) {
  if (absl::Status s = LoadClusterToken(flags.cluster_token_file); !s.ok()) {
    return Fail(absl::StrCat("--cluster-token-file: ", s.message()));
  }
  if (absl::Status s = LoadProcessTls(flags.tls); !s.ok()) return Fail(std::string(s.message()));
  LogInfo(kLog, "gRPC: %s",
          ProcessTls().enabled() ? "mutual TLS on every port and call (--tls-ca signs the peers)"
                                 : "plaintext (no --tls-cert, --tls-key, --tls-ca)");
  if (!HasClusterToken()) {
    LogWarning(kLog,
               "no cluster token (--cluster-token-file or %s): anyone who reaches this "
               "port can register ranks and use the rendezvous store",
               kClusterTokenEnv);
  }
  absl::StatusOr<BearerKeys> api_keys =
      BearerKeys::Load(flags.api_keys, flags.api_key_file, kApiKeyEnv);
  if (!api_keys.ok()) return Fail(absl::StrCat("API keys: ", api_keys.status().message()));
  absl::StatusOr<BearerKeys> admin_keys = BearerKeys::Load({}, flags.admin_key_file, kAdminKeyEnv);
  if (!admin_keys.ok()) return Fail(absl::StrCat("admin key: ", admin_keys.status().message()));
  if (admin_keys->empty()) {
    LogWarning(kLog,
               "no admin key (--admin-key-file or %s): anyone who reaches this port can "
               "drain the cluster or flush its prefix cache",
               kAdminKeyEnv);
  }
  if (api_keys->empty()) {
    LogWarning(kLog, "no API key (--api-key, --api-key-file or %s): the client APIs are open",
               kApiKeyEnv);
  }
  // The model file gives the tokenizer and the head counts that decide the tensor-parallel split.
  absl::StatusOr<std::unique_ptr<GgufFile>> file = OpenModel(flags.model);
  if (!file.ok()) return Fail(absl::StrCat("--model: ", file.status().message()));
  absl::StatusOr<ModelConfig> config = ModelConfig::FromGguf(**file);
  if (!config.ok()) return Fail(absl::StrCat("--model: ", config.status().message()));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(**file);
  if (!tokenizer.ok()) return Fail(absl::StrCat("--model: ", tokenizer.status().message()));
  // The coordinator checks client token ids against the tokenizer, workers against the config:
  // the two must agree, or ids accepted here would be refused by every worker.
  if ((*tokenizer)->vocab_size() != config->vocab_size) {
    return Fail(absl::StrCat("--model: the tokenizer has ", (*tokenizer)->vocab_size(),
                             " tokens but llama.vocab_size is ", config->vocab_size,
                             "; tpserve needs them equal"));
  }
  if (absl::StatusOr<ShardLayout> layout = ShardLayout::Make(*config, 0, flags.world_size);
      !layout.ok()) {
    return Fail(absl::StrCat("--world-size ", flags.world_size, ": ", layout.status().message()));
  }
  LogInfo(kLog, "model %s: %s", flags.model, config->DebugString());
  if (flags.speculative == "draft") {
    if (flags.draft_model.empty()) return Fail("--speculative draft needs --draft-model");
    if (absl::Status same = CheckDraftTokenizer(flags.draft_model, **tokenizer); !same.ok()) {
      return Fail(absl::StrCat("--draft-model: ", same.message()));
    }
  }
  int self_spec_layers = 0;
  if (flags.speculative == "self") {
    self_spec_layers = flags.self_spec_layers > 0
                           ? flags.self_spec_layers
                           : static_cast<int>(std::max<int64_t>(1, config->num_layers / 4));
    if (self_spec_layers >= config->num_layers) {
      return Fail(absl::StrCat("--self-spec-layers ", self_spec_layers,
                               ": the draft must be fewer layers than the model's ",
                               config->num_layers));
    }
    LogInfo(kLog, "self-speculative: the draft is the model's first %d of %d layers",
            self_spec_layers, config->num_layers);
  }
  SamplingParams default_sampling;
  if (flags.sampling_defaults == "model") {
    std::string taken;
    absl::StatusOr<SamplingParams> recommended =
        ModelSamplingDefaults(**file, default_sampling, &taken);
    if (!recommended.ok()) {
      return Fail(absl::StrCat("--model: ", recommended.status().message(),
                               " (--sampling-defaults builtin ignores the model's sampling)"));
    }
    default_sampling = *recommended;
    if (!taken.empty()) {
      LogInfo(kLog, "requests that do not choose take the model's sampling: %s", taken);
    }
  }

  absl::Notification stop;
  HandleSignals(&stop);

  // HTTP comes up before the workers, so that /health and /health/ready answer during start-up.
  const std::string served_model_name = ServedModelName(flags);
  Metrics metrics(served_model_name);
  absl::StatusOr<std::unique_ptr<ChatTemplate>> loaded_template =
      LoadChatTemplate(**file, **tokenizer, flags.chat_template);
  if (!loaded_template.ok()) return Fail(std::string(loaded_template.status().message()));
  const std::unique_ptr<ChatTemplate> chat_template = *std::move(loaded_template);
  SetAuthRefusalCounter([&metrics](const char* surface) { metrics.AddAuthFailure(surface); });
  // Before `metrics` goes away; the servers that refuse are stopped by then.
  absl::Cleanup forget_counter = [] { SetAuthRefusalCounter(nullptr); };
  HttpLimits http_limits;
  http_limits.max_connections = flags.http_max_connections;
  http_limits.max_body_bytes = static_cast<size_t>(flags.http_max_body_bytes);
  http_limits.header_timeout = absl::Seconds(flags.http_header_timeout_s);
  HttpServer http({served_model_name, config->context_length, tokenizer->get(), chat_template.get(),
                   default_sampling, &metrics, &*api_keys, http_limits});
  if (flags.http_port >= 0) {
    const std::string http_host = flags.http_host.empty() ? flags.host : flags.http_host;
    absl::StatusOr<int> http_port = http.Start(http_host, flags.http_port);
    if (!http_port.ok()) {
      return Fail(absl::StrCat(http_port.status().message(), " (--http-host, --http-port)"));
    }
    const std::string http_address = JoinHostPort(http_host, *http_port);
    std::printf("tpserve-coordinator http listening on %s\n", http_address.c_str());
    std::fflush(stdout);
    if (!flags.http_port_file.empty() && !WritePortFile(flags.http_port_file, *http_port)) {
      return Fail(absl::StrCat("--http-port-file: cannot write ", flags.http_port_file));
    }
    LogInfo(kLog, "HTTP (OpenAI API) on %s, model name \"%s\"", http_address, served_model_name);
  }

  ClusterServiceImpl cluster(flags.world_size,
                             ClusterServiceImpl::StatusProbe(kRegisterProbeTimeout));
  InferenceServiceImpl inference(tokenizer->get(), flags.world_size, served_model_name,
                                 default_sampling);
  inference.SetBearerKeys(&*api_keys);
  AdminServiceImpl admin(&cluster, flags.world_size, flags.model);
  admin.SetAdminKeys(&*admin_keys);
  // Server reflection, so that grpcurl and other generic clients can list and call the services.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // The operators' port apart from the clients' and the cluster's, so that a network policy or a
  // Service can expose one without the others.
  const std::string admin_host = flags.admin_host.empty() ? flags.host : flags.admin_host;
  std::string admin_address;
  std::unique_ptr<grpc::Server> admin_server = Listen(
      admin_host, flags.admin_port, {&admin}, "admin ", flags.admin_port_file, &admin_address);
  if (admin_server == nullptr) {
    return Fail(absl::StrCat("cannot serve AdminService on ",
                             JoinHostPort(admin_host, flags.admin_port),
                             " (--admin-host, --admin-port, --admin-port-file)"));
  }
  std::string address;
  std::unique_ptr<grpc::Server> server =
      Listen(flags.host, flags.port, {&cluster, &inference}, "", flags.port_file, &address);
  // On every way out, failed start-ups included: the destructor's Shutdown would wait without a
  // deadline for the calls in flight (a launcher's readiness polls), delaying the exit status.
  absl::Cleanup shutdown_servers = [&server, &admin_server] {
    const auto deadline = absl::ToChronoTime(absl::Now() + absl::Seconds(1));
    if (server != nullptr) server->Shutdown(deadline);
    admin_server->Shutdown(deadline);
  };
  if (server == nullptr) {
    return Fail(absl::StrCat("cannot serve on ", JoinHostPort(flags.host, flags.port),
                             " (--host, --port, --port-file)"));
  }
  LogInfo(kLog, "AdminService on %s", admin_address);
  LogInfo(kLog, "listening on %s; waiting for %d workers to register", address, flags.world_size);

  // Start-up: registration, Init (the collective rendezvous), LoadShard.
  absl::StatusOr<std::vector<RegisteredWorker>> workers =
      cluster.WaitForAllRanks(absl::Now() + absl::Seconds(flags.startup_timeout_s), &stop);
  if (!workers.ok()) {
    ShutdownRegistered(cluster.Registered());
    if (stop.HasBeenNotified()) return 0;
    return Fail(absl::StrCat("start-up timed out after ", flags.startup_timeout_s,
                             " s (--startup-timeout): missing ranks ", cluster.MissingRanks(),
                             " of --world-size ", flags.world_size));
  }
  WorkerPool pool(*workers);
  WorkerInitOptions init;
  init.group_id = NewGroupId();
  init.coordinator_address = address;
  // Empty: each worker loads the file of its own --model (paths are per host); LoadShard then
  // checks by size and fingerprint that every rank loaded the same model.
  init.model_path = "";
  init.block_size = flags.block_size;
  init.kv_cache_blocks = flags.kv_cache_blocks;
  init.kv_cache_bytes = flags.kv_cache_memory_mib << 20;
  init.kv_cache_fp8 = flags.kv_cache_dtype != "auto";
  init.weights_fp8 = flags.quantization == "fp8";
  init.relay_steps = !flags.no_step_relay;
  init.device = flags.device == "cuda" ? v1::DEVICE_CUDA : v1::DEVICE_CPU;
  init.max_num_seqs = flags.max_num_seqs;
  init.max_num_batched_tokens = flags.max_num_batched_tokens;
  init.enforce_eager = flags.enforce_eager;
  if (flags.speculative == "draft") init.draft_model_path = flags.draft_model;
  init.self_spec_layers = self_spec_layers;
  LogInfo(kLog, "all %d ranks registered; Init with group %s", flags.world_size, init.group_id);
  if (absl::Status s = pool.Init(init, absl::Seconds(flags.startup_timeout_s)); !s.ok()) {
    pool.Shutdown(kShutdownTimeout);
    return Fail(s.ToString());
  }
  if (stop.HasBeenNotified()) {
    pool.Shutdown(kShutdownTimeout);
    return 0;
  }
  absl::StatusOr<LoadedModel> loaded = pool.LoadShard(kLoadTimeout);
  if (!loaded.ok()) {
    pool.Shutdown(kShutdownTimeout);
    return Fail(loaded.status().ToString());
  }

  EngineOptions options;
  options.block_size = flags.block_size;
  options.num_blocks = static_cast<int32_t>(loaded->kv_cache_blocks);
  options.context_length =
      loaded->context_length > 0 ? loaded->context_length : config->context_length;
  // A sequence can never outgrow the KV pool: advertise (and enforce) what fits.
  if (const int64_t pool_tokens = int64_t{options.num_blocks} * flags.block_size;
      pool_tokens < options.context_length) {
    LogWarning(kLog,
               "the KV pool holds %d tokens, less than the model's context of %d: serving a "
               "context of %d (raise --kv-cache-memory or --kv-cache-blocks for more)",
               pool_tokens, options.context_length, pool_tokens);
    options.context_length = pool_tokens;
  }
  options.vocab_size = loaded->vocab_size > 0 ? loaded->vocab_size : config->vocab_size;
  options.step_timeout = absl::Seconds(flags.step_timeout_s);
  options.max_num_seqs = flags.max_num_seqs;
  options.max_num_batched_tokens = flags.max_num_batched_tokens;
  options.max_step_attention = flags.max_step_attention;
  options.enable_prefix_cache = !flags.no_prefix_cache;
  options.jump_forward = !flags.no_jump_forward;
  options.num_speculative_tokens = flags.speculative != "none" ? flags.num_speculative_tokens : 0;
  options.draft_model = flags.speculative == "draft" || flags.speculative == "self";
  options.spec_disable_batch_size = flags.spec_disable_batch_size;
  options.spec_min_acceptance = flags.spec_min_acceptance;
  options.ngram.min_n = flags.ngram.min_n;
  options.ngram.max_n = std::max(flags.ngram.min_n, flags.ngram.max_n);
  options.max_queued_requests = flags.max_queued_requests;
  options.recovery_grace = absl::Seconds(flags.recovery_grace_s);
  Engine engine(options, &pool, tokenizer->get());
  engine.SetMetrics(&metrics);
  GroupReformer reformer(&cluster, &pool, init, *loaded, absl::Seconds(flags.startup_timeout_s),
                         kLoadTimeout);
  engine.SetGroupReformer([&reformer] { return reformer.Reform(); });
  engine.Start();
  {
    HeartbeatMonitor heartbeat(&pool, absl::Seconds(flags.heartbeat_interval_s),
                               [&engine](const absl::Status& s) { engine.MarkDegraded(s); });
    admin.SetServing(&pool, &engine);
    inference.SetEngine(&engine);
    http.SetEngine(&engine);
    LogInfo(kLog,
            "serving: %d ranks, %d KV blocks of %d tokens, context %d, vocab %d, %d weight "
            "bytes in all; up to %d sequences and %d tokens per step, prefix cache %s, "
            "jump-forward %s, speculative %s",
            flags.world_size, options.num_blocks, options.block_size, options.context_length,
            options.vocab_size, loaded->weight_bytes, options.max_num_seqs,
            options.max_num_batched_tokens, options.enable_prefix_cache ? "on" : "off",
            options.jump_forward ? "on" : "off", flags.speculative);
    if (stop.HasBeenNotified()) LogInfo(kLog, "stop requested during start-up");
    stop.WaitForNotification();
  }
  engine.Stop();
  // Before the engine goes away: HTTP threads may still be reading it.
  http.Stop();
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  admin_server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  pool.Shutdown(kShutdownTimeout);
  LogInfo(kLog, "stopped");
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::Flags flags;
  CLI::App app{"tpserve coordinator: drives tensor-parallel workers and serves InferenceService"};
  app.add_option("--model", flags.model,
                 "GGUF model file or Hugging Face folder (tokenizer and config are read here)")
      ->required()
      ->check(CLI::ExistingPath);
  app.add_option("--chat-template", flags.chat_template,
                 "Jinja chat template file to use instead of the model's tokenizer.chat_template")
      ->check(CLI::ExistingFile);
  app.add_option("--sampling-defaults", flags.sampling_defaults,
                 "what a request's absent sampling fields take: 'model' (the model's recommended "
                 "sampling: general.sampling.* or generation_config.json) or 'builtin' "
                 "(temperature 1, every filter off)")
      ->check(CLI::IsMember({"model", "builtin"}))
      ->capture_default_str();
  app.add_option("--world-size", flags.world_size, "number of worker ranks (tensor-parallel size)")
      ->required()
      ->check(CLI::Range(1, 1024));
  app.add_option("--host", flags.host, "address to listen on")->capture_default_str();
  app.add_option("--port", flags.port, "port to listen on; 0 picks a free one")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--port-file", flags.port_file, "write the chosen port to this file");
  app.add_option("--startup-timeout", flags.startup_timeout_s,
                 "seconds to wait for every rank to register (and for Init)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--step-timeout", flags.step_timeout_s,
                 "the least time, in seconds, a step may take before the cluster is degraded; a "
                 "step of more work gets proportionally longer (dead ranks are found by the "
                 "heartbeats)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--recovery-grace", flags.recovery_grace_s,
                 "seconds requests in flight are held after a rank is lost, waiting for the group "
                 "to re-form, before they fail; they then recompute and go on streaming where they "
                 "stopped. New requests meanwhile queue up to --max-queued-requests (refused with "
                 "503 when it is 0). 0 = requests in flight fail at once")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--heartbeat-interval", flags.heartbeat_interval_s,
                 "seconds between heartbeats to every rank; a rank that does not answer within "
                 "half of it has missed one, which fails the step in flight and degrades the "
                 "cluster")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 60.0));
  app.add_option("--kv-cache-blocks", flags.kv_cache_blocks,
                 "KV blocks per rank; 0 sizes the pool from --kv-cache-memory")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-cache-memory", flags.kv_cache_memory_mib,
                 "MiB of KV cache per rank when --kv-cache-blocks is 0; 0 = the worker's default")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--kv-cache-dtype", flags.kv_cache_dtype,
                 "the KV cache's element type: auto (fp32 on CPU workers, bf16 on CUDA), or fp8 "
                 "(= fp8_e4m3: E4M3 codes, a quarter of the CPU's bytes per token and half of "
                 "CUDA's)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "fp8", "fp8_e4m3"}));
  app.add_option("--quantization", flags.quantization,
                 "none (the model file's own weights), or fp8: CUDA workers quantize every "
                 "linear's weights at load to FP8 E4M3 with per-output-channel scales and its "
                 "activations per token (W8A8; half the bytes of bf16 weights)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "fp8"}));
  app.add_option("--max-num-batched-tokens", flags.max_num_batched_tokens,
                 "tokens run per step: decodes plus prefill chunks")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-step-attention", flags.max_step_attention,
                 "attention work per step, in tokens times the context they attend to: a long "
                 "prompt's later chunks get shorter so that no step runs long")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
  app.add_option("--max-num-seqs", flags.max_num_seqs, "sequences running at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_flag("--no-prefix-cache", flags.no_prefix_cache,
               "turn off the RadixAttention prefix cache");
  app.add_flag("--no-jump-forward", flags.no_jump_forward,
               "sample every token of constrained output, also where the constraint forces it");
  app.add_flag("--no-step-relay", flags.no_step_relay,
               "send every step to every rank, also where the ranks share memory (by default "
               "rank 0 alone gets it and relays it to the others through the segment)");
  app.add_option("--speculative", flags.speculative,
                 "speculative decoding: 'ngram' proposes the tokens that followed the latest "
                 "earlier occurrence of a sequence's last tokens (prompt lookup), verified "
                 "losslessly by rank 0; 'draft' has rank 0 run --draft-model, a smaller model "
                 "with the same tokenizer, to propose them; 'self' has it run the model's own "
                 "first --self-spec-layers layers; 'none' to decode one token per step")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "ngram", "draft", "self"}));
  app.add_option("--draft-model", flags.draft_model,
                 "--speculative draft: the draft model (GGUF file or Hugging Face folder), which "
                 "every worker must be started with too (tpserve-worker --draft-model)");
  app.add_option("--self-spec-layers", flags.self_spec_layers,
                 "--speculative self: the draft is the model's first this many layers, then its "
                 "final norm and output head (0: a quarter of its layers)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--num-speculative-tokens", flags.num_speculative_tokens,
                 "most tokens proposed per sequence and step")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  app.add_option("--spec-min-acceptance", flags.spec_min_acceptance,
                 "a request whose share of accepted proposals falls below this, once it has "
                 "proposed 16 tokens, speculates no more (0: never switched off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--spec-disable-batch-size", flags.spec_disable_batch_size,
                 "no proposals in steps with more decoding sequences than this")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  AddNgramFlags(app, &flags.ngram);
  app.add_option("--block-size", flags.block_size, "tokens per KV block")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--http-port", flags.http_port,
                 "port of the OpenAI-compatible HTTP API; 0 picks a free one, -1 turns it off")
      ->capture_default_str()
      ->check(CLI::Range(-1, 65535));
  app.add_option("--http-host", flags.http_host,
                 "address the HTTP API listens on (default: --host)");
  app.add_option("--http-port-file", flags.http_port_file,
                 "write the chosen HTTP port to this file");
  app.add_option("--http-max-connections", flags.http_max_connections,
                 "open HTTP connections beyond which new ones get 503 (idle and slow ones count)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--http-max-body-bytes", flags.http_max_body_bytes,
                 "largest request body accepted; larger ones get 413 before they are read")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 32));
  app.add_option("--http-header-timeout", flags.http_header_timeout_s,
                 "seconds a request's head may take to arrive (and an idle connection may stay "
                 "open) before the connection is closed")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--served-model-name", flags.served_model_name,
                 "the model name clients pass in OpenAI requests (default: the model file's name "
                 "without .gguf)");
  app.add_option("--max-queued-requests", flags.max_queued_requests,
                 "requests waiting to start beyond which new ones get 429 / RESOURCE_EXHAUSTED; "
                 "0 = no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--device", flags.device,
                 "where the workers run the model: cpu, or cuda (one GPU per rank)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--enforce-eager", flags.enforce_eager,
               "cuda: every worker runs every step eagerly, without decode CUDA graphs");
  app.add_option("--cluster-token-file", flags.cluster_token_file,
                 "file holding the token every coordinator-worker call carries (default: $" +
                     std::string(tpserve::kClusterTokenEnv) + "; neither: an open cluster)");
  app.add_option("--api-key", flags.api_keys,
                 "a key clients must send as 'Authorization: Bearer' (HTTP /v1/*) or gRPC "
                 "metadata 'authorization' (InferenceService); repeatable");
  app.add_option("--api-key-file", flags.api_key_file,
                 "file of API keys, one per line (also $" + std::string(tpserve::kApiKeyEnv) + ")");
  app.add_option("--admin-key-file", flags.admin_key_file,
                 "file of keys (one per line) that AdminService's Drain, Undrain and "
                 "FlushPrefixCache need as 'authorization: Bearer' (also $" +
                     std::string(tpserve::kAdminKeyEnv) + "; tpctl --admin-key-file)");
  app.add_option("--admin-port", flags.admin_port,
                 "port of AdminService (tpctl); 0 picks a free one")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--admin-host", flags.admin_host,
                 "address AdminService listens on (default: --host)");
  app.add_option("--admin-port-file", flags.admin_port_file,
                 "write the chosen admin port to this file");
  tpserve::AddTlsFlags(app, &flags.tls);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;  // --help is 0; every flag error exits 1
  }
  return tpserve::Run(flags);
}
