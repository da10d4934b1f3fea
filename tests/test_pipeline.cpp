// The pipeline's check of a backend (run_scenario): the second poisoned run of the same instance,
// which every row makes for its determinism note, must pass the check too. A backend that leaves
// state behind (a counter not reset, a flag, a workspace) passes its first run and breaks on the
// next one, as a serving loop or a graph replay would find.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "core/error.hpp"
#include "host_memory_limit.hpp"
#include "model/scenario.hpp"
#include "pipeline/pipeline.hpp"
#include "wrapped_backend.hpp"

namespace attn {
namespace {

// The cpu backend, except that run() computes only the first time: later runs leave the
// poisoned output as it is.
class FirstRunOnlyInstance : public BackendInstance {
 public:
  explicit FirstRunOnlyInstance(std::unique_ptr<BackendInstance> inner) : inner_(std::move(inner)) {}
  void plan() override { inner_->plan(); }
  void run() override {
    if (runs_++ == 0) inner_->run();
  }
  void run_attention() override {
    if (runs_++ == 0) inner_->run_attention();
  }
  void poison() override { inner_->poison(); }
  void poison_outputs() override { inner_->poison_outputs(); }
  AttentionOutput fetch() override { return inner_->fetch(); }

 private:
  std::unique_ptr<BackendInstance> inner_;
  int runs_ = 0;
};

// A backend whose device is missing here (available() says no) and that serves only some
// batches, or cannot answer supports() without its device.
class AbsentBackend : public Backend {
 public:
  explicit AbsentBackend(bool answers) : answers_(answers) {}
  std::string name() const override { return answers_ ? "absent_mla_only" : "absent_silent"; }
  std::string description() const override { return "a device backend on a machine without its device"; }
  std::vector<std::string> features() const override { return {}; }
  Support available() const override { return Support::no("no device here"); }
  Support supports(const AttentionSpec& spec, const Batch&) const override {
    if (!answers_) throw RuntimeError("supports() needs the device");
    return spec.use_mla ? Support::yes() : Support::no("serves MLA layers only");
  }
  std::unique_ptr<BackendInstance> create(const Batch&, const CommonAttentionMetadata&,
                                          const RunOptions&) const override {
    throw RuntimeError("never created: not available");
  }

 private:
  bool answers_;
};

// The cpu backend, declaring an e4m3 intermediate in its output (as the fp8 tensor-core prefill
// declares its P): its budget's floor, and so every element bound, grows by the data-flow factor.
struct DeclareE4m3 {
  void operator()(AttentionOutput& o) const { o.coarse_roundings = {DType::fp8_e4m3}; }
};
using CoarseInstance = testing::FetchAdjustedInstance<DeclareE4m3>;

// The cpu backend, turning every NaN of its output into a finite value (O 0, LSE -inf): what a merge
// that weighs a piece that read a NaN as a piece without keys gives the rows of that piece.
struct HideNan {
  void operator()(AttentionOutput& o) const {
    for (float& x : o.o)
      if (std::isnan(x)) x = 0.0f;
    for (float& x : o.lse)
      if (std::isnan(x)) x = -std::numeric_limits<float>::infinity();
  }
};
using NanHiddenInstance = testing::FetchAdjustedInstance<HideNan>;

// The cpu backend, letting a NaN row spill into the row after it (the next head, or the next
// token's first head): what a head mapping or an output offset that is one row off gives.
struct LeakNan {
  void operator()(AttentionOutput& o) const {
    const size_t dv = static_cast<size_t>(o.head_size_v);
    for (size_t row = o.o.size() / dv - 1; row > 0; --row)
      if (std::isnan(o.o[(row - 1) * dv])) o.o[row * dv] = std::numeric_limits<float>::quiet_NaN();
  }
};
using NanLeakedInstance = testing::FetchAdjustedInstance<LeakNan>;

PipelineOptions check_only(const std::string& backend) {
  PipelineOptions o;
  o.backends = {backend};
  o.time = false;
  o.batch_invariance = false;
  o.check_sample = 8;
  return o;
}

TEST(PipelineCheck, StateLeftByTheFirstRunFailsTheRow) {
  const Scenario sc = scenario_from_cli("llama3-8b", "2x1@100,1x8@40", 3);
  std::vector<std::unique_ptr<Backend>> registry;
  registry.push_back(make_cpu_backend());
  registry.push_back(std::make_unique<testing::WrappedBackend<FirstRunOnlyInstance>>(
      "first_run_only", "cpu, computing on its first run only", make_cpu_backend()));

  const PipelineResult clean = run_scenario(sc, registry, check_only("cpu"));
  ASSERT_EQ(clean.rows.size(), 1u);
  EXPECT_EQ(clean.rows[0].status, "pass") << clean.rows[0].reason;
  EXPECT_TRUE(clean.rows[0].deterministic);

  const PipelineResult stale = run_scenario(sc, registry, check_only("first_run_only"));
  ASSERT_EQ(stale.rows.size(), 1u);
  const ResultRow& r = stale.rows[0];
  EXPECT_EQ(r.status, "fail");
  EXPECT_FALSE(r.deterministic);
  EXPECT_NE(r.reason.find("second run"), std::string::npos) << r.reason;
}

// The cpu backend, except that its step leaves the new tokens' cache slots as poison() left them
// (NaN) while its output is the step's: what a kernel that writes the cache inside its attention
// and reads its new keys from the step's input does when it skips the store.
class StoreSkippingInstance : public BackendInstance {
 public:
  explicit StoreSkippingInstance(std::unique_ptr<BackendInstance> inner) : inner_(std::move(inner)) {}
  void plan() override { inner_->plan(); }
  void run() override {
    inner_->run();
    step_ = inner_->fetch();
    inner_->poison();  // the slots the store should have filled, NaN again
    have_step_ = true;
  }
  void run_attention() override {
    inner_->run_attention();
    have_step_ = false;
  }
  void poison() override {
    inner_->poison();
    have_step_ = false;
  }
  void poison_outputs() override {
    inner_->poison_outputs();
    have_step_ = false;
  }
  AttentionOutput fetch() override { return have_step_ ? step_ : inner_->fetch(); }

 private:
  std::unique_ptr<BackendInstance> inner_;
  AttentionOutput step_;
  bool have_step_ = false;
};

// A skipped cache store whose step output is right anyway fails the row: the attention alone over
// the caches the step wrote is checked too.
TEST(PipelineCheck, CacheStoreSkippedInsideTheStepFailsTheRow) {
  const Scenario sc = scenario_from_cli("llama3-8b", "2x1@100,1x8@40", 3);
  std::vector<std::unique_ptr<Backend>> registry;
  registry.push_back(std::make_unique<testing::WrappedBackend<StoreSkippingInstance>>(
      "store_skipping", "cpu, its cache store skipped", make_cpu_backend()));
  const PipelineResult r = run_scenario(sc, registry, check_only("store_skipping"));
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].status, "fail");
  EXPECT_TRUE(r.rows[0].deterministic) << "the step alone is right and repeatable";
  EXPECT_NE(r.rows[0].reason.find("the attention alone over the caches the step wrote"), std::string::npos)
      << r.rows[0].reason;
}

// The NaN probe (validate/nan_probe.hpp): a context key's cached K and a new token's K planted NaN
// must reach exactly the rows that attend them. Both faults below pass the comparison with the reference (they change
// nothing without a NaN) and fail the probe; without it (--no-nan-probe) they pass.
TEST(PipelineCheck, NanProbeFailsANanHiddenOrLeaked) {
  const Scenario sc = scenario_from_cli("llama3-8b", "2x1@100,1x8@40", 3);
  std::vector<std::unique_ptr<Backend>> registry;
  registry.push_back(make_cpu_backend());
  registry.push_back(std::make_unique<testing::WrappedBackend<NanHiddenInstance>>(
      "nan_hidden", "cpu, every NaN of its output made finite", make_cpu_backend()));
  registry.push_back(std::make_unique<testing::WrappedBackend<NanLeakedInstance>>(
      "nan_leaked", "cpu, a NaN row spilling into the next", make_cpu_backend()));

  const PipelineResult clean = run_scenario(sc, registry, check_only("cpu"));
  ASSERT_EQ(clean.rows.size(), 1u);
  EXPECT_EQ(clean.rows[0].status, "pass") << clean.rows[0].reason;

  // Request 0 has the longest context (100): the cached key is its position 49 (the middle of keys
  // 0-99), kv head 7 (heads 28-31). Request 2 has the most new tokens (8 at 40-47): the new key is
  // its position 44, kv head 0 (heads 0-3 of tokens 6-9).
  const PipelineResult hidden = run_scenario(sc, registry, check_only("nan_hidden"));
  ASSERT_EQ(hidden.rows.size(), 1u);
  EXPECT_EQ(hidden.rows[0].status, "fail");
  EXPECT_EQ(hidden.rows[0].reason,
            "a NaN planted in the cached K of (request 0, position 49, kv head 7): token 0 (request 0) head 28 "
            "attends it but 128 of its 128 O elements are not NaN (20 rows wrong, of 20 that attend a planted key)");

  const PipelineResult leaked = run_scenario(sc, registry, check_only("nan_leaked"));
  ASSERT_EQ(leaked.rows.size(), 1u);
  EXPECT_EQ(leaked.rows[0].status, "fail");
  EXPECT_EQ(leaked.rows[0].reason,
            "a NaN planted in the cached K of (request 0, position 49, kv head 7) and the new K of (request 2, "
            "position 44, kv head 0): token 1 (request 1) head 0 attends neither key but holds a NaN (5 rows wrong, "
            "of 20 that attend a planted key)");

  PipelineOptions no_probe = check_only("nan_hidden");
  no_probe.nan_probe = false;
  const PipelineResult unprobed = run_scenario(sc, registry, no_probe);
  ASSERT_EQ(unprobed.rows.size(), 1u);
  EXPECT_EQ(unprobed.rows[0].status, "pass") << unprobed.rows[0].reason;
}

// [run] num_layers: one call runs every layer, so a row's work is every layer's; a row that kept
// one layer's flops and bytes under the time of three read each rate 3 x too low. (That each
// backend runs every layer over its own cache is its own test: the cpu backend's test of layers
// and threads, and each GPU backend's LayersEachOverTheirOwnCache.)
TEST(PipelineLayers, WorkIsOfEveryLayer) {
  std::vector<std::unique_ptr<Backend>> registry;
  registry.push_back(make_cpu_backend());
  Scenario sc = scenario_from_cli("llama3-8b", "2x1@100,1x8@40", 3);
  PipelineOptions o = check_only("cpu");
  o.time = true;
  o.iterations = 3;
  o.warmup = 0;
  const PipelineResult one = run_scenario(sc, registry, o);
  sc.run.num_layers = 3;
  const PipelineResult three = run_scenario(sc, registry, o);
  ASSERT_EQ(one.rows.size(), 1u);
  ASSERT_EQ(three.rows.size(), 1u);
  const ResultRow &a = one.rows[0], &b = three.rows[0];
  EXPECT_EQ(b.status, "pass") << b.reason;
  EXPECT_EQ(a.num_layers, 1);
  EXPECT_EQ(b.num_layers, 3);
  EXPECT_GT(a.flops, 0);
  EXPECT_DOUBLE_EQ(b.flops, 3 * a.flops);
  EXPECT_DOUBLE_EQ(b.bytes, 3 * a.bytes);
  EXPECT_GT(b.samples, 0);
  // The rows' own rates divide that work by their own times.
  EXPECT_DOUBLE_EQ(b.tflops, b.flops / (b.median_time_us * 1e-6) / 1e12);
  // planned_rows, which a sweep's --resume compares stored rows with, says the same.
  EXPECT_EQ(planned_rows(sc, o).front().num_layers, 3);
}

// Defect: a feature's bug was judged without the coarse intermediates the row's output declares,
// so its element bounds were the plain dtype's while the row's own were raised: the reported
// sensitivity of an fp8 tensor-core row read up to 16 x what its check can see. Here the cpu
// output declares e4m3, 16 x bf16's rounding: the same bug reads ~16 x smaller.
// Defect: the cpu row judged each bug at its own fp32 budget (~150 x tighter than bf16's), so
// every feature read as exercised (causal ~1e4) on data a bf16 kernel's check barely sees; a row
// finer than the model dtype is judged at the model dtype's budget.
TEST(PipelineCheck, SensitivityIsJudgedUnderTheRowsOwnDataFlow) {
  const Scenario sc = scenario_from_cli("llama3-8b", "1x16@40", 3);
  std::vector<std::unique_ptr<Backend>> registry;
  registry.push_back(make_cpu_backend());
  registry.push_back(
      std::make_unique<testing::WrappedBackend<CoarseInstance>>("coarse", "cpu, declaring an e4m3 intermediate",
                                                               make_cpu_backend()));
  auto causal_of = [&](const std::string& backend) {
    const PipelineResult r = run_scenario(sc, registry, check_only(backend));
    EXPECT_EQ(r.rows.at(0).status, "pass") << r.rows.at(0).reason;
    const std::string& sens = r.rows.at(0).sensitivity;
    const size_t at = sens.find("causal=");
    EXPECT_NE(at, std::string::npos) << sens;
    return at == std::string::npos ? -1.0 : std::stod(sens.substr(at + 7));
  };
  const double plain = causal_of("cpu"), coarse = causal_of("coarse");
  EXPECT_GT(plain, 20.0);
  EXPECT_LT(plain, 1000.0);  // at fp32's budget: ~1e4
  EXPECT_LT(coarse, plain / 10.0);
  EXPECT_GT(coarse, plain / 30.0);
}

// Under --strict a feature the data does not exercise fails the row, and the reason says which
// budget it was judged at: a cpu row is judged at the model dtype's (bf16 here), not its own fp32.
TEST(PipelineCheck, StrictFailsDataThatDoesNotExerciseAFeature) {
  Scenario sc = scenario_from_cli("llama3-8b", "1x8@40", 3);
  sc.spec.sliding_window = 4096;  // far beyond every sequence: a window off by one changes nothing
  std::vector<std::unique_ptr<Backend>> registry;
  registry.push_back(make_cpu_backend());
  PipelineOptions o = check_only("cpu");
  EXPECT_EQ(run_scenario(sc, registry, o).rows.at(0).status, "pass");
  o.strict = true;
  const ResultRow r = run_scenario(sc, registry, o).rows.at(0);
  EXPECT_EQ(r.status, "fail");
  EXPECT_EQ(r.not_exercised, "window");
  EXPECT_NE(r.reason.find("features not exercised by this batch's data: window; first: window ("), std::string::npos)
      << r.reason;
  EXPECT_NE(r.reason.find(" x the bf16 budget), below 4"), std::string::npos) << r.reason;
}

// A backend missing its device still says when it could not serve the batch on any machine
// (FLASHMLA on a non-MLA layer: "MLA only", not "no GPU"); the device's reason stands where the
// batch is one it serves, or where supports() cannot answer without the device.
TEST(PipelineCheck, SkipReasonPrefersWhatHoldsOnEveryMachine) {
  const Scenario sc = scenario_from_cli("llama3-8b", "2x1@100", 3);
  std::vector<std::unique_ptr<Backend>> registry;
  registry.push_back(make_cpu_backend());
  registry.push_back(std::make_unique<AbsentBackend>(true));
  registry.push_back(std::make_unique<AbsentBackend>(false));
  PipelineResult r = run_scenario(sc, registry, check_only("absent_mla_only"));
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].status, "skipped");
  EXPECT_EQ(r.rows[0].reason, "serves MLA layers only");
  r = run_scenario(sc, registry, check_only("absent_silent"));
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].status, "skipped");
  EXPECT_EQ(r.rows[0].reason, "no device here");
  const Scenario mla = scenario_from_cli("deepseek-v3-tp8", "2x1@100", 3);
  r = run_scenario(mla, registry, check_only("absent_mla_only"));
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].reason, "no device here");
}

// A batch larger than the machine's memory fails before allocating, with what it needs and what
// there is (ATTN_HOST_MEMORY_MB stands in for a small machine): the float64 reference as a runtime
// error naming the request, the cpu backend's cache as an error row.
TEST(PipelineCheck, BatchesLargerThanHostMemoryFailWithTheirSize) {
  {  // 40k keys x 256 float64 values = 82 MB of reference per worker, 164 MB of bf16 cache.
    const HostMemoryLimit mem(50);
    const Scenario sc = scenario_from_cli("llama3-8b", "1x1@40000", 3);
    std::vector<std::unique_ptr<Backend>> registry;
    registry.push_back(make_cpu_backend());
    try {
      run_scenario(sc, registry, check_only("cpu"));
      FAIL() << "expected the reference to refuse a span larger than the host memory";
    } catch (const RuntimeError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("request 0 (context_len = 40000, query_len = 1"), std::string::npos) << msg;
      EXPECT_NE(msg.find("needs 82."), std::string::npos) << msg;
      EXPECT_NE(msg.find("52.4 MB available"), std::string::npos) << msg;
    }
  }
  {  // The reference fits, the cache does not.
    const HostMemoryLimit mem(100);
    const Scenario sc = scenario_from_cli("llama3-8b", "1x1@40000", 3);
    std::vector<std::unique_ptr<Backend>> registry;
    registry.push_back(make_cpu_backend());
    const PipelineResult r = run_scenario(sc, registry, check_only("cpu"));
    ASSERT_EQ(r.rows.size(), 1u);
    EXPECT_EQ(r.rows[0].status, "error");
    EXPECT_NE(r.rows[0].reason.find("cpu: the KV cache (2502 blocks of 16 tokens"), std::string::npos) << r.rows[0].reason;
    EXPECT_NE(r.rows[0].reason.find("needs 164."), std::string::npos) << r.rows[0].reason;
  }
}

// A backend this build lacks (the CUDA ones of a CPU-only build) is named as such, not as a typo;
// a name that is no backend lists the names there are.
TEST(PipelineBackends, NotBuiltIsToldApartFromUnknown) {
  std::vector<std::unique_ptr<Backend>> cpu_only;
  cpu_only.push_back(make_cpu_backend());
  AttentionSpec spec;
  spec.num_q_heads = spec.num_kv_heads = 1;
  spec.head_size_qk = spec.head_size_v = 16;
  BatchShape shape;
  shape.requests = {{4, 1}};
  const Batch b = make_batch(spec, shape, 1);
  auto message = [&](const std::string& name) {
    try {
      resolve_backends({name}, cpu_only, spec, b, nullptr, "f.toml: run.backends");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("FLASH_ATTN").find("f.toml: run.backends = flash_attn: not in this build (it has cpu;"),
            std::string::npos)
      << message("FLASH_ATTN");
  EXPECT_NE(message("flash_atn").find("flash_atn: unknown backend (known: flash_attn, flashinfer, flashmla, cpu, "
                                      "auto, all)"),
            std::string::npos)
      << message("flash_atn");
  EXPECT_EQ(resolve_backends({"CPU", "all"}, cpu_only, spec, b, nullptr).size(), 1u);
}

}  // namespace
}  // namespace attn
