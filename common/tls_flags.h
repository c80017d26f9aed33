// The TLS flags, the same on every binary that serves or calls gRPC (coordinator, worker, tpctl,
// the launcher). Each falls back to an environment variable, so that a container sets them once
// for its server and for a `tpctl` run in it (the chart does).
#pragma once

#include "CLI/CLI.hpp"
#include "common/grpc_tls.h"

namespace tpserve {

inline void AddTlsFlags(CLI::App& app, TlsFiles* files) {
  app.add_option("--tls-cert", files->cert,
                 "PEM certificate this process presents on every gRPC port and call (mutual TLS; "
                 "with --tls-key and --tls-ca)")
      ->envname("TPSERVE_TLS_CERT");
  app.add_option("--tls-key", files->key, "PEM private key of --tls-cert")
      ->envname("TPSERVE_TLS_KEY");
  app.add_option("--tls-ca", files->ca,
                 "PEM CA certificates: peers (servers and callers) must present a certificate "
                 "they signed")
      ->envname("TPSERVE_TLS_CA");
  app.add_option("--tls-server-name", files->server_name,
                 "the name servers' certificates must carry (a SAN), instead of the host dialed")
      ->envname("TPSERVE_TLS_SERVER_NAME");
}

}  // namespace tpserve
