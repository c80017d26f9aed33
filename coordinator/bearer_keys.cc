#include "coordinator/bearer_keys.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cluster_token.h"

namespace tpserve {

absl::StatusOr<BearerKeys> BearerKeys::Load(const std::vector<std::string>& keys,
                                             const std::string& file, const char* env_name) {
  BearerKeys out;
  for (const std::string& key : keys) {
    const std::string k(absl::StripAsciiWhitespace(key));
    if (k.empty()) return absl::InvalidArgumentError("an empty key");
    out.keys_.push_back(k);
  }
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read the key file ", file));
    const size_t before = out.keys_.size();
    for (std::string line; std::getline(in, line);) {
      const std::string k(absl::StripAsciiWhitespace(line));
      if (!k.empty()) out.keys_.push_back(k);
    }
    if (out.keys_.size() == before) {
      return absl::InvalidArgumentError(absl::StrCat("the key file ", file, " holds no key"));
    }
  }
  if (const char* env = std::getenv(env_name); env != nullptr) {
    for (absl::string_view line : absl::StrSplit(env, '\n')) {
      const std::string k(absl::StripAsciiWhitespace(line));
      if (!k.empty()) out.keys_.push_back(k);
    }
  }
  return out;
}

bool BearerKeys::Accepts(const std::string& authorization) const {
  if (keys_.empty()) return true;
  const std::string offered = BearerSecret(authorization);
  bool match = false;
  for (const std::string& key : keys_) match |= !offered.empty() && SecretsEqual(offered, key);
  return match;
}

grpc::Status BearerKeys::Check(const grpc::ServerContextBase& context, const char* method,
                              const char* surface) const {
  if (Accepts(AuthorizationOf(context))) return grpc::Status::OK;
  RecordAuthRefusal(surface, method, context.peer(), "no valid key");
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      absl::StrCat(method, " needs a key (metadata authorization: Bearer)"));
}

}  // namespace tpserve
