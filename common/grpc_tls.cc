#include "common/grpc_tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

// PEM files are kilobytes; anything this large is not one, and is not read into memory.
constexpr std::streamoff kMaxPemBytes = 1 << 20;

absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  if (in.tellg() > kMaxPemBytes) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is over 1 MiB"));
  }
  in.seekg(0);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

Bio MemoryBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The certificates in `pem`, in order (none when it holds no PEM certificate).
std::vector<Cert> ParseCertificates(const std::string& pem) {
  std::vector<Cert> certs;
  Bio bio = MemoryBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(x);
  // The end of the input reads as an error too; OpenSSL's queue must not leak into later calls.
  ERR_clear_error();
  return certs;
}

// An encrypted key would make OpenSSL prompt on the terminal: refuse it instead.
int NoPassphrase(char*, int, int, void*) { return 0; }

Pkey ParsePrivateKey(const std::string& pem) {
  Bio bio = MemoryBio(pem);
  Pkey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  ERR_clear_error();
  return key;
}

GrpcTls& ProcessTlsStorage() {
  static GrpcTls* tls = new GrpcTls();
  return *tls;
}

}  // namespace

absl::StatusOr<GrpcTls> GrpcTls::Load(const TlsFiles& files) {
  if (files.empty()) {
    if (!files.server_name.empty()) {
      return absl::InvalidArgumentError(
          "--tls-server-name needs --tls-cert, --tls-key and --tls-ca");
    }
    return GrpcTls();
  }
  for (const auto& [flag, path] : {std::pair{"--tls-cert", &files.cert},
                                   std::pair{"--tls-key", &files.key},
                                   std::pair{"--tls-ca", &files.ca}}) {
    if (path->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-cert, --tls-key and --tls-ca go together: ", flag, " is missing"));
    }
  }
  GrpcTls tls;
  auto cert_pem = ReadPem("--tls-cert", files.cert);
  if (!cert_pem.ok()) return cert_pem.status();
  auto key_pem = ReadPem("--tls-key", files.key);
  if (!key_pem.ok()) return key_pem.status();
  auto ca_pem = ReadPem("--tls-ca", files.ca);
  if (!ca_pem.ok()) return ca_pem.status();

  const std::vector<Cert> chain = ParseCertificates(*cert_pem);
  if (chain.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert: ", files.cert, " holds no PEM certificate"));
  }
  const Pkey key = ParsePrivateKey(*key_pem);
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key: ", files.key, " holds no unencrypted PEM private key"));
  }
  if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("--tls-key: ", files.key,
                                                   " is not the key of the certificate in "
                                                   "--tls-cert ", files.cert));
  }
  if (ParseCertificates(*ca_pem).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-ca: ", files.ca, " holds no PEM certificate"));
  }
  tls.cert_pem_ = *std::move(cert_pem);
  tls.key_pem_ = *std::move(key_pem);
  tls.ca_pem_ = *std::move(ca_pem);
  tls.server_name_ = files.server_name;
  return tls;
}

std::shared_ptr<grpc::ServerCredentials> GrpcTls::ServerCredentials() const {
  if (!enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = ca_pem_;
  options.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> GrpcTls::ChannelCredentials() const {
  if (!enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ca_pem_;
  options.pem_private_key = key_pem_;
  options.pem_cert_chain = cert_pem_;
  return grpc::SslCredentials(options);
}

void GrpcTls::ApplyTo(grpc::ChannelArguments* args) const {
  if (enabled() && !server_name_.empty()) args->SetSslTargetNameOverride(server_name_);
}

std::shared_ptr<grpc::Channel> GrpcTls::Channel(const std::string& address,
                                                grpc::ChannelArguments args) const {
  ApplyTo(&args);
  return grpc::CreateCustomChannel(address, ChannelCredentials(), args);
}

absl::Status LoadProcessTls(const TlsFiles& files) {
  absl::StatusOr<GrpcTls> tls = GrpcTls::Load(files);
  if (!tls.ok()) return tls.status();
  ProcessTlsStorage() = *std::move(tls);
  return absl::OkStatus();
}

const GrpcTls& ProcessTls() { return ProcessTlsStorage(); }

}  // namespace tpserve
