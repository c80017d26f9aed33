#include "coordinator/coordinator.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/auth_refusal.h"
#include "common/cluster_token.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/graceful_drain.h"
#include "coordinator/header_gate.h"
#include "coordinator/health_publisher.h"
#include "coordinator/heartbeat_monitor.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "model/hf_folder.h"
#include "model/sampling_defaults.h"

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

std::string ServedModelName(const CoordinatorFlags& flags) {
  if (!flags.served_model_name.empty()) return flags.served_model_name;
  std::filesystem::path path = std::filesystem::path(flags.model).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();  // a folder given as "dir/"
  std::string name = path.filename().string();
  if (absl::EndsWith(name, ".gguf")) name.resize(name.size() - 5);
  return name;
}

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

// The model's chat template (--chat-template overrides the file's), or null when the file has
// none or the interpreter cannot run it: chat requests are then refused, and the log names the
// construct. A --chat-template that cannot be used stops the start.
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

// `status` with `prefix` before its message.
absl::Status WithPrefix(absl::string_view prefix, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}
template <typename T>
absl::StatusOr<T> WithPrefix(absl::string_view prefix, absl::StatusOr<T> value) {
  if (value.ok()) return value;
  return WithPrefix(prefix, value.status());
}

// The client port's check of every call's headers, before its message is read: a stranger's
// 250 MB Generate costs its headers. ClusterService needs the cluster token, InferenceService
// (but Health) an API key.
HeaderGate ClientGate(const BearerKeys* keys) {
  return [keys](std::string_view path, std::string_view authorization) {
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
}

}  // namespace

Coordinator::~Coordinator() {
  // On every way out, failed start-ups included: the destructor's Shutdown would wait without a
  // deadline for the calls in flight (a launcher's readiness polls), delaying the exit status.
  const auto deadline = absl::ToChronoTime(absl::Now() + absl::Seconds(1));
  if (server_ != nullptr) server_->Shutdown(deadline);
  if (admin_server_ != nullptr) admin_server_->Shutdown(deadline);
  // Before `metrics_` goes away; the servers that refuse are stopped by then.
  if (counting_auth_refusals_) SetAuthRefusalCounter(nullptr);
}

int Coordinator::Run() {
  absl::Status started = LoadModel();
  if (started.ok()) started = StartFrontEnds();
  if (started.ok()) started = FormCluster();
  if (absl::IsCancelled(started)) return 0;  // stopped during start-up
  if (!started.ok()) {
    LogError(kLog, "%s", started.message());
    return 1;
  }
  Serve();
  Shutdown();
  LogInfo(kLog, "stopped");
  return 0;
}

absl::Status Coordinator::LoadModel() {
  RETURN_IF_ERROR(
      WithPrefix("--cluster-token-file: ", LoadClusterToken(flags_.cluster_token_file)));
  RETURN_IF_ERROR(LoadProcessTls(flags_.tls));
  LogInfo(kLog, "gRPC: %s",
          ProcessTls().enabled() ? "mutual TLS on every port and call (--tls-ca signs the peers)"
                                 : "plaintext (no --tls-cert, --tls-key, --tls-ca)");
  if (!HasClusterToken()) {
    LogWarning(kLog,
               "no cluster token (--cluster-token-file or %s): anyone who reaches this "
               "port can register ranks and use the rendezvous store",
               kClusterTokenEnv);
  }
  ASSIGN_OR_RETURN(
      api_keys_,
      WithPrefix("API keys: ", BearerKeys::Load(flags_.api_keys, flags_.api_key_file, kApiKeyEnv)));
  ASSIGN_OR_RETURN(
      admin_keys_,
      WithPrefix("admin key: ", BearerKeys::Load({}, flags_.admin_key_file, kAdminKeyEnv)));
  if (admin_keys_.empty()) {
    LogWarning(kLog,
               "no admin key (--admin-key-file or %s): anyone who reaches this port can "
               "drain the cluster or flush its prefix cache",
               kAdminKeyEnv);
  }
  if (api_keys_.empty()) {
    LogWarning(kLog, "no API key (--api-key, --api-key-file or %s): the client APIs are open",
               kApiKeyEnv);
  }
  // The model file gives the tokenizer and the head counts that decide the tensor-parallel split.
  ASSIGN_OR_RETURN(file_, WithPrefix("--model: ", OpenModel(flags_.model)));
  ASSIGN_OR_RETURN(config_, WithPrefix("--model: ", ModelConfig::FromGguf(*file_)));
  // As the workers see it: CPU ranks apply sliding windows and serve the whole context.
  if (flags_.device == "cpu") config_.ServeWholeContext();
  ASSIGN_OR_RETURN(tokenizer_, WithPrefix("--model: ", Tokenizer::FromGguf(*file_)));
  // The coordinator checks client token ids against the tokenizer, workers against the config:
  // the two must agree, or ids accepted here would be refused by every worker.
  if (tokenizer_->vocab_size() != config_.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model: the tokenizer has ", tokenizer_->vocab_size(), " tokens but llama.vocab_size is ",
        config_.vocab_size, "; tpserve needs them equal"));
  }
  LogInfo(kLog, "model %s: %s", flags_.model, config_.DebugString());
  ASSIGN_OR_RETURN(plan_, MakeServingPlan(flags_, config_, ServedModelName(flags_)));
  if (flags_.speculative == "draft") {
    RETURN_IF_ERROR(
        WithPrefix("--draft-model: ", CheckDraftTokenizer(flags_.draft_model, *tokenizer_)));
  }
  if (plan_.self_spec_layers > 0) {
    LogInfo(kLog, "self-speculative: the draft is the model's first %d of %d layers",
            plan_.self_spec_layers, config_.num_layers);
  }
  if (flags_.sampling_defaults == "model") {
    std::string taken;
    absl::StatusOr<SamplingParams> recommended =
        ModelSamplingDefaults(*file_, default_sampling_, &taken);
    if (!recommended.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--model: ", recommended.status().message(),
                       " (--sampling-defaults builtin ignores the model's sampling)"));
    }
    default_sampling_ = *recommended;
    if (!taken.empty()) {
      LogInfo(kLog, "requests that do not choose take the model's sampling: %s", taken);
    }
  }
  served_model_name_ = ServedModelName(flags_);
  ASSIGN_OR_RETURN(chat_template_, LoadChatTemplate(*file_, *tokenizer_, flags_.chat_template));
  ASSIGN_OR_RETURN(
      reasoning_,
      ResolveReasoningParser(flags_.reasoning_parser,
                             chat_template_ != nullptr ? &chat_template_->source() : nullptr));
  if (reasoning_ != ReasoningParser::kNone) {
    LogInfo(kLog, "reasoning parser %s: replies carry the model's thinking as reasoning_content",
            ReasoningParserName(reasoning_));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::StartFrontEnds() {
  // HTTP comes up before the workers, so that /health and /health/ready answer during start-up.
  metrics_ = std::make_unique<Metrics>(served_model_name_, flags_.metrics_names == "vllm"
                                                               ? MetricNames::kVllm
                                                               : MetricNames::kTpserve);
  SetAuthRefusalCounter(
      [metrics = metrics_.get()](const char* surface) { metrics->AddAuthFailure(surface); });
  counting_auth_refusals_ = true;
  loras_ = std::make_unique<LoraManager>(served_model_name_, plan_.loras, plan_.init.max_loras);
  front_end_ = std::make_unique<FrontEndPool>(
      FrontEndPool::DefaultThreads(std::thread::hardware_concurrency()),
      kMaxQueuedFrontEndRequests);
  http_ = std::make_unique<HttpServer>(
      HttpServerOptions{served_model_name_, config_.context_length, tokenizer_.get(),
                        chat_template_.get(), default_sampling_, metrics_.get(), &api_keys_,
                        plan_.http, front_end_.get(), reasoning_, loras_.get()});
  if (flags_.http_port >= 0) {
    const std::string http_host = flags_.http_host.empty() ? flags_.host : flags_.http_host;
    absl::StatusOr<int> started = http_->Start(http_host, flags_.http_port);
    if (!started.ok()) {
      return absl::UnavailableError(
          absl::StrCat(started.status().message(), " (--http-host, --http-port)"));
    }
    const int http_port = *started;
    const std::string http_address = JoinHostPort(http_host, http_port);
    std::printf("tpserve-coordinator http listening on %s\n", http_address.c_str());
    std::fflush(stdout);
    if (!flags_.http_port_file.empty() && !WritePortFile(flags_.http_port_file, http_port)) {
      return absl::UnavailableError(
          absl::StrCat("--http-port-file: cannot write ", flags_.http_port_file));
    }
    LogInfo(kLog, "HTTP (OpenAI API) on %s, model name \"%s\"", http_address, served_model_name_);
  }

  cluster_ = std::make_unique<ClusterServiceImpl>(
      flags_.world_size, ClusterServiceImpl::StatusProbe(kRegisterProbeTimeout));
  inference_ = std::make_unique<InferenceServiceImpl>(
      tokenizer_.get(), front_end_.get(), flags_.world_size, served_model_name_, default_sampling_);
  inference_->SetBearerKeys(&api_keys_);
  inference_->SetChat(chat_template_.get(), reasoning_);
  inference_->SetLoras(loras_.get());
  inference_->SetLoadProgress(&load_progress_);
  admin_ = std::make_unique<AdminServiceImpl>(cluster_.get(), flags_.world_size,
                                              flags_.pipeline_parallel_size, flags_.model);
  admin_->SetAdminKeys(&admin_keys_);
  admin_->SetLoras(loras_.get());
  // Server reflection, so that grpcurl and other generic clients can list and call the services.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // The operators' port apart from the clients' and the cluster's, so that a network policy or a
  // Service can expose one without the others.
  const std::string admin_host = flags_.admin_host.empty() ? flags_.host : flags_.admin_host;
  std::string admin_address;
  // AdminService checks its keys per operation (its status views are open).
  admin_server_ = Listen(
      admin_host, flags_.admin_port, {admin_.get()},
      [](std::string_view, std::string_view) { return true; }, "admin ", flags_.admin_port_file,
      &admin_address);
  if (admin_server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve AdminService on ",
                                               JoinHostPort(admin_host, flags_.admin_port),
                                               " (--admin-host, --admin-port, --admin-port-file)"));
  }
  EnableGrpcHealthService();
  server_ = Listen(flags_.host, flags_.port, {cluster_.get(), inference_.get()},
                   ClientGate(&api_keys_), "", flags_.port_file, &address_);
  if (server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve on ",
                                               JoinHostPort(flags_.host, flags_.port),
                                               " (--host, --port, --port-file)"));
  }
  SetGrpcServing(server_.get(), false);  // until the cluster serves
  LogInfo(kLog, "AdminService on %s", admin_address);
  LogInfo(kLog, "listening on %s; waiting for %d workers to register", address_, flags_.world_size);
  return absl::OkStatus();
}

absl::Status Coordinator::FormCluster() {
  absl::StatusOr<std::vector<RegisteredWorker>> workers =
      cluster_->WaitForAllRanks(absl::Now() + absl::Seconds(flags_.startup_timeout_s), stop_);
  if (!workers.ok()) {
    ShutdownRegistered(cluster_->Registered());
    if (stop_->HasBeenNotified()) return absl::CancelledError("stopped during start-up");
    return absl::DeadlineExceededError(
        absl::StrCat("start-up timed out after ", flags_.startup_timeout_s,
                     " s (--startup-timeout): missing ranks ", cluster_->MissingRanks(),
                     " of --world-size ", flags_.world_size));
  }
  pool_ = std::make_unique<WorkerPool>(*workers);
  init_ = plan_.init;
  init_.current_loras = [loras = loras_.get()] { return loras->OnWorkers(); };
  init_.group_id = NewGroupId();
  init_.coordinator_address = address_;
  LogInfo(kLog, "all %d ranks registered; Init with group %s", flags_.world_size, init_.group_id);
  absl::Status formed = pool_->Init(init_, absl::Seconds(flags_.startup_timeout_s));
  if (formed.ok() && stop_->HasBeenNotified()) {
    formed = absl::CancelledError("stopped during start-up");
  }
  if (formed.ok()) {
    absl::StatusOr<LoadedModel> loaded = pool_->LoadShard(kLoadTimeout, &load_progress_);
    if (loaded.ok()) loaded_ = *std::move(loaded);
    formed = loaded.status();
  }
  if (!formed.ok()) {
    pool_->Shutdown(kShutdownTimeout);
    return absl::IsCancelled(formed) ? formed : absl::UnavailableError(formed.ToString());
  }
  return absl::OkStatus();
}

void Coordinator::Serve() {
  int64_t model_context = 0;
  const EngineOptions options = MakeEngineOptions(flags_, config_, *loaded_, &model_context);
  if (options.context_length < model_context) {
    LogWarning(kLog,
               "the KV pool holds %d tokens, less than the model's context of %d: serving a "
               "context of %d (raise --kv-cache-memory or --kv-cache-blocks for more)",
               options.context_length, model_context, options.context_length);
  }
  if (flags_.pipeline_parallel_size > 1) {
    LogInfo(kLog, "%d pipeline stages of %d tensor-parallel ranks, %d step(s) in flight",
            flags_.pipeline_parallel_size, flags_.world_size / flags_.pipeline_parallel_size,
            options.steps_in_flight);
  }
  metrics_->SetCacheConfig(options.block_size, options.num_blocks, options.enable_prefix_cache);
  engine_ = std::make_unique<Engine>(options, pool_.get(), tokenizer_.get());
  engine_->SetMetrics(metrics_.get());
  loras_->SetEngine(engine_.get(), pool_.get());
  reformer_ =
      std::make_unique<GroupReformer>(cluster_.get(), pool_.get(), init_, *loaded_,
                                      absl::Seconds(flags_.startup_timeout_s), kLoadTimeout);
  engine_->SetGroupReformer([reformer = reformer_.get()] { return reformer->Reform(); });
  engine_->Start();
  const absl::Duration shutdown_timeout = absl::Seconds(flags_.shutdown_timeout_s);
  cluster_->SetLeaveHandler([engine = engine_.get(), shutdown_timeout](int rank) {
    return DrainForLeavingRank(*engine, rank, shutdown_timeout);
  });
  {
    HeartbeatMonitor heartbeat(
        pool_.get(), absl::Seconds(flags_.heartbeat_interval_s),
        [engine = engine_.get()](const absl::Status& s) { engine->MarkDegraded(s); });
    admin_->SetServing(pool_.get(), engine_.get());
    inference_->SetEngine(engine_.get());
    http_->SetEngine(engine_.get());
    const HealthPublisher grpc_health(server_.get(), engine_.get(), absl::Milliseconds(250));
    LogInfo(kLog,
            "serving: %d ranks, %d KV blocks of %d tokens, context %d, vocab %d, %d weight "
            "bytes in all; up to %d sequences and %d tokens per step, prefix cache %s, "
            "jump-forward %s, speculative %s",
            flags_.world_size, options.num_blocks, options.block_size, options.context_length,
            options.vocab_size, loaded_->weight_bytes, options.max_num_seqs,
            options.max_num_batched_tokens, options.enable_prefix_cache ? "on" : "off",
            options.jump_forward ? "on" : "off", flags_.speculative);
    if (stop_->HasBeenNotified()) LogInfo(kLog, "stop requested during start-up");
    stop_->WaitForNotification();
    DrainForShutdown(*engine_, *http_, shutdown_timeout);
  }
}

void Coordinator::Shutdown() {
  engine_->Stop();
  // The streams the engine just failed write their error events before HTTP stops.
  http_->WaitIdle(absl::Now() + kShutdownTimeout);
  // Before the engine goes away: HTTP's generations may still be reading it.
  http_->Stop();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  admin_server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  // Before the engine goes away: a request queued there may still submit (and be refused).
  front_end_->Stop();
  pool_->Shutdown(kShutdownTimeout);
  // Before the engine goes away; a Leave still draining ended with the server's shutdown.
  cluster_->SetLeaveHandler(nullptr);
}

}  // namespace tpserve
