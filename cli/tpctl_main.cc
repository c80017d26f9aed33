// tpctl: operator commands against a running coordinator's AdminService.
//
//   tpctl [--coordinator HOST:PORT] [--json] [--timeout S] [--admin-key-file F]
//         [--tls-cert C --tls-key K --tls-ca A [--tls-server-name N]]
//         status|drain|undrain|flush-cache|lora list|lora load NAME PATH|lora unload NAME
//
// The address is the coordinator's admin port (its --admin-port), from --coordinator, else
// $TPSERVE_COORDINATOR. Exits 0 on success, 1 when
// the flags are wrong, the coordinator cannot be reached within --timeout, or the call fails;
// the error is one line on stderr naming the address.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/tpctl_plan.h"
#include "common/grpc_tls.h"
#include "common/tls_flags.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "tpserve/v1/admin.grpc.pb.h"

namespace tpserve {
namespace {

struct Flags {
  std::string coordinator;
  bool json = false;
  double timeout_s = 5;
  std::string admin_key_file;
  std::string admin_key;  // from the file, else $TPSERVE_ADMIN_KEY; sent when not empty
  TlsFiles tls;
};

std::string StateName(v1::HealthResponse::State state) {
  switch (state) {
    case v1::HealthResponse::STATE_STARTING:
      return "starting";
    case v1::HealthResponse::STATE_SERVING:
      return "serving";
    case v1::HealthResponse::STATE_DEGRADED:
      return "degraded";
    default:
      return "unknown";
  }
}

// Left-aligned columns, two spaces apart.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

void PrintStatus(const v1::ClusterStatusResponse& r) {
  std::string head =
      absl::StrCat("cluster ", StateName(r.state()), ": ", r.world_size(), " ranks",
                   r.pipeline_parallel_size() > 1
                       ? absl::StrCat(" (", r.pipeline_parallel_size(), " pipeline stages)")
                       : "",
                   ", model ", r.model_path(), ", KV ", r.kv_blocks_used(), "/",
                   r.kv_blocks_total(), " blocks of ", r.kv_block_size(), " tokens");
  if (!r.message().empty()) absl::StrAppend(&head, " (", r.message(), ")");
  std::printf("%s\n", head.c_str());
  const double hit_rate = r.prefix_cache_query_tokens() > 0
                              ? 100.0 * r.prefix_cache_hit_tokens() / r.prefix_cache_query_tokens()
                              : 0.0;
  std::printf(
      "requests: %d running, %d waiting%s; %lld preemptions; prefix cache: %lld blocks, %lld of "
      "%lld looked-up tokens hit (%.1f%%)\n",
      r.num_requests_running(), r.num_requests_waiting(),
      r.draining() ? " (draining: no new requests admitted)" : "",
      static_cast<long long>(r.num_preemptions()), static_cast<long long>(r.kv_blocks_cached()),
      static_cast<long long>(r.prefix_cache_hit_tokens()),
      static_cast<long long>(r.prefix_cache_query_tokens()), hit_rate);
  if (!r.waiting_for().empty()) {
    std::printf("paused: %d requests held for %.0f s more, waiting for %s\n",
                r.num_requests_held(), r.recovery_grace_left_ms() / 1000.0,
                r.waiting_for().c_str());
  }
  if (r.spec_draft_tokens() > 0) {
    std::printf("speculative decoding: %lld of %lld proposed tokens accepted (%.1f%%)\n",
                static_cast<long long>(r.spec_accepted_tokens()),
                static_cast<long long>(r.spec_draft_tokens()),
                100.0 * r.spec_accepted_tokens() / r.spec_draft_tokens());
  }
  // Pipeline stages add each rank's stage and tensor-parallel rank ("STAGE 1/2  TP 0/3").
  const int stages = std::max(1, r.pipeline_parallel_size());
  const int tp_size = std::max(1, r.world_size() / stages);
  std::vector<std::vector<std::string>> rows = {{"RANK", "ADDRESS", "HOST", "DEVICE", "STATE",
                                                 "WEIGHTS (MiB)", "KV USED/TOTAL", "HEARTBEAT",
                                                 "STEP P50", "LAST ERROR"}};
  if (stages > 1) rows[0].insert(rows[0].begin() + 2, {"STAGE", "TP"});
  for (const v1::ShardStatus& s : r.shards()) {
    rows.push_back({
        absl::StrCat(s.rank()),
        s.address(),
        s.hostname().empty() ? "-" : s.hostname(),
        s.device().empty() ? "-" : s.device(),
        s.state(),
        absl::StrFormat("%.1f", s.weight_bytes() / 1048576.0),
        absl::StrCat(s.kv_blocks_used(), "/", s.kv_blocks_total()),
        s.heartbeat_age_ms() < 0 ? "-" : absl::StrFormat("%.1fs ago", s.heartbeat_age_ms() / 1e3),
        s.step_latency_p50_ms() > 0 ? absl::StrFormat("%.1f ms", s.step_latency_p50_ms()) : "-",
        s.last_error().empty() ? "-" : s.last_error(),
    });
    if (stages > 1) {
      rows.back().insert(rows.back().begin() + 2, {absl::StrCat(s.stage(), "/", stages),
                                                   absl::StrCat(s.tp_rank(), "/", tp_size)});
    }
  }
  PrintTable(rows);
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "tpctl: %s\n", message.c_str());
  return 1;
}

std::string Plural(int64_t n, const char* noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

void PrintDrain(const v1::DrainResponse& r) {
  std::printf("draining: %s in flight\n", Plural(r.requests_in_flight(), "request").c_str());
}

void PrintFlush(const v1::FlushPrefixCacheResponse& r) {
  std::printf("flushed %s\n", Plural(r.blocks_evicted(), "cached block").c_str());
}

// Calls one AdminService method with the --timeout deadline and prints its response as JSON
// (--json) or with `print`. `call(stub, context, response)` makes the call. Returns the exit code.
template <typename Response, typename Call, typename Print>
int RunCall(const Flags& flags, const char* method, Call call, Print print) {
  const std::shared_ptr<grpc::Channel> channel = ProcessTls().Channel(flags.coordinator);
  auto stub = v1::AdminService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_s * 1000)));
  if (!flags.admin_key.empty()) context.AddMetadata("authorization", "Bearer " + flags.admin_key);
  Response response;
  const grpc::Status status = call(*stub, &context, &response);
  // These codes also come from a coordinator that answered ("cluster is starting", a slow
  // flush): only a channel that never connected means the address is wrong or down.
  const bool maybe_unreachable = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                                 status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
  if (maybe_unreachable && channel->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
    return Fail(absl::StrCat("cannot reach coordinator at ", flags.coordinator, ": ",
                             status.error_message()));
  }
  if (!status.ok()) {
    return Fail(
        absl::StrCat(method, " on ", flags.coordinator, " failed: ", status.error_message()));
  }
  if (flags.json) {
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    options.always_print_primitive_fields = true;
    options.preserve_proto_field_names = true;
    std::string json;
    if (!google::protobuf::util::MessageToJsonString(response, &json, options).ok()) {
      return Fail("cannot print the response as JSON");
    }
    std::printf("%s", json.c_str());
    return 0;
  }
  print(response);
  return 0;
}

void PrintAdapters(const v1::ListLoraAdaptersResponse& r) {
  std::printf("%d of %d LoRA adapter slots in use\n", r.adapters_size(), r.max_loras());
  for (const v1::LoraAdapter& a : r.adapters()) {
    std::printf("  %-20s slot %-3d %s\n", a.name().c_str(), a.slot(), a.path().c_str());
  }
}

enum class Command { kStatus, kDrain, kUndrain, kFlushCache, kLoraList, kLoraLoad, kLoraUnload };

// `tpctl lora`: the adapter to load or unload, and how long its requests may take to finish.
struct LoraFlags {
  std::string name;
  std::string path;
  int drain_timeout_s = 60;
};

int RunCommand(const Flags& flags, Command command, const LoraFlags& lora = {}) {
  using Stub = v1::AdminService::Stub;
  switch (command) {
    case Command::kStatus:
      return RunCall<v1::ClusterStatusResponse>(
          flags, "ClusterStatus",
          [](Stub& stub, grpc::ClientContext* context, v1::ClusterStatusResponse* response) {
            return stub.ClusterStatus(context, v1::ClusterStatusRequest(), response);
          },
          PrintStatus);
    case Command::kDrain:
      return RunCall<v1::DrainResponse>(
          flags, "Drain",
          [](Stub& stub, grpc::ClientContext* context, v1::DrainResponse* response) {
            return stub.Drain(context, v1::DrainRequest(), response);
          },
          PrintDrain);
    case Command::kUndrain:
      return RunCall<v1::UndrainResponse>(
          flags, "Undrain",
          [](Stub& stub, grpc::ClientContext* context, v1::UndrainResponse* response) {
            return stub.Undrain(context, v1::UndrainRequest(), response);
          },
          [](const v1::UndrainResponse&) { std::printf("admitting requests again\n"); });
    case Command::kFlushCache:
      return RunCall<v1::FlushPrefixCacheResponse>(
          flags, "FlushPrefixCache",
          [](Stub& stub, grpc::ClientContext* context, v1::FlushPrefixCacheResponse* response) {
            return stub.FlushPrefixCache(context, v1::FlushPrefixCacheRequest(), response);
          },
          PrintFlush);
    case Command::kLoraList:
      return RunCall<v1::ListLoraAdaptersResponse>(
          flags, "ListLoraAdapters",
          [](Stub& stub, grpc::ClientContext* context, v1::ListLoraAdaptersResponse* response) {
            return stub.ListLoraAdapters(context, v1::ListLoraAdaptersRequest(), response);
          },
          PrintAdapters);
    case Command::kLoraLoad: {
      v1::LoadLoraAdapterRequest request;
      request.set_name(lora.name);
      request.set_path(lora.path);
      return RunCall<v1::LoadLoraAdapterResponse>(
          flags, "LoadLoraAdapter",
          [&request](Stub& stub, grpc::ClientContext* context,
                     v1::LoadLoraAdapterResponse* response) {
            return stub.LoadLoraAdapter(context, request, response);
          },
          [](const v1::LoadLoraAdapterResponse& r) {
            std::printf("loaded %s into slot %d\n", r.adapter().name().c_str(), r.adapter().slot());
          });
    }
    case Command::kLoraUnload: {
      v1::UnloadLoraAdapterRequest request;
      request.set_name(lora.name);
      request.set_drain_timeout_s(lora.drain_timeout_s);
      return RunCall<v1::UnloadLoraAdapterResponse>(
          flags, "UnloadLoraAdapter",
          [&request](Stub& stub, grpc::ClientContext* context,
                     v1::UnloadLoraAdapterResponse* response) {
            return stub.UnloadLoraAdapter(context, request, response);
          },
          [&lora](const v1::UnloadLoraAdapterResponse&) {
            std::printf("unloaded %s\n", lora.name.c_str());
          });
    }
  }
  return 1;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::Flags flags;
  CLI::App app{"tpctl: operate a running tpserve cluster through the coordinator, or plan one"};
  app.require_subcommand(1);
  // The top-level options also after the command: `tpctl status --json`.
  app.fallthrough();
  app.add_option("--coordinator", flags.coordinator,
                 "the coordinator's admin address HOST:PORT, its --admin-port (default: "
                 "$TPSERVE_COORDINATOR)");
  app.add_flag("--json", flags.json, "print the response as JSON");
  app.add_option("--timeout", flags.timeout_s, "seconds to wait for the coordinator")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI::App* status = app.add_subcommand("status", "cluster state and one row per shard");
  CLI::App* drain = app.add_subcommand(
      "drain", "stop admitting requests; those in flight run to the end (for restarts)");
  app.add_option("--admin-key-file", flags.admin_key_file,
                 "file whose first line is the coordinator's admin key (default: "
                 "$TPSERVE_ADMIN_KEY), for drain, undrain, flush-cache, lora load and unload");
  CLI::App* undrain = app.add_subcommand("undrain", "admit requests again after a drain");
  CLI::App* flush = app.add_subcommand(
      "flush-cache", "evict every prefix-cache block that no running request uses");
  tpserve::LoraFlags lora_flags;
  CLI::App* lora = app.add_subcommand("lora", "the cluster's LoRA adapters");
  lora->require_subcommand(1);
  CLI::App* lora_list = lora->add_subcommand("list", "the adapters served and their slots");
  CLI::App* lora_load = lora->add_subcommand(
      "load", "load an adapter (a PEFT folder every worker may open) into a free slot");
  lora_load->add_option("name", lora_flags.name, "what requests name as \"model\"")->required();
  lora_load->add_option("path", lora_flags.path, "the folder, as every worker sees it")->required();
  CLI::App* lora_unload = lora->add_subcommand(
      "unload", "refuse new requests for an adapter, let its running ones finish, then drop it");
  lora_unload->add_option("name", lora_flags.name)->required();
  lora_unload
      ->add_option("--drain-timeout", lora_flags.drain_timeout_s,
                   "seconds its running requests may take")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  tpserve::PlanFlags plan_flags;
  CLI::App* plan = tpserve::AddPlanCommand(app, &plan_flags);
  tpserve::AddTlsFlags(app, &flags.tls);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;
  }
  if (plan->parsed()) return tpserve::RunPlan(*plan, plan_flags, flags.json);
  if (absl::Status s = tpserve::LoadProcessTls(flags.tls); !s.ok()) {
    std::fprintf(stderr, "tpctl: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (flags.coordinator.empty()) {
    const char* env = std::getenv("TPSERVE_COORDINATOR");
    if (env == nullptr || *env == '\0') {
      std::fprintf(stderr, "tpctl: --coordinator: required when TPSERVE_COORDINATOR is not set\n");
      return 1;
    }
    flags.coordinator = env;
  }
  if (!flags.admin_key_file.empty()) {
    std::ifstream in(flags.admin_key_file);
    if (!in || !std::getline(in, flags.admin_key) || flags.admin_key.empty()) {
      std::fprintf(stderr, "tpctl: --admin-key-file: cannot read a key from %s\n",
                   flags.admin_key_file.c_str());
      return 1;
    }
  } else if (const char* env = std::getenv("TPSERVE_ADMIN_KEY"); env != nullptr) {
    flags.admin_key = env;
  }
  if (status->parsed()) return tpserve::RunCommand(flags, tpserve::Command::kStatus);
  if (drain->parsed()) return tpserve::RunCommand(flags, tpserve::Command::kDrain);
  if (undrain->parsed()) return tpserve::RunCommand(flags, tpserve::Command::kUndrain);
  if (flush->parsed()) return tpserve::RunCommand(flags, tpserve::Command::kFlushCache);
  // Loading reads the adapter on every rank, and unloading waits for its requests: more than a
  // status call's default --timeout.
  if (lora->parsed())
    flags.timeout_s = std::max(flags.timeout_s, lora_flags.drain_timeout_s + 130.0);
  if (lora_list->parsed()) return tpserve::RunCommand(flags, tpserve::Command::kLoraList);
  if (lora_load->parsed()) {
    return tpserve::RunCommand(flags, tpserve::Command::kLoraLoad, lora_flags);
  }
  if (lora_unload->parsed()) {
    return tpserve::RunCommand(flags, tpserve::Command::kLoraUnload, lora_flags);
  }
  return 1;
}
