// Each coordinator flag's effect on the workers' Init, the HTTP limits and the engine, from a
// command line parsed as tpserve-coordinator parses it (AddCoordinatorFlags), on a model of the
// shape a GGUF header would give.
#include "coordinator/serving_plan.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

constexpr char kModel[] = TPSERVE_MODEL_PATH;

CoordinatorFlags Parse(std::vector<std::string> args) {
  args.insert(args.begin(), {"tpserve-coordinator", "--model", kModel, "--world-size", "1"});
  CLI::App app;
  CoordinatorFlags flags;
  AddCoordinatorFlags(app, &flags);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return flags;
}

ModelConfig Model() {
  ModelConfig config;
  config.num_layers = 30;
  config.num_heads = 9;
  config.num_kv_heads = 3;
  config.context_length = 8192;
  config.vocab_size = 49152;
  return config;
}

TEST(ServingPlan, FlagsReachTheWorkersInit) {
  const CoordinatorFlags flags =
      Parse({"--block-size", "32", "--kv-cache-blocks", "600", "--kv-cache-memory", "64",
             "--kv-cache-dtype", "fp8", "--quantization", "fp8", "--no-step-relay", "--device",
             "cuda", "--max-num-seqs", "64", "--max-num-batched-tokens", "1024", "--enforce-eager",
             "--speculative", "draft", "--draft-model", kModel});
  absl::StatusOr<ServingPlan> plan = MakeServingPlan(flags, Model());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const WorkerInitOptions& init = plan->init;
  EXPECT_EQ(init.block_size, 32);
  EXPECT_EQ(init.kv_cache_blocks, 600);
  EXPECT_EQ(init.kv_cache_bytes, int64_t{64} << 20);
  EXPECT_TRUE(init.kv_cache_fp8);
  EXPECT_TRUE(init.weights_fp8);
  EXPECT_FALSE(init.relay_steps);
  EXPECT_EQ(init.device, v1::DEVICE_CUDA);
  EXPECT_EQ(init.max_num_seqs, 64);
  EXPECT_EQ(init.max_num_batched_tokens, 1024);
  EXPECT_TRUE(init.enforce_eager);
  EXPECT_EQ(init.draft_model_path, kModel);
  EXPECT_EQ(init.self_spec_layers, 0);
  EXPECT_EQ(init.model_path, "") << "each worker loads its own --model";
}

TEST(ServingPlan, DefaultsAreThePlainCpuCluster) {
  absl::StatusOr<ServingPlan> plan = MakeServingPlan(Parse({}), Model());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->init.device, v1::DEVICE_CPU);
  EXPECT_FALSE(plan->init.kv_cache_fp8);
  EXPECT_FALSE(plan->init.weights_fp8);
  EXPECT_TRUE(plan->init.relay_steps);
  EXPECT_EQ(plan->init.draft_model_path, "");
  EXPECT_EQ(plan->http.max_connections, HttpLimits().max_connections);
  EXPECT_EQ(plan->http.io_threads, 0);
  EXPECT_EQ(plan->http.max_body_bytes, HttpLimits().max_body_bytes);
  EXPECT_EQ(plan->http.header_timeout, HttpLimits().header_timeout);
}

TEST(ServingPlan, HttpLimits) {
  absl::StatusOr<ServingPlan> plan =
      MakeServingPlan(Parse({"--http-max-connections", "100", "--http-io-threads", "3",
                             "--http-max-body-bytes", "1048576",
                             "--http-header-timeout", "2.5"}),
                      Model());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->http.max_connections, 100);
  EXPECT_EQ(plan->http.io_threads, 3);
  EXPECT_EQ(plan->http.max_body_bytes, 1048576u);
  EXPECT_EQ(plan->http.header_timeout, absl::Milliseconds(2500));
}

TEST(ServingPlan, SelfSpeculationTakesAQuarterOfTheLayersUnlessTold) {
  absl::StatusOr<ServingPlan> plan = MakeServingPlan(Parse({"--speculative", "self"}), Model());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->self_spec_layers, 7);  // 30 / 4
  EXPECT_EQ(plan->init.self_spec_layers, 7);
  plan = MakeServingPlan(Parse({"--speculative", "self", "--self-spec-layers", "12"}), Model());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->self_spec_layers, 12);
  // Only with --speculative self.
  plan = MakeServingPlan(Parse({"--speculative", "ngram", "--self-spec-layers", "12"}), Model());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->init.self_spec_layers, 0);
}

TEST(ServingPlan, RefusesFlagsThatCannotServe) {
  absl::StatusOr<ServingPlan> plan =
      MakeServingPlan(Parse({"--speculative", "self", "--self-spec-layers", "30"}), Model());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "--self-spec-layers 30: the draft must be fewer layers than the model's 30");
  plan = MakeServingPlan(Parse({"--speculative", "draft"}), Model());
  EXPECT_EQ(plan.status().message(), "--speculative draft needs --draft-model");
}

TEST(ServingPlan, PipelineStagesSplitTheWorld) {
  CoordinatorFlags flags = Parse({"--pipeline-parallel-size", "3", "--speculative", "ngram"});
  flags.world_size = 9;
  absl::StatusOr<ServingPlan> plan = MakeServingPlan(flags, Model());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->init.pipeline_size, 3);
  EXPECT_FALSE(plan->init.relay_steps);  // the coordinator sends every rank of a pipeline its step
  flags = Parse({"--pp", "2"});
  flags.world_size = 2;
  plan = MakeServingPlan(flags, Model());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->init.pipeline_size, 2);
  plan = MakeServingPlan(Parse({}), Model());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->init.pipeline_size, 1);
  EXPECT_TRUE(plan->init.relay_steps);

  flags = Parse({"--pipeline-parallel-size", "2"});
  flags.world_size = 3;
  EXPECT_EQ(MakeServingPlan(flags, Model()).status().message(),
            "--pipeline-parallel-size 2 does not divide --world-size 3");
  flags = Parse({"--pipeline-parallel-size", "31"});
  flags.world_size = 62;
  EXPECT_EQ(MakeServingPlan(flags, Model()).status().message(),
            "--world-size 62 in 31 stage(s): pipeline stage 0 of 31: this model's 30 layers make 1 "
            "to 30 stages");
  flags = Parse({"--pipeline-parallel-size", "2"});
  flags.world_size = 4;  // stages of 2 ranks cannot split 9 heads
  EXPECT_TRUE(absl::StrContains(MakeServingPlan(flags, Model()).status().message(),
                                "tensor-parallel size 2 cannot split"));
  flags = Parse({"--pipeline-parallel-size", "2", "--device", "cuda"});
  flags.world_size = 2;
  EXPECT_TRUE(MakeServingPlan(flags, Model()).ok()) << "CUDA stages link through NCCL";
  flags = Parse({"--pipeline-parallel-size", "2", "--steps-in-flight", "3"});
  flags.world_size = 2;
  EXPECT_EQ(MakeServingPlan(flags, Model()).status().message(),
            "--steps-in-flight 3 is more than the 2 pipeline stage(s): a stage runs one step at a "
            "time");
  for (const std::vector<std::string>& refused :
       {std::vector<std::string>{"--speculative", "self"},
        {"--speculative", "draft", "--draft-model", kModel}}) {
    std::vector<std::string> args = {"--pipeline-parallel-size", "2"};
    args.insert(args.end(), refused.begin(), refused.end());
    flags = Parse(args);
    flags.world_size = 2;
    EXPECT_EQ(MakeServingPlan(flags, Model()).status().code(), absl::StatusCode::kInvalidArgument)
        << refused[1];
  }
}

TEST(ServingPlan, LoraModulesTakeSlotsInOrder) {
  absl::StatusOr<ServingPlan> plan =
      MakeServingPlan(Parse({"--lora-modules", "sql=/a/sql", "--lora-modules", "chat=/a/chat",
                             "--max-lora-rank", "32"}),
                      Model(), "smol");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->init.loras.size(), 2u);
  EXPECT_EQ(plan->init.loras[0].name, "sql");
  EXPECT_EQ(plan->init.loras[0].slot, 1);
  EXPECT_EQ(plan->init.loras[1].path, "/a/chat");
  EXPECT_EQ(plan->init.loras[1].slot, 2);
  EXPECT_EQ(plan->init.max_loras, 2);
  EXPECT_EQ(plan->init.max_lora_rank, 32);
  EXPECT_EQ(LoraNamed(plan->loras, "smol", "chat")->slot, 2);
  EXPECT_EQ(LoraNamed(plan->loras, "smol", "smol")->slot, 0);
  EXPECT_FALSE(LoraNamed(plan->loras, "smol", "other").has_value());
  const std::pair<std::vector<std::string>, const char*> refused[] = {
      {{"--lora-modules", "sql"}, "expected name=path"},
      {{"--lora-modules", "=/a"}, "expected name=path"},
      {{"--lora-modules", "smol=/a"}, "the served model's"},
      {{"--lora-modules", "a=/a", "--lora-modules", "a=/b"}, "another adapter's"},
      {{"--lora-modules", "a=/a", "--lora-modules", "b=/b", "--max-loras", "1"}, "--max-loras"},
  };
  for (const auto& [args, message] : refused) {
    const absl::Status status = MakeServingPlan(Parse(args), Model(), "smol").status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << args[1];
    EXPECT_TRUE(absl::StrContains(status.message(), message)) << status;
  }
  // CUDA workers hold their slots in device memory (worker/cuda/cuda_lora_pool.h).
  const absl::StatusOr<ServingPlan> cuda = MakeServingPlan(
      Parse({"--lora-modules", "a=/a", "--max-loras", "3", "--device", "cuda"}), Model(), "smol");
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_EQ(cuda->init.device, v1::DEVICE_CUDA);
  EXPECT_EQ(cuda->init.max_loras, 3);
}

TEST(ServingPlan, EngineOptionsFromFlagsAndTheLoadedModel) {
  const CoordinatorFlags flags = Parse(
      {"--block-size", "32", "--step-timeout", "31", "--max-num-seqs", "64",
       "--max-num-batched-tokens", "1024", "--max-step-attention", "4000000", "--no-prefix-cache",
       "--no-jump-forward", "--speculative", "ngram", "--num-speculative-tokens", "3",
       "--spec-disable-batch-size", "4", "--spec-min-acceptance", "0.3", "--ngram-min", "2",
       "--ngram-max", "3", "--max-queued-requests", "10", "--recovery-grace", "59", "--max-n", "5",
       "--max-constraint-bytes", "20000", "--grammar-compile-timeout", "11"});
  LoadedModel loaded;
  loaded.kv_cache_blocks = 1000;  // 32,000 tokens: the model's 8192 fit
  loaded.vocab_size = 49152;
  int64_t model_context = 0;
  const EngineOptions options = MakeEngineOptions(flags, Model(), loaded, &model_context);
  EXPECT_EQ(model_context, 8192);
  EXPECT_EQ(options.block_size, 32);
  EXPECT_EQ(options.num_blocks, 1000);
  EXPECT_EQ(options.context_length, 8192);
  EXPECT_EQ(options.vocab_size, 49152);
  EXPECT_EQ(options.step_timeout, absl::Seconds(31));
  EXPECT_EQ(options.max_num_seqs, 64);
  EXPECT_EQ(options.max_num_batched_tokens, 1024);
  EXPECT_EQ(options.max_step_attention, 4000000);
  EXPECT_FALSE(options.enable_prefix_cache);
  EXPECT_FALSE(options.jump_forward);
  EXPECT_EQ(options.num_speculative_tokens, 3);
  EXPECT_FALSE(options.draft_model) << "n-gram proposals need no draft";
  EXPECT_EQ(options.spec_disable_batch_size, 4);
  EXPECT_DOUBLE_EQ(options.spec_min_acceptance, 0.3);
  EXPECT_EQ(options.ngram.min_n, 2);
  EXPECT_EQ(options.ngram.max_n, 3);
  EXPECT_EQ(options.max_queued_requests, 10);
  EXPECT_EQ(options.recovery_grace, absl::Seconds(59));
  EXPECT_EQ(options.limits.max_n, 5);
  EXPECT_EQ(options.grammar.max_bytes, 20000);
  EXPECT_EQ(options.grammar.timeout, absl::Seconds(11));
  EXPECT_EQ(options.steps_in_flight, 1);

  CoordinatorFlags pipeline = Parse({"--pp", "3"});
  EXPECT_EQ(MakeEngineOptions(pipeline, Model(), loaded, nullptr).steps_in_flight, 3)
      << "one step per stage";
  pipeline = Parse({"--pp", "3", "--steps-in-flight", "1"});
  EXPECT_EQ(MakeEngineOptions(pipeline, Model(), loaded, nullptr).steps_in_flight, 1);
}

TEST(ServingPlan, TheContextIsWhatTheKvPoolHolds) {
  LoadedModel loaded;
  loaded.kv_cache_blocks = 100;  // 1,600 tokens of 16
  int64_t model_context = 0;
  EngineOptions options = MakeEngineOptions(Parse({}), Model(), loaded, &model_context);
  EXPECT_EQ(model_context, 8192);
  EXPECT_EQ(options.context_length, 1600);
  EXPECT_EQ(options.vocab_size, 49152) << "the model's, when the ranks report none";
  EXPECT_EQ(options.num_speculative_tokens, 0) << "--speculative none";
  loaded.context_length = 1024;  // the ranks serve less than the file says (a sliding window)
  options = MakeEngineOptions(Parse({}), Model(), loaded, &model_context);
  EXPECT_EQ(model_context, 1024);
  EXPECT_EQ(options.context_length, 1024);
}

}  // namespace
}  // namespace tpserve
