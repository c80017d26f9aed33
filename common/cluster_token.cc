#include "common/cluster_token.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/auth_refusal.h"
#include "common/grpc_tls.h"
#include "grpcpp/support/client_interceptor.h"

namespace tpserve {
namespace {

constexpr char kBearer[] = "Bearer ";

// Written once by LoadClusterToken, before any channel or server exists.
std::string& Token() {
  static std::string* token = new std::string();
  return *token;
}

// Adds the token to the initial metadata of every call on a channel.
class TokenInterceptor : public grpc::experimental::Interceptor {
 public:
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", kBearer + Token()});
    }
    methods->Proceed();
  }
};

class TokenInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor();
  }
};

}  // namespace

absl::Status LoadClusterToken(const std::string& file) {
  std::string token;
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read the cluster token file ", file));
    std::stringstream contents;
    contents << in.rdbuf();
    token = std::string(absl::StripAsciiWhitespace(contents.str()));
    if (token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("the cluster token file ", file, " is empty"));
    }
  } else if (const char* env = std::getenv(kClusterTokenEnv); env != nullptr) {
    token = std::string(absl::StripAsciiWhitespace(env));
  }
  Token() = token;
  return absl::OkStatus();
}

bool HasClusterToken() { return !Token().empty(); }

std::shared_ptr<grpc::Channel> ClusterChannel(const std::string& address,
                                              const grpc::ChannelArguments& args) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  if (HasClusterToken()) interceptors.push_back(std::make_unique<TokenInterceptorFactory>());
  grpc::ChannelArguments with_tls = args;
  ProcessTls().ApplyTo(&with_tls);
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, ProcessTls().ChannelCredentials(), with_tls, std::move(interceptors));
}

bool SecretsEqual(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

std::string BearerSecret(const std::string& authorization) {
  if (!absl::StartsWith(authorization, kBearer)) return "";
  return std::string(absl::StripAsciiWhitespace(authorization.substr(sizeof(kBearer) - 1)));
}

std::string AuthorizationOf(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  return it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
}

bool ClusterTokenAccepts(const std::string& authorization) {
  if (!HasClusterToken()) return true;
  const std::string offered = BearerSecret(authorization);
  return !offered.empty() && SecretsEqual(offered, Token());
}

grpc::Status CheckClusterToken(const grpc::ServerContextBase& context, const char* method) {
  if (ClusterTokenAccepts(AuthorizationOf(context))) return grpc::Status::OK;
  const std::string offered = BearerSecret(AuthorizationOf(context));
  RecordAuthRefusal(kSurfaceCluster, method, context.peer(),
                    offered.empty() ? "no cluster token" : "a wrong cluster token");
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      absl::StrCat(method, " needs this cluster's token (authorization: Bearer)"));
}

}  // namespace tpserve
