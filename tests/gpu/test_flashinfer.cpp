// FLASHINFER on the GPU against the float64 reference: random values, ragged batches, shuffled
// pages, NaN page tails (the device fill), poisoned outputs before every run.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "backends/flashinfer/flashinfer_backend.hpp"
#include "attention_alone.hpp"
#include "gpu/gpu_test_util.hpp"
#include "nan_key.hpp"
#include "metadata/common.hpp"
#include "reference/reference.hpp"
#include "validate/validate.hpp"

namespace attn {
namespace {

using testing::mha_spec;

struct Case {
  AttentionSpec spec;
  std::vector<RequestShape> requests;  // (context_len, query_len)
  int shared_prefix_len = 0;
  CascadeMode cascade = CascadeMode::off;
  uint64_t seed = 7;
  bool sm90_prefill = true;  // FlashInferOptions::sm90_prefill
  int64_t max_pairs = 0;     // (request, head) pairs the reference computes, sampled; 0 = all
};

Batch make_case_batch(const Case& c) {
  BatchShape shape;
  shape.label = "test";
  shape.requests = c.requests;
  shape.shared_prefix_len = c.shared_prefix_len;
  shape.block_allocation = BlockAllocation::shuffled;
  return make_batch(c.spec, shape, c.seed);
}

using testing::Outcome;

Outcome run_case(const Case& c) {
  FlashInferOptions fo;
  fo.sm90_prefill = c.sm90_prefill;
  RunOptions opts;
  opts.cascade = c.cascade;
  return testing::run_and_validate(*make_flashinfer_backend(fo), make_case_batch(c), opts, c.max_pairs);
}

// The decode of every group through the tensor-core path (the prefill kernel), as an A/B switch.
struct ForceTensorCoreDecode {
  ForceTensorCoreDecode() { setenv("ATTN_FI_TENSOR_CORE_DECODE", "1", 1); }
  ~ForceTensorCoreDecode() { unsetenv("ATTN_FI_TENSOR_CORE_DECODE"); }
};


TEST(FlashInferGpu, DecodeCudaCoresGroups1To4) {
  ATTN_REQUIRE_CUDA_DEVICE();
  for (int g : {1, 2, 3, 4}) {
    Case c{mha_spec(4 * g, 4, 128)};
    c.requests = {{333, 1}, {0, 1}, {1100, 1}, {15, 1}, {16, 1}, {2047, 1}};
    const Outcome r = run_case(c);
    EXPECT_VALID(r) << " (group " << g << ")";
    EXPECT_NE(r.plan.find("decode:cuda_cores"), std::string::npos) << r.plan;
  }
}

TEST(FlashInferGpu, DecodeTensorCoresAgreeWithCudaCores) {
  // Groups 1-4 run on CUDA cores by vLLM's rule; forced onto tensor cores they must agree.
  ATTN_REQUIRE_CUDA_DEVICE();
  for (int g : {1, 2, 4}) {
    Case c{mha_spec(2 * g, 2, 128)};
    c.requests = {{900, 1}, {1, 1}, {4000, 1}, {77, 1}};
    const Outcome cc = run_case(c);
    EXPECT_VALID(cc) << " (group " << g << ")";
    EXPECT_NE(cc.plan.find("decode:cuda_cores"), std::string::npos) << cc.plan;
    ForceTensorCoreDecode force;
    const Outcome tc = run_case(c);
    EXPECT_VALID(tc) << " (group " << g << ", tensor cores forced)";
    EXPECT_NE(tc.plan.find("decode:tile_q=16"), std::string::npos) << tc.plan;
    const OutputDiff d = diff_outputs(cc.out, tc.out);
    EXPECT_LT(d.rel_l2, 5e-3) << " (group " << g << ")";
  }
}

TEST(FlashInferGpu, DecodeTensorCoresForGroupsAboveFour) {
  // Groups 5, 7, 8 (vLLM's use_tensor_cores rule): the prefill kernel, 16-row tiles, partial groups.
  ATTN_REQUIRE_CUDA_DEVICE();
  for (int g : {5, 7, 8}) {
    Case c{mha_spec(2 * g, 2, 128)};
    c.requests = {{900, 1}, {1, 1}, {4000, 1}, {77, 1}};
    const Outcome tc = run_case(c);
    EXPECT_VALID(tc) << " (group " << g << ")";
    EXPECT_NE(tc.plan.find("decode:tile_q=16"), std::string::npos) << tc.plan;
  }
}

TEST(FlashInferGpu, PageSizesNotPowersOfTwo) {
  // The kernels divide keys by the page size with a multiply-high (FastDivU32) when they fill
  // their row-address tables: pages of 24 and 80 keys through the CUDA-core decode (group 4),
  // the tensor-core decode (group 8) and FlashInfer's own prefill, ragged tails included.
  ATTN_REQUIRE_CUDA_DEVICE();
  for (int bs : {24, 80}) {
    for (int g : {4, 8}) {
      Case c{mha_spec(2 * g, 2, 128, DType::bf16, bs)};
      c.requests = {{900, 1}, {1, 1}, {4001, 1}, {77, 1}, {bs - 1, 1}, {bs, 1}};
      const Outcome r = run_case(c);
      EXPECT_VALID(r) << " (page size " << bs << ", group " << g << ")";
      EXPECT_NE(r.plan.find(g <= 4 ? "decode:cuda_cores" : "decode:tile_q=16"), std::string::npos) << r.plan;
    }
    Case pre{mha_spec(8, 2, 128, DType::bf16, bs)};
    pre.requests = {{0, 97}, {150, 1}, {333, 200}, {bs + 1, 64}};
    pre.sm90_prefill = false;
    EXPECT_VALID(run_case(pre)) << " (page size " << bs << ", mma.sync prefill)";
  }
}

TEST(FlashInferGpu, SplitKvForFewLongDecodes) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(8, 2, 128)};
  c.requests = {{7000, 1}, {3333, 1}};
  const Outcome r = run_case(c);
  EXPECT_VALID(r);
  EXPECT_EQ(r.plan.find("work=2 "), std::string::npos) << "expected a split schedule: " << r.plan;
}

TEST(FlashInferGpu, MixedChunkedPrefillReordersDecodesFirst) {
  ATTN_REQUIRE_CUDA_DEVICE();
  // Prefills before decodes in the batch: the builder moves the decodes first, fetch() restores order.
  Case c{mha_spec(28, 4, 128, DType::f16, 32)};
  c.requests = {{0, 97}, {150, 1}, {40, 64}, {1000, 1}, {1000, 300}, {3, 19}, {5, 1}};
  EXPECT_VALID(run_case(c));
}

TEST(FlashInferGpu, LongPrefillsAllTiles) {
  ATTN_REQUIRE_CUDA_DEVICE();
  // FlashInfer's own prefill plan and kernel (the sm_90a path has its own tiles).
  Case big{mha_spec(32, 8, 128)};  // mean packed length > 64: q tile 128
  big.sm90_prefill = false;
  big.requests = {{0, 1500}, {700, 600}, {129, 255}};
  const Outcome r = run_case(big);
  EXPECT_VALID(r);
  EXPECT_NE(r.plan.find("tile_q=128"), std::string::npos) << r.plan;
  Case mid{mha_spec(8, 8, 128)};  // mean packed 17..64: q tile 64
  mid.sm90_prefill = false;
  mid.requests = {{100, 40}, {0, 30}, {2000, 20}};
  const Outcome m = run_case(mid);
  EXPECT_VALID(m);
  EXPECT_NE(m.plan.find("tile_q=64"), std::string::npos) << m.plan;
}

// The prefill part on the sm_90a kernel (the CSR page table read through its indptr, O and the
// base-2 LSE written in place) and on FlashInfer's mma.sync prefill: both pass, NHD and HND,
// with a window, a soft cap, GQA 7 and decodes in the same batch (their own pass).
TEST(FlashInferGpu, PrefillOnSm90AndMmaSync) {
  ATTN_REQUIRE_CUDA_DEVICE();
  for (const KvLayout layout : {KvLayout::NHD, KvLayout::HND}) {
    for (const bool sm90 : {false, true}) {
      Case c{mha_spec(28, 4, 128, DType::f16, 32)};
      c.spec.kv_layout = layout;
      c.spec.sliding_window = 300;
      c.spec.logits_soft_cap = 20.0f;
      c.sm90_prefill = sm90;
      c.requests = {{0, 97}, {150, 1}, {40, 64}, {1000, 300}, {3, 19}};
      const Outcome r = run_case(c);
      EXPECT_VALID(r) << (sm90 ? " (sm90)" : " (mma.sync)");
      const bool on_sm90 = r.plan.find("prefill:sm90") != std::string::npos;
      EXPECT_EQ(on_sm90, sm90 && testing::sm90_device()) << r.plan;
    }
  }
#if !defined(ATTN_QUICK_BUILD)
  // Head sizes 64 and 256 take it too (bf16, long causal).
  for (const int d : {64, 256}) {
    Case c{mha_spec(8, 2, d)};
    c.requests = {{0, 700}, {1200, 300}};
    const Outcome r = run_case(c);
    EXPECT_VALID(r) << " (head size " << d << ")";
  }
#endif
}

// Short prefills on the sm_90a kernel take the planner's balanced fixed rounds, as FLASH_ATTN's do
// (testing::short_prefill_rounds).
TEST(FlashInferGpu, Sm90PrefillBalancedRounds) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(8, 2, 128)};
  c.requests = testing::short_prefill_rounds();
  const Outcome r = run_case(c);
  EXPECT_VALID(r);
  if (r.plan.find("prefill:sm90") != std::string::npos && testing::device_sm_count() == 132)
    EXPECT_NE(r.plan.find("rounds=balanced"), std::string::npos) << r.plan;
}

// FLASH_ATTN's HeadGroupedRounds through FLASHINFER's prefill pass (testing::l2_grouped_prefill):
// the same grouped list, named in the plan summary.
TEST(FlashInferGpu, Sm90PrefillGroupedRounds) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(32, 32, 128)};
  c.requests = testing::l2_grouped_prefill();
  c.max_pairs = 12;
  const Outcome r = run_case(c);
  EXPECT_VALID(r);
  if (r.plan.find("prefill:sm90") != std::string::npos && testing::device_sm_count() == 132)
    EXPECT_NE(r.plan.find("l2_groups=4"), std::string::npos) << r.plan;
}

TEST(FlashInferGpu, WindowAndSoftCap) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(16, 8, 128)};
  c.spec.sliding_window = 100;
  c.spec.logits_soft_cap = 30.0f;
  c.requests = {{0, 300}, {500, 1}, {90, 50}, {2000, 1}, {0, 1}};
  EXPECT_VALID(run_case(c));
}

TEST(FlashInferGpu, HndEqualsNhd) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(32, 8, 128)};
  c.requests = {{300, 1}, {0, 60}, {1000, 1}, {64, 33}};
  const Outcome nhd = run_case(c);
  EXPECT_VALID(nhd);
  c.spec.kv_layout = KvLayout::HND;
  const Outcome hnd = run_case(c);
  EXPECT_VALID(hnd);
  EXPECT_TRUE(diff_outputs(nhd.out, hnd.out).bitwise_equal);
}

// An fp8 cache with host k/v scales (FlashInfer's convention), group g over 4 kv heads; e5m2
// under an fp16 model, e4m3 under bf16.
Case fp8_case(DType kv, int g) {
  Case c{mha_spec(4 * g, 4, 128, kv == DType::fp8_e5m2 ? DType::f16 : DType::bf16)};
  c.spec.kv_cache_dtype = kv;
  c.spec.k_scale = 0.05f;
  c.spec.v_scale = 0.03f;
  return c;
}

TEST(FlashInferGpu, Fp8CachesWithHostScales) {
  ATTN_REQUIRE_CUDA_DEVICE();
  for (DType kv : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    for (int g : {4, 8}) {
      Case c = fp8_case(kv, g);
      c.requests = {{333, 1}, {70, 90}, {0, 1}, {1100, 1}, {5, 200}};
      EXPECT_VALID(run_case(c)) << " (" << to_string(kv) << ", group " << g << ")";
    }
    // A prefill-only batch: the sm_90a kernel widens the codes, the layer's scales go with them.
    Case p = fp8_case(kv, 7);
    p.requests = {{0, 300}, {500, 130}, {37, 64}};
    const Outcome r = run_case(p);
    EXPECT_VALID(r) << " (" << to_string(kv) << ", prefill)";
    EXPECT_EQ(r.plan.find("prefill:sm90") != std::string::npos, testing::sm90_device()) << r.plan;
    // FlashInfer's own mma.sync prefill over the codes, Q in fragment slots: q tiles of 128 (group 7,
    // long chunks) and 64 (group 1, short ones), every warp of the tile on its own rows.
    struct MmaSyncPrefill {
      int group, tile_q;
      std::vector<RequestShape> requests;
    };
    for (const MmaSyncPrefill& m : {MmaSyncPrefill{7, 128, {{0, 300}, {500, 130}, {37, 64}}},
                                    MmaSyncPrefill{1, 64, {{100, 40}, {0, 30}, {2000, 20}}}}) {
      Case c = fp8_case(kv, m.group);
      c.sm90_prefill = false;
      c.requests = m.requests;
      const Outcome rm = run_case(c);
      EXPECT_VALID(rm) << " (" << to_string(kv) << ", mma.sync prefill, q tile " << m.tile_q << ")";
      EXPECT_NE(rm.plan.find("tile_q=" + std::to_string(m.tile_q) + " "), std::string::npos) << rm.plan;
    }
  }
}

// The decode of groups 1-4 on the CUDA-core kernel, whatever the cache dtype (A/B switch).
struct ForceCudaCoreDecode {
  ForceCudaCoreDecode() { setenv("ATTN_FI_TENSOR_CORE_DECODE", "0", 1); }
  ~ForceCudaCoreDecode() { unsetenv("ATTN_FI_TENSOR_CORE_DECODE"); }
};

TEST(FlashInferGpu, Fp8DecodeRunsOnTensorCoresAndAgreesWithCudaCores) {
  // An fp8 cache takes the tensor-core decode at every group (registers widen the codes); forced
  // onto the CUDA-core kernel, the same batch must agree with it and with the reference.
  ATTN_REQUIRE_CUDA_DEVICE();
  for (DType kv : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    for (int g : {1, 4}) {
      Case c = fp8_case(kv, g);
      c.requests = {{900, 1}, {1, 1}, {4000, 1}, {77, 1}};
      const Outcome tc = run_case(c);
      EXPECT_VALID(tc) << " (" << to_string(kv) << ", group " << g << ")";
      EXPECT_NE(tc.plan.find("decode:tile_q=16"), std::string::npos) << tc.plan;
      ForceCudaCoreDecode force;
      const Outcome cc = run_case(c);
      EXPECT_VALID(cc) << " (" << to_string(kv) << ", group " << g << ", CUDA cores forced)";
      EXPECT_NE(cc.plan.find("decode:cuda_cores"), std::string::npos) << cc.plan;
      EXPECT_LT(diff_outputs(cc.out, tc.out).rel_l2, 5e-3) << " (" << to_string(kv) << ", group " << g << ")";
    }
  }
}

// [run] num_layers: three layers over caches of their own on one plan, a mixed step (decode and
// prefill passes), then two layers of a cascade (a merge of two levels per layer).
TEST(FlashInferGpu, LayersEachOverTheirOwnCache) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(32, 8, 128)};
  for (int i = 0; i < 12; ++i) c.requests.push_back({300 + 41 * i, 1});
  c.requests.push_back({260, 200});
  testing::expect_layers_like_one(*make_flashinfer_backend(), make_case_batch(c), 3);
  Case cas{mha_spec(16, 4, 128)};
  cas.requests = {{700, 1}, {650, 3}, {900, 1}};
  cas.shared_prefix_len = 512;
  RunOptions cascade;
  cascade.cascade = CascadeMode::on;
  testing::expect_layers_like_one(*make_flashinfer_backend(), make_case_batch(cas), 2, cascade);
}

// What `run --timed attention` times: the step's passes without its cache writes, two layers of a
// mixed step (decode and prefill passes) and of a two-level cascade.
TEST(FlashInferGpu, AttentionAloneIsTheStepsWithoutTheCacheWrite) {
  ATTN_REQUIRE_CUDA_DEVICE();
  RunOptions two;
  two.num_layers = 2;
  Case c{mha_spec(32, 8, 128)};
  for (int i = 0; i < 12; ++i) c.requests.push_back({300 + 41 * i, 1});
  c.requests.push_back({260, 200});
  testing::expect_attention_alone_is_the_steps(*make_flashinfer_backend(), make_case_batch(c), two);
  Case cas{mha_spec(16, 4, 128)};
  cas.requests = {{700, 1}, {650, 3}, {900, 1}};
  cas.shared_prefix_len = 512;
  RunOptions cascade = two;
  cascade.cascade = CascadeMode::on;
  testing::expect_attention_alone_is_the_steps(*make_flashinfer_backend(), make_case_batch(cas), cascade);
}

// A NaN key reaches every row that attends it through FLASHINFER's merges by LSE: a split decode,
// and the two-level cascade with level 0 in kv splits on the sm_90a kernel or on FlashInfer's own
// prefill (a key of the shared prefix, and one of a request's own). New tokens' keys, NaN in the K
// input, reach the rows at and after them and not those before them, masked in the same tiles: in
// the cascade's suffix level and in a prefill from scratch, on both prefill kernels.
TEST(FlashInferGpu, NanKeyReachesEveryRowThatAttendsIt) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case split{mha_spec(8, 2, 128)};
  split.requests = {{7000, 1}, {3333, 1}};
  const std::string plan =
      testing::expect_nan_key_reaches_its_rows(*make_flashinfer_backend(), make_case_batch(split), {0, 4100, 1});
  EXPECT_EQ(plan.find("work=2 "), std::string::npos) << "expected a split schedule: " << plan;
  Case cascade{mha_spec(16, 4, 128)};
  cascade.shared_prefix_len = 2048;
  for (int i = 0; i < 12; ++i) cascade.requests.push_back({2048 + 37 * i, 1});
  cascade.requests.push_back({2100, 45});
  const Batch cb = make_case_batch(cascade);
  Case fresh{mha_spec(8, 1, 128)};
  fresh.requests = {{0, 300}, {0, 129}};
  const Batch fb = make_case_batch(fresh);
  RunOptions on;
  on.cascade = CascadeMode::on;
  for (const bool sm90 : {true, false}) {
    FlashInferOptions fo;
    fo.sm90_prefill = sm90;
    for (const TokenKey key : {TokenKey{0, 1500, 2}, TokenKey{12, 2090, 0}, TokenKey{12, 2120, 0}}) {
      const std::string p = testing::expect_nan_key_reaches_its_rows(*make_flashinfer_backend(fo), cb, key, on);
      EXPECT_NE(p.find("cascade=on"), std::string::npos) << p;
    }
    testing::expect_nan_key_reaches_its_rows(*make_flashinfer_backend(fo), fb, {0, 150, 0});
  }
}

TEST(FlashInferGpu, CascadeMatchesNonCascade) {
  // Level 0 (every token against the shared prefix) runs the sm_90a kernel on an sm_90a device,
  // in kv splits with a slot each, or FlashInfer's own prefill; both must merge with level 1 to
  // the non-cascade result.
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(16, 4, 128)};
  c.spec.logits_soft_cap = 30.0f;
  c.shared_prefix_len = 2048;
  for (int i = 0; i < 12; ++i) c.requests.push_back({2048 + 37 * i, 1});
  c.requests.push_back({2100, 45});
  c.cascade = CascadeMode::off;
  const Outcome off = run_case(c);
  EXPECT_VALID(off);
  for (const bool sm90 : {true, false}) {
    c.cascade = CascadeMode::on;
    c.sm90_prefill = sm90;
    const Outcome on = run_case(c);
    EXPECT_VALID(on) << (sm90 ? " (level 0 on sm90)" : " (level 0 on mma.sync)");
    EXPECT_NE(on.plan.find("cascade=on"), std::string::npos) << on.plan;
    const bool level0_sm90 = on.plan.find("cascade_prefix:sm90") != std::string::npos;
    EXPECT_EQ(level0_sm90, sm90 && testing::sm90_device()) << on.plan;
    if (level0_sm90) EXPECT_NE(on.plan.find(" splits="), std::string::npos) << "expected kv splits: " << on.plan;
    EXPECT_LT(diff_outputs(on.out, off.out).rel_l2, 1e-2);
  }
}

TEST(FlashInferGpu, Fp8CacheNeverTakesTheCascade) {
  // vLLM's FlashInfer builder refuses the cascade for a cache dtype other than the model's
  // (FlashInfer's cascade wrapper has one dtype); `--cascade on` cannot force it either.
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c = fp8_case(DType::fp8_e4m3, 4);
  c.shared_prefix_len = 1024;
  for (int i = 0; i < 8; ++i) c.requests.push_back({1024 + 40 * i, 1});
  for (const CascadeMode mode : {CascadeMode::auto_, CascadeMode::on}) {
    c.cascade = mode;
    const Outcome r = run_case(c);
    EXPECT_VALID(r);
    EXPECT_NE(r.plan.find("cascade=off (kv cache dtype fp8_e4m3 differs from the model dtype bf16"), std::string::npos)
        << r.plan;
  }
  // The same batch over a bf16 cache takes it when forced.
  Case b{mha_spec(16, 4, 128)};
  b.shared_prefix_len = c.shared_prefix_len;
  b.requests = c.requests;
  b.cascade = CascadeMode::on;
  const Outcome r = run_case(b);
  EXPECT_VALID(r);
  EXPECT_NE(r.plan.find("cascade=on"), std::string::npos) << r.plan;
}

TEST(FlashInferGpu, CudaGraphReplay) {
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(32, 8, 128)};
  c.requests = {{300, 1}, {0, 60}, {1000, 1}};
  const Batch b = make_case_batch(c);
  const CommonAttentionMetadata m = build_common_metadata(b);
  auto inst = make_flashinfer_backend()->create(b, m, RunOptions{});
  inst->plan();
  AttentionOutput out;
  testing::replay_in_graph(*inst, &out);
  if (HasFatalFailure()) return;
  const ValidationResult v = validate_output(b, out, compute_reference(b), default_budget(c.spec.dtype));
  EXPECT_TRUE(v.pass) << v.failure;
}

TEST(FlashInferGpu, GraphPlannedForALargerBatchReplaysThisOne) {
  // Planned for 32 requests (a vLLM capture size), run with 5: the grid covers the padded work
  // list and the blocks past the real work items exit (bug class 9: never read stale entries).
  // The contexts are short enough (15 work items at the 8-page minimum chunk) that the padded
  // grid, max_grid / num_kv_heads, exceeds the real work at any occupancy the knobs give.
  ATTN_REQUIRE_CUDA_DEVICE();
  Case c{mha_spec(32, 8, 128)};
  c.requests = {{300, 1}, {17, 1}, {1000, 1}, {130, 1}, {64, 1}};
  const Batch b = make_case_batch(c);
  const CommonAttentionMetadata m = build_common_metadata(b);
  RunOptions opts;
  opts.graph_capture_size = 32;
  auto inst = make_flashinfer_backend()->create(b, m, opts);
  inst->plan();
  EXPECT_NE(inst->plan_summary().find("padded_work="), std::string::npos) << inst->plan_summary();
  AttentionOutput out;
  testing::replay_in_graph(*inst, &out);
  if (HasFatalFailure()) return;
  const ValidationResult v = validate_output(b, out, compute_reference(b), default_budget(c.spec.dtype));
  EXPECT_TRUE(v.pass) << v.failure << " | " << inst->plan_summary();
}

#if !defined(ATTN_QUICK_BUILD)
TEST(FlashInferGpu, HeadSizes64And256) {
  ATTN_REQUIRE_CUDA_DEVICE();
  for (int d : {64, 256}) {
    for (int g : {2, 8}) {
      Case c{mha_spec(2 * g, 2, d)};
      c.requests = {{333, 1}, {70, 90}, {0, 1}, {1100, 1}, {5, 200}};
      EXPECT_VALID(run_case(c)) << " (head size " << d << ", group " << g << ")";
    }
  }
}
#endif

TEST(FlashInferSelector, SkipsWithTheSeedsReasons) {
  const auto backend = make_flashinfer_backend();
  Case c{mha_spec(32, 8, 128)};
  c.requests = {{10, 1}};
  auto reason = [&](const AttentionSpec& s) {
    Case k = c;
    k.spec = s;
    return backend->supports(s, make_case_batch(k)).reason;
  };
  AttentionSpec s = c.spec;
  s.alibi = true;
  EXPECT_NE(reason(s).find("ALiBi"), std::string::npos);
  s = c.spec;
  s.sinks = true;
  EXPECT_NE(reason(s).find("sinks"), std::string::npos);
  s = c.spec;
  s.head_size_qk = s.head_size_v = 96;
  EXPECT_NE(reason(s).find("96"), std::string::npos);
  EXPECT_TRUE(backend->supports(c.spec, make_case_batch(c)).ok);
}

}  // namespace
}  // namespace attn
