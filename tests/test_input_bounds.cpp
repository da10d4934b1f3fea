// Bad input at the edges: sizes too large for host memory (refused from the shape, before
// anything is allocated), numeric environment variables, floats that do not fit the spec's
// floats, head sizes past the documented bound, impossible dates, a directory as a trace, and a
// file's backend that this build lacks.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "core/env.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/parallel.hpp"
#include "host_memory_limit.hpp"
#include "model/batch.hpp"
#include "model/scenario.hpp"
#include "model/trace.hpp"
#include "pipeline/pipeline.hpp"
#include "test_dir.hpp"

namespace attn {
namespace {

template <class E>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "<no error>";
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

const std::string kLlama = "[model]\npreset = \"llama3-8b\"\n";
const std::string kBase = kLlama + "[[batch.requests]]\ncount = 2\ncontext_len = 64\nquery_len = 1\n";

// ---- 1. per-token data in the host-memory estimate ---------------------------------------------

// 2M new tokens: the batch's own arrays (16 MB of slot mapping) fit 1 GB, but Q, the outputs and
// the float64 reference of 32 heads x 128 do not; refused when the shape expands (describe too).
TEST(InputBounds, HostEstimateCountsPerTokenData) {
  const HostMemoryLimit limit(1024);
  const Scenario s =
      parse_scenario(kLlama + "[[batch.requests]]\ncount = 1\ncontext_len = 0\nquery_len = 2000000\n", "q.toml");
  const std::string msg = error_of<RuntimeError>([&] { expand_shapes(s); });
  EXPECT_HAS(msg, "q.toml:4: batch.requests[0].count = 1:");
  EXPECT_HAS(msg, "2000000 new tokens");
  EXPECT_HAS(msg, "per token");
  EXPECT_HAS(msg, "GB of host memory");
  EXPECT_HAS(msg, "1.1 GB available");
  // The estimate itself, from the shape alone: at least Q + O + the float64 reference per token.
  BatchShape shape;
  BatchSize z;
  z.num_reqs = 1;
  z.num_tokens = 2000000;
  z.max_blocks_per_req = z.used_blocks = 125000;
  const HostBytes h = run_host_bytes(s.spec, shape, z);
  EXPECT_GE(h.per_token, 2e6 * 32 * 128 * (4.0 + 4.0 + 8.0));
  EXPECT_GE(h.metadata, h.batch);
}

// Large context x many requests: the block table's copies count too (describe hung on them).
TEST(InputBounds, HostEstimateCountsMetadataCopies) {
  const HostMemoryLimit limit(256);
  const Scenario s =
      parse_scenario(kLlama + "[[batch.requests]]\ncount = 1000\ncontext_len = 300000\nquery_len = 1\n", "c.toml");
  // Block table 1000 x 18751 int32 = 75 MB (+ the shuffle's scratch): under 256 MB alone, not
  // with the metadata's copies.
  const std::string msg = error_of<RuntimeError>([&] { expand_shapes(s); });
  EXPECT_HAS(msg, "c.toml:4: batch.requests[0].count = 1000:");
  EXPECT_HAS(msg, "metadata copies");
}

TEST(InputBounds, HugeHeadCountIsRefusedWithItsSize) {
  const HostMemoryLimit limit(1024);
  const Scenario s = parse_scenario("[model]\nnum_q_heads = 2147483647\nnum_kv_heads = 1\nhead_size = 128\n"
                                    "[[batch.requests]]\ncount = 2\ncontext_len = 64\nquery_len = 1\n",
                                    "h.toml");
  const std::string msg = error_of<RuntimeError>([&] { expand_shapes(s); });
  EXPECT_HAS(msg, "h.toml:6: batch.requests[0].count = 2:");
  EXPECT_HAS(msg, "2147483647 heads");
  EXPECT_HAS(msg, "of host memory");
}

class InputBoundsDir : public attn_test::TestDir {};

TEST_F(InputBoundsDir, HugeTraceStepIsRefusedBeforeItIsBuilt) {
  write("one_huge.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,20000000,1\n");
  const Scenario s = parse_scenario(kLlama + "[batch.trace]\nfile = \"one_huge.csv\"\nmax_num_batched_tokens = 2147483647\n",
                                    "t.toml", dir_.string());
  const std::vector<BatchShape> shapes = expand_shapes(s);
  ASSERT_EQ(shapes.size(), 1u);
  const HostMemoryLimit limit(1024);  // 160 MB of slot mapping fit; 20M tokens x 32 heads do not
  const std::string msg = error_of<RuntimeError>([&] { make_batch(s.spec, shapes[0], s.seed); });
  EXPECT_HAS(msg, "t.toml:3: batch.trace.step = 0:");
  EXPECT_HAS(msg, "of host memory");
}

// ---- 2. ATTN_THREADS ------------------------------------------------------------------------------

int hw() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

TEST(InputBounds, ThreadCountIsClampedAndBadValuesFallBack) {
  {
    const ScopedEnv v("ATTN_THREADS", "100000");
    testing::internal::CaptureStderr();
    const int n = default_threads();
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_LE(n, 1024);
    EXPECT_LE(n, 4 * hw());
    EXPECT_HAS(err, "ATTN_THREADS = \"100000\"");
    std::atomic<int64_t> sum{0};
    parallel_for(100000, [&](int64_t b, int64_t e) { sum += e - b; });
    EXPECT_EQ(sum.load(), 100000);
  }
  for (const char* bad : {"abc", "-1", "0", "99999999999999999999999", "1e3", "4x"}) {
    const ScopedEnv v("ATTN_THREADS", bad);
    testing::internal::CaptureStderr();
    EXPECT_EQ(default_threads(), hw()) << bad;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_HAS(err, std::string("ATTN_THREADS = \"") + bad + "\"");
    EXPECT_EQ(err.find('\n'), err.size() - 1) << err;  // one line
  }
  const ScopedEnv v("ATTN_THREADS", "3");
  EXPECT_EQ(default_threads(), std::min(3, 4 * hw()));
}

// A thread that cannot start (address space exhausted here) is a RuntimeError, after the threads
// that did start are joined: never std::terminate.
// Runs parallel_for with too little address space left for the threads' stacks: exit code 7 when
// that is a RuntimeError saying so.
[[noreturn]] void parallel_for_short_of_address_space() {
  long pages = 0;
  std::ifstream("/proc/self/statm") >> pages;
  const rlim_t now = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE));
  const rlimit lim{now + (24u << 20), now + (24u << 20)};  // room for two 8 MB stacks at most
  ::setrlimit(RLIMIT_AS, &lim);
  try {
    parallel_for(1000, [](int64_t, int64_t) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }, 1000);
  } catch (const RuntimeError& e) {
    std::_Exit(std::string(e.what()).find("cannot start worker thread") != std::string::npos ? 7 : 8);
  }
  std::_Exit(0);
}

// A thread that cannot start (address space exhausted here) is a RuntimeError, after the threads
// that did start are joined: never std::terminate.
TEST(InputBoundsDeathTest, ThreadCreationFailureIsAnError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(parallel_for_short_of_address_space(), testing::ExitedWithCode(7), "");
}

// ---- 3. ATTN_HOST_MEMORY_MB ---------------------------------------------------------------------

TEST(InputBounds, HostMemoryVariableIsParsedStrictly) {
  std::size_t meminfo = 0;
  {
    const ScopedEnv v("ATTN_HOST_MEMORY_MB", "2048");
    EXPECT_EQ(available_host_bytes(), std::size_t{2048} << 20);
  }
  {
    const ScopedEnv none("ATTN_HOST_MEMORY_MB", std::nullopt);
    meminfo = available_host_bytes();
  }
  for (const char* bad : {"1e3", "abc", "-1", "0", "99999999999999999999999", ""}) {
    const ScopedEnv v("ATTN_HOST_MEMORY_MB", bad);
    testing::internal::CaptureStderr();
    const std::size_t got = available_host_bytes();
    const std::string err = testing::internal::GetCapturedStderr();
    // Not 1 MB for "1e3": the override is ignored and /proc/meminfo read (within what moved).
    EXPECT_GT(got, std::size_t{64} << 20) << bad;
    EXPECT_NEAR(static_cast<double>(got), static_cast<double>(meminfo), 2e9) << bad;
    EXPECT_HAS(err, std::string("ATTN_HOST_MEMORY_MB = \"") + bad + "\"");
  }
}

// ---- 3b. a setting in a range that holds 0 (the sm_90a fused write's ATTN_FA_FUSED_WRITE_ITEMS) ----

TEST(InputBounds, RangeSettingIsParsedStrictly) {
  const char* name = "ATTN_FA_FUSED_WRITE_ITEMS";
  {
    const ScopedEnv none(name, std::nullopt);
    EXPECT_EQ(env_int_in(name, 0, 4, "2"), std::nullopt);
  }
  for (const int good : {0, 3, 4}) {
    const ScopedEnv v(name, std::to_string(good));
    EXPECT_EQ(env_int_in(name, 0, 4, "2"), std::optional<int64_t>(good));
  }
  for (const char* bad : {"5", "-1", "abc", "", "1e0", "2x"}) {
    const ScopedEnv v(name, bad);
    testing::internal::CaptureStderr();
    EXPECT_EQ(env_int_in(name, 0, 4, "2 (the default)"), std::nullopt) << bad;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_HAS(err, std::string(name) + " = \"" + bad + "\": not a whole number in [0, 4]; using 2 (the default)");
  }
}

// ---- 4. floats that do not fit a float --------------------------------------------------------

TEST(InputBounds, FloatKeysMustFitAFloat) {
  const std::string fp8 = "kv_cache_dtype = \"fp8_e4m3\"\n";
  struct Case {
    std::string model_line, key;
  };
  for (const Case& c : std::vector<Case>{{"scale = 1e300", "model.scale"},
                                         {"scale = 1e-300", "model.scale"},
                                         {"scale = 1e-40", "model.scale"},
                                         {"logits_soft_cap = 1e308", "model.logits_soft_cap"},
                                         {"logits_soft_cap = 1e-300", "model.logits_soft_cap"},
                                         {"k_scale = 1e300", "model.k_scale"},
                                         {"k_scale = 1e-300", "model.k_scale"},
                                         {"v_scale = 1e-300", "model.v_scale"},
                                         {"q_scale = 1e300", "model.q_scale"}}) {
    const std::string text = "[model]\npreset = \"llama3-8b\"\n" + fp8 + c.model_line +
                             "\n[[batch.requests]]\ncount = 2\ncontext_len = 64\nquery_len = 1\n";
    const std::string msg = error_of<InputError>([&] { parse_scenario(text, "f.toml"); });
    const std::string value = c.model_line.substr(c.model_line.find("= ") + 2);
    EXPECT_HAS(msg, "f.toml:4: " + c.key + " = ");
    EXPECT_HAS(msg, "does not fit a 32-bit float");
  }
  // Ordinary values and the float range's own edges still parse.
  const Scenario s = parse_scenario(kLlama + "scale = 0.0883883\nlogits_soft_cap = 3e38\n" +
                                        "[[batch.requests]]\ncount = 2\ncontext_len = 64\nquery_len = 1\n",
                                    "ok.toml");
  EXPECT_FLOAT_EQ(s.spec.scale, 0.0883883f);
  EXPECT_FLOAT_EQ(s.spec.logits_soft_cap, 3e38f);
}

// ---- 5. head sizes and MLA dims ------------------------------------------------------------------

TEST(InputBounds, HeadSizesAndMlaDimsAreBounded) {
  for (const std::string line : {"head_size = 2147483647", "head_size = 100000000", "head_size_qk = 1025",
                                 "head_size_v = 4096"}) {
    const std::string msg = error_of<InputError>([&] {
      parse_scenario(kLlama + line + "\n[[batch.requests]]\ncount = 2\ncontext_len = 64\nquery_len = 1\n", "h.toml");
    });
    EXPECT_HAS(msg, "h.toml:3: model." + line.substr(0, line.find(' ')));
    EXPECT_HAS(msg, "too large (at most 1024)");
  }
  const std::string mla = "[model]\nnum_q_heads = 16\n[model.mla]\nkv_lora_rank = 2147483647\nqk_rope_head_dim = "
                          "2147483647\nqk_nope_head_dim = 2147483647\nv_head_dim = 2147483647\n"
                          "[[batch.requests]]\ncount = 2\ncontext_len = 64\nquery_len = 1\n";
  const std::string msg = error_of<InputError>([&] { parse_scenario(mla, "m.toml"); });
  EXPECT_HAS(msg, "m.toml:4: model.mla.kv_lora_rank = 2147483647: too large (at most 4096)");
  // The largest accepted sizes count without overflow.
  const Scenario s = parse_scenario(
      "[model]\nnum_q_heads = 8\nnum_kv_heads = 8\nhead_size = 1024\n[[batch.requests]]\ncount = 2\ncontext_len = "
      "64\nquery_len = 1\n",
      "big.toml");
  const Batch b = make_batch(s.spec, expand_shapes(s)[0], 1);
  const BatchSummary sum = summarize_batch(b);
  EXPECT_GT(sum.kv_cache_bytes, 0);
  EXPECT_GT(sum.flops, 0);
  EXPECT_GT(sum.host_bytes, 0);
}

// ---- 6. a file's backend this build lacks --------------------------------------------------------

TEST(InputBounds, FileBackendNotInThisBuildNamesItsLine) {
  const Scenario s = parse_scenario(kBase + "[run]\nbackends = [\"cpu\",\n  \"FLASH_ATTN\"]\n", "be_fa.toml");
  std::vector<std::unique_ptr<Backend>> cpu_only;
  cpu_only.push_back(make_cpu_backend());
  PipelineOptions opts;
  opts.time = false;
  const std::string msg = error_of<InputError>([&] { run_scenario(s, cpu_only, opts); });
  EXPECT_HAS(msg, "be_fa.toml:9: run.backends = \"FLASH_ATTN\": not in this build (it has cpu;");
  // Given by --set, the same name is the override's, not a line of the file.
  const Scenario set = parse_scenario(kBase, "be.toml", ".", {parse_override("run.backends=[\"cpu\", \"FLASH_ATTN\"]")});
  EXPECT_HAS(error_of<InputError>([&] { run_scenario(set, cpu_only, opts); }),
             "--set (be.toml): run.backends = \"FLASH_ATTN\": not in this build (it has cpu;");
}

// ---- 7, 8. trace dates and paths ---------------------------------------------------------------

TEST_F(InputBoundsDir, TraceDaysMustExistInTheirMonth) {
  const std::string header = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  for (const char* bad : {"2023-02-30 10:00:00", "2023-02-29 10:00:00", "1900-02-29 10:00:00", "2023-04-31 10:00:00"}) {
    const std::string path = write("bad.csv", header + std::string(bad) + ",10,5\n");
    const std::string msg = error_of<InputError>([&] { load_trace_csv(path); });
    EXPECT_HAS(msg, path + ":2: TIMESTAMP = " + bad);
  }
  for (const char* good : {"2024-02-29 10:00:00", "2000-02-29 10:00:00", "2023-12-31 23:59:59"}) {
    const std::string path = write("good.csv", header + std::string(good) + ",10,5\n");
    EXPECT_EQ(load_trace_csv(path).size(), 1u) << good;
  }
}

TEST_F(InputBoundsDir, TraceDirectoryIsNamedAsOne) {
  const std::string msg = error_of<InputError>([&] {
    parse_scenario(kLlama + "[batch.trace]\nfile = \"" + dir_.string() + "\"\n", "d.toml");
  });
  EXPECT_HAS(msg, "d.toml:4: batch.trace.file = ");
  EXPECT_HAS(msg, "is a directory");
}

}  // namespace
}  // namespace attn
