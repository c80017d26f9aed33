// tpserve-coordinator: serves InferenceService and ClusterService on one port, AdminService on
// another (--admin-port) and the OpenAI-compatible HTTP API on a third, waits for the --world-size
// workers to register, initializes and loads them, then runs the engine until SIGTERM/SIGINT. Exits
// 1 when start-up fails (bad flags, unsplittable model, missing ranks, Init or LoadShard errors), 0
// after a signal. The process's parts and their order are Coordinator's (coordinator.h).
#include <pthread.h>
#include <signal.h>

#include <thread>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "common/thread_name.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_flags.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "coordinator";

// Blocks SIGINT/SIGTERM in every thread (call before starting any) and notifies `stop` from a
// dedicated thread when one arrives.
void HandleSignals(absl::Notification* stop) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread([signals, stop] {
    NameThisThread("tp-signals");
    int signal = 0;
    sigwait(&signals, &signal);
    LogInfo(kLog, "received %s; shutting down", signal == SIGINT ? "SIGINT" : "SIGTERM");
    stop->Notify();
  }).detach();
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
  // absl's lock-order check (on in Debian's build of absl) takes a global lock in every Mutex
  // acquisition: a debugging aid, left to the unit tests.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::Notification stop;
  tpserve::HandleSignals(&stop);
  return tpserve::Coordinator(flags, &stop).Run();
}
