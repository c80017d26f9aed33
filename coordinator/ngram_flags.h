// The n-gram proposer's flags, the same on the coordinator and on the launcher that passes them
// on (as common/tls_flags.h is for TLS).
#pragma once

#include "CLI/CLI.hpp"
#include "coordinator/ngram_proposer.h"

namespace tpserve {

inline void AddNgramFlags(CLI::App& app, NgramOptions* options) {
  app.add_option("--ngram-min", options->min_n, "ngram: shortest suffix matched")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--ngram-max", options->max_n, "ngram: longest suffix tried first")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
}

}  // namespace tpserve
