// Requests survive a worker loss: a rank of a T=3 cluster is SIGKILLed while 16 streaming
// requests (8 over SSE, 8 over gRPC; greedy and seeded; some with n = 2, some with logprobs,
// some constrained to a regular expression) decode, and started again as a supervisor would. Within
// the recovery grace every request is held, then recomputed, and its whole stream equals what the
// same request streamed on the healthy cluster: no token repeated or missing, the same
// log-probabilities. Past the grace they fail naming the rank and the cluster serves once the rank
// is back. After kill-and-restart cycles the coordinator holds no KV block, no request, and not
// more memory than it started with. The same holds at three pipeline stages of one rank when the
// middle stage's rank is the one lost.
//
// The cycles test runs TPSERVE_RECOVERY_CYCLES cycles (default 3); the full form is
// TPSERVE_RECOVERY_CYCLES=10.
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

using nlohmann::json;

constexpr int kRequests = 16;
constexpr int kMaxTokens = 64;
// Tokens each stream has received before the rank is killed: mid-stream for all of them.
constexpr int kKilledAfter = 6;

struct Job {
  bool sse;          // over HTTP as an event stream; else gRPC Generate
  bool seeded;       // temperature 0.8 with a seed; else greedy
  int n;             // samples
  bool logprobs;     // each token's log-probability and the most likely other (SSE only)
  bool constrained;  // the text must match a regular expression (gRPC only)
  std::string prompt;
  int seed;
};

std::vector<Job> Jobs(int n) {
  const char* topics[] = {"a lighthouse", "the sea",   "a robot",   "winter",
                          "a library",    "mountains", "a violin",  "the moon",
                          "a garden",     "a city",    "a train",   "the desert",
                          "a clock",      "a forest",  "a kitchen", "the rain"};
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    const bool sse = i % 2 == 0;
    jobs.push_back({sse, (i / 2) % 2 == 1, i % 8 == 3 || i % 8 == 6 ? 2 : 1, sse && i % 8 == 4,
                    i % 8 == 7, absl::StrCat("Write a few sentences about ", topics[i % 16], "."),
                    1000 + i});
  }
  return jobs;
}

// What the engine holds and counts: every sample of every request.
int Samples(const std::vector<Job>& jobs) {
  int samples = 0;
  for (const Job& job : jobs) samples += job.n;
  return samples;
}

// What one request streamed.
struct Outcome {
  bool ok = false;
  std::string error;                 // when not ok: the status or the error event's message
  std::map<int, std::string> texts;  // by sample: concatenated deltas
  std::map<int, std::vector<int32_t>> token_ids;  // by sample, gRPC only
  std::string logprobs;                           // SSE with logprobs: each token's, in order
  int keepalives = 0;                             // SSE ": paused" comments
  std::atomic<int> chunks{0};                     // chunks with tokens so far
  std::atomic<bool> finished{false};              // the fields above are final
};

void RunSse(const std::string& http_address, const Job& job, Outcome* out) {
  httplib::Client client("http://" + http_address);
  client.set_read_timeout(300);
  json body = {{"prompt", job.prompt},
               {"max_tokens", kMaxTokens},
               {"stream", true},
               {"ignore_eos", true},
               {"temperature", job.seeded ? 0.8 : 0.0},
               {"n", job.n}};
  if (job.seeded) body["seed"] = job.seed;
  if (job.logprobs) body["logprobs"] = 1;
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/completions";
  request.body = body.dump();
  request.set_header("Content-Type", "application/json");
  std::string pending;
  bool ended = false;
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    pending.append(data, size);
    size_t end;
    while ((end = pending.find("\n\n")) != std::string::npos) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (absl::StartsWith(event, ": paused")) {
        ++out->keepalives;
      } else if (event == "data: [DONE]") {
        ended = true;
      } else if (absl::StartsWith(event, "data: ")) {
        const json chunk = json::parse(event.substr(6));
        if (chunk.contains("error")) {
          out->error = chunk["error"].value("message", "");
        } else {
          const json& choice = chunk["choices"][0];
          out->texts[choice.value("index", 0)] += choice.value("text", "");
          if (choice.contains("logprobs") && !choice["logprobs"].is_null()) {
            // Token by token: how tokens group into chunks varies with the steps.
            const json& lp = choice["logprobs"];
            for (size_t k = 0; k < lp["tokens"].size(); ++k) {
              out->logprobs += json::array({lp["tokens"][k], lp["token_logprobs"][k],
                                            lp["top_logprobs"][k], lp["text_offset"][k]})
                                   .dump();
            }
          }
          ++out->chunks;
        }
      }
    }
    return true;
  };
  httplib::Response response;
  httplib::Error error;
  if (!client.send(request, response, error)) {
    out->error = absl::StrCat("HTTP error ", static_cast<int>(error));
    return;
  }
  if (response.status != 200) {
    out->error = absl::StrCat("HTTP ", response.status);
    return;
  }
  out->ok = ended && out->error.empty();
  if (!ended && out->error.empty()) out->error = "the stream ended without [DONE]";
}

void RunGrpc(LocalCluster& cluster, const Job& job, Outcome* out) {
  v1::GenerateRequest request;
  request.set_text(job.prompt);
  request.set_max_tokens(kMaxTokens);
  request.set_ignore_eos(true);
  request.set_n(job.n);
  // Longer than max_tokens can write: the constraint holds through the whole stream.
  if (job.constrained) request.mutable_constraint()->set_regex("[a-z ,.]{2000}");
  request.mutable_sampling()->set_temperature(job.seeded ? 0.8f : 0.0f);
  if (job.seeded) request.mutable_sampling()->set_seed(job.seed);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(300)));
  auto reader = cluster.inference().Generate(&context, request);
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
    out->texts[chunk.index()] += chunk.text();
    std::vector<int32_t>& ids = out->token_ids[chunk.index()];
    ids.insert(ids.end(), chunk.token_ids().begin(), chunk.token_ids().end());
    if (chunk.token_ids_size() > 0) ++out->chunks;
  }
  const grpc::Status status = reader->Finish();
  out->ok = status.ok();
  if (!status.ok()) out->error = status.error_message();
}

// Runs `jobs` concurrently; `during(outcomes)` runs on this thread while they stream.
template <typename During>
std::vector<std::unique_ptr<Outcome>> RunAll(LocalCluster& cluster, const std::vector<Job>& jobs,
                                             During during) {
  std::vector<std::unique_ptr<Outcome>> outcomes;
  for (size_t i = 0; i < jobs.size(); ++i) outcomes.push_back(std::make_unique<Outcome>());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < jobs.size(); ++i) {
    clients.emplace_back([&, i] {
      if (jobs[i].sse) {
        RunSse(cluster.http_address(), jobs[i], outcomes[i].get());
      } else {
        RunGrpc(cluster, jobs[i], outcomes[i].get());
      }
      outcomes[i]->finished = true;
    });
  }
  during(outcomes);
  for (std::thread& client : clients) client.join();
  return outcomes;
}

// Waits until every request has streamed `chunks` chunks with tokens.
bool AwaitChunks(const std::vector<std::unique_ptr<Outcome>>& outcomes, int chunks) {
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  for (const auto& out : outcomes) {
    while (out->chunks.load() < chunks && !out->finished.load()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  return true;
}

std::map<std::string, double> Metrics(LocalCluster& cluster) {
  httplib::Client client("http://" + cluster.http_address());
  const auto result = client.Get("/metrics");
  std::map<std::string, double> values;
  if (!result || result->status != 200) return values;
  for (absl::string_view line : absl::StrSplit(result->body, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    double value;
    if (brace == absl::string_view::npos || space == absl::string_view::npos ||
        !absl::SimpleAtod(line.substr(space + 1), &value)) {
      continue;
    }
    values[std::string(line.substr(0, brace))] = value;
  }
  return values;
}

int64_t ResidentKiB(int pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    int64_t kib;
    if (absl::StartsWith(line, "VmRSS:") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(6, line.size() - 9)), &kib)) {
      return kib;
    }
  }
  return -1;
}

// A T=3 cluster with the HTTP API, holding requests for `grace_s` after a lost rank.
LocalClusterOptions Options(int grace_s) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  options.http_port = 0;
  options.coordinator_args = {"--recovery-grace", std::to_string(grace_s)};
  return options;
}

class SurviveWorkerLoss : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    options_ = new LocalClusterOptions(Options(60));
    auto cluster = StartServing(*options_, absl::Seconds(180));
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
    // The reference: the same requests, together, on the healthy cluster.
    const std::vector<Job> jobs = Jobs(kRequests);
    auto healthy = RunAll(*cluster_, jobs, [](auto&) {});
    for (int i = 0; i < kRequests; ++i) {
      ASSERT_TRUE(healthy[i]->ok) << i << ": " << healthy[i]->error;
      ASSERT_EQ(healthy[i]->texts.size(), static_cast<size_t>(jobs[i].n)) << i;
      ASSERT_EQ(healthy[i]->logprobs.empty(), !jobs[i].logprobs) << i;
      if (jobs[i].constrained) {
        const std::string& text = healthy[i]->texts[0];
        ASSERT_EQ(text.find_first_not_of("abcdefghijklmnopqrstuvwxyz ,."), std::string::npos)
            << text;
      }
      reference_.push_back(std::move(healthy[i]));
    }
    rss_at_start_kib_ = ResidentKiB(cluster_->coordinator().pid());
  }
  static void TearDownTestSuite() {
    if (cluster_ != nullptr) cluster_->StopAll();
    delete cluster_;
    std::filesystem::remove_all(options_->log_dir);
    delete options_;
    reference_.clear();
  }

  // Every request completed with the stream it had on the healthy cluster.
  static void ExpectAsHealthy(const std::vector<Job>& jobs,
                              const std::vector<std::unique_ptr<Outcome>>& outcomes,
                              const std::string& when) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      ASSERT_TRUE(outcomes[i]->ok)
          << when << ", request " << i << ": " << outcomes[i]->error << "\n"
          << LogTails(*options_);
      EXPECT_EQ(outcomes[i]->texts, reference_[i]->texts) << when << ", request " << i;
      EXPECT_EQ(outcomes[i]->token_ids, reference_[i]->token_ids) << when << ", request " << i;
      EXPECT_EQ(outcomes[i]->logprobs, reference_[i]->logprobs) << when << ", request " << i;
    }
  }

  static LocalClusterOptions* options_;
  static LocalCluster* cluster_;
  static std::vector<std::unique_ptr<Outcome>> reference_;
  static int64_t rss_at_start_kib_;
};

LocalClusterOptions* SurviveWorkerLoss::options_ = nullptr;
LocalCluster* SurviveWorkerLoss::cluster_ = nullptr;
std::vector<std::unique_ptr<Outcome>> SurviveWorkerLoss::reference_;
int64_t SurviveWorkerLoss::rss_at_start_kib_ = 0;

TEST_F(SurviveWorkerLoss, SixteenStreamsPauseAndContinueAsOnAHealthyCluster) {
  const std::vector<Job> jobs = Jobs(kRequests);
  const int samples = Samples(jobs);
  const std::map<std::string, double> before = Metrics(*cluster_);
  int held_seen = 0;
  bool degraded_seen = false;
  std::string health_seen;
  auto outcomes = RunAll(*cluster_, jobs, [&](const auto& outcomes) {
    ASSERT_TRUE(AwaitChunks(outcomes, kKilledAfter)) << LogTails(*options_);
    cluster_->worker(1)->Signal(SIGKILL);
    const absl::Time killed = absl::Now();
    // The pause, as an operator sees it, while the rank is away.
    while (absl::Now() < killed + absl::Seconds(3)) {
      auto status = ClusterStatus(*cluster_);
      if (status.ok() && status->num_requests_held() > held_seen) {
        held_seen = status->num_requests_held();
        degraded_seen = degraded_seen || Metrics(*cluster_).at("tpserve:cluster_degraded") == 1;
        EXPECT_NE(status->waiting_for(), "");
        EXPECT_GT(status->recovery_grace_left_ms(), 0);
        httplib::Client http("http://" + cluster_->http_address());
        if (auto health = http.Get("/health"); health) {
          EXPECT_EQ(health->status, 503);
          health_seen = health->body;
        }
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    ASSERT_TRUE(cluster_->RestartWorker(1).ok());
  });
  ExpectAsHealthy(jobs, outcomes, "rank 1 killed and restarted 3 s later");
  EXPECT_EQ(held_seen, samples) << "tpctl status never showed every request held";
  EXPECT_TRUE(absl::StrContains(health_seen, "rank 1")) << health_seen;
  int keepalives = 0;
  for (const auto& out : outcomes) keepalives += out->keepalives;
  EXPECT_GT(keepalives, 0) << "no event stream was told of the pause";

  const std::map<std::string, double> after = Metrics(*cluster_);
  EXPECT_EQ(after.at("tpserve:requests_held_total") - before.at("tpserve:requests_held_total"),
            samples);
  EXPECT_EQ(
      after.at("tpserve:requests_resumed_total") - before.at("tpserve:requests_resumed_total"),
      samples);
  EXPECT_EQ(after.at("tpserve:recoveries_total") - before.at("tpserve:recoveries_total"), 1);
  EXPECT_EQ(after.at("tpserve:recovery_duration_seconds_count") -
                before.at("tpserve:recovery_duration_seconds_count"),
            1);
  EXPECT_EQ(after.at("tpserve:num_requests_held"), 0);
  EXPECT_TRUE(degraded_seen) << "/metrics never said the cluster was degraded";
  EXPECT_EQ(after.at("tpserve:cluster_degraded"), 0);
  std::printf("survive_worker_loss: 16 streams resumed; recovery took %.2f s; %d keep-alives\n",
              after.at("tpserve:recovery_duration_seconds_sum") -
                  before.at("tpserve:recovery_duration_seconds_sum"),
              keepalives);
}

int Cycles() {
  int cycles = 3;
  if (const char* env = std::getenv("TPSERVE_RECOVERY_CYCLES"); env != nullptr) {
    EXPECT_TRUE(absl::SimpleAtoi(env, &cycles) && cycles > 0) << "TPSERVE_RECOVERY_CYCLES=" << env;
  }
  return cycles;
}

TEST_F(SurviveWorkerLoss, CyclesLeakNoBlockNoRequestNoMemory) {
  const std::vector<Job> jobs = Jobs(4);
  const int cycles = Cycles();
  for (int cycle = 0; cycle < cycles; ++cycle) {
    const int rank = cycle % 3;
    const double resumed = Metrics(*cluster_).at("tpserve:requests_resumed_total");
    auto outcomes = RunAll(*cluster_, jobs, [&](const auto& outcomes) {
      ASSERT_TRUE(AwaitChunks(outcomes, kKilledAfter)) << LogTails(*options_);
      cluster_->worker(rank)->Signal(SIGKILL);
      absl::SleepFor(absl::Seconds(1));
      ASSERT_TRUE(cluster_->RestartWorker(rank).ok());
    });
    ExpectAsHealthy(jobs, outcomes, absl::StrCat("cycle ", cycle + 1, ", rank ", rank));
    EXPECT_EQ(Metrics(*cluster_).at("tpserve:requests_resumed_total") - resumed, Samples(jobs))
        << "cycle " << cycle + 1 << ": not every request was in flight at the loss";
    std::printf("survive_worker_loss: cycle %d: rank %d killed, 4 requests resumed\n", cycle + 1,
                rank);
  }
  auto status = ClusterStatus(*cluster_);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->kv_blocks_used(), 0);
  EXPECT_EQ(status->num_requests_running(), 0);
  EXPECT_EQ(status->num_requests_waiting(), 0);
  EXPECT_EQ(status->num_requests_held(), 0);
  const int64_t rss = ResidentKiB(cluster_->coordinator().pid());
  std::printf("survive_worker_loss: coordinator RSS %lld KiB after %d cycles, %lld at the start\n",
              static_cast<long long>(rss), cycles, static_cast<long long>(rss_at_start_kib_));
  EXPECT_LE(rss - rss_at_start_kib_, 16 * 1024);
}

TEST(SurviveWorkerLossPastTheGrace, HeldRequestsFailNamingTheRankThenTheClusterServes) {
  LocalClusterOptions options = Options(3);
  auto cluster = StartServing(options, absl::Seconds(180));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::vector<Job> jobs = Jobs(kRequests);
  auto outcomes = RunAll(**cluster, jobs, [&](const auto& outcomes) {
    ASSERT_TRUE(AwaitChunks(outcomes, kKilledAfter)) << LogTails(options);
    (*cluster)->worker(1)->Signal(SIGKILL);
  });
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_FALSE(outcomes[i]->ok) << i;
    EXPECT_TRUE(absl::StrContains(outcomes[i]->error, "rank 1")) << i << ": " << outcomes[i]->error;
    EXPECT_TRUE(absl::StrContains(outcomes[i]->error, "recovery grace"))
        << i << ": " << outcomes[i]->error;
  }
  ASSERT_TRUE((*cluster)->RestartWorker(1).ok());
  ASSERT_TRUE(WaitForServing(**cluster, absl::Seconds(60))) << LogTails(options);
  const std::vector<Job> one(jobs.begin(), jobs.begin() + 1);
  auto served = RunAll(**cluster, one, [](auto&) {});
  EXPECT_TRUE(served[0]->ok) << served[0]->error;
  EXPECT_GT(served[0]->chunks.load(), 0);
  (*cluster)->StopAll();
  std::filesystem::remove_all(options.log_dir);
}

TEST(SurviveWorkerLossInAPipeline, TheMiddleStagesRankKilledAndRestarted) {
  LocalClusterOptions options = Options(60);
  options.coordinator_args.insert(options.coordinator_args.end(),
                                  {"--pipeline-parallel-size", "3"});  // rank 1: layers 10-19
  auto cluster = StartServing(options, absl::Seconds(180));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::vector<Job> jobs = Jobs(kRequests);
  auto healthy = RunAll(**cluster, jobs, [](auto&) {});
  auto outcomes = RunAll(**cluster, jobs, [&](const auto& outcomes) {
    ASSERT_TRUE(AwaitChunks(outcomes, kKilledAfter)) << LogTails(options);
    (*cluster)->worker(1)->Signal(SIGKILL);
    absl::SleepFor(absl::Seconds(2));
    ASSERT_TRUE((*cluster)->RestartWorker(1).ok());
  });
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(healthy[i]->ok) << i << ": " << healthy[i]->error;
    ASSERT_TRUE(outcomes[i]->ok) << i << ": " << outcomes[i]->error << "\n" << LogTails(options);
    EXPECT_EQ(outcomes[i]->texts, healthy[i]->texts) << i;
    EXPECT_EQ(outcomes[i]->token_ids, healthy[i]->token_ids) << i;
    EXPECT_EQ(outcomes[i]->logprobs, healthy[i]->logprobs) << i;
  }
  const std::map<std::string, double> metrics = Metrics(**cluster);
  EXPECT_EQ(metrics.at("tpserve:recoveries_total"), 1);
  (*cluster)->StopAll();
  std::filesystem::remove_all(options.log_dir);
}

}  // namespace
}  // namespace tpserve::testing
