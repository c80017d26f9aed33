// The trust boundary, tried as an attacker on 127.0.0.1 would: real coordinator and worker
// processes (LocalCluster gives them a random cluster token in a 0600 file), calls without and
// with a wrong credential. Each must be refused (UNAUTHENTICATED / 401), counted in
// tpserve:auth_failures_total, and change nothing: the cluster then serves exactly as before.
// With the right credential the same calls work. With mutual TLS (certificates made here with
// the openssl CLI), no gRPC port talks to a caller without a certificate from the cluster's CA.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <sys/wait.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/grpc_tls.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster_test_util.h"
#include "tpserve/v1/admin.grpc.pb.h"
#include "tpserve/v1/inference.grpc.pb.h"
#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve::testing {
namespace {

constexpr char kApiKey[] = "sk-test-0123456789";
const std::vector<int32_t> kPrompt = {1, 504, 3458, 282, 5248, 314, 253, 1345};

// Calls `method` ("/pkg.Service/Method") on `channel` with an empty request (every request
// message parses from no bytes) and, unless empty, `authorization` as metadata.
grpc::Status CallRaw(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& authorization) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  grpc::CompletionQueue cq;
  grpc::Slice no_bytes("", 0);
  const grpc::ByteBuffer request(&no_bytes, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  auto call = stub.PrepareUnaryCall(&context, method, request, &cq);
  call->StartCall();
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  EXPECT_TRUE(cq.Next(&tag, &ok));
  return status;
}

// The same over plaintext to `address`.
grpc::Status CallRaw(const std::string& address, const std::string& method,
                     const std::string& authorization) {
  return CallRaw(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()), method,
                 authorization);
}

// tpserve:auth_failures_total by surface, from the coordinator's /metrics.
std::map<std::string, int> AuthFailures(const std::string& http_address) {
  httplib::Client http("http://" + http_address);
  auto res = http.Get("/metrics");
  EXPECT_TRUE(res && res->status == 200);
  std::map<std::string, int> counts;
  if (!res) return counts;
  std::istringstream lines(res->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("tpserve:auth_failures_total{", 0) != 0) continue;
    const size_t at = line.find("surface=\"") + 9;
    counts[line.substr(at, line.find('"', at) - at)] = std::stoi(line.substr(line.rfind(' ') + 1));
  }
  EXPECT_EQ(counts.size(), 4u) << res->body;
  return counts;
}

// `after` minus `before`, surfaces that did not change left out.
std::map<std::string, int> Rise(const std::map<std::string, int>& before,
                                const std::map<std::string, int>& after) {
  std::map<std::string, int> rise;
  for (const auto& [surface, count] : after) {
    const auto it = before.find(surface);
    const int delta = count - (it == before.end() ? 0 : it->second);
    if (delta != 0) rise[surface] = delta;
  }
  return rise;
}

// Each of `methods` on `address` with each of `credentials` is refused as UNAUTHENTICATED.
void ExpectRefused(const std::string& address, const std::vector<std::string>& methods,
                   const std::vector<std::string>& credentials) {
  for (const std::string& method : methods) {
    for (const std::string& credential : credentials) {
      EXPECT_EQ(CallRaw(address, method, credential).error_code(),
                grpc::StatusCode::UNAUTHENTICATED)
          << method << " on " << address << " with '" << credential << "'";
    }
  }
}

// Every method of `service` (its descriptor, so that a method added later is covered too).
std::vector<std::string> Methods(const std::string& service) {
  const auto* descriptor =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
  EXPECT_NE(descriptor, nullptr) << service;
  std::vector<std::string> methods;
  for (int i = 0; descriptor != nullptr && i < descriptor->method_count(); ++i) {
    methods.push_back("/" + service + "/" + descriptor->method(i)->name());
  }
  return methods;
}

std::vector<std::string> WorkerAddresses(LocalCluster& cluster) {
  auto status = ClusterStatus(cluster);
  EXPECT_TRUE(status.ok()) << status.status();
  std::vector<std::string> addresses;
  if (status.ok()) {
    for (const auto& shard : status->shards()) addresses.push_back(shard.address());
  }
  return addresses;
}

TEST(SecurityAuthz, ClusterCallsNeedTheClusterToken) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  options.http_port = 0;
  auto cluster = StartServing(options, absl::Seconds(120));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto before = GenerateGreedy(**cluster, kPrompt, 8);
  ASSERT_TRUE(before.ok()) << before.status();
  const std::vector<std::string> workers = WorkerAddresses(**cluster);
  ASSERT_EQ(workers.size(), 3u);

  const std::vector<std::string> bad = {"", "Bearer wrong-token", "Bearer ", "Basic abc"};
  const auto counted_before = AuthFailures((*cluster)->http_address());
  for (const std::string& address : workers) {
    ExpectRefused(address, Methods("tpserve.v1.WorkerService"), bad);
  }
  ExpectRefused((*cluster)->address(), Methods("tpserve.v1.ClusterService"), bad);
  // A fake rank 1 tries to register, with a well-formed request and no token.
  {
    auto stub = v1::ClusterService::NewStub(
        grpc::CreateChannel((*cluster)->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    v1::RegisterRequest request;
    request.set_rank(1);
    request.set_address("127.0.0.1:1");
    v1::RegisterResponse response;
    EXPECT_EQ(stub->Register(&context, request, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  // The coordinator counts what it refused itself (workers only log theirs).
  const int cluster_refusals =
      static_cast<int>(Methods("tpserve.v1.ClusterService").size() * bad.size()) + 1;
  EXPECT_EQ(Rise(counted_before, AuthFailures((*cluster)->http_address())),
            (std::map<std::string, int>{{"cluster", cluster_refusals}}));
  for (int rank = 0; rank < 3; ++rank) {
    const std::string log = (*cluster)->LogPath("worker-" + std::to_string(rank));
    std::ifstream in(log);
    std::stringstream contents;
    contents << in.rdbuf();
    EXPECT_NE(contents.str().find("refused cluster WorkerService.Step from "), std::string::npos)
        << log;
    EXPECT_EQ(contents.str().find((*cluster)->cluster_token()), std::string::npos) << log;
  }

  // Nothing changed: the same ranks, the same answer.
  EXPECT_EQ(WorkerAddresses(**cluster), workers);
  auto after = GenerateGreedy(**cluster, kPrompt, 8);
  ASSERT_TRUE(after.ok()) << after.status() << "\n" << LogTails(options);
  EXPECT_EQ(*after, *before);

  // The right token is accepted: Status answers, a StoreGet of a missing key times out.
  const std::string token = "Bearer " + (*cluster)->cluster_token();
  EXPECT_TRUE(CallRaw(workers[0], "/tpserve.v1.WorkerService/Status", token).ok());
  EXPECT_NE(
      CallRaw((*cluster)->address(), "/tpserve.v1.ClusterService/StoreGet", token).error_code(),
      grpc::StatusCode::UNAUTHENTICATED);

  // A refused StoreSet stored nothing; the same StoreSet with the token is read back.
  auto store = v1::ClusterService::NewStub(
      grpc::CreateChannel((*cluster)->address(), grpc::InsecureChannelCredentials()));
  const auto store_call = [&](const std::string& authorization,
                              const std::function<grpc::Status(grpc::ClientContext*)>& call) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
    return call(&context);
  };
  const auto refused_every_bad_credential =
      [&](const std::function<grpc::Status(grpc::ClientContext*)>& call, const char* what) {
        for (const std::string& credential : bad) {
          EXPECT_EQ(store_call(credential, call).error_code(), grpc::StatusCode::UNAUTHENTICATED)
              << what << " with '" << credential << "'";
        }
      };
  v1::StoreSetRequest set;
  set.set_key("attacker/probe");
  set.set_value("planted");
  v1::StoreSetResponse set_response;
  refused_every_bad_credential(
      [&](grpc::ClientContext* c) { return store->StoreSet(c, set, &set_response); }, "StoreSet");
  v1::StoreGetRequest get;
  get.set_key("attacker/probe");
  get.set_timeout_ms(200);
  v1::StoreGetResponse got;
  EXPECT_FALSE(
      store_call(token, [&](grpc::ClientContext* c) { return store->StoreGet(c, get, &got); }).ok())
      << "a refused StoreSet stored '" << got.value() << "'";
  ASSERT_TRUE(store_call(token, [&](grpc::ClientContext* c) {
                return store->StoreSet(c, set, &set_response);
              }).ok());
  ASSERT_TRUE(store_call(token, [&](grpc::ClientContext* c) {
                return store->StoreGet(c, get, &got);
              }).ok());
  EXPECT_EQ(got.value(), "planted");

  // Rank 1 dies; a fake rank 1 without or with a wrong token cannot take its place, and the real
  // one, restarted, rejoins and the answer is the same.
  (*cluster)->worker(1)->Signal(SIGKILL);
  (*cluster)->worker(1)->Stop(absl::Seconds(5));
  const auto serving = [&] {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    v1::HealthResponse health;
    return (*cluster)->inference().Health(&context, v1::HealthRequest(), &health).ok() &&
           health.state() == v1::HealthResponse::STATE_SERVING;
  };
  const absl::Time noticed_by = absl::Now() + absl::Seconds(10);
  while (serving() && absl::Now() < noticed_by) absl::SleepFor(absl::Milliseconds(100));
  ASSERT_FALSE(serving()) << "the coordinator never noticed rank 1's death";
  v1::RegisterRequest fake;
  fake.set_rank(1);
  fake.set_address("127.0.0.1:1");
  v1::RegisterResponse registered;
  refused_every_bad_credential(
      [&](grpc::ClientContext* c) { return store->Register(c, fake, &registered); },
      "a fake Register of a dead rank");
  ASSERT_TRUE((*cluster)->RestartWorker(1).ok());
  ASSERT_TRUE(WaitForServing(**cluster, absl::Seconds(60))) << LogTails(options);
  for (const std::string& address : WorkerAddresses(**cluster)) {
    EXPECT_NE(address, "127.0.0.1:1");
  }
  auto rejoined = GenerateGreedy(**cluster, kPrompt, 8);
  ASSERT_TRUE(rejoined.ok()) << rejoined.status() << "\n" << LogTails(options);
  EXPECT_EQ(*rejoined, *before);
}

TEST(SecurityAuthz, ClientApisNeedAnApiKey) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 1);
  options.http_port = 0;
  options.coordinator_args = {"--api-key", kApiKey};
  auto cluster = LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->WaitReady(absl::Seconds(120)).ok()) << LogTails(options);
  const auto counted_before = AuthFailures((*cluster)->http_address());

  httplib::Client http("http://" + (*cluster)->http_address());
  const std::string body = R"({"model": "x", "prompt": "Hello", "max_tokens": 4})";
  for (const char* header : {"", "Bearer wrong", "Bearer "}) {
    httplib::Headers headers;
    if (*header != '\0') headers.emplace("Authorization", header);
    auto res = http.Post("/v1/completions", headers, body, "application/json");
    ASSERT_TRUE(res) << "no HTTP answer";
    EXPECT_EQ(res->status, 401) << "with '" << header << "'";
    const auto error = nlohmann::json::parse(res->body, nullptr, false);
    EXPECT_EQ(error["error"]["code"], "invalid_api_key") << res->body;
    EXPECT_EQ(res->body.find(kApiKey), std::string::npos);
  }
  auto models = http.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  auto health = http.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  httplib::Headers good = {{"Authorization", std::string("Bearer ") + kApiKey}};
  auto served = http.Post("/v1/completions", good,
                          R"({"model": ")" + std::string("SmolLM2-135M-Instruct.Q4_1") +
                              R"(", "prompt": "Hello", "max_tokens": 4})",
                          "application/json");
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200) << served->body;

  const std::string address = (*cluster)->address();
  ExpectRefused(address,
                {"/tpserve.v1.InferenceService/Score", "/tpserve.v1.InferenceService/Tokenize",
                 "/tpserve.v1.InferenceService/ListModels"},
                {"", "Bearer wrong"});
  EXPECT_TRUE(CallRaw(address, "/tpserve.v1.InferenceService/Health", "").ok());
  EXPECT_TRUE(
      CallRaw(address, "/tpserve.v1.InferenceService/ListModels", std::string("Bearer ") + kApiKey)
          .ok());
  {
    auto stub = v1::InferenceService::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    v1::GenerateRequest request;
    request.set_text("Hello");
    request.set_max_tokens(2);
    v1::GenerateResponse chunk;
    for (const char* credential : {"", "Bearer wrong"}) {
      grpc::ClientContext refused;
      if (*credential != '\0') refused.AddMetadata("authorization", credential);
      auto reader = stub->Generate(&refused, request);
      int chunks = 0;
      while (reader->Read(&chunk)) ++chunks;
      EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED) << credential;
      EXPECT_EQ(chunks, 0) << credential;
    }
    grpc::ClientContext allowed;
    allowed.AddMetadata("authorization", std::string("Bearer ") + kApiKey);
    auto ok_reader = stub->Generate(&allowed, request);
    int chunks = 0;
    while (ok_reader->Read(&chunk)) ++chunks;
    EXPECT_TRUE(ok_reader->Finish().ok());
    EXPECT_GT(chunks, 0);
  }
  // 3 completions and /v1/models over HTTP; 3 methods x 2 and 2 Generates over gRPC.
  EXPECT_EQ(Rise(counted_before, AuthFailures((*cluster)->http_address())),
            (std::map<std::string, int>{{"http", 4}, {"inference", 8}}));
}

// Drain, Undrain and FlushPrefixCache need the admin key; ClusterStatus stays readable. All of
// AdminService is on the admin port, none of it on the client and cluster port.
TEST(SecurityAuthz, AdminOperationsNeedTheAdminKey) {
  char dir[] = "/tmp/tpserve-admin-key-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string key_file = std::string(dir) + "/admin-key";
  std::ofstream(key_file) << "admin-secret-42\n";
  const std::string wrong_file = std::string(dir) + "/wrong-key";
  std::ofstream(wrong_file) << "not-the-key\n";
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 1);
  options.http_port = 0;
  options.coordinator_args = {"--admin-key-file", key_file};
  auto cluster = StartServing(options, absl::Seconds(120));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string address = (*cluster)->admin_address();
  ASSERT_NE(address, (*cluster)->address());
  // Something in the prefix tree, so that a refused flush has something to keep.
  ASSERT_TRUE(GenerateGreedy(**cluster, kPrompt, 40).ok());
  const auto cached = [&] {
    auto status = ClusterStatus(**cluster);
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->kv_blocks_cached() : -1;
  };
  const int64_t cached_before = cached();
  ASSERT_GT(cached_before, 0);
  const auto counted_before = AuthFailures((*cluster)->http_address());
  ExpectRefused(address,
                {"/tpserve.v1.AdminService/Drain", "/tpserve.v1.AdminService/Undrain",
                 "/tpserve.v1.AdminService/FlushPrefixCache"},
                {"", "Bearer not-the-key"});
  EXPECT_EQ(cached(), cached_before) << "a refused FlushPrefixCache flushed";
  EXPECT_TRUE(CallRaw(address, "/tpserve.v1.AdminService/ClusterStatus", "").ok());
  for (const std::string& method : Methods("tpserve.v1.AdminService")) {
    EXPECT_EQ(CallRaw((*cluster)->address(), method, "Bearer admin-secret-42").error_code(),
              grpc::StatusCode::UNIMPLEMENTED)
        << method << " on the client port";
  }
  EXPECT_EQ(CallRaw(address, "/tpserve.v1.InferenceService/Health", "").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  httplib::Client http("http://" + (*cluster)->http_address());
  auto ready = http.Get("/health/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200) << "refused drains must not drain";

  const std::string tpctl = std::string(TPSERVE_BIN_DIR) + "/tpctl";
  const auto exited_zero = [](const CommandResult& r) {
    return r.finished && WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 0;
  };
  const CommandResult refused =
      RunCommand({tpctl, "--coordinator", address, "--admin-key-file", wrong_file, "drain"},
                 absl::Seconds(10));
  EXPECT_FALSE(exited_zero(refused)) << refused.output;
  const CommandResult drained = RunCommand(
      {tpctl, "--coordinator", address, "--admin-key-file", key_file, "drain"}, absl::Seconds(10));
  EXPECT_TRUE(exited_zero(drained)) << drained.output;
  EXPECT_EQ(Rise(counted_before, AuthFailures((*cluster)->http_address())),
            (std::map<std::string, int>{{"admin", 7}}));
  ready = http.Get("/health/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  const CommandResult undrained =
      RunCommand({tpctl, "--coordinator", address, "undrain", "--admin-key-file", key_file},
                 absl::Seconds(10));
  EXPECT_TRUE(exited_zero(undrained)) << undrained.output;
  ready = http.Get("/health/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  EXPECT_TRUE(GenerateGreedy(**cluster, kPrompt, 2).ok());
  EXPECT_TRUE(
      CallRaw(address, "/tpserve.v1.AdminService/FlushPrefixCache", "Bearer admin-secret-42").ok());
  EXPECT_EQ(cached(), 0);
  std::filesystem::remove_all(dir);
}

// Certificates made with the openssl CLI in a fresh directory: the cluster's CA and a certificate
// it signed (SANs 127.0.0.1 and localhost, for servers and clients alike), and a foreign CA with
// a certificate of the same names.
class Certificates {
 public:
  Certificates() {
    char dir[] = "/tmp/tpserve-tls-XXXXXX";
    EXPECT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    std::ofstream(dir_ + "/ext.cnf")
        << "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
           "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n";
    for (const char* ca : {"ca", "foreign-ca"}) {
      Run({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
           "-days", "2", "-subj", std::string("/CN=tpserve test ") + ca, "-keyout", Path(ca, "key"),
           "-out", Path(ca, "crt")});
    }
    for (const auto& [name, ca] : {std::pair{"node", "ca"}, std::pair{"foreign", "foreign-ca"}}) {
      Run({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
           std::string("/CN=tpserve ") + name, "-keyout", Path(name, "key"), "-out",
           Path(name, "csr")});
      Run({"x509", "-req", "-in", Path(name, "csr"), "-CA", Path(ca, "crt"), "-CAkey",
           Path(ca, "key"), "-CAcreateserial", "-days", "2", "-extfile", dir_ + "/ext.cnf", "-out",
           Path(name, "crt")});
    }
  }
  ~Certificates() { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name, const char* kind) const {
    return dir_ + "/" + name + "." + kind;
  }
  // This certificate and key, trusting `ca`.
  TlsFiles Files(const std::string& name, const std::string& ca) const {
    return {Path(name, "crt"), Path(name, "key"), Path(ca, "crt"), ""};
  }

 private:
  void Run(std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/env", "openssl"});
    const CommandResult r = RunCommand(args, absl::Seconds(30));
    EXPECT_TRUE(r.finished && WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 0)
        << r.output;
  }

  std::string dir_;
};

std::shared_ptr<grpc::Channel> TlsChannel(const TlsFiles& files, const std::string& address) {
  auto tls = GrpcTls::Load(files);
  EXPECT_TRUE(tls.ok()) << tls.status();
  return tls.ok() ? tls->Channel(address) : nullptr;
}

// A T=1 cluster with mutual TLS, the cluster token, an API key and an admin key: every gRPC port
// (worker, cluster and inference, admin) refuses callers without the CA's certificate before any
// credential is looked at; with it, a Generate works end to end and refusals are counted.
TEST(SecurityAuthz, MutualTlsOnEveryGrpcPort) {
  const Certificates certs;
  char dir[] = "/tmp/tpserve-admin-key-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string key_file = std::string(dir) + "/admin-key";
  std::ofstream(key_file) << "admin-secret-42\n";
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 1);
  options.http_port = 0;
  options.tls = certs.Files("node", "ca");
  options.coordinator_args = {"--api-key", kApiKey, "--admin-key-file", key_file};
  auto cluster = StartServing(options, absl::Seconds(120));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string api_key = std::string("Bearer ") + kApiKey;
  const std::string token = "Bearer " + (*cluster)->cluster_token();
  const std::vector<std::string> workers = WorkerAddresses(**cluster);
  ASSERT_EQ(workers.size(), 1u);
  // One call per port, each with the right credential: only the channel may be wrong.
  const std::vector<std::tuple<std::string, std::string, std::string>> ports = {
      {workers[0], "/tpserve.v1.WorkerService/Status", token},
      {(*cluster)->address(), "/tpserve.v1.ClusterService/StoreGet", token},
      {(*cluster)->address(), "/tpserve.v1.InferenceService/ListModels", api_key},
      {(*cluster)->admin_address(), "/tpserve.v1.AdminService/ClusterStatus", ""},
  };
  const auto counted_before = AuthFailures((*cluster)->http_address());

  grpc::SslCredentialsOptions no_client_cert;
  std::ifstream ca_in(certs.Path("ca", "crt"));
  no_client_cert.pem_root_certs.assign(std::istreambuf_iterator<char>(ca_in), {});
  const std::map<std::string, std::function<std::shared_ptr<grpc::Channel>(const std::string&)>>
      strangers = {
          {"plaintext",
           [](const std::string& a) {
             return grpc::CreateChannel(a, grpc::InsecureChannelCredentials());
           }},
          {"TLS without a client certificate",
           [&](const std::string& a) {
             return grpc::CreateChannel(a, grpc::SslCredentials(no_client_cert));
           }},
          {"a foreign CA's certificate",
           [&](const std::string& a) { return TlsChannel(certs.Files("foreign", "ca"), a); }},
          {"trusting only a foreign CA",
           [&](const std::string& a) { return TlsChannel(certs.Files("node", "foreign-ca"), a); }},
      };
  for (const auto& [address, method, credential] : ports) {
    for (const auto& [who, channel] : strangers) {
      const absl::Time start = absl::Now();
      const grpc::Status status = CallRaw(channel(address), method, credential);
      std::printf("%s with %s: code %d after %.0f ms (%s)\n", method.c_str(), who.c_str(),
                  status.error_code(), absl::ToDoubleMilliseconds(absl::Now() - start),
                  status.error_message().c_str());
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
          << method << " on " << address << " with " << who << ": " << status.error_message();
    }
    const grpc::Status served =
        CallRaw(TlsChannel(certs.Files("node", "ca"), address), method, credential);
    if (method == "/tpserve.v1.ClusterService/StoreGet") {
      EXPECT_NE(served.error_code(), grpc::StatusCode::UNAVAILABLE) << served.error_message();
      EXPECT_NE(served.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    } else {
      EXPECT_TRUE(served.ok()) << method << ": " << served.error_message();
    }
  }
  // No stranger reached a service: nothing was refused there.
  EXPECT_TRUE(Rise(counted_before, AuthFailures((*cluster)->http_address())).empty());

  // With the CA's certificate, credentials still count, each refusal once.
  const auto channel = TlsChannel(certs.Files("node", "ca"), (*cluster)->address());
  const auto admin = TlsChannel(certs.Files("node", "ca"), (*cluster)->admin_address());
  EXPECT_EQ(CallRaw(channel, "/tpserve.v1.InferenceService/ListModels", "").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(CallRaw(channel, "/tpserve.v1.ClusterService/StoreGet", "Bearer x").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(CallRaw(admin, "/tpserve.v1.AdminService/Drain", "Bearer x").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(
      CallRaw(channel, "/tpserve.v1.AdminService/Drain", "Bearer admin-secret-42").error_code(),
      grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(Rise(counted_before, AuthFailures((*cluster)->http_address())),
            (std::map<std::string, int>{{"admin", 1}, {"cluster", 1}, {"inference", 1}}));

  auto stub = v1::InferenceService::NewStub(channel);
  const v1::GenerateRequest request = GreedyRequest(kPrompt, 4);
  grpc::ClientContext context;
  context.AddMetadata("authorization", api_key);
  auto reader = stub->Generate(&context, request);
  v1::GenerateResponse chunk;
  int tokens = 0;
  while (reader->Read(&chunk)) tokens += chunk.token_ids_size();
  const grpc::Status generated = reader->Finish();
  EXPECT_TRUE(generated.ok()) << generated.error_message() << "\n" << LogTails(options);
  EXPECT_EQ(tokens, 4);

  // tpctl with the certificate reaches the admin port; without it, it names the address.
  const std::string tpctl = std::string(TPSERVE_BIN_DIR) + "/tpctl";
  const CommandResult status = RunCommand(
      {tpctl, "--coordinator", (*cluster)->admin_address(), "--tls-cert", certs.Path("node", "crt"),
       "--tls-key", certs.Path("node", "key"), "--tls-ca", certs.Path("ca", "crt"), "status"},
      absl::Seconds(10));
  EXPECT_TRUE(status.finished && WIFEXITED(status.wait_status) &&
              WEXITSTATUS(status.wait_status) == 0)
      << status.output;
  EXPECT_NE(status.output.find("cluster serving"), std::string::npos) << status.output;
  const CommandResult plain =
      RunCommand({tpctl, "--coordinator", (*cluster)->admin_address(), "--timeout", "2", "status"},
                 absl::Seconds(10));
  EXPECT_NE(WEXITSTATUS(plain.wait_status), 0) << plain.output;
  EXPECT_NE(plain.output.find("cannot reach coordinator at " + (*cluster)->admin_address()),
            std::string::npos)
      << plain.output;
  std::filesystem::remove_all(dir);
}

// A bad certificate file stops a process at start-up with a line naming the flag and the file,
// and nothing of what the file holds.
TEST(SecurityAuthz, BadTlsFilesAreNamedNotPrinted) {
  const Certificates certs;
  const std::string not_pem = certs.Path("secret", "txt");
  std::ofstream(not_pem) << "do-not-print-this-secret\n";
  const std::string tpctl = std::string(TPSERVE_BIN_DIR) + "/tpctl";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--tls-cert", not_pem, "--tls-key", certs.Path("node", "key"), "--tls-ca",
        certs.Path("ca", "crt")},
       "--tls-cert: " + not_pem + " holds no PEM certificate"},
      {{"--tls-cert", certs.Path("node", "crt"), "--tls-key", not_pem, "--tls-ca",
        certs.Path("ca", "crt")},
       "--tls-key: " + not_pem + " holds no unencrypted PEM private key"},
      {{"--tls-cert", certs.Path("node", "crt"), "--tls-key", certs.Path("foreign", "key"),
        "--tls-ca", certs.Path("ca", "crt")},
       "--tls-key: " + certs.Path("foreign", "key") + " is not the key of the certificate"},
      {{"--tls-cert", certs.Path("node", "crt"), "--tls-key", certs.Path("node", "key"), "--tls-ca",
        certs.Path("missing", "crt")},
       "--tls-ca: cannot read " + certs.Path("missing", "crt")},
      {{"--tls-cert", certs.Path("node", "crt")}, "--tls-key is missing"},
  };
  for (const auto& [flags, expected] : cases) {
    for (const std::string binary : {"tpctl", "tpserve-worker"}) {
      std::vector<std::string> argv = {std::string(TPSERVE_BIN_DIR) + "/" + binary};
      if (binary == "tpctl") {
        argv.insert(argv.end(), {"--coordinator", "127.0.0.1:1", "status"});
      } else {
        argv.insert(argv.end(),
                    {"--coordinator", "127.0.0.1:1", "--rank", "0", "--model", TPSERVE_MODEL_PATH});
      }
      argv.insert(argv.end(), flags.begin(), flags.end());
      const CommandResult r = RunCommand(argv, absl::Seconds(10));
      EXPECT_TRUE(r.finished && WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 1)
          << binary << ": " << r.output;
      EXPECT_NE(r.output.find(expected), std::string::npos) << binary << ": " << r.output;
      EXPECT_EQ(r.output.find("do-not-print-this-secret"), std::string::npos) << r.output;
      EXPECT_EQ(r.output.find("PRIVATE KEY"), std::string::npos) << r.output;
    }
  }
}

}  // namespace
}  // namespace tpserve::testing
