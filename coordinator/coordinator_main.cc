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
#include "coordinator/coordinator_flags.h"
#include "coordinator/engine.h"
#include "coordinator/front_end_pool.h"
#include "coordinator/graceful_drain.h"
#include "coordinator/group_reformer.h"
#include "coordinator/header_gate.h"
#include "coordinator/heartbeat_monitor.h"
#include "coordinator/http_server.h"
#include "coordinator/inference_service.h"
#include "coordinator/metrics.h"
#include "coordinator/serving_plan.h"
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
// Requests read but not yet parsed, over both front ends; more are refused (503,
// RESOURCE_EXHAUSTED) rather than queued without bound.
constexpr size_t kMaxQueuedFrontEndRequests = 4096;
// The largest message the client and admin ports take: a prompt's text for a long context, a
// schema, token ids. gRPC buffers a message whole before it checks the size, so this bounds what
// one authenticated call can cost.
constexpr int kMaxClientMessageBytes = 64 << 20;


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

std::string ServedModelName(const CoordinatorFlags& flags) {
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

// Serves `services` on host:port (0: a free one) with the process's TLS and `gate` on every call's
// headers; reports the address as "tpserve-coordinator <what>listening on ADDRESS" and in
// `port_file`. Null when it cannot.
std::unique_ptr<grpc::Server> Listen(const std::string& host, int port,
                                     const std::vector<grpc::Service*>& services, HeaderGate gate,
                                     const std::string& what, const std::string& port_file,
                                     std::string* address) {
  grpc::ServerBuilder builder;
  int chosen = 0;
  builder.AddListeningPort(
      JoinHostPort(host, port),
      GatedServerCredentials(ProcessTls().enabled() ? ProcessTls().ServerCredentials() : nullptr,
                             std::move(gate)),
      &chosen);
  // What clients, operators and registering ranks send is small; the large replies (Score's
  // logits) go the other way.
  builder.SetMaxReceiveMessageSize(kMaxClientMessageBytes);
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

int Run(const CoordinatorFlags& flags) {
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
  absl::StatusOr<ServingPlan> plan = MakeServingPlan(flags, *config);
  if (!plan.ok()) return Fail(std::string(plan.status().message()));
  if (flags.speculative == "draft") {
    if (absl::Status same = CheckDraftTokenizer(flags.draft_model, **tokenizer); !same.ok()) {
      return Fail(absl::StrCat("--draft-model: ", same.message()));
    }
  }
  if (plan->self_spec_layers > 0) {
    LogInfo(kLog, "self-speculative: the draft is the model's first %d of %d layers",
            plan->self_spec_layers, config->num_layers);
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
  FrontEndPool front_end(FrontEndPool::DefaultThreads(std::thread::hardware_concurrency()),
                         kMaxQueuedFrontEndRequests);
  HttpServer http({served_model_name, config->context_length, tokenizer->get(), chat_template.get(),
                   default_sampling, &metrics, &*api_keys, plan->http, &front_end});
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
  InferenceServiceImpl inference(tokenizer->get(), &front_end, flags.world_size,
                                 served_model_name, default_sampling);
  inference.SetBearerKeys(&*api_keys);
  LoadProgress load_progress;
  inference.SetLoadProgress(&load_progress);
  AdminServiceImpl admin(&cluster, flags.world_size, flags.model);
  admin.SetAdminKeys(&*admin_keys);
  // Server reflection, so that grpcurl and other generic clients can list and call the services.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // The operators' port apart from the clients' and the cluster's, so that a network policy or a
  // Service can expose one without the others.
  const std::string admin_host = flags.admin_host.empty() ? flags.host : flags.admin_host;
  std::string admin_address;
  // AdminService checks its keys per operation (its status views are open).
  std::unique_ptr<grpc::Server> admin_server =
      Listen(admin_host, flags.admin_port, {&admin},
             [](std::string_view, std::string_view) { return true; }, "admin ",
             flags.admin_port_file, &admin_address);
  if (admin_server == nullptr) {
    return Fail(absl::StrCat("cannot serve AdminService on ",
                             JoinHostPort(admin_host, flags.admin_port),
                             " (--admin-host, --admin-port, --admin-port-file)"));
  }
  std::string address;
  // Keys are checked before a message is read: a stranger's 250 MB Generate costs its headers.
  const BearerKeys* keys = &*api_keys;
  HeaderGate client_gate = [keys](std::string_view path, std::string_view authorization) {
    auto under = [path](std::string_view service) {
      return path.substr(0, service.size()) == service;
    };
    // gRPC's core does not tell this hook the caller's address.
    constexpr std::string_view kPeer = "a caller refused from its headers";
    if (under("/tpserve.v1.ClusterService/")) {
      if (ClusterTokenAccepts(std::string(authorization))) return true;
      RecordAuthRefusal(kSurfaceCluster, path, kPeer, "no valid cluster token");
      return false;
    }
    if (under("/tpserve.v1.InferenceService/") && path != "/tpserve.v1.InferenceService/Health") {
      if (keys->Accepts(std::string(authorization))) return true;
      RecordAuthRefusal(kSurfaceInference, path, kPeer, "no valid key");
      return false;
    }
    return true;
  };
  std::unique_ptr<grpc::Server> server =
      Listen(flags.host, flags.port, {&cluster, &inference}, std::move(client_gate), "",
             flags.port_file, &address);
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
  WorkerInitOptions init = plan->init;
  init.group_id = NewGroupId();
  init.coordinator_address = address;
  LogInfo(kLog, "all %d ranks registered; Init with group %s", flags.world_size, init.group_id);
  if (absl::Status s = pool.Init(init, absl::Seconds(flags.startup_timeout_s)); !s.ok()) {
    pool.Shutdown(kShutdownTimeout);
    return Fail(s.ToString());
  }
  if (stop.HasBeenNotified()) {
    pool.Shutdown(kShutdownTimeout);
    return 0;
  }
  absl::StatusOr<LoadedModel> loaded = pool.LoadShard(kLoadTimeout, &load_progress);
  if (!loaded.ok()) {
    pool.Shutdown(kShutdownTimeout);
    return Fail(loaded.status().ToString());
  }

  int64_t model_context = 0;
  const EngineOptions options = MakeEngineOptions(flags, *config, *loaded, &model_context);
  if (options.context_length < model_context) {
    LogWarning(kLog,
               "the KV pool holds %d tokens, less than the model's context of %d: serving a "
               "context of %d (raise --kv-cache-memory or --kv-cache-blocks for more)",
               options.context_length, model_context, options.context_length);
  }
  Engine engine(options, &pool, tokenizer->get());
  engine.SetMetrics(&metrics);
  GroupReformer reformer(&cluster, &pool, init, *loaded, absl::Seconds(flags.startup_timeout_s),
                         kLoadTimeout);
  engine.SetGroupReformer([&reformer] { return reformer.Reform(); });
  engine.Start();
  const absl::Duration shutdown_timeout = absl::Seconds(flags.shutdown_timeout_s);
  cluster.SetLeaveHandler([&engine, shutdown_timeout](int rank) {
    return DrainForLeavingRank(engine, rank, shutdown_timeout);
  });
  // Before the engine goes away; a Leave still draining ends with the server's shutdown.
  absl::Cleanup forget_leaves = [&cluster] { cluster.SetLeaveHandler(nullptr); };
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
    DrainForShutdown(engine, http, shutdown_timeout);
  }
  engine.Stop();
  // The streams the engine just failed write their error events before HTTP stops.
  http.WaitIdle(absl::Now() + kShutdownTimeout);
  // Before the engine goes away: HTTP threads may still be reading it.
  http.Stop();
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  admin_server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  // Before the engine goes away: a request queued there may still submit (and be refused).
  front_end.Stop();
  pool.Shutdown(kShutdownTimeout);
  LogInfo(kLog, "stopped");
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::CoordinatorFlags flags;
  CLI::App app{"tpserve coordinator: drives tensor-parallel workers and serves InferenceService"};
  tpserve::AddCoordinatorFlags(app, &flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;  // --help is 0; every flag error exits 1
  }
  return tpserve::Run(flags);
}
