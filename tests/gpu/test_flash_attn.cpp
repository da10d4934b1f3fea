// FLASH_ATTN on the GPU against the float64 reference: random values, ragged batches, shuffled
// blocks, NaN page tails (the device fill), poisoned outputs before every run.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/flash_attn/flash_attn_backend.hpp"
#include "backends/flash_attn/flash_attn_plan.hpp"
#include "core/env.hpp"
#include "attention_alone.hpp"
#include "gpu/gpu_test_util.hpp"
#include "nan_key.hpp"
#include "metadata/common.hpp"
#include "model/scenario.hpp"
#include "pipeline/pipeline.hpp"
#include "reference/reference.hpp"
#include "validate/validate.hpp"
#include "wrapped_backend.hpp"

namespace attn {
namespace {

using testing::mha_spec;

struct Case {
  AttentionSpec spec;
  std::vector<RequestShape> requests;  // (context_len, query_len)
  int shared_prefix_len = 0;
  int local_attention_chunk = 0;
  CascadeMode cascade = CascadeMode::off;
  uint64_t seed = 7;
  int64_t max_pairs = 0;  // (request, head) pairs the reference computes, sampled; 0 = all
};

// A soft cap of 5, sinks and a 90-token window on 16 q / 2 kv heads of size d (G = 8): every
// score-path feature at once, on the given requests.
Case softcap_sinks_window(int d, std::vector<RequestShape> requests) {
  Case s{mha_spec(16, 2, d)};
  s.spec.logits_soft_cap = 5.0f;
  s.spec.sinks = true;
  s.spec.sliding_window = 90;
  s.requests = std::move(requests);
  return s;
}

Batch make_case_batch(const Case& c) {
  BatchShape shape;
  shape.label = "test";
  shape.requests = c.requests;
  shape.shared_prefix_len = c.shared_prefix_len;
  shape.local_attention_chunk = c.local_attention_chunk;
  shape.block_allocation = BlockAllocation::shuffled;
  return make_batch(c.spec, shape, c.seed);
}

using testing::Outcome;

Outcome run_case(const Case& c) {
  RunOptions opts;
  opts.cascade = c.cascade;
  return testing::run_and_validate(*make_flash_attn_backend(), make_case_batch(c), opts, c.max_pairs);
}

TEST(FlashAttnGpu, DecodeGqa4Bf16) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(32, 8, 128)};
  c.requests = {{37, 1}, {700, 1}, {15, 1}, {256, 1}, {1023, 1}, {1, 1}, {480, 1}, {64, 1}};
  const Outcome r = run_case(c);
  EXPECT_VALID(r);
  // The decode tiling, or the sm_90a kernel's 128-row tiles where it takes decode-only passes
  // (ATTN_FA_SM90_DECODE=all).
  const bool sm90 = flash_attn_sm90_passes(make_flash_attn_config(c.spec)) == Sm90Passes::all;
  EXPECT_NE(r.plan.find(sm90 ? "tiling=sm90" : "tiling=decode"), std::string::npos) << r.plan;
}

TEST(FlashAttnGpu, MixedChunkedPrefillGqa7Fp16) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(28, 4, 128, DType::f16, 32)};
  c.requests = {{0, 97}, {300, 1}, {150, 130}, {77, 1}, {0, 5}, {513, 1}, {40, 64}};
  const Outcome r = run_case(c);
  EXPECT_VALID(r);
  const Sm90Passes passes = flash_attn_sm90_passes(make_flash_attn_config(c.spec));
  const bool sm90 = passes == Sm90Passes::all || passes == Sm90Passes::mixed;
  EXPECT_NE(r.plan.find(sm90 ? "tiling=sm90" : "tiling=prefill"), std::string::npos) << r.plan;
}

// Mixed steps on the sm_90a kernel, whose CTAs claim their work items as they go (counters that
// the kernel's last CTA zeroes): 24 long decodes beside two short prefills (fixed rounds would be
// uneven; items from the front only), and 24 decodes beside a new prompt at 32/8 heads, more than
// two items per SM (claimed from both ends: prefill items from the front, decode items from the
// back, until the ends meet). One instance runs each three times, so that later launches start
// from the counters the one before left; the poisoned outputs fail any item left unclaimed or
// claimed twice.
TEST(FlashAttnGpu, MixedStepClaimsItems) {
  ATTN_REQUIRE_CUDA_DEVICE();
  struct Step {
    AttentionSpec spec;
    std::vector<RequestShape> requests;
    bool two_ended;
  };
  std::vector<Step> steps(2);
  steps[0].spec = mha_spec(16, 4, 128);
  for (int i = 0; i < 24; ++i) steps[0].requests.push_back({2000 + 13 * i, 1});
  steps[0].requests.push_back({256, 256});
  steps[0].requests.push_back({256, 256});
  steps[0].two_ended = false;
  steps[1].spec = mha_spec(32, 8, 128);
  for (int i = 0; i < 24; ++i) steps[1].requests.push_back({1150 + 7 * i, 1});
  steps[1].requests.push_back({0, 384});
  steps[1].two_ended = true;
  for (const Step& st : steps) {
    BatchShape shape;
    shape.label = "test";
    shape.requests = st.requests;
    shape.block_allocation = BlockAllocation::shuffled;
    const Batch b = make_batch(st.spec, shape, 7);
    const CommonAttentionMetadata m = build_common_metadata(b);
    auto inst = make_flash_attn_backend()->create(b, m, RunOptions{});
    inst->plan();
    const ReferenceResult ref = compute_reference(b);
    for (int launch = 0; launch < 3; ++launch) {
      inst->poison();
      inst->run();
      const ValidationResult v = validate_output(b, inst->fetch(), ref, default_budget(st.spec.dtype));
      EXPECT_TRUE(v.pass) << "launch " << launch << ": " << v.failure << " | plan: " << inst->plan_summary();
    }
    const Sm90Passes passes = flash_attn_sm90_passes(make_flash_attn_config(st.spec));
    const bool sm90 = passes == Sm90Passes::all || passes == Sm90Passes::mixed;
    const std::string plan = inst->plan_summary();
    EXPECT_EQ(plan.find("items=dynamic") != std::string::npos, sm90) << plan;
    EXPECT_EQ(plan.find("front_ctas=") != std::string::npos, sm90 && st.two_ended) << plan;
  }
}

// [run] num_layers: three layers over caches of their own, each a mixed step split over its decodes
// and a cascade over a shared prefix (two launches and a merge per layer).
TEST(FlashAttnGpu, LayersEachOverTheirOwnCache) {
  ATTN_REQUIRE_CUDA_DEVICE();
  BatchShape mixed;
  mixed.label = "test";
  for (int i = 0; i < 12; ++i) mixed.requests.push_back({300 + 41 * i, 1});
  mixed.requests.push_back({260, 200});
  mixed.block_allocation = BlockAllocation::shuffled;
  testing::expect_layers_like_one(*make_flash_attn_backend(), make_batch(mha_spec(32, 8, 128), mixed, 7), 3);
  BatchShape shared;
  shared.label = "test";
  shared.requests = {{700, 1}, {650, 3}, {900, 1}};
  shared.shared_prefix_len = 512;
  shared.block_allocation = BlockAllocation::shuffled;
  RunOptions cascade;
  cascade.cascade = CascadeMode::on;
  testing::expect_layers_like_one(*make_flash_attn_backend(), make_batch(mha_spec(16, 4, 128), shared, 7), 2, cascade);
}

// What `run --timed attention` times: the step's launches without its cache writes, two layers of a
// mixed step (the sm_90a decode launch beside a prefill, launched after no write) and of a cascade
// (prefix pass, suffix pass, merge), and a split decode (the mma.sync decode tiling's clusters).
TEST(FlashAttnGpu, AttentionAloneIsTheStepsWithoutTheCacheWrite) {
  ATTN_REQUIRE_CUDA_DEVICE();
  RunOptions two;
  two.num_layers = 2;
  BatchShape mixed;
  mixed.label = "test";
  for (int i = 0; i < 12; ++i) mixed.requests.push_back({300 + 41 * i, 1});
  mixed.requests.push_back({260, 200});
  mixed.block_allocation = BlockAllocation::shuffled;
  testing::expect_attention_alone_is_the_steps(*make_flash_attn_backend(), make_batch(mha_spec(32, 8, 128), mixed, 7),
                                               two);
  BatchShape shared = mixed;
  shared.requests = {{700, 1}, {650, 3}, {900, 1}};
  shared.shared_prefix_len = 512;
  RunOptions cascade = two;
  cascade.cascade = CascadeMode::on;
  testing::expect_attention_alone_is_the_steps(*make_flash_attn_backend(), make_batch(mha_spec(16, 4, 128), shared, 7),
                                               cascade);
  BatchShape split = mixed;
  split.requests = {{8191, 1}, {5000, 1}};
  testing::expect_attention_alone_is_the_steps(*make_flash_attn_backend(), make_batch(mha_spec(32, 8, 128), split, 7),
                                               two);
  // Prefills from scratch: on the sm_90a kernel the launch writes the cache itself
  // (flash_attn_sm90_fused_write), whole key tiles by bulk copies and cut ones gathered; at head size
  // 128 the plain scores kernel and the soft cap's in fp16, at 64 the three-consumer kernel; a group
  // of 7, whose tokens' packed rows straddle the items (each token stored by one of them); pages of
  // 64 slots (the copy's slot -> page and offset at another block size).
  BatchShape scratch = mixed;
  scratch.requests = {{0, 1000}, {0, 257}, {0, 128}, {0, 77}};
  testing::expect_attention_alone_is_the_steps(*make_flash_attn_backend(), make_batch(mha_spec(32, 8, 128), scratch, 7),
                                               two);
  AttentionSpec capped = mha_spec(16, 4, 128);
  capped.logits_soft_cap = 30.0f;
  capped.dtype = capped.kv_cache_dtype = DType::f16;
  testing::expect_attention_alone_is_the_steps(*make_flash_attn_backend(), make_batch(capped, scratch, 7), two);
  testing::expect_attention_alone_is_the_steps(*make_flash_attn_backend(), make_batch(mha_spec(32, 32, 64), scratch, 7),
                                               two);
  testing::expect_attention_alone_is_the_steps(*make_flash_attn_backend(), make_batch(mha_spec(28, 4, 128), scratch, 7),
                                               two);
  AttentionSpec pages64 = mha_spec(32, 8, 128);
  pages64.block_size = 64;
  testing::expect_attention_alone_is_the_steps(*make_flash_attn_backend(), make_batch(pages64, scratch, 7), two);
}

TEST(FlashAttnGpu, SlidingWindowSmallerThanChunkGqa5) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(10, 2, 128)};
  c.spec.sliding_window = 40;
  c.requests = {{150, 100}, {90, 1}, {0, 77}, {333, 3}};
  EXPECT_VALID(run_case(c));
}

TEST(FlashAttnGpu, SoftCapAndSinks) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(16, 2, 128)};
  c.spec.logits_soft_cap = 5.0f;
  c.spec.sinks = true;
  c.requests = {{200, 33}, {64, 1}, {0, 48}, {1000, 1}};
  EXPECT_VALID(run_case(c));
}

TEST(FlashAttnGpu, Alibi) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(12, 12, 128, DType::f16)};
  c.spec.alibi = true;
  c.requests = {{100, 20}, {31, 1}, {0, 70}};
  EXPECT_VALID(run_case(c));
}

TEST(FlashAttnGpu, Fp8E4m3NonUnitScales) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(32, 8, 128)};
  c.spec.kv_cache_dtype = DType::fp8_e4m3;
  c.spec.k_scale = 0.0125f;
  c.spec.v_scale = 0.02f;
  c.requests = {{250, 1}, {0, 40}, {700, 1}, {128, 17}};
  EXPECT_VALID(run_case(c));
}

TEST(FlashAttnGpu, Fp8E5m2NonUnitScalesFp16) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(8, 8, 128, DType::f16)};
  c.spec.kv_cache_dtype = DType::fp8_e5m2;
  c.spec.k_scale = 2.5f;
  c.spec.v_scale = 0.375f;
  c.requests = {{90, 1}, {17, 30}, {400, 1}};
  EXPECT_VALID(run_case(c));
}

TEST(FlashAttnGpu, NonCausalEncoder) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(8, 2, 128)};
  c.spec.attn_type = AttentionType::encoder_only;
  c.requests = {{0, 70}, {0, 3}, {0, 129}};
  EXPECT_VALID(run_case(c));
}

TEST(FlashAttnGpu, LocalAttentionChunks) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(8, 2, 128)};
  c.local_attention_chunk = 64;
  c.requests = {{50, 100}, {130, 1}, {0, 200}};
  EXPECT_VALID(run_case(c));
}

TEST(FlashAttnGpu, SplitKvForFewLongDecodes) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(8, 1, 128)};
  c.spec.sinks = true;  // counted once across splits
  c.requests = {{3000, 1}, {1777, 1}};
  const Outcome r = run_case(c);
  EXPECT_VALID(r);
  EXPECT_EQ(r.plan.find("splits=1 "), std::string::npos) << "expected a split schedule: " << r.plan;
  // The same sequences among many others run unsplit; both agree with the reference.
  Case many = c;
  for (int i = 0; i < 200; ++i) many.requests.push_back({40 + i, 1});
  const Outcome u = run_case(many);
  EXPECT_VALID(u);
  EXPECT_NE(u.plan.find("splits=1 "), std::string::npos) << u.plan;
}

// On sm_90 the decode tiling's two splits of a tile run as one thread block cluster and merge in
// the first CTA's shared memory (no partials, no merge kernel). A split with no keys of a short
// sequence (LSE -inf), the sink counted by split 0 only, 2-token decodes, head size 64; beside
// them four splits and the fp8 decode tiling (no room), which keep the partials and the merge kernel.
TEST(FlashAttnGpu, SplitKvMergedInClusters) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const char* env = std::getenv("ATTN_FA_CLUSTER_MERGE");
  const bool expected = attn::testing::sm90_device() && (env == nullptr || std::string(env) != "0");
  Case two{mha_spec(32, 8, 128)};
  two.spec.sinks = true;
  for (int i = 0; i < 16; ++i) two.requests.push_back({4000 - 61 * i, 2});
  Case empty_splits{mha_spec(8, 1, 128)};  // 600 keys: 2 splits; 20 keys: the second one empty
  empty_splits.spec.sinks = true;
  empty_splits.requests = {{600, 1}, {20, 1}, {0, 1}};
  Case four{mha_spec(8, 1, 128)};  // 1100 keys: 4 splits
  four.spec.sinks = true;
  four.requests = {{1100, 1}, {700, 1}, {30, 1}};
  Case hd64{mha_spec(8, 2, 64, DType::f16)};
  hd64.requests = {{520, 1}, {300, 1}};
  Case hd96{mha_spec(8, 2, 96)};  // head size 96, whose decode tiling clusters too
  hd96.requests = {{520, 2}, {300, 1}};
  Case fp8{mha_spec(16, 4, 128)};
  fp8.spec.kv_cache_dtype = DType::fp8_e4m3;
  fp8.spec.k_scale = 0.0125f;
  fp8.spec.v_scale = 0.02f;
  fp8.requests = {{1200, 1}, {900, 2}};
  for (const auto& [c, clusters] :
       {std::pair{&two, true}, {&empty_splits, true}, {&four, false}, {&hd64, true}, {&hd96, true}, {&fp8, false}}) {
    const Outcome r = run_case(*c);
    EXPECT_VALID(r);
    EXPECT_NE(r.plan.find("tiling=decode"), std::string::npos) << r.plan;
    EXPECT_EQ(r.plan.find("splits=1 "), std::string::npos) << "expected a split schedule: " << r.plan;
    EXPECT_EQ(r.plan.find("merge=cluster") != std::string::npos, expected && clusters) << r.plan;
  }
}

// A NaN key reaches every row that attends it, however FLASH_ATTN splits the row's keys and merges
// the pieces by LSE: split decodes merged by merge_attn_states (four splits, an fp8 cache) or in a
// thread block cluster (two splits, on sm_90), a split prefill, and the cascade's two levels (a key
// of the shared prefix, and one of a request's own). New tokens' keys, NaN in the K input that the
// cache write stores (quantized to fp8 by it in one case), reach the rows at and after them and not
// those before them, masked in the same tiles: in a split decode of two tokens, in a prefill from
// scratch on the sm_90a kernel, and in the cascade's suffix level.
TEST(FlashAttnGpu, NanKeyReachesEveryRowThatAttendsIt) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const auto backend = make_flash_attn_backend();
  auto expect_split = [](const std::string& plan) {
    EXPECT_EQ(plan.find("splits=1 "), std::string::npos) << "expected a split schedule: " << plan;
  };
  Case four{mha_spec(8, 1, 128)};
  four.requests = {{1100, 1}, {700, 1}, {30, 1}};
  expect_split(testing::expect_nan_key_reaches_its_rows(*backend, make_case_batch(four), {0, 600, 0}));
  Case two{mha_spec(32, 8, 128)};
  for (int i = 0; i < 16; ++i) two.requests.push_back({4000 - 61 * i, 2});
  expect_split(testing::expect_nan_key_reaches_its_rows(*backend, make_case_batch(two), {3, 2500, 5}));
  Case fp8{mha_spec(16, 4, 128)};
  fp8.spec.kv_cache_dtype = DType::fp8_e4m3;
  fp8.spec.k_scale = 0.0125f;
  fp8.spec.v_scale = 0.02f;
  fp8.requests = {{1200, 1}, {900, 2}};
  const Batch fb = make_case_batch(fp8);
  expect_split(testing::expect_nan_key_reaches_its_rows(*backend, fb, {1, 450, 3}));
  expect_split(testing::expect_nan_key_reaches_its_rows(*backend, fb, {1, 901, 3}));  // new, quantized by the write
  Case prefill{mha_spec(8, 1, 128)};
  prefill.requests = {{8000, 128}, {500, 64}};
  expect_split(testing::expect_nan_key_reaches_its_rows(*backend, make_case_batch(prefill), {0, 5000, 0}));
  Case fresh{mha_spec(8, 1, 128)};
  fresh.requests = {{0, 300}, {0, 129}};
  testing::expect_nan_key_reaches_its_rows(*backend, make_case_batch(fresh), {0, 150, 0});
  Case cascade{mha_spec(16, 4, 128)};
  cascade.shared_prefix_len = 512;
  for (int i = 0; i < 12; ++i) cascade.requests.push_back({512 + 37 * i, 1});
  cascade.requests.push_back({600, 45});
  RunOptions on;
  on.cascade = CascadeMode::on;
  const Batch cb = make_case_batch(cascade);
  for (const TokenKey key : {TokenKey{0, 100, 2}, TokenKey{12, 550, 1}, TokenKey{12, 620, 1}}) {
    const std::string plan = testing::expect_nan_key_reaches_its_rows(*backend, cb, key, on);
    EXPECT_NE(plan.find("cascade=on"), std::string::npos) << plan;
  }
}

TEST(FlashAttnGpu, CascadeMatchesNonCascade) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(16, 4, 128)};
  c.spec.sinks = true;
  c.spec.logits_soft_cap = 30.0f;
  c.shared_prefix_len = 512;
  for (int i = 0; i < 12; ++i) c.requests.push_back({512 + 37 * i, 1});
  c.requests.push_back({600, 45});
  c.cascade = CascadeMode::on;
  const Outcome on = run_case(c);
  EXPECT_VALID(on);
  EXPECT_NE(on.plan.find("cascade=on"), std::string::npos) << on.plan;
  // The suffix pass (short, with decodes) keeps the mma.sync kernel even where the sm_90a one takes decodes.
  EXPECT_EQ(on.plan.find("tiling=sm90"), std::string::npos) << on.plan;
  c.cascade = CascadeMode::off;
  const Outcome off = run_case(c);
  EXPECT_VALID(off);
  const OutputDiff d = diff_outputs(on.out, off.out);
  EXPECT_LT(d.rel_l2, 1e-2);
}

TEST(FlashAttnGpu, CudaGraphReplay) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const AttentionSpec spec = mha_spec(32, 8, 128);
  BatchShape shape;
  shape.requests = {{300, 1}, {0, 60}, {1000, 1}};
  const Batch b = make_batch(spec, shape, 11);
  const CommonAttentionMetadata m = build_common_metadata(b);
  auto inst = make_flash_attn_backend()->create(b, m, RunOptions{});
  inst->plan();
  AttentionOutput out;
  testing::replay_in_graph(*inst, &out);
  if (HasFatalFailure()) return;
  const ValidationResult v = validate_output(b, out, compute_reference(b), default_budget(spec.dtype));
  EXPECT_TRUE(v.pass) << v.failure;
}

TEST(FlashAttnGpu, OtherHeadSizes) {
  ATTN_REQUIRE_CUDA_DEVICE();
  for (int d : {64, 96, 256}) {
    Case c{mha_spec(8, 2, d, d == 96 ? DType::f16 : DType::bf16)};
    c.requests = {{120, 1}, {33, 70}, {0, 1}};
    const auto backend = make_flash_attn_backend();
    BatchShape shape;
    shape.requests = c.requests;
    const Support s = backend->supports(c.spec, make_batch(c.spec, shape, 1));
#if defined(ATTN_QUICK_BUILD)
    EXPECT_FALSE(s.ok);
    EXPECT_NE(s.reason.find("not compiled"), std::string::npos) << s.reason;
#else
    ASSERT_TRUE(s.ok) << s.reason;
    const Outcome r = run_case(c);
    EXPECT_VALID(r) << " (head size " << d << ")";
#endif
  }
}

// A layer variant of the fp8 tests: head size, model and cache dtypes, block size.
struct CacheVariant {
  int d;
  DType dtype, kv;
  int block_size;
};

// hq / hkv heads of variant v; an fp8 cache gets non-unit scales (k 0.05, v 0.03).
Case variant_case(const CacheVariant& v, int hq, int hkv) {
  Case c{mha_spec(hq, hkv, v.d, v.dtype, v.block_size)};
  c.spec.kv_cache_dtype = v.kv;
  if (is_fp8(v.kv)) {
    c.spec.k_scale = 0.05f;
    c.spec.v_scale = 0.03f;
  }
  return c;
}

// " (head size d, block b, kv dtype)": which variant an expectation failed on.
std::string variant_label(const CacheVariant& v) {
  return " (head size " + std::to_string(v.d) + ", block " + std::to_string(v.block_size) + ", " + std::string(to_string(v.kv)) + ")";
}

// The fp8 cache is widened in registers with head-dim and key orders specific to each head
// size; block sizes 32 (a shift) and 48 (a division) cover both block-table lookups.
TEST(FlashAttnGpu, Fp8HeadSizesAndBlockSizes) {
  ATTN_REQUIRE_CUDA_DEVICE();
  std::vector<CacheVariant> variants = {{128, DType::bf16, DType::fp8_e4m3, 32}, {128, DType::f16, DType::fp8_e4m3, 48},
                                   {128, DType::bf16, DType::bf16, 48}};
#if !defined(ATTN_QUICK_BUILD)
  variants.push_back({64, DType::bf16, DType::fp8_e4m3, 16});
  variants.push_back({96, DType::f16, DType::fp8_e5m2, 16});
  variants.push_back({256, DType::bf16, DType::fp8_e4m3, 32});
#endif
  for (const CacheVariant& v : variants) {
    Case c = variant_case(v, 8, 2);
    c.requests = {{333, 1}, {70, 90}, {0, 1}, {1100, 1}, {5, 200}};
    const Outcome r = run_case(c);
    EXPECT_VALID(r) << variant_label(v);
  }
}

// ---- the sm_90a wgmma prefill kernel: batches without decode-sized sequences, hd128, 16-bit
// cache. On other devices or builds the same cases run the mma.sync kernel and still must pass.

bool device_is_sm90() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;
}

// The wgmma kernel runs on compute capability 9.0 unless ATTN_FA_SM90=0 turns it off.
bool sm90_expected() {
  const char* v = std::getenv("ATTN_FA_SM90");
  return device_is_sm90() && (v == nullptr || std::string(v) != "0");
}

// The kernel the launcher picks for a pass planned over these (context, query) requests.
bool pass_uses_sm90(const AttentionSpec& s, const std::vector<RequestShape>& reqs) {
  std::vector<int32_t> q, k;
  for (const RequestShape& r : reqs) {
    q.push_back(r.query_len);
    k.push_back(r.context_len + r.query_len);
  }
  const FlashAttnPass pass =
      make_flash_attn_pass(q, k, true, s.num_q_heads / s.num_kv_heads, s.head_size_qk, s.num_kv_heads, 132, 0,
                           flash_attn_sm90_passes(make_flash_attn_config(s)));
  return flash_attn_uses_sm90(make_flash_attn_config(s), pass.tiling);
}

TEST(FlashAttnSm90, Selected) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const bool sm90 = sm90_expected();
  const std::vector<RequestShape> prefill = {{0, 97}, {150, 130}};
  EXPECT_EQ(pass_uses_sm90(mha_spec(32, 8, 128), prefill), sm90);
  EXPECT_EQ(pass_uses_sm90(mha_spec(32, 8, 128, DType::f16), prefill), sm90);
  // An fp8 cache too (widened to fp16 by the producer).
  AttentionSpec fp8 = mha_spec(32, 8, 128);
  fp8.kv_cache_dtype = DType::fp8_e4m3;
  EXPECT_EQ(pass_uses_sm90(fp8, prefill), sm90);
  // Mixed batches over a 16-bit cache: on it too unless ATTN_FA_SM90_DECODE=0 keeps them on
  // mma.sync; decodes alone on the mma.sync decode tiling unless ATTN_FA_SM90_DECODE=all; over an
  // fp8 cache both always on mma.sync (its decode tiling is faster there).
  const char* env = std::getenv("ATTN_FA_SM90_DECODE");
  const bool mixed = sm90 && (env == nullptr || std::string(env) != "0");
  const bool decodes = sm90 && env != nullptr && std::string(env) == "all";
  EXPECT_EQ(flash_attn_sm90_passes(make_flash_attn_config(mha_spec(32, 8, 128))),
            !sm90 ? Sm90Passes::none : decodes ? Sm90Passes::all : mixed ? Sm90Passes::mixed : Sm90Passes::prefills);
  EXPECT_EQ(pass_uses_sm90(mha_spec(32, 8, 128), {{100, 1}, {7, 1}}), decodes);
  EXPECT_EQ(pass_uses_sm90(mha_spec(32, 8, 128), {{0, 97}, {300, 1}}), mixed);
  EXPECT_FALSE(pass_uses_sm90(fp8, {{0, 97}, {300, 1}}));
  EXPECT_FALSE(pass_uses_sm90(fp8, {{100, 1}, {7, 1}}));
  EXPECT_FALSE(pass_uses_sm90(fp8, {{100, 2}, {7, 1}}));
  AttentionSpec fp8_192 = mha_spec(16, 16, 192);
  fp8_192.kv_cache_dtype = DType::fp8_e4m3;
  EXPECT_EQ(pass_uses_sm90(fp8_192, prefill), sm90);
  EXPECT_EQ(pass_uses_sm90(mha_spec(16, 16, 192), prefill), sm90);
#if !defined(ATTN_QUICK_BUILD)
  EXPECT_EQ(pass_uses_sm90(mha_spec(32, 32, 64), prefill), sm90);
  EXPECT_EQ(pass_uses_sm90(mha_spec(16, 16, 256), prefill), sm90);
  EXPECT_EQ(pass_uses_sm90(mha_spec(16, 16, 256), {{0, 97}, {300, 1}}), mixed);  // else mma.sync, 64-row tiles
  EXPECT_EQ(pass_uses_sm90(mha_spec(32, 8, 96), prefill), sm90);
#else
  EXPECT_FALSE(pass_uses_sm90(mha_spec(32, 8, 96), prefill));  // not compiled
#endif
}

#if !defined(ATTN_QUICK_BUILD)
TEST(FlashAttnSm90, HeadSizes64To256) {
  // hd64: one 64-column swizzle block per row, P V as m64n64k16. hd96: hd128's tiles, dims 96..127
  // never copied (bulk copies land them as zeros, cp.async leaves them as they were), Q K^T over 6
  // k-steps, P V as m64n128k16 with 32 output columns dropped. hd192 (24 chunks per row, not a
  // divisor of the 128 producer threads) and hd256: 64-key stages, P V as m64n192k16 and
  // m64n256k16, 128-row host tiles (their mma.sync tiles are 64 rows). All: ragged GQA, then
  // soft cap + sinks + a window.
  ATTN_REQUIRE_CUDA_DEVICE();
  for (int d : {64, 96, 192, 256}) {
    Case c{mha_spec(28, 4, d, DType::f16, 32)};
    c.requests = {{0, 97}, {150, 130}, {0, 5}, {1000, 300}, {3, 19}};
    EXPECT_VALID(run_case(c)) << " (head size " << d << ")";
    EXPECT_EQ(pass_uses_sm90(c.spec, c.requests), sm90_expected()) << " (head size " << d << ")";
    const Case s = softcap_sinks_window(d, {{200, 33}, {0, 48}, {900, 200}});
    EXPECT_VALID(run_case(s)) << " (head size " << d << ")";
  }
  // hd64: long causal MHA. hd256: splits, and a mixed batch that falls back to mma.sync.
  Case l{mha_spec(32, 32, 64)};
  l.requests = {{0, 1500}, {700, 600}};
  EXPECT_VALID(run_case(l));
  // hd64 at G = 1 (a negative row's token is negative), each query tiled from its end
  // (rows_from_end): 200 rows leave the first tile 8 of 192, 150 one partial tile of its own, and
  // split partials of the 3000-key queries carry the shifted rows too.
  Case split64{mha_spec(4, 4, 64)};
  split64.requests = {{3000, 200}, {2000, 150}, {500, 400}};
  const Outcome r64 = run_case(split64);
  EXPECT_VALID(r64);
  EXPECT_EQ(r64.plan.find("splits=1 "), std::string::npos) << "expected a split schedule: " << r64.plan;
  Case split{mha_spec(8, 1, 256)};
  split.requests = {{3000, 12}, {1777, 5}};
  const Outcome r = run_case(split);
  EXPECT_VALID(r);
  EXPECT_EQ(r.plan.find("splits=1 "), std::string::npos) << "expected a split schedule: " << r.plan;
  Case m{mha_spec(16, 16, 256)};
  m.requests = {{0, 97}, {300, 1}, {40, 200}};
  EXPECT_VALID(run_case(m));
  // hd96: splits, 48-slot pages (boxes of 16 under the 128-key tile), a mixed batch with decodes
  // and an fp8 cache (codes widened into the padded tiles).
  Case split96{mha_spec(8, 1, 96)};
  split96.requests = {{3000, 12}, {1777, 5}};
  const Outcome r96 = run_case(split96);
  EXPECT_VALID(r96);
  EXPECT_EQ(r96.plan.find("splits=1 "), std::string::npos) << "expected a split schedule: " << r96.plan;
  Case pages96{mha_spec(12, 4, 96, DType::bf16, 48)};
  pages96.requests = {{0, 200}, {333, 100}, {47, 49}};
  EXPECT_VALID(run_case(pages96));
  EXPECT_EQ(pass_uses_sm90(pages96.spec, pages96.requests), sm90_expected());
  Case mixed96{mha_spec(16, 4, 96, DType::f16)};
  mixed96.requests = {{0, 97}, {300, 1}, {40, 200}, {1000, 2}};
  EXPECT_VALID(run_case(mixed96));
  for (DType kv : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    Case f96{mha_spec(8, 2, 96)};
    f96.spec.kv_cache_dtype = kv;
    f96.spec.k_scale = 0.05f;
    f96.spec.v_scale = 0.03f;
    f96.requests = {{0, 97}, {150, 130}, {1000, 300}};
    EXPECT_VALID(run_case(f96)) << to_string(kv);
    EXPECT_EQ(pass_uses_sm90(f96.spec, f96.requests), sm90_expected()) << to_string(kv);
  }
}
#endif

// Speculative decodes (3 to 16 tokens per request at GQA 4 and 8: 20 to 128 packed rows) on the
// sm_90a kernel's decode launch: ragged contexts with pages ending mid-block (NaN-poisoned tails),
// a request with no context, KV splits (few requests), then soft cap + sinks + a window, at every
// 16-bit head size with a decode launch.
TEST(FlashAttnSm90, SpeculativeDecodes) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const bool decode_launch = sm90_expected() && std::getenv("ATTN_FA_SM90_DECODE") == nullptr &&
                             std::getenv("ATTN_FA_SM90_ONE_TILE_DECODES") == nullptr;
#if !defined(ATTN_QUICK_BUILD)
  const std::vector<int> sizes = {64, 96, 128, 256};
#else
  const std::vector<int> sizes = {128};
#endif
  for (const int d : sizes) {
    for (const int g : {4, 8}) {
      Case c{mha_spec(2 * g, 2, d, d == 96 ? DType::f16 : DType::bf16)};
      c.requests = {{1500, 16 / g * 4}, {0, 5}, {333, 8}, {2047, 3 + g / 2}, {70, 128 / g}};
      const Outcome r = run_case(c);
      EXPECT_VALID(r) << " (head size " << d << ", G " << g << ")";
      if (decode_launch) {
        EXPECT_NE(r.plan.find("launch=decodes"), std::string::npos) << r.plan;
        EXPECT_EQ(r.plan.find("splits=1 "), std::string::npos) << "expected a split schedule: " << r.plan;
      }
    }
    const Case s = softcap_sinks_window(d, {{200, 4}, {0, 7}, {900, 16}});
    const Outcome rs = run_case(s);
    EXPECT_VALID(rs) << " (head size " << d << ")";
    if (decode_launch) EXPECT_NE(rs.plan.find("launch=decodes"), std::string::npos) << rs.plan;
  }
}

// Speculative decodes of 17-32 packed rows on the mma.sync decode tiling's spec tiles (one 32-row
// tile per sequence, FwdTraits::kSpec): head sizes 64 and 128, both 16-bit dtypes, GQA 1, 2, 4
// and 8, ragged contexts ending mid-page, a request with no context, split partials merged by the
// merge kernel (few requests) and unsplit passes (many); then soft cap, sinks and a window, and
// ALiBi. Every case is checked against the float64 reference with NaN-poisoned outputs and page
// tails.
TEST(FlashAttnGpu, SpecDecodeTiles) {
  ATTN_REQUIRE_CUDA_DEVICE();
#if !defined(ATTN_QUICK_BUILD)
  const std::vector<int> sizes = {64, 128};
#else
  const std::vector<int> sizes = {128};
#endif
  auto expect_spec = [](const Case& c, const Outcome& r) {
    const FlashAttnConfig config = make_flash_attn_config(c.spec);
    if (flash_attn_spec_tiles(config) && flash_attn_sm90_passes(config) != Sm90Passes::all)
      EXPECT_NE(r.plan.find("tiling=spec"), std::string::npos) << r.plan;
  };
  for (const int d : sizes) {
    for (const int g : {1, 2, 4, 8}) {
      Case c{mha_spec(2 * g, 2, d, g == 2 ? DType::f16 : DType::bf16)};
      // Tokens x G within 17..32 rows: the whole tile, its first row past 16, and between.
      const int most = 32 / g, least = 16 / g + 1;
      c.requests = {{1500, most}, {0, least}, {333, std::max(most - 1, least)}, {2047, least}, {70, (most + least) / 2}};
      const Outcome r = run_case(c);
      EXPECT_VALID(r) << " (head size " << d << ", G " << g << ")";
      expect_spec(c, r);
      EXPECT_EQ(r.plan.find("splits=1 "), std::string::npos) << "expected a split schedule: " << r.plan;
    }
    // Many requests, no split: 24 x 8 kv heads = 192 CTAs.
    Case many{mha_spec(32, 8, d)};
    for (int i = 0; i < 24; ++i) many.requests.push_back({300 + 77 * i, 5 + i % 4});
    many.max_pairs = 96;
    const Outcome rm = run_case(many);
    EXPECT_VALID(rm) << " (head size " << d << ", 24 requests)";
    expect_spec(many, rm);
    const Case s = softcap_sinks_window(d, {{200, 3}, {0, 4}, {900, 4}});
    const Outcome rs = run_case(s);
    EXPECT_VALID(rs) << " (head size " << d << ", soft cap, sinks, window)";
    expect_spec(s, rs);
    Case a{mha_spec(8, 2, d)};
    a.spec.alibi = true;
    a.requests = {{500, 6}, {31, 8}};
    const Outcome ra = run_case(a);
    EXPECT_VALID(ra) << " (head size " << d << ", ALiBi)";
    expect_spec(a, ra);
    // Cascade: verify steps sharing a 512-token prefix (their suffix pass on spec tiles), and six
    // one-token decodes sharing it (24 packed rows against the prefix: the prefix pass on one spec
    // tile, non-causal, its splits merged with the suffix's partials).
    for (const int q : {6, 1}) {
      Case cc{mha_spec(16, 4, d)};
      cc.shared_prefix_len = 512;
      for (int i = 0; i < 6; ++i) cc.requests.push_back({512 + 53 * i, q});
      cc.cascade = CascadeMode::on;
      const Outcome rc = run_case(cc);
      EXPECT_VALID(rc) << " (head size " << d << ", cascade, " << q << " tokens)";
      EXPECT_NE(rc.plan.find("cascade=on"), std::string::npos) << rc.plan;
      if (q == 6) expect_spec(cc, rc);
    }
  }
}

// Block sizes that are not a divisor of the key tile: the producer copies boxes of gcd(block
// size, tile keys) slots, none crossing a page (48 under 128-key tiles: 16; 32 and 48 under
// hd256's 80-key prefill tiles: 16; 96 and 160 under 128: 32), and pages larger than a tile (256):
// slices. Page tails past each sequence are NaN, so a box that crossed into the next page would show.
TEST(FlashAttnSm90, BlockSizesNotDividingTheTile) {
  ATTN_REQUIRE_CUDA_DEVICE();
  std::vector<std::pair<int, int>> cases = {{128, 48}, {128, 96}, {128, 160}, {128, 256}};
#if !defined(ATTN_QUICK_BUILD)
  cases.push_back({64, 48});
  cases.push_back({256, 32});
  cases.push_back({256, 48});
#endif
  for (const auto& [d, bs] : cases) {
    Case c{mha_spec(8, 2, d, DType::bf16, bs)};
    c.requests = {{0, 700}, {333, 450}, {1000, 77}};
    EXPECT_VALID(run_case(c)) << " (head size " << d << ", block " << bs << ")";
    EXPECT_EQ(pass_uses_sm90(c.spec, c.requests), sm90_expected()) << " (head size " << d << ", block " << bs << ")";
  }
}

// Many short prefills (testing::short_prefill_rounds), which the kernel's snake of fixed rounds
// leaves uneven, so the planner lists each CTA's items ("rounds=balanced" on a 132-SM device):
// every row written and right.
TEST(FlashAttnSm90, BalancedFixedRounds) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(8, 2, 128)};
  c.requests = testing::short_prefill_rounds();
  const Outcome r = run_case(c);
  EXPECT_VALID(r);
  if (pass_uses_sm90(c.spec, c.requests) && testing::device_sm_count() == 132)
    EXPECT_NE(r.plan.find("rounds=balanced"), std::string::npos) << r.plan;
}

// A prefill whose K/V outgrow L2 (testing::l2_grouped_prefill): every item of the grouped list runs
// once (NaN-poisoned outputs).
TEST(FlashAttnSm90, HeadGroupedRounds) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(32, 32, 128)};
  c.requests = testing::l2_grouped_prefill();
  c.max_pairs = 12;
  const Outcome r = run_case(c);
  EXPECT_VALID(r);
  if (pass_uses_sm90(c.spec, c.requests) && testing::device_sm_count() == 132)
    EXPECT_NE(r.plan.find("l2_groups=4"), std::string::npos) << r.plan;
}

TEST(FlashAttnSm90, RaggedPrefillGqa7Fp16) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(28, 4, 128, DType::f16, 32)};
  c.requests = {{0, 97}, {150, 130}, {0, 5}, {40, 64}, {1000, 300}, {3, 19}};
  const Outcome r = run_case(c);
  EXPECT_VALID(r);
  EXPECT_EQ(pass_uses_sm90(c.spec, c.requests), sm90_expected());
}

// fp8 caches on the wgmma kernel: every row's codes copied into the stage and widened to fp16 in
// place by the producer, a bf16 Q stored as fp16 x 2^-8, per-sequence descales on the scores and O.
// e4m3 and e5m2, both model dtypes, every head size, block sizes 16, 32 and 48 (a division in the
// block-table lookup), ragged lengths whose last pages end mid-page (NaN-poisoned tails), then soft
// cap + window + sinks.
// An e4m3 cache with small scales, soft cap, sinks and a window on prefill-sized requests; q_scale
// > 0 quantizes the queries too (the fp8 tensor-core path on sm_90a).
Case fp8_softcap_sinks_window(float q_scale) {
  Case s = softcap_sinks_window(128, {{200, 33}, {0, 48}, {900, 200}});
  s.spec.kv_cache_dtype = DType::fp8_e4m3;
  s.spec.k_scale = 0.0125f;
  s.spec.v_scale = 0.02f;
  s.spec.q_scale = q_scale;
  return s;
}

TEST(FlashAttnSm90, Fp8Caches) {
  ATTN_REQUIRE_CUDA_DEVICE();
  std::vector<CacheVariant> variants = {{128, DType::bf16, DType::fp8_e4m3, 16}, {128, DType::f16, DType::fp8_e5m2, 48},
                                   {128, DType::bf16, DType::fp8_e5m2, 16}, {192, DType::bf16, DType::fp8_e5m2, 16}};
#if !defined(ATTN_QUICK_BUILD)
  variants.push_back({64, DType::bf16, DType::fp8_e4m3, 16});
  variants.push_back({256, DType::f16, DType::fp8_e4m3, 32});
#endif
  for (const CacheVariant& v : variants) {
    Case c = variant_case(v, 28, 4);
    c.requests = {{0, 97}, {150, 130}, {0, 5}, {1000, 300}, {3, 19}};
    const Outcome r = run_case(c);
    EXPECT_VALID(r) << variant_label(v);
    EXPECT_EQ(pass_uses_sm90(c.spec, c.requests), sm90_expected()) << variant_label(v);
  }
  EXPECT_VALID(run_case(fp8_softcap_sinks_window(0.f)));
}

// Decode-only passes over an fp8 cache: the mma.sync decode tiling (on every device: its codes are
// widened in registers). Both model dtypes and fp8 formats, non-unit scales, GQA 4 and 8, 1- and
// 2-token decodes, ragged contexts with pages ending mid-block, a one-key sequence and a long one;
// then soft cap, sinks and a window, without and with vLLM's query quant.
TEST(FlashAttnGpu, Fp8Decodes) {
  ATTN_REQUIRE_CUDA_DEVICE();
  std::vector<CacheVariant> variants = {{128, DType::bf16, DType::fp8_e4m3, 16}, {128, DType::f16, DType::fp8_e5m2, 48},
                                        {128, DType::bf16, DType::fp8_e5m2, 32}};
  for (const CacheVariant& v : variants) {
    for (const int hkv : {8, 4}) {
      Case c = variant_case(v, 32, hkv);
      c.requests = {{333, 1}, {0, 1}, {1100, 2}, {4097, 1}, {15, 2}, {2048, 1}};
      const Outcome r = run_case(c);
      EXPECT_VALID(r) << variant_label(v) << " kv heads " << hkv;
      EXPECT_NE(r.plan.find("tiling=decode"), std::string::npos) << r.plan;
    }
  }
  Case s = fp8_softcap_sinks_window(0.f);
  s.requests = {{200, 1}, {0, 2}, {900, 1}, {1500, 2}};
  EXPECT_VALID(run_case(s));
  Case q = fp8_softcap_sinks_window(0.05f);
  q.requests = s.requests;
  EXPECT_VALID(run_case(q));
}

// vLLM's query quant over an e4m3 cache: on sm_90a the head-size-128 prefill runs Q K^T and P V on
// fp8 tensor cores (P rounded to e4m3, declared as a coarse rounding: its own budget). Non-unit
// q/k/v scales (q / q_scale not on a power-of-two grid), pages ending mid-block, GQA 7, both model
// dtypes; then soft cap, sinks and a window on the same path.
TEST(FlashAttnSm90, Fp8TensorCores) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const char* env = std::getenv("ATTN_FA_FP8_MMA");
  const bool mma_expected = sm90_expected() && (env == nullptr || std::string(env) != "0");
  for (DType dt : {DType::bf16, DType::f16}) {
    Case c{mha_spec(28, 4, 128, dt)};
    c.spec.kv_cache_dtype = DType::fp8_e4m3;
    c.spec.k_scale = 0.125f;
    c.spec.v_scale = 0.0625f;
    c.spec.q_scale = 0.0371f;
    c.requests = {{0, 97}, {150, 130}, {0, 5}, {1000, 300}, {3, 19}};
    const Outcome r = run_case(c);
    EXPECT_VALID(r) << to_string(dt);
    EXPECT_EQ(r.out.coarse_roundings.size(), mma_expected ? 1u : 0u) << to_string(dt);
    EXPECT_EQ(r.plan.find("mma=e4m3") != std::string::npos, mma_expected) << r.plan;
  }
  EXPECT_VALID(run_case(fp8_softcap_sinks_window(0.003f)));
}

// The fp8 tensor-core path moves whole boxes of gcd(block size, 128) slots of K's and V's codes by
// the copy engine (each producer warp the boxes that start in its 32 rows: two of 16 slots, one of
// 32, one of 64 on warps 0 and 2, one of 128 on warp 0) and the rows from the box that reaches
// seq_len on by cp.async, zero past it. Every box size, pages larger than a tile, last pages ending
// mid-block (NaN-poisoned tails: a box read past seq_len would show), a sequence shorter than a box.
TEST(FlashAttnSm90, Fp8TensorCoresBoxSizes) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const char* env = std::getenv("ATTN_FA_FP8_MMA");
  const bool mma_expected = sm90_expected() && (env == nullptr || std::string(env) != "0");
  for (const int bs : {32, 48, 64, 128, 256}) {
    Case c{mha_spec(8, 2, 128, DType::bf16, bs)};
    c.spec.kv_cache_dtype = DType::fp8_e4m3;
    c.spec.k_scale = 0.125f;
    c.spec.v_scale = 0.0625f;
    c.spec.q_scale = 0.0371f;
    c.requests = {{0, 700}, {333, 450}, {1000, 77}, {0, 9}};
    const Outcome r = run_case(c);
    EXPECT_VALID(r) << " (block " << bs << ")";
    EXPECT_EQ(r.plan.find("mma=e4m3") != std::string::npos, mma_expected) << r.plan;
  }
}

TEST(FlashAttnSm90, LongCausalBf16) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(32, 8, 128)};
  c.requests = {{0, 1500}, {700, 600}, {129, 255}};
  EXPECT_VALID(run_case(c));
}

TEST(FlashAttnSm90, WindowSoftCapSinksAlibi) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case w{mha_spec(10, 2, 128)};
  w.spec.sliding_window = 40;
  w.requests = {{150, 100}, {0, 77}, {333, 300}};
  EXPECT_VALID(run_case(w));
  Case s{mha_spec(16, 2, 128)};
  s.spec.logits_soft_cap = 5.0f;
  s.spec.sinks = true;
  s.requests = {{200, 33}, {0, 48}, {900, 200}};
  EXPECT_VALID(run_case(s));
  Case a{mha_spec(12, 12, 128, DType::f16)};
  a.spec.alibi = true;
  a.requests = {{100, 20}, {0, 300}};
  EXPECT_VALID(run_case(a));
}

TEST(FlashAttnSm90, LocalChunksAndEncoder) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case l{mha_spec(8, 2, 128)};
  l.local_attention_chunk = 64;
  l.requests = {{50, 100}, {0, 200}, {300, 150}};
  EXPECT_VALID(run_case(l));
  Case e{mha_spec(8, 2, 128)};
  e.spec.attn_type = AttentionType::encoder_only;
  e.requests = {{0, 70}, {0, 9}, {0, 300}};
  EXPECT_VALID(run_case(e));
}

TEST(FlashAttnSm90, SplitPartialsForFewLongPrefills) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(8, 1, 128)};
  c.spec.sinks = true;  // counted once across splits
  c.requests = {{3000, 12}, {1777, 5}};
  const Outcome r = run_case(c);
  EXPECT_VALID(r);
  EXPECT_EQ(r.plan.find("splits=1 "), std::string::npos) << "expected a split schedule: " << r.plan;
}

TEST(FlashAttnSm90, CascadeBothPasses) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(16, 4, 128)};
  c.spec.sinks = true;
  c.spec.logits_soft_cap = 30.0f;
  c.shared_prefix_len = 512;
  for (int i = 0; i < 12; ++i) c.requests.push_back({512 + 37 * i, 4 + i});
  c.cascade = CascadeMode::on;
  const Outcome on = run_case(c);
  EXPECT_VALID(on);
  EXPECT_NE(on.plan.find("cascade=on"), std::string::npos) << on.plan;
  c.cascade = CascadeMode::off;
  const Outcome off = run_case(c);
  EXPECT_VALID(off);
  EXPECT_LT(diff_outputs(on.out, off.out).rel_l2, 1e-2);
}

// Host-only checks: the selector's reasons and the split rule need no device.
TEST(FlashAttnSelector, RejectsWithReasons) {
  const auto backend = make_flash_attn_backend();
  BatchShape shape;
  shape.requests = {{16, 1}};
  AttentionSpec s = mha_spec(8, 2, 128);
  const Batch b = make_batch(s, shape, 1);
  s.kv_layout = KvLayout::HND;
  EXPECT_NE(backend->supports(s, b).reason.find("HND"), std::string::npos);
  s = mha_spec(8, 2, 128, DType::bf16, 24);
  EXPECT_NE(backend->supports(s, b).reason.find("block size"), std::string::npos);
  s = mha_spec(8, 2, 128, DType::f32);
  EXPECT_FALSE(backend->supports(s, b).ok);
  s = mha_spec(8, 2, 80);
  EXPECT_NE(backend->supports(s, b).reason.find("head size"), std::string::npos);
  EXPECT_TRUE(backend->supports(mha_spec(8, 2, 128), b).ok);
  // The backend takes one head size for Q.K and V, on any device.
  s = mha_spec(8, 8, 192);
  s.head_size_v = 128;
  EXPECT_NE(backend->supports(s, b).reason.find("one head size"), std::string::npos);
  // qk 192 / v 128 (the MLA prefill's attention): the sm_90a kernel only; other pairs never.
  FlashAttnConfig c = make_flash_attn_config(mha_spec(8, 8, 192));
  c.head_size_v = 128;
  const std::string why = flash_attn_unsupported_reason(c);
  EXPECT_EQ(why.empty(), flash_attn_sm90_available(c)) << why;
  if (!why.empty()) EXPECT_NE(why.find("sm_90a kernel only"), std::string::npos) << why;
  c.kv_dtype = DType::fp8_e4m3;
  EXPECT_FALSE(flash_attn_unsupported_reason(c).empty());
  c = make_flash_attn_config(mha_spec(8, 8, 128));
  c.head_size_v = 64;
  EXPECT_NE(flash_attn_unsupported_reason(c).find("head_size_v 64"), std::string::npos);
}

TEST(FlashAttnSelector, SplitRule) {
  EXPECT_EQ(flash_attn_num_splits(512, 4096, 132), 1);       // enough CTAs
  EXPECT_EQ(flash_attn_num_splits(8, 4096, 132), 16);        // 4096 / 256 = 16 caps the search (a full wave needs 33)
  EXPECT_EQ(flash_attn_num_splits(8, 100000, 132), 32);      // capped at kMaxSplits
  EXPECT_EQ(flash_attn_num_splits(100, 200, 132), 1);        // too short to split
  EXPECT_EQ(flash_attn_num_splits(66, 100000, 132), 4);      // 264 CTAs: one full wave of 2 per SM
  EXPECT_EQ(flash_attn_num_splits(64, 16384, 132), 4);       // 256 CTAs fit 264 slots; 5 would not
  // Decode CTAs in several waves: split only when the last one would leave > 15 % of the slots idle.
  EXPECT_EQ(flash_attn_num_splits(512, 4096, 132, 2, true), 1);    // 1.94 waves of 264
  EXPECT_EQ(flash_attn_num_splits(512, 4096, 132, 3, true), 3);    // 1.29 waves of 396 -> 3.88
  EXPECT_EQ(flash_attn_num_splits(1024, 2048, 132, 3, true), 1);   // 2.59 waves: 0.86 of the last one busy
  EXPECT_EQ(flash_attn_num_splits(512, 200, 132, 3, true), 1);     // too short to split
  EXPECT_EQ(flash_attn_num_splits(128, 32768, 132, 2, true), 2);   // 16 x 32k decode: one wave of 256
  EXPECT_EQ(flash_attn_num_splits(202, 3000, 132, 2, true), 1);    // every SM busy, less than one wave
  EXPECT_EQ(flash_attn_num_splits(640, 2048, 132, 2, false), 1);   // prefill tiles differ: never split
  EXPECT_EQ(flash_attn_num_splits(640, 2048, 132, 2, true), 2);    // the same count of decode CTAs: 2
}

// A sliding window: the keys the split rule shares out start at a tile's first token's window, as
// the kernel's tile_keys cuts them. 16 decodes x 8 kv heads at 32k would take 2 splits of 16k keys,
// of which a 128-token window reads 128: one split; a prefill tile of 64 tokens (128 rows at GQA 2)
// attends its window plus its own 63 tokens. The tiles' costs keep every key.
TEST(FlashAttnSelector, SplitRuleCountsAWindowsKeys) {
  const std::vector<int32_t> q(16, 1), k(16, 32768);
  EXPECT_EQ(make_flash_attn_pass(q, k, true, 4, 128, 8, 132, 0).num_splits, 2);
  const FlashAttnPass w = make_flash_attn_pass(q, k, true, 4, 128, 8, 132, 0, Sm90Passes::none, nullptr,
                                               kH100StreamShare, 128);
  EXPECT_EQ(w.num_splits, 1);
  ASSERT_EQ(w.tile_keys.size(), 16u);
  EXPECT_EQ(w.tile_keys[0], 32768);
  // A window wider than the sequence changes nothing.
  const FlashAttnPass wide = make_flash_attn_pass(q, k, true, 4, 128, 8, 132, 0, Sm90Passes::none, nullptr,
                                                  kH100StreamShare, 65536);
  EXPECT_EQ(wide.num_splits, 2);
  EXPECT_EQ(wide.tile_keys[0], 32768);
  // Prefill chunks of Gemma-2's window test (gqa 2, head size 256: 128-row tiles of 64 tokens):
  // 9 tiles x 8 kv heads once took 3 splits of up to 890 keys; their windows hold at most 319.
  const std::vector<int32_t> pq{300, 190, 45}, pk{300, 890, 195};
  EXPECT_EQ(make_flash_attn_pass(pq, pk, true, 2, 256, 8, 132, 0, Sm90Passes::prefills).num_splits, 3);
  const FlashAttnPass pw =
      make_flash_attn_pass(pq, pk, true, 2, 256, 8, 132, 0, Sm90Passes::prefills, nullptr, kH100StreamShare, 256);
  EXPECT_EQ(pw.num_splits, 1);
  EXPECT_EQ(*std::max_element(pw.tile_keys.begin(), pw.tile_keys.end()), 890);
  // 319 keys at most: 2 splits where the windows reach 512 keys (a 449-token window).
  EXPECT_EQ(make_flash_attn_pass(pq, pk, true, 2, 256, 8, 132, 0, Sm90Passes::prefills, nullptr, kH100StreamShare, 449)
                .num_splits,
            2);
}

// A mixed step under a window: the claim rule prices each tile by its window's keys, the balanced
// order keeps every key. scenarios/sinks_gptoss.toml (gpt-oss-20b: GQA 8, head size 64, window 128):
// 32 decodes at 1000 keys read 128 each; priced at 1000 they looked like the step's heavy work and
// kept fixed rounds, priced at 128 they are claimed (1.043 x on the H200, Version 73).
TEST(FlashAttnSelector, ClaimRuleCountsAWindowsKeys) {
  std::vector<int32_t> q(32, 1), k(32, 1001);
  q.push_back(256);
  k.push_back(356);
  const Sm90Passes mixed = Sm90Passes::mixed;  // a 16-bit cache's default
  const double h200_share = 0.94;                // flash_attn_stream_share of the H200 (Sm90TilesOf128Or192Rows)
  const FlashAttnPass plain = make_flash_attn_pass(q, k, true, 8, 64, 8, 132, 0, mixed, nullptr, h200_share);
  const FlashAttnPass window = make_flash_attn_pass(q, k, true, 8, 64, 8, 132, 0, mixed, nullptr, h200_share, 128);
  ASSERT_TRUE(window.tiling.sm90_tiles);
  EXPECT_FALSE(plain.dynamic_items);
  EXPECT_TRUE(window.dynamic_items);
  EXPECT_EQ(window.num_splits, 1);
  EXPECT_EQ(*std::max_element(window.tile_keys.begin(), window.tile_keys.end()), 1001);
  // A window wider than every sequence prices the tiles as no window does.
  EXPECT_EQ(make_flash_attn_pass(q, k, true, 8, 64, 8, 132, 0, mixed, nullptr, h200_share, 4096).dynamic_items,
            plain.dynamic_items);
}

TEST(FlashAttnSelector, SplitRuleCountsTheKernelsCtasPerSm) {
  ATTN_REQUIRE_CUDA_DEVICE();
  // The hd128 decode kernel of a 16-bit cache fills 2 CTAs per SM (3 stages of 64 keys, by shared
  // memory), that of an fp8 cache 4 (2 stages of 64 keys, 128 registers: kMinCtasPerSm). 64 x 8 =
  // 512 CTAs are 1.94 waves of 264 or 0.97 of 528: no split either way. 48 x 8 = 384 CTAs are 1.45
  // waves of 264 (2 splits make 2.91) but less than one wave of 528, which runs unsplit.
  FlashAttnConfig c = make_flash_attn_config(mha_spec(32, 8, 128));
  const FlashAttnTiling decode = flash_attn_tiling(128, 4);
  EXPECT_EQ(flash_attn_ctas_per_sm(c, decode), 2);
  const std::vector<int32_t> q(64, 1), k(64, 4096), q48(48, 1), k48(48, 2048);
  EXPECT_EQ(make_flash_attn_pass(q, k, true, 4, 128, 8, 132, 0, Sm90Passes::none, &c).num_splits, 1);
  EXPECT_EQ(make_flash_attn_pass(q48, k48, true, 4, 128, 8, 132, 0, Sm90Passes::none, &c).num_splits, 2);
  // Its spec tiles (32 rows, 105 KB, 228 registers) keep the 2; 64 x 8 tokens stay unsplit, 16 x 8 split.
  if (flash_attn_spec_tiles(c)) {
    const FlashAttnPass spec = make_flash_attn_pass(std::vector<int32_t>(64, 8), k, true, 4, 128, 8, 132, 0,
                                                    Sm90Passes::mixed, &c);
    ASSERT_TRUE(spec.tiling.spec);
    EXPECT_EQ(flash_attn_ctas_per_sm(c, spec.tiling), 2);
    EXPECT_EQ(spec.num_splits, 1);
    EXPECT_EQ(make_flash_attn_pass(std::vector<int32_t>(16, 8), std::vector<int32_t>(16, 4096), true, 4, 128, 8, 132, 0,
                                   Sm90Passes::mixed, &c)
                  .num_splits,
              2);
  }
  c.kv_dtype = DType::fp8_e4m3;
  EXPECT_EQ(flash_attn_ctas_per_sm(c, decode), 4);
  EXPECT_EQ(make_flash_attn_pass(q, k, true, 4, 128, 8, 132, 0, Sm90Passes::none, &c).num_splits, 1);
  EXPECT_EQ(make_flash_attn_pass(q48, k48, true, 4, 128, 8, 132, 0, Sm90Passes::none, &c).num_splits, 1);
  // hd64: both decode kernels fit 4 CTAs per SM (the 16-bit one by its 128 registers and 34 KB of
  // shared memory, the fp8 one by kMinCtasPerSm), so 64 x 4k stays unsplit on both.
  FlashAttnConfig c64 = make_flash_attn_config(mha_spec(32, 8, 64));
  if (!flash_attn_unsupported_reason(c64).empty()) GTEST_SKIP() << flash_attn_unsupported_reason(c64);
  const FlashAttnTiling decode64 = flash_attn_tiling(64, 4);
  EXPECT_EQ(flash_attn_ctas_per_sm(c64, decode64), 4);
  EXPECT_EQ(make_flash_attn_pass(q, k, true, 4, 64, 8, 132, 0, Sm90Passes::none, &c64).num_splits, 1);
  c64.kv_dtype = DType::fp8_e4m3;
  EXPECT_EQ(flash_attn_ctas_per_sm(c64, decode64), 4);
  EXPECT_EQ(make_flash_attn_pass(q, k, true, 4, 64, 8, 132, 0, Sm90Passes::none, &c64).num_splits, 1);
}

TEST(FlashAttnSelector, SplitRuleOnTheSm90KernelsDecodes) {
  ATTN_REQUIRE_CUDA_DEVICE();
  // The persistent sm_90a kernel counts one CTA per SM for passes with decode-sized sequences: 16
  // decodes x 8 kv heads = 128 items stay unsplit on 132 SMs (2 splits at 2 CTAs per SM), 8 x 8 = 64
  // split in 2. Prefill passes keep 2 CTAs per SM.
  // (Sm90Passes::all: ATTN_FA_SM90_DECODE=all; by default decode-only passes keep the mma.sync
  // decode tiling.)
  const FlashAttnConfig c = make_flash_attn_config(mha_spec(32, 8, 128));
  if (flash_attn_sm90_passes(c) == Sm90Passes::none) GTEST_SKIP() << "no sm_90a kernel for this layer here";
  const FlashAttnPass d16 = make_flash_attn_pass(std::vector<int32_t>(16, 1), std::vector<int32_t>(16, 32768), true, 4,
                                                 128, 8, 132, 0, Sm90Passes::all, &c);
  EXPECT_EQ(flash_attn_ctas_per_sm(c, d16.tiling), 1);
  EXPECT_EQ(d16.num_splits, 1);
  EXPECT_EQ(make_flash_attn_pass(std::vector<int32_t>(8, 1), std::vector<int32_t>(8, 16384), true, 4, 128, 8, 132, 0,
                                 Sm90Passes::all, &c)
                .num_splits,
            2);
  EXPECT_EQ(flash_attn_ctas_per_sm(c, make_flash_attn_pass({512}, {512}, true, 4, 128, 8, 132, 0, Sm90Passes::all, &c).tiling),
            2);
}

TEST(FlashAttnSelector, Sm90TilesOf128Or192Rows) {
  // Host planning only (no device): the sm_90a kernel's tiles for every sequence of the passes
  // Sm90Passes gives it, 128 rows (192 for head size 64 prefills: three consumer warpgroups); head
  // size 256 prefills need them (its mma.sync tiles are 64 rows).
  using enum Sm90Passes;
  const std::vector<int32_t> q = {97, 130}, k = {97, 280};
  const FlashAttnPass mma = make_flash_attn_pass(q, k, true, 1, 256, 16, 132, 0, none);
  const FlashAttnPass sm90 = make_flash_attn_pass(q, k, true, 1, 256, 16, 132, 0, prefills);
  EXPECT_EQ(mma.tiling.block_m, 64);
  EXPECT_FALSE(mma.tiling.sm90_tiles);
  EXPECT_EQ(mma.num_tiles(), 2 + 3);  // ceil(97 / 64) + ceil(130 / 64)
  EXPECT_EQ(sm90.tiling.block_m, 128);
  EXPECT_TRUE(sm90.tiling.sm90_tiles);
  EXPECT_EQ(sm90.num_tiles(), 1 + 2);
  EXPECT_EQ(make_flash_attn_pass(q, k, true, 1, 256, 16, 132, 0, all).num_tiles(), 1 + 2);
  // Next to a decode: mma.sync 64-row tiles when the kernel takes prefills only, 128-row ones
  // (the decode is one tile) when it takes all passes.
  const FlashAttnPass mixed_mma = make_flash_attn_pass({97, 1}, {97, 300}, true, 1, 256, 16, 132, 0, prefills);
  EXPECT_FALSE(mixed_mma.tiling.sm90_tiles);
  EXPECT_EQ(mixed_mma.tiling.block_m, 64);
  const FlashAttnPass mixed_all = make_flash_attn_pass({97, 1}, {97, 300}, true, 1, 256, 16, 132, 0, all);
  EXPECT_TRUE(mixed_all.tiling.sm90_tiles);
  EXPECT_EQ(mixed_all.tiling.block_m, 128);
  EXPECT_EQ(mixed_all.num_tiles(), 1 + 1);
  // Decodes alone (GQA 8, one and two tokens): the decode tiling, or one 128-row tile each.
  for (const Sm90Passes mode : {none, prefills}) {
    const FlashAttnPass d = make_flash_attn_pass({1, 2}, {300, 40}, true, 8, 128, 8, 132, 0, mode);
    EXPECT_TRUE(d.tiling.decode);
    EXPECT_FALSE(d.tiling.sm90_tiles);
  }
  // mixed (the default for a 16-bit cache): a pass of decodes alone keeps the decode tiling, a
  // decode beside a prefill takes the sm_90a tiles.
  const FlashAttnPass decodes_mixed = make_flash_attn_pass({1, 2}, {300, 40}, true, 8, 128, 8, 132, 0, mixed);
  EXPECT_TRUE(decodes_mixed.tiling.decode);
  EXPECT_FALSE(decodes_mixed.tiling.sm90_tiles);
  const FlashAttnPass beside = make_flash_attn_pass({97, 1}, {97, 300}, true, 1, 256, 16, 132, 0, mixed);
  EXPECT_TRUE(beside.tiling.sm90_tiles);
  EXPECT_EQ(beside.tiling.block_m, 128);
  const FlashAttnPass decodes = make_flash_attn_pass({1, 2}, {300, 40}, true, 8, 128, 8, 132, 0, all);
  EXPECT_FALSE(decodes.tiling.decode);
  EXPECT_TRUE(decodes.tiling.sm90_tiles);
  EXPECT_EQ(decodes.num_tiles(), 2);
  // A mixed pass on it: decode tiles spread among the prefill tiles, each kind longest first.
  // Tiles (seq, m_block, keys) at GQA 4: prefills (3, 1, 1000), (3, 0, 968), (4, 1, 40), (4, 0, 32);
  // decodes (0, 0, 900), (1, 0, 700), (2, 0, 500).
  const std::vector<int32_t> mq = {1, 1, 1, 64, 40}, mk = {900, 700, 500, 1000, 40};
  EXPECT_EQ(make_flash_attn_pass(mq, mk, true, 4, 128, 8, 132, 0, all).tiles,
            (std::vector<int32_t>{3, 1, 0, 0, 3, 0, 1, 0, 4, 1, 2, 0, 4, 0}));
  // Fewer items than SMs: nothing to balance, fixed rounds; so for passes of one kind.
  EXPECT_FALSE(make_flash_attn_pass(mq, mk, true, 4, 128, 8, 132, 0, all).dynamic_items);
  EXPECT_FALSE(make_flash_attn_pass({64, 40}, {1000, 40}, true, 4, 128, 8, 132, 0, all).dynamic_items);
  EXPECT_FALSE(decodes.dynamic_items);
  // Mixed steps at 32/8 heads: the CTAs claim their items where fixed rounds leave some of them far
  // more key tiles (H100, Version 38: 32 x 1 @ 8k + 2048 new 593 -> 486 us, 128 x 1 @ 1k + 2 x 1024
  // on 1k 354 -> 290 us; from both ends, Version 39: 461 and 282 us) or where the decodes' pages set
  // the time by far (Version 39: 96 x 1 @ 4k + 4 x 256 on 2k 1.007 x from both ends), not where the
  // rounds are even (48 x 1 @ 2k + 2 x 512 on 1k 185 -> 195 us claimed from one end, 197 from both;
  // 64 x 1 @ 2k + 8 x 128 on 512: 0.99 x).
  auto claims = [&](int decodes_n, int decode_ctx, int prefills_n, int prefill_ctx, int prefill_q,
                    double stream_share = kH100StreamShare) {
    std::vector<int32_t> ql, sl;
    for (int i = 0; i < decodes_n; ++i) {
      ql.push_back(1);
      sl.push_back(decode_ctx + 1);
    }
    for (int i = 0; i < prefills_n; ++i) {
      ql.push_back(prefill_q);
      sl.push_back(prefill_ctx + prefill_q);
    }
    const FlashAttnPass pass = make_flash_attn_pass(ql, sl, true, 4, 128, 8, 132, 0, all, nullptr, stream_share);
    // Claimed from both ends wherever each CTA has two items or more: prefill tiles first.
    const bool two_ended = pass.dynamic_items && pass.num_tiles() * 8 * pass.num_splits >= 2 * 132;
    EXPECT_EQ(pass.claim_front_ctas > 0, two_ended) << decodes_n << " decodes";
    if (two_ended) EXPECT_GT(ql[static_cast<size_t>(pass.tiles[0])], 1);
    if (two_ended) EXPECT_EQ(ql[static_cast<size_t>(pass.tiles[pass.tiles.size() - 2])], 1);
    return pass.dynamic_items;
  };
  EXPECT_TRUE(claims(32, 8192, 1, 0, 2048));
  EXPECT_TRUE(claims(128, 1024, 2, 1024, 1024));
  EXPECT_FALSE(claims(48, 2048, 2, 1024, 512));
  EXPECT_TRUE(claims(96, 4096, 4, 2048, 256));  // the decodes' pages set the time by far
  EXPECT_FALSE(claims(64, 2048, 8, 512, 128));
  EXPECT_TRUE(claims(24, 1200, 1, 0, 384));  // scenarios/mixed_uneven_rounds.toml
  // The decodes' pages priced by the device (flash_attn_stream_share): an H100 SXM's DRAM (2619 MHz x
  // 5120 bits) keeps 0.65 of its SMs streaming, an H200's (4814 GB/s peak, as `attn-bench device`
  // reads it: ~3134 MHz x 6144 bits) 0.94, a device that reports no memory clock the H100's share.
  DeviceInfo h100;
  h100.num_sms = 132;
  h100.memory_clock_khz = 2619000;
  h100.memory_bus_bits = 5120;
  DeviceInfo h200 = h100;
  h200.memory_clock_khz = 3134000;
  h200.memory_bus_bits = 6144;
  EXPECT_NEAR(flash_attn_stream_share(h100), kH100StreamShare, 0.01);
  EXPECT_NEAR(flash_attn_stream_share(h200), 0.94, 0.01);
  EXPECT_EQ(flash_attn_stream_share(DeviceInfo{}), kH100StreamShare);
  // On the H200 the pages no longer put 64 x 1 @ 2k + 8 x 128 on 512's floor above every schedule's
  // end: claimed from both ends, 1.065 x faster than the H100's price of its pages left it (fixed
  // rounds; Version 66), while 48 x 1 @ 2k + 2 x 512 on 1k keeps its even rounds (claims 0.957 x,
  // Version 65). The steps whose decodes are most of the work stay claimed (mixu96 below: fixed
  // rounds 1.26 x slower there, Version 66), and so does the rest.
  const double h200_share = flash_attn_stream_share(h200);
  EXPECT_TRUE(claims(64, 2048, 8, 512, 128, h200_share));
  EXPECT_FALSE(claims(48, 2048, 2, 1024, 512, h200_share));
  EXPECT_TRUE(claims(96, 4096, 4, 2048, 256, h200_share));
  EXPECT_TRUE(claims(32, 8192, 1, 0, 2048, h200_share));
  EXPECT_TRUE(claims(128, 1024, 2, 1024, 1024, h200_share));
  EXPECT_TRUE(claims(24, 1200, 1, 0, 384, h200_share));
  // At head sizes 64, 96 and 128 (256 runs one CTA per item: nothing to claim). (8 decodes at 4k +
  // 1024 new tokens, 16/16 heads: the rule's yes; 128 decodes at 1k + 2 x 1024 on 1k at 32/8 heads
  // of size 64, claimed 1.31 x faster than fixed rounds, H100, twenty-fourth session.)
  const std::vector<int32_t> q256 = {1, 1, 1, 1, 1, 1, 1, 1, 1024}, k256 = {4001, 4001, 4001, 4001, 4001, 4001, 4001, 4001, 1024};
  for (int d : {64, 96, 128}) EXPECT_TRUE(make_flash_attn_pass(q256, k256, true, 1, d, 16, 132, 0, all).dynamic_items) << d;
  // 128 decodes at 1k + 2 x 1024 new on 1k at 32/32 heads of size 96: 4096 one-row decode items whose
  // pages set the time; claimed from both ends 1.53 x faster than fixed rounds (Version 39).
  std::vector<int32_t> q96(128, 1), k96(128, 1025);
  q96.insert(q96.end(), {1024, 1024});
  k96.insert(k96.end(), {2048, 2048});
  const FlashAttnPass mixu96 = make_flash_attn_pass(q96, k96, true, 1, 96, 32, 132, 0, all);
  EXPECT_TRUE(mixu96.dynamic_items);
  EXPECT_GT(mixu96.claim_front_ctas, 0);
  EXPECT_TRUE(make_flash_attn_pass(q96, k96, true, 1, 96, 32, 132, 0, all, nullptr, h200_share).dynamic_items);
  EXPECT_FALSE(make_flash_attn_pass(q256, k256, true, 1, 256, 16, 132, 0, all).dynamic_items);
  // Where the kernel can claim at all (what ATTN_FA_SM90_DYNAMIC=1 forces): decode launches at 64-128.
  for (int d : {64, 96, 128, 192, 256})
    EXPECT_EQ(flash_attn_sm90_can_claim(make_flash_attn_pass(q256, k256, true, 1, d, 16, 132, 0, all).tiling, d), d <= 128)
        << d;
  EXPECT_FALSE(flash_attn_sm90_can_claim(make_flash_attn_pass({64, 40}, {1000, 40}, true, 4, 128, 8, 132, 0, all).tiling, 128));
  // On the mma.sync kernel one order, longest first.
  EXPECT_EQ(make_flash_attn_pass(mq, mk, true, 4, 128, 8, 132, 0, prefills).tiles,
            (std::vector<int32_t>{3, 1, 3, 0, 0, 0, 1, 0, 2, 0, 4, 1, 4, 0}));
  // Head size 128: the mma.sync prefill tile is already 128 rows either way.
  EXPECT_EQ(make_flash_attn_pass(q, k, true, 4, 128, 8, 132, 0, none).tiling.block_m, 128);
  // The MLA prefill's head-size-192 tiling (one query head per kv head) is the same rule.
  EXPECT_EQ(flash_attn_pass_tiling({64, 48}, 1, 192, prefills).block_m, 128);
  EXPECT_EQ(flash_attn_pass_tiling({64, 48}, 1, 192, none).block_m, 64);
  EXPECT_FALSE(flash_attn_pass_tiling({64, 1}, 1, 192, prefills).sm90_tiles);
  EXPECT_EQ(flash_attn_pass_tiling({64, 1}, 1, 192, prefills).block_m, 64);
  EXPECT_EQ(flash_attn_pass_tiling({64, 1}, 1, 192, all).block_m, 128);
  // Head size 64: 192-row tiles for prefills, 128 rows once a decode-sized sequence shares the
  // launch (the decode launch keeps two consumers).
  const FlashAttnPass hd64 = make_flash_attn_pass({400, 130}, {400, 130}, true, 1, 64, 8, 132, 0, prefills);
  EXPECT_TRUE(hd64.tiling.sm90_tiles);
  EXPECT_EQ(hd64.tiling.block_m, 192);
  EXPECT_EQ(hd64.num_tiles(), 3 + 1);  // ceil(400 / 192) + ceil(130 / 192)
  EXPECT_EQ(sm90_block_m(64, false), 192);
  const FlashAttnPass hd64_mixed = make_flash_attn_pass({400, 1}, {400, 300}, true, 1, 64, 8, 132, 0, all);
  EXPECT_TRUE(hd64_mixed.tiling.sm90_tiles);
  EXPECT_EQ(hd64_mixed.tiling.block_m, 128);
  EXPECT_EQ(hd64_mixed.num_tiles(), 4 + 1);
}

// A pass whose every sequence is one 128-row tile of the sm_90a kernel, some past the mma.sync
// decode tile's 16 rows (speculative decodes: 8 tokens at GQA 4 are 32 rows, 16 at GQA 8 are 128),
// is a decode launch (small_seqs: a consumer whose 64 rows are all past the query computes nothing,
// rows from each query's start), past 64 rows only at one item per SM at most; one longer sequence,
// head size 192 (no decode launch) or a prefills-only mode (fp8 caches, FLASHINFER) keep the
// prefill launch.
TEST(FlashAttnSelector, Sm90OneTileDecodesAreDecodeLaunches) {
  using enum Sm90Passes;
  for (const int d : {64, 96, 128, 256}) {
    for (const auto& [q, g] : {std::pair{5, 4}, {8, 4}, {32, 4}, {4, 8}, {8, 8}, {16, 8}}) {
      for (const Sm90Passes mode : {mixed, all}) {
        const FlashAttnPass p = make_flash_attn_pass({q, q, q}, {4096, q + 100, q}, true, g, d, 8, 132, 0, mode);
        if (q * g <= flash_attn_tiling(d, 1).small_block_m && mode == mixed) {  // 32 rows at head size 256
          EXPECT_TRUE(p.tiling.decode) << d << " " << q << "x" << g;
          continue;
        }
        EXPECT_TRUE(p.tiling.sm90_tiles) << d << " " << q << "x" << g;
        EXPECT_TRUE(p.tiling.small_seqs) << d << " " << q << "x" << g;
        EXPECT_EQ(p.tiling.block_m, 128) << d;  // two consumers at head size 64 too
        EXPECT_FALSE(p.rows_from_end) << d;
        EXPECT_EQ(p.num_tiles(), 3) << d;
        EXPECT_GT(p.num_splits, 1) << d;  // 24 items for 132 SMs
      }
    }
  }
  // Past 64 rows only where each SM gets at most one item (with more, both consumers compute and
  // the prefill launch's overlap wins): 20 requests x 8 kv heads = 160 items of 128 rows take the
  // prefill launch, of 64 rows the decode launch.
  const std::vector<int32_t> k20(20, 4096);
  EXPECT_FALSE(make_flash_attn_pass(std::vector<int32_t>(20, 32), k20, true, 4, 128, 8, 132, 0, mixed).tiling.small_seqs);
  EXPECT_TRUE(make_flash_attn_pass(std::vector<int32_t>(16, 32), std::vector<int32_t>(16, 4096), true, 4, 128, 8, 132, 0, mixed)
                  .tiling.small_seqs);
  EXPECT_TRUE(make_flash_attn_pass(std::vector<int32_t>(20, 16), k20, true, 4, 128, 8, 132, 0, mixed).tiling.small_seqs);
  // 33 tokens at GQA 4 (132 rows: two tiles), or one 8-token decode beside a 512-token prefill: the
  // prefill launch, tiled from each query's end.
  for (const auto& [q, k] : {std::pair{std::vector<int32_t>{33, 8}, std::vector<int32_t>{4096, 108}},
                             {std::vector<int32_t>{8, 512}, std::vector<int32_t>{2048, 1536}}}) {
    const FlashAttnPass p = make_flash_attn_pass(q, k, true, 4, 128, 8, 132, 0, mixed);
    EXPECT_TRUE(p.tiling.sm90_tiles);
    EXPECT_FALSE(p.tiling.small_seqs);
    EXPECT_TRUE(p.rows_from_end);
  }
  EXPECT_FALSE(make_flash_attn_pass({16, 16}, {4096, 116}, true, 4, 192, 8, 132, 0, mixed).tiling.small_seqs);
  EXPECT_FALSE(make_flash_attn_pass({8, 8}, {4096, 108}, true, 4, 128, 8, 132, 0, prefills).tiling.small_seqs);
  EXPECT_TRUE(make_flash_attn_pass({8, 8}, {4096, 108}, true, 4, 128, 8, 132, 0, prefills).tiling.sm90_tiles);
  EXPECT_FALSE(make_flash_attn_pass({8, 8}, {4096, 108}, true, 4, 128, 8, 132, 0, none).tiling.sm90_tiles);
  // Sequences of at most 16 rows keep the mma.sync decode tiling (mixed), as before.
  EXPECT_TRUE(make_flash_attn_pass({4, 2}, {4096, 108}, true, 4, 128, 8, 132, 0, mixed).tiling.decode);
}

// Speculative decodes (every sequence 17-32 packed rows) over a cache of the model dtype at head
// sizes 64 and 128 take the mma.sync decode tiling's spec tiles, one 32-row tile per sequence,
// whatever the device's sm_90a modes but `all`; 16 rows or fewer keep the plain decode tile, 33 or
// more, a longer sequence beside them, an fp8 cache, head sizes 96, 192 and 256 and passes planned
// without the layer (FLASHINFER's) keep what they had. Spec tiles never merge splits in clusters.
TEST(FlashAttnSelector, SpecDecodesTakeSpecTiles) {
  using enum Sm90Passes;
  auto config = [](int d, DType kv) {
    FlashAttnConfig c;
    c.num_q_heads = 32;
    c.num_kv_heads = 8;
    c.head_size_qk = c.head_size_v = d;
    c.dtype = DType::bf16;
    c.kv_dtype = kv;
    return c;
  };
  const bool on = ab_switch_on("ATTN_FA_SPEC_TILES");  // the A/B switch, read as the selector reads it
  for (const int d : {64, 128}) {
    const FlashAttnConfig c = config(d, DType::bf16);
    if (!flash_attn_unsupported_reason(c).empty()) continue;  // not compiled (ATTN_QUICK_BUILD)
    EXPECT_EQ(flash_attn_spec_tiles(c), on) << d;
    for (const auto& [q, g] : {std::pair{5, 4}, {8, 4}, {3, 8}, {4, 8}, {32, 1}, {17, 1}, {9, 2}}) {
      for (const Sm90Passes mode : {none, prefills, mixed}) {
        const FlashAttnPass p = make_flash_attn_pass({q, q, q}, {4096, q + 100, q}, true, g, d, 8, 132, 0, mode, &c);
        EXPECT_EQ(p.tiling.spec, on) << d << " " << q << "x" << g;
        if (!on) continue;
        EXPECT_TRUE(p.tiling.decode) << d << " " << q << "x" << g;
        EXPECT_FALSE(p.tiling.sm90_tiles) << d;
        EXPECT_EQ(p.tiling.block_m, kSpecTileRows) << d;
        EXPECT_EQ(p.num_tiles(), 3) << d;  // one tile per sequence
        EXPECT_FALSE(p.rows_from_end) << d;
        EXPECT_GT(p.num_splits, 1) << d;  // 24 CTAs for 132 SMs
        EXPECT_FALSE(flash_attn_cluster_merge(c, p.tiling, 2)) << d;
      }
      // ATTN_FA_SM90_DECODE=all: the sm_90a kernel's decode launch, as before.
      EXPECT_FALSE(make_flash_attn_pass({q, q}, {4096, 300}, true, g, d, 8, 132, 0, all, &c).tiling.spec) << d;
    }
    // 16 rows: the plain decode tile; 36 rows, or an 8-token decode beside a 512-token prefill: not spec.
    const FlashAttnPass plain = make_flash_attn_pass({4, 2}, {4096, 108}, true, 4, d, 8, 132, 0, mixed, &c);
    EXPECT_TRUE(plain.tiling.decode && !plain.tiling.spec) << d;
    EXPECT_EQ(plain.tiling.block_m, flash_attn_tiling(d, 1).small_block_m) << d;
    EXPECT_FALSE(make_flash_attn_pass({9, 2}, {4096, 108}, true, 4, d, 8, 132, 0, mixed, &c).tiling.spec) << d;
    EXPECT_FALSE(make_flash_attn_pass({33}, {4096}, true, 1, d, 8, 132, 0, none, &c).tiling.spec) << d;
    EXPECT_FALSE(make_flash_attn_pass({8, 512}, {2048, 1536}, true, 4, d, 8, 132, 0, mixed, &c).tiling.spec) << d;
    // An fp8 cache, or no layer to ask (FLASHINFER's sm_90a prefill plan): not spec.
    const FlashAttnConfig f8 = config(d, DType::fp8_e4m3);
    EXPECT_FALSE(flash_attn_spec_tiles(f8)) << d;
    EXPECT_FALSE(make_flash_attn_pass({8, 8}, {4096, 108}, true, 4, d, 8, 132, 0, prefills, &f8).tiling.spec) << d;
    EXPECT_FALSE(make_flash_attn_pass({8, 8}, {4096, 108}, true, 4, d, 8, 132, 0, mixed).tiling.spec) << d;
  }
  for (const int d : {96, 192, 256}) EXPECT_FALSE(flash_attn_spec_tiles(config(d, DType::bf16))) << d;
}

// sm_90a prefill passes tile each query from its end (FlashAttnParams::rows_from_end): a 4k query
// at head size 64 (192-row tiles, 4096 = 21 x 192 + 64) has its 64-row tile first, on the first
// 64 keys, and 21 whole ones after it; the mma.sync tiling and decode launches tile from the start.
TEST(FlashAttnSelector, Sm90TilesFromEachQuerysEnd) {
  using enum Sm90Passes;
  const FlashAttnPass hd64 = make_flash_attn_pass({4096}, {4096}, true, 1, 64, 32, 132, 0, prefills);
  ASSERT_TRUE(hd64.rows_from_end);
  ASSERT_EQ(hd64.tiling.block_m, 192);
  ASSERT_EQ(hd64.num_tiles(), 22);
  std::vector<int64_t> keys(hd64.tile_keys);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys.front(), 64);    // m = 0: rows -128 .. 63, of which 0 .. 63 are the query's
  EXPECT_EQ(keys[1], 64 + 192);   // m = 1: rows 64 .. 255
  EXPECT_EQ(keys.back(), 4096);   // m = 21: rows 3904 .. 4095, whole
  int64_t sum = 0;
  for (const int64_t k : keys) sum += (k + 127) / 128;
  EXPECT_EQ(sum, 1 + 362);  // key tiles; from the start: 352 + 32 (the last tile's 64 rows on all 32)
  // With context the shift is the same rows (tokens 0 .. 63 on 1000 + 64 keys); at G = 4 a tile of
  // 128 rows holds 32 tokens: 100 tokens = 400 rows = 3 x 128 + 16 rows (4 tokens) first.
  const FlashAttnPass ctx = make_flash_attn_pass({4096}, {5096}, true, 1, 64, 32, 132, 0, prefills);
  EXPECT_EQ(*std::min_element(ctx.tile_keys.begin(), ctx.tile_keys.end()), 1064);
  const FlashAttnPass gqa = make_flash_attn_pass({100}, {100}, true, 4, 128, 8, 132, 0, prefills);
  ASSERT_EQ(gqa.num_tiles(), 4);
  EXPECT_EQ(*std::min_element(gqa.tile_keys.begin(), gqa.tile_keys.end()), 4);
  // Whole tiles are the same either way (1024 tokens x G 4 = 32 tiles of 32 tokens); the mma.sync
  // tiling and decode launches tile from the start.
  const FlashAttnPass whole = make_flash_attn_pass({1024}, {1024}, true, 4, 128, 8, 132, 0, prefills);
  EXPECT_TRUE(whole.rows_from_end);
  EXPECT_EQ(*std::min_element(whole.tile_keys.begin(), whole.tile_keys.end()), 32);
  const FlashAttnPass mma = make_flash_attn_pass({4096}, {4096}, true, 1, 64, 32, 132, 0, none);
  EXPECT_FALSE(mma.rows_from_end);
  EXPECT_EQ(*std::max_element(mma.tile_keys.begin(), mma.tile_keys.end()), 4096);
  const FlashAttnPass step = make_flash_attn_pass({300, 1}, {300, 900}, true, 4, 128, 8, 132, 0, mixed);
  EXPECT_TRUE(step.tiling.sm90_tiles);
  EXPECT_FALSE(step.rows_from_end);  // a decode launch (kDecodes): not measured there, tiled from the start
}

// The mean key tiles per work item that picks head size 128's plain-scores kernel (sm90_plain_at):
// 8 x 1k at 32/8 heads has tiles of 32 tokens whose items see 1..8 key tiles, four of each (4.5 ->
// 5); 2 x 4k 1..32 (16.5 -> 17); 1 x 16k 1..128 (64.5 -> 65); two splits halve 8 x 1k's (2.25 -> 3).
TEST(FlashAttnSelector, MeanItemKeyTiles) {
  const std::vector<int32_t> q(8, 1024);
  FlashAttnPass p8x1k = make_flash_attn_pass(q, q, true, 4, 128, 8, 132, 0, Sm90Passes::prefills);
  EXPECT_EQ(mean_item_key_tiles(p8x1k), 5);
  EXPECT_LE(mean_item_key_tiles(p8x1k), kSm90PlainMaxItemTiles128);
  FlashAttnPass p2x4k = make_flash_attn_pass({4096, 4096}, {4096, 4096}, true, 4, 128, 8, 132, 0, Sm90Passes::prefills);
  EXPECT_EQ(mean_item_key_tiles(p2x4k), 17);
  EXPECT_GT(mean_item_key_tiles(p2x4k), kSm90PlainMaxItemTiles128);
  FlashAttnPass p16k = make_flash_attn_pass({16384}, {16384}, true, 4, 128, 8, 132, 0, Sm90Passes::prefills);
  EXPECT_EQ(mean_item_key_tiles(p16k), 65);
  p8x1k.num_splits = 2;
  EXPECT_EQ(mean_item_key_tiles(p8x1k), 3);
  EXPECT_EQ(mean_item_key_tiles(FlashAttnPass{}), 0);
}

// The fixed rounds of an sm_90a prefill pass, balanced by the planner: every item once, each CTA's
// cost (2.75 + its key tiles per item) within one item of every other's, below the kernel's snake.
TEST(FlashAttnSelector, Sm90FixedRoundsBalanced) {
  const std::vector<int32_t> q(8, 1024);  // 8 x 1k causal, 32/8 heads: 256 tiles x 8 kv heads
  FlashAttnPass pass = make_flash_attn_pass(q, q, true, 4, 128, 8, 132, 0, Sm90Passes::prefills);
  ASSERT_TRUE(pass.tiling.sm90_tiles);
  ASSERT_EQ(pass.num_tiles(), 256);
  ASSERT_EQ(pass.num_splits, 1);
  balance_fixed_rounds(pass, 8, 128, 132);
  const int items = 256 * 8;
  ASSERT_EQ(pass.work_ctas, 132);
  ASSERT_EQ(pass.work_rounds, 16);  // 2048 items: 15 or 16 per CTA
  ASSERT_EQ(pass.work_order.size(), 132u * 16u);
  auto cost = [&](int w) { return 2.75 + static_cast<double>((pass.tile_keys[static_cast<size_t>(w / 8)] + 127) / 128); };
  std::vector<int> seen(items, 0);
  std::vector<double> load(132, 0.0);
  for (int b = 0; b < 132; ++b) {
    double last = 1e9;
    bool ended = false;
    for (int r = 0; r < 16; ++r) {
      const int w = pass.work_order[static_cast<size_t>(b * 16 + r)];
      if (w >= items) {  // none left: the rest of the column too
        ended = true;
        continue;
      }
      ASSERT_FALSE(ended) << "CTA " << b << " round " << r;
      ASSERT_GE(w, 0);
      ++seen[static_cast<size_t>(w)];
      EXPECT_LE(cost(w), last) << "CTA " << b << " takes its items heaviest first";
      last = cost(w);
      load[static_cast<size_t>(b)] += cost(w);
    }
  }
  for (int w = 0; w < items; ++w) ASSERT_EQ(seen[static_cast<size_t>(w)], 1) << "item " << w;
  const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
  EXPECT_LE(*hi - *lo, 2.75 + 8);  // within the largest item
  // The snake: round r's items r * 132 .. to CTAs 0.. (odd rounds from the far end).
  std::vector<double> snake(132, 0.0);
  for (int w = 0; w < items; ++w) {
    const int r = w / 132, k = w % 132;
    snake[static_cast<size_t>(r % 2 == 0 ? k : 131 - k)] += cost(w);
  }
  EXPECT_LE(*hi, *std::max_element(snake.begin(), snake.end()) - 2.0);  // 114 against 116 key tiles

  // Tiles that do not come most keys first (the MLA prefill's passes share one list in sequence
  // order): the same balance, each CTA's items still heaviest first.
  FlashAttnPass reversed = make_flash_attn_pass(q, q, true, 4, 128, 8, 132, 0, Sm90Passes::prefills);
  for (std::size_t i = 0, j = reversed.tile_keys.size() - 1; i < j; ++i, --j) {
    std::swap(reversed.tile_keys[i], reversed.tile_keys[j]);
    std::swap(reversed.tiles[2 * i], reversed.tiles[2 * j]);
    std::swap(reversed.tiles[2 * i + 1], reversed.tiles[2 * j + 1]);
  }
  balance_fixed_rounds(reversed, 8, 128, 132);
  ASSERT_EQ(reversed.work_order.size(), pass.work_order.size());
  auto reversed_cost = [&](int w) {
    return 2.75 + static_cast<double>((reversed.tile_keys[static_cast<size_t>(w / 8)] + 127) / 128);
  };
  std::vector<double> reversed_load(132, 0.0);
  for (int b = 0; b < 132; ++b) {
    double last = 1e9;
    for (int r = 0; r < reversed.work_rounds; ++r) {
      const int w = reversed.work_order[static_cast<size_t>(b * reversed.work_rounds + r)];
      if (w >= items) break;
      EXPECT_LE(reversed_cost(w), last) << "CTA " << b << " takes its items heaviest first";
      last = reversed_cost(w);
      reversed_load[static_cast<size_t>(b)] += reversed_cost(w);
    }
  }
  EXPECT_EQ(*std::max_element(reversed_load.begin(), reversed_load.end()), *hi);

  // Splits cut each tile's key tiles: every (tile, kv head, split) once.
  FlashAttnPass split = make_flash_attn_pass(q, q, true, 4, 128, 8, 132, 0, Sm90Passes::prefills);
  split.num_splits = 2;
  balance_fixed_rounds(split, 8, 128, 132);
  ASSERT_FALSE(split.work_order.empty());
  const int split_items = split.num_tiles() * 8 * 2;
  std::vector<int> split_seen(static_cast<size_t>(split_items), 0);
  for (int32_t w : split.work_order)
    if (w < split_items) ++split_seen[static_cast<size_t>(w)];
  EXPECT_EQ(std::count(split_seen.begin(), split_seen.end(), 1), split_items);

  // Left to the kernel's snake: a pass it already balances (2 x 4k: its longest CTA within 0.5 %
  // of the mean), head size 256 (one CTA per item), claimed items, a decode-sized sequence, and no
  // more items than CTAs.
  FlashAttnPass even = make_flash_attn_pass({4096, 4096}, {4096, 4096}, true, 4, 128, 8, 132, 0, Sm90Passes::prefills);
  balance_fixed_rounds(even, 8, 128, 132);
  EXPECT_TRUE(even.work_order.empty());
  FlashAttnPass hd256 = make_flash_attn_pass(q, q, true, 1, 256, 16, 132, 0, Sm90Passes::prefills);
  balance_fixed_rounds(hd256, 16, 256, 132);
  EXPECT_TRUE(hd256.work_order.empty());
  FlashAttnPass claimed = pass;
  claimed.dynamic_items = true;
  balance_fixed_rounds(claimed, 8, 128, 132);
  EXPECT_TRUE(claimed.work_order.empty());
  FlashAttnPass mixed = make_flash_attn_pass({1024, 1}, {1024, 2048}, true, 4, 128, 8, 132, 0, Sm90Passes::all);
  ASSERT_TRUE(mixed.tiling.small_seqs);
  balance_fixed_rounds(mixed, 8, 128, 132);
  EXPECT_TRUE(mixed.work_order.empty());
  FlashAttnPass few = make_flash_attn_pass({64}, {64}, true, 4, 128, 8, 132, 0, Sm90Passes::prefills);
  balance_fixed_rounds(few, 8, 128, 132);
  EXPECT_TRUE(few.work_order.empty());
}

// Passes whose K/V outgrow L2 get a list dealt a group of (kv head, sequence) pairs at a time: each
// group at most 24 MB of K/V unless it needs more pairs for two items per CTA, every item once, each
// CTA's items in group order (so that the CTAs move through the groups together), the longest CTA
// no later than the snake's or within 1 % of the best order's; passes whose K/V fit keep what they had.
TEST(FlashAttnSelector, Sm90HeadGroupsForL2) {
  // The element size the planners pass: a 16-bit cache's, none over fp8 (tile-major rounds there).
  EXPECT_EQ(l2_group_elem_bytes(DType::bf16), 2);
  EXPECT_EQ(l2_group_elem_bytes(DType::f16), 2);
  EXPECT_EQ(l2_group_elem_bytes(DType::fp8_e4m3), 0);
  EXPECT_EQ(l2_group_elem_bytes(DType::fp8_e5m2), 0);
  struct Shape {
    const char* name;
    std::vector<int32_t> q;
    int gqa, head_size, kv_heads, groups;  // groups: the expected count (0: none)
  };
  // hd96 32/32 2 x 4k: 1.5 MB of K/V per (head, sequence), 96 MB in all -> 4 groups of 16 pairs.
  // 1 x 16k 32/8 hd128: 8 MB per pair -> 3, 3 and 2 pairs. 32 x 4k: 2 MB -> 21 groups of 12 pairs and
  // one of 4. 32/32 heads of 128 over 3000 + 2937: ~1.45 MB -> 4 groups of 16. 2 x 4k 32/8 hd128
  // (32 MB) and 8 x 1k fit: one group.
  const std::vector<Shape> shapes = {{"hd96 2 x 4k", {4096, 4096}, 1, 96, 32, 4},
                                     {"hd128 1 x 16k", {16384}, 4, 128, 8, 3},
                                     {"hd128 32 x 4k", std::vector<int32_t>(32, 4096), 4, 128, 8, 22},
                                     {"hd128 32/32 3000 + 2937", {3000, 2937}, 1, 128, 32, 4},
                                     {"hd128 2 x 4k", {4096, 4096}, 4, 128, 8, 0},
                                     {"hd128 8 x 1k", std::vector<int32_t>(8, 1024), 4, 128, 8, 0}};
  for (const Shape& sh : shapes) {
    SCOPED_TRACE(sh.name);
    FlashAttnPass pass = make_flash_attn_pass(sh.q, sh.q, true, sh.gqa, sh.head_size, sh.kv_heads, 132, 0, Sm90Passes::prefills);
    ASSERT_TRUE(pass.tiling.sm90_tiles);
    ASSERT_EQ(pass.num_splits, 1);
    FlashAttnPass plain = pass;
    balance_fixed_rounds(plain, sh.kv_heads, sh.head_size, 132);  // no element size: never grouped
    EXPECT_EQ(plain.l2_groups, 0);
    const L2Groups g = l2_groups(pass, sh.kv_heads, sh.head_size, 2, 132);
    EXPECT_EQ(g.count, sh.groups);
    balance_fixed_rounds(pass, sh.kv_heads, sh.head_size, 132, 2);
    EXPECT_EQ(pass.l2_groups, sh.groups);
    if (sh.groups == 0) {
      EXPECT_TRUE(g.of_pair.empty());
      EXPECT_EQ(pass.work_order, plain.work_order);
      continue;
    }
    ASSERT_EQ(g.of_pair.size(), static_cast<size_t>(sh.kv_heads) * static_cast<size_t>(g.num_seqs));
    // Groups: consecutive runs of pairs (head-major), each within 24 MB or needed for 264 items.
    const int items = pass.num_tiles() * sh.kv_heads;
    std::vector<double> group_bytes(static_cast<size_t>(g.count), 0.0), group_items(static_cast<size_t>(g.count), 0.0);
    std::vector<int> group_pairs(static_cast<size_t>(g.count), 0);
    for (size_t p = 0; p < g.of_pair.size(); ++p) {
      ASSERT_GE(g.of_pair[p], p == 0 ? 0 : g.of_pair[p - 1]);
      ASSERT_LE(g.of_pair[p], p == 0 ? 0 : g.of_pair[p - 1] + 1);
      ++group_pairs[static_cast<size_t>(g.of_pair[p])];
    }
    auto group_of = [&](int w) {
      const int tile = w / sh.kv_heads, h = w % sh.kv_heads;
      return g.of_pair[static_cast<size_t>(h) * static_cast<size_t>(g.num_seqs) + static_cast<size_t>(pass.tiles[2 * static_cast<size_t>(tile)])];
    };
    auto cost = [&](int w) {
      return 2.75 + static_cast<double>((pass.tile_keys[static_cast<size_t>(w / sh.kv_heads)] + 127) / 128);
    };
    for (int w = 0; w < items; ++w) group_items[static_cast<size_t>(group_of(w))] += 1;
    for (int seq = 0; seq < g.num_seqs; ++seq)
      for (int h = 0; h < sh.kv_heads; ++h)
        group_bytes[static_cast<size_t>(g.of_pair[static_cast<size_t>(h * g.num_seqs + seq)])] +=
            2.0 * sh.head_size * 2 * sh.q[static_cast<size_t>(seq)];
    for (int k = 0; k < g.count; ++k) {
      EXPECT_GE(group_items[static_cast<size_t>(k)], 264) << "group " << k;
      EXPECT_TRUE(group_bytes[static_cast<size_t>(k)] <= 24.0 * (1 << 20) || group_pairs[static_cast<size_t>(k)] == 1 ||
                  k == g.count - 1)
          << "group " << k << ": " << group_bytes[static_cast<size_t>(k)] << " bytes";
    }
    ASSERT_EQ(pass.work_ctas, 132);
    ASSERT_EQ(pass.work_order.size(), static_cast<size_t>(132 * pass.work_rounds));
    std::vector<int> seen(static_cast<size_t>(items), 0);
    std::vector<double> load(132, 0.0);
    double largest = 0.0, total = 0.0;
    for (int b = 0; b < 132; ++b) {
      int last_group = 0;
      for (int r = 0; r < pass.work_rounds; ++r) {
        const int w = pass.work_order[static_cast<size_t>(b * pass.work_rounds + r)];
        if (w >= items) continue;
        ++seen[static_cast<size_t>(w)];
        EXPECT_GE(group_of(w), last_group) << "CTA " << b << " round " << r << ": groups in order";
        last_group = group_of(w);
        load[static_cast<size_t>(b)] += cost(w);
        largest = std::max(largest, cost(w));
        total += cost(w);
      }
    }
    for (int w = 0; w < items; ++w) ASSERT_EQ(seen[static_cast<size_t>(w)], 1) << "item " << w;
    const double hi = *std::max_element(load.begin(), load.end());
    std::vector<double> snake(132, 0.0);  // round r's items r * 132 .. to CTAs 0.. (odd rounds from the far end)
    for (int w = 0; w < items; ++w) snake[static_cast<size_t>((w / 132) % 2 == 0 ? w % 132 : 131 - w % 132)] += cost(w);
    EXPECT_TRUE(hi <= *std::max_element(snake.begin(), snake.end()) + 1e-9 ||
                hi <= 1.01 * std::max(total / 132, largest) + 1e-9)
        << "no later than the snake, or within 1 % of the best order";
  }
}

// FLASH_ATTN, except that run() does nothing while its stream is being captured: right when
// launched, empty as a CUDA graph (a planted fault of the kind a host-side step inside run() makes).
class CaptureSkippingInstance final : public BackendInstance {
 public:
  explicit CaptureSkippingInstance(std::unique_ptr<BackendInstance> inner) : inner_(std::move(inner)) {}
  void plan() override { inner_->plan(); }
  void run() override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    (void)cudaStreamIsCapturing(static_cast<cudaStream_t>(inner_->stream()), &status);
    if (status == cudaStreamCaptureStatusNone) inner_->run();
  }
  void run_attention() override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    (void)cudaStreamIsCapturing(static_cast<cudaStream_t>(inner_->stream()), &status);
    if (status == cudaStreamCaptureStatusNone) inner_->run_attention();
  }
  void poison() override { inner_->poison(); }
  void poison_outputs() override { inner_->poison_outputs(); }
  void synchronize() override { inner_->synchronize(); }
  AttentionOutput fetch() override { return inner_->fetch(); }
  bool on_device() const override { return true; }
  void* stream() const override { return inner_->stream(); }

 private:
  std::unique_ptr<BackendInstance> inner_;
};

// The graph that `run --cuda-graph` times is the graph that gets checked: replayed over poisoned
// outputs after the samples, its output validated like the row's own. A run() that is right only
// when launched fails its row instead of being timed unchecked.
TEST(FlashAttnGpu, TimedGraphReplayIsChecked) {
  ATTN_REQUIRE_CUDA_DEVICE();
  std::vector<std::unique_ptr<Backend>> registry;
  registry.push_back(make_flash_attn_backend());
  registry.push_back(std::make_unique<testing::WrappedBackend<CaptureSkippingInstance>>(
      "capture_skipping", "FLASH_ATTN, empty when captured", make_flash_attn_backend()));
  Scenario sc = scenario_from_cli("llama3-8b", "6x1@300,1x40@100", 3);
  sc.run.num_layers = 2;  // the graph holds both layers
  PipelineOptions o;
  o.time = true;
  o.warmup = 1;
  o.iterations = 2;
  o.cuda_graph = true;
  o.batch_invariance = false;
  o.read_floor = false;
  o.check_sample = 16;
  for (const char* name : {"flash_attn", "capture_skipping"}) {
    o.backends = {name};
    const PipelineResult r = run_scenario(sc, registry, o);
    ASSERT_EQ(r.rows.size(), 1u);
    const ResultRow& row = r.rows[0];
    EXPECT_EQ(row.timing_method, "cuda_graph");
    EXPECT_EQ(row.num_layers, 2);
    if (std::string(name) == "flash_attn") {
      EXPECT_EQ(row.status, "pass") << row.reason;
    } else {
      EXPECT_EQ(row.status, "fail");
      EXPECT_NE(row.reason.find("the CUDA-graph replay that was timed"), std::string::npos) << row.reason;
    }
  }
}

}  // namespace
}  // namespace attn

// ---- benchmarks (disabled by default; run with --gtest_also_run_disabled_tests) --------------
// They print throughput and assert nothing about speed.
#include "timing/timing.hpp"

namespace attn {
namespace {

struct BenchRow {
  double us = 0, gbps = 0, tflops = 0;
  std::string plan;
};

BenchRow bench(const AttentionSpec& spec, const std::vector<RequestShape>& reqs, int prefix = 0,
               CascadeMode cascade = CascadeMode::off) {
  BatchShape shape;
  shape.requests = reqs;
  shape.shared_prefix_len = prefix;
  const Batch b = make_batch(spec, shape, 3);
  const CommonAttentionMetadata m = build_common_metadata(b);
  RunOptions opts;
  opts.cascade = cascade;
  auto inst = make_flash_attn_backend()->create(b, m, opts);
  inst->plan();
  TimingOptions t;
  t.warmup = 5;
  t.iterations = 30;
  t.cold_l2 = true;
  t.cuda_graph = true;
  const Timing tm = time_device_instance(*inst, t);
  const WorkCounts w = count_work(b);
  BenchRow r;
  r.us = tm.median_us;
  r.gbps = w.bytes / (tm.median_us * 1e3);
  r.tflops = w.flops / (tm.median_us * 1e6);
  r.plan = inst->plan_summary();
  std::printf("[bench] %-40s %9.1f us %8.1f GB/s %7.1f TFLOP/s  %s\n", "", r.us, r.gbps, r.tflops, r.plan.c_str());
  return r;
}

TEST(FlashAttnBench, DISABLED_Targets) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const AttentionSpec s = mha_spec(32, 8, 128);
  std::printf("decode 64 x 4k, 32/8 hd128 block 16 (target >= 2550 GB/s)\n");
  bench(s, std::vector<RequestShape>(64, {4096, 1}));
  std::printf("decode 8 x 16k (split-KV)\n");
  bench(s, std::vector<RequestShape>(8, {16384, 1}));
  std::printf("prefill 2 x 4k causal (target >= ~308 TFLOP/s)\n");
  bench(s, std::vector<RequestShape>(2, {0, 4096}));
  std::printf("prefill 1 x 8k causal, hd128\n");
  bench(s, std::vector<RequestShape>(1, {0, 8192}));
  std::printf("mixed: 64 decodes @4k + 2 prefill chunks 1k@2k, one launch vs separately\n");
  std::vector<RequestShape> mixed(64, {4096, 1});
  mixed.push_back({2048, 1024});
  mixed.push_back({2048, 1024});
  const BenchRow one = bench(s, mixed);
  const BenchRow dec = bench(s, std::vector<RequestShape>(64, {4096, 1}));
  const BenchRow pre = bench(s, std::vector<RequestShape>(2, {2048, 1024}));
  std::printf("[bench] mixed one launch %.1f us vs separate %.1f us\n", one.us, dec.us + pre.us);
  std::printf("cascade: 128 decodes sharing a 4k prefix (+64 own tokens), on vs off (target >= 3x)\n");
  const std::vector<RequestShape> shared(128, {4096 + 64, 1});
  const BenchRow con = bench(s, shared, 4096, CascadeMode::on);
  const BenchRow coff = bench(s, shared, 4096, CascadeMode::off);
  std::printf("[bench] cascade speedup %.2fx\n", coff.us / con.us);
  std::printf("fp8 e4m3 decode 64 x 4k\n");
  AttentionSpec f = s;
  f.kv_cache_dtype = DType::fp8_e4m3;
  bench(f, std::vector<RequestShape>(64, {4096, 1}));
#if !defined(ATTN_QUICK_BUILD)
  std::printf("prefill 2 x 4k causal hd64 32/32 and hd256 16/16\n");
  bench(mha_spec(32, 32, 64), std::vector<RequestShape>(2, {0, 4096}));
  bench(mha_spec(16, 16, 256), std::vector<RequestShape>(2, {0, 4096}));
#endif
}

}  // namespace
}  // namespace attn
