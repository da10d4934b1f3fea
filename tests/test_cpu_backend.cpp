// The cpu backend against the float64 reference and against a small naive oracle written here
// from the Batch's values, feature by feature; plus its building blocks (cache writes,
// merge_attn_states), the registry and the selector.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/cpu_cache_ops.hpp"
#include "backends/cpu/merge_attn_states.hpp"
#include "backends/cpu/online_softmax.hpp"
#include "core/error.hpp"
#include "metadata/common.hpp"
#include "model/batch.hpp"
#include "model/kv_cache.hpp"
#include "reference/reference.hpp"

#include "attention_alone.hpp"
#include "mha_spec.hpp"
#include "nan_key.hpp"

namespace attn {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Inputs are exact in float and the backend accumulates in fp32: observed errors are ~4e-7
// (MLA's 512-long up-projections included), so this bound is fp32-level with 10x headroom.
constexpr double kTol = 5e-6;

using testing::mha_spec;

AttentionSpec mla_spec(int hq, DType dtype = DType::bf16, int block_size = 16) {
  AttentionSpec s;
  s.use_mla = true;
  s.num_q_heads = hq;
  s.num_kv_heads = 1;
  s.head_size_qk = s.mla.qk_head_dim();
  s.head_size_v = s.mla.v_head_dim;
  s.dtype = s.kv_cache_dtype = dtype;
  s.block_size = block_size;
  return s;
}

Batch make_test_batch(const AttentionSpec& s, std::vector<RequestShape> reqs, int shared_prefix = 0,
                      int local_chunk = 0, uint64_t seed = 11) {
  BatchShape shape;
  shape.label = "test";
  shape.requests = std::move(reqs);
  shape.shared_prefix_len = shared_prefix;
  shape.local_attention_chunk = local_chunk;
  shape.block_allocation = BlockAllocation::shuffled;
  return make_batch(s, shape, seed);
}

bool all_nan(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isnan(x)) return false;
  return true;
}

struct CpuRun {
  AttentionOutput out;
  std::string summary;
};

// plan -> poison -> run -> fetch, checking that the poison really covered the outputs.
CpuRun run_cpu(const Batch& b, const RunOptions& opts = {}, const CpuBackendOptions& cpu = {}) {
  auto backend = make_cpu_backend(cpu);
  const Support s = backend->supports(b.spec, b);
  EXPECT_TRUE(s.ok) << s.reason;
  auto inst = backend->create(b, build_common_metadata(b), opts);
  inst->plan();
  inst->poison();
  const AttentionOutput poisoned = inst->fetch();
  EXPECT_TRUE(all_nan(poisoned.o) && all_nan(poisoned.lse)) << "poison() left outputs written";
  inst->run();
  inst->synchronize();
  return {inst->fetch(), inst->plan_summary()};
}

// ---- naive oracle: float64, dense, straight from the semantics in docs/DESIGN.md --------------

struct Expected {
  std::vector<double> o;    // [num_tokens, num_heads, head_size_v]
  std::vector<double> lse;  // [num_tokens, num_heads]
};

Expected naive_attention(const Batch& b) {
  const AttentionSpec& s = b.spec;
  const int hq = s.num_q_heads, dqk = s.head_size_qk, dv = s.head_size_v;
  const MlaDims& md = s.mla;
  Expected e;
  e.o.assign(static_cast<size_t>(b.num_tokens() * hq * dv), 0.0);
  e.lse.assign(static_cast<size_t>(b.num_tokens() * hq), -kInf);
  // MLA up-projections, [head][c][d].
  std::vector<std::vector<double>> w_uk(hq), w_uv(hq);
  if (s.use_mla) {
    for (int h = 0; h < hq; ++h) {
      for (int c = 0; c < md.kv_lora_rank; ++c) {
        for (int d = 0; d < md.qk_nope_head_dim; ++d) w_uk[h].push_back(b.w_uk(h, c, d));
        for (int d = 0; d < md.v_head_dim; ++d) w_uv[h].push_back(b.w_uv(h, c, d));
      }
    }
  }
  for (int r = 0; r < b.num_reqs(); ++r) {
    const int ctx = b.requests[r].context_len, seq = b.requests[r].seq_len();
    std::vector<std::vector<double>> latent(s.use_mla ? seq : 0);
    for (int key = 0; key < static_cast<int>(latent.size()); ++key)
      for (int c = 0; c < md.latent_dim(); ++c) latent[key].push_back(b.latent(r, key, c));
    for (int h = 0; h < hq; ++h) {
      // Keys and values of this (request, head) for every position, up-projected for MLA.
      std::vector<std::vector<double>> K(seq, std::vector<double>(dqk)), V(seq, std::vector<double>(dv));
      for (int key = 0; key < seq; ++key) {
        if (s.use_mla) {
          for (int c = 0; c < md.kv_lora_rank; ++c) {
            const double x = latent[key][c];
            for (int d = 0; d < md.qk_nope_head_dim; ++d) K[key][d] += x * w_uk[h][c * md.qk_nope_head_dim + d];
            for (int d = 0; d < md.v_head_dim; ++d) V[key][d] += x * w_uv[h][c * md.v_head_dim + d];
          }
          for (int d = 0; d < md.qk_rope_head_dim; ++d) K[key][md.qk_nope_head_dim + d] = latent[key][md.kv_lora_rank + d];
        } else {
          const int kvh = h / s.gqa_ratio();
          for (int d = 0; d < dqk; ++d) K[key][d] = b.k(r, key, kvh, d);
          for (int d = 0; d < dv; ++d) V[key][d] = b.v(r, key, kvh, d);
        }
      }
      for (int i = 0; i < b.requests[r].query_len; ++i) {
        const int p = ctx + i;
        int lo = 0, hi = seq;
        if (s.causal()) {
          hi = p + 1;
          if (s.sliding_window > 0) lo = std::max(lo, p - s.sliding_window + 1);
          if (b.local_attention_chunk > 0) lo = std::max(lo, p / b.local_attention_chunk * b.local_attention_chunk);
        }
        std::vector<double> q(dqk);
        for (int d = 0; d < dqk; ++d) q[d] = b.q(r, p, h, d);
        std::vector<double> logit(seq);
        double m = s.sinks ? b.sinks[h] : -kInf;
        for (int key = lo; key < hi; ++key) {
          double x = 0;
          for (int d = 0; d < dqk; ++d) x += q[d] * K[key][d];
          x *= s.scale;
          if (s.logits_soft_cap > 0) x = s.logits_soft_cap * std::tanh(x / s.logits_soft_cap);
          if (s.alibi) x -= b.alibi[h] * std::abs(p - key);
          logit[key] = x;
          m = std::max(m, x);
        }
        const int64_t row = (b.query_start_loc[r] + i) * int64_t{hq} + h;
        if (m == -kInf) continue;
        double denom = s.sinks ? std::exp(b.sinks[h] - m) : 0.0;
        for (int key = lo; key < hi; ++key) denom += std::exp(logit[key] - m);
        for (int key = lo; key < hi; ++key) {
          const double w = std::exp(logit[key] - m) / denom;
          for (int d = 0; d < dv; ++d) e.o[row * dv + d] += w * V[key][d];
        }
        e.lse[row] = m + std::log(denom);
      }
    }
  }
  return e;
}

// |got - want| <= tol * (1 + |want|) everywhere, LSE included (-inf must match -inf).
void expect_matches(const AttentionOutput& got, const std::vector<double>& o, const std::vector<double>& lse,
                    double tol, const std::string& what) {
  ASSERT_EQ(got.o.size(), o.size()) << what;
  ASSERT_EQ(got.lse.size(), lse.size()) << what;
  double worst = 0;
  int64_t worst_at = -1, bad = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    const double err = std::abs(got.o[i] - o[i]);
    if (!(err <= tol * (1 + std::abs(o[i])))) ++bad;
    if (!(err <= worst)) {
      worst = err;
      worst_at = static_cast<int64_t>(i);
    }
  }
  EXPECT_EQ(bad, 0) << what << ": worst |o - ref| = " << worst << " at element " << worst_at;
  int64_t bad_lse = 0;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lse[i])) {
      bad_lse += !(std::isinf(got.lse[i]) && got.lse[i] < 0);
    } else {
      bad_lse += !(std::abs(got.lse[i] - lse[i]) <= tol * (1 + std::abs(lse[i])));
    }
  }
  EXPECT_EQ(bad_lse, 0) << what << ": LSE rows off";
}

void check_against_both(const Batch& b, const AttentionOutput& got, double tol) {
  const Expected naive = naive_attention(b);
  expect_matches(got, naive.o, naive.lse, tol, "vs naive");
  const ReferenceResult ref = compute_reference(b);
  expect_matches(got, ref.o, ref.lse, tol, "vs compute_reference");
}

// ---- every MHA feature, each on a ragged batch with shuffled blocks ---------------------------

struct FeatureCase {
  std::string name;
  AttentionSpec spec;
  std::vector<RequestShape> requests;  // {context_len, query_len}
  int shared_prefix = 0;
  int local_chunk = 0;
};

AttentionSpec with(AttentionSpec s, auto&& edit) {
  edit(s);
  return s;
}

std::vector<FeatureCase> feature_cases() {
  const std::vector<RequestShape> ragged{{37, 1}, {0, 20}, {50, 9}, {5, 1}, {16, 16}};
  return {
      {"CausalGqa7NhdBf16", mha_spec(14, 2, 32), ragged},
      {"CausalGqa5HndFp16", mha_spec(10, 2, 64, DType::f16, 8, KvLayout::HND), {{0, 23}, {41, 1}, {19, 6}}},
      {"MhaFp32Block32", mha_spec(4, 4, 48, DType::f32, 32), {{70, 3}, {1, 1}, {0, 40}}},
      {"NonCausalHnd",
       with(mha_spec(4, 2, 32, DType::bf16, 16, KvLayout::HND), [](auto& s) { s.attn_type = AttentionType::encoder_only; }),
       {{0, 25}, {0, 7}, {12, 5}}},
      {"WindowSmallerThanPrefillChunk", with(mha_spec(6, 3, 32), [](auto& s) { s.sliding_window = 8; }),
       {{40, 30}, {3, 1}, {60, 1}, {0, 25}}},
      {"SoftCap", with(mha_spec(4, 1, 32), [](auto& s) { s.logits_soft_cap = 2.0f; }), ragged},
      {"Alibi", with(mha_spec(8, 2, 32, DType::bf16, 8, KvLayout::HND), [](auto& s) { s.alibi = true; }), ragged},
      {"AlibiNonCausal",
       with(mha_spec(4, 4, 32), [](auto& s) { s.alibi = true; s.attn_type = AttentionType::encoder_only; }),
       {{0, 19}, {0, 6}}},
      {"Sinks", with(mha_spec(4, 2, 32), [](auto& s) { s.sinks = true; }), ragged},
      // The worked example of make_local_attention_virtual_batches: q = [4, 10, 5], kv = [6, 17, 9].
      {"LocalAttentionSourceExample", mha_spec(4, 2, 32, DType::bf16, 4), {{2, 4}, {7, 10}, {4, 5}}, 0, 4},
      {"LocalAttentionPrefillSpansChunks", with(mha_spec(6, 2, 32, DType::bf16, 8), [](auto& s) { s.sinks = true; }),
       {{30, 40}, {47, 1}, {0, 33}}, 0, 16},
      {"Fp8E4m3NonUnitScales",
       with(mha_spec(4, 2, 32), [](auto& s) { s.kv_cache_dtype = DType::fp8_e4m3; s.k_scale = 0.5f; s.v_scale = 2.0f; }),
       ragged},
      {"Fp8E5m2NonUnitScalesHnd", with(mha_spec(6, 3, 64, DType::f16, 16, KvLayout::HND), [](auto& s) {
         s.kv_cache_dtype = DType::fp8_e5m2;
         s.k_scale = 0.25f;
         s.v_scale = 3.0f;
       }),
       ragged},
      {"VHeadSizeDiffersFromQk", with(mha_spec(6, 2, 64, DType::bf16, 16, KvLayout::HND), [](auto& s) { s.head_size_v = 40; }),
       ragged},
      {"SharedPrefixWithoutCascade", mha_spec(4, 2, 32), {{40, 1}, {33, 7}, {32, 1}}, 32},
      {"EverythingAtOnce", with(mha_spec(14, 2, 32, DType::bf16, 16, KvLayout::HND), [](auto& s) {
         s.sliding_window = 24;
         s.logits_soft_cap = 5.0f;
         s.alibi = true;
         s.sinks = true;
         s.kv_cache_dtype = DType::fp8_e4m3;
         s.k_scale = 0.7f;
         s.v_scale = 1.5f;
       }),
       ragged},
  };
}

void PrintTo(const FeatureCase& c, std::ostream* os) { *os << c.name; }

class CpuFeature : public ::testing::TestWithParam<FeatureCase> {};

TEST_P(CpuFeature, MatchesReferenceAndNaive) {
  const FeatureCase& c = GetParam();
  const Batch b = make_test_batch(c.spec, c.requests, c.shared_prefix, c.local_chunk);
  const CpuRun run = run_cpu(b);
  check_against_both(b, run.out, kTol);
  if (c.local_chunk > 0) {
    EXPECT_NE(run.summary.find("local_chunk="), std::string::npos) << run.summary;
  }
}

INSTANTIATE_TEST_SUITE_P(Features, CpuFeature, ::testing::ValuesIn(feature_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- cascade ------------------------------------------------------------------------------------

std::vector<RequestShape> cascade_requests() {
  // 9 requests share 64 tokens; decodes, chunked prefills and one whose context is exactly the
  // prefix (its suffix holds only new tokens).
  return {{64, 1}, {70, 1}, {99, 4}, {64, 9}, {128, 1}, {65, 3}, {80, 1}, {77, 12}, {100, 1}};
}

TEST(CpuCascade, OnAndOffAgreeWithReference) {
  AttentionSpec s = mha_spec(8, 2, 32);
  s.logits_soft_cap = 4.0f;
  s.sinks = true;  // the sink must enter the merged denominator exactly once
  const Batch b = make_test_batch(s, cascade_requests(), 64);
  RunOptions on, off;
  on.cascade = CascadeMode::on;
  off.cascade = CascadeMode::off;
  const CpuRun a = run_cpu(b, on), c = run_cpu(b, off);
  EXPECT_EQ(a.summary, "cascade=on prefix=64");
  EXPECT_EQ(c.summary, "cascade=off (off by option)");
  check_against_both(b, a.out, kTol);
  check_against_both(b, c.out, kTol);
  for (size_t i = 0; i < a.out.o.size(); ++i) ASSERT_NEAR(a.out.o[i], c.out.o[i], 1e-5) << i;
}

// A NaN key reaches exactly the rows that attend it: through the cascade's merge (a key of the
// shared prefix, every request's rows; a key of one request past the prefix; a new token's, written
// by the run's cache write and masked from the tokens before it), and through the MLA prefill's
// context chunks, merged by LSE (a 50-token context in 16-token chunks), and its new tokens.
TEST(CpuCascade, NanKeyReachesEveryRowThatAttendsIt) {
  const AttentionSpec s = mha_spec(8, 2, 32);
  const Batch b = make_test_batch(s, cascade_requests(), 64);
  RunOptions on;
  on.cascade = CascadeMode::on;
  const auto backend = make_cpu_backend();
  EXPECT_EQ(testing::expect_nan_key_reaches_its_rows(*backend, b, {2, 40, 1}, on), "cascade=on prefix=64");
  testing::expect_nan_key_reaches_its_rows(*backend, b, {2, 90, 0}, on);
  testing::expect_nan_key_reaches_its_rows(*backend, b, {7, 83, 1}, on);  // new tokens 77-88
  CpuBackendOptions small;
  small.mla_workspace_tokens = 32;
  const Batch mla = make_test_batch(mla_spec(3), {{50, 6}, {10, 4}, {33, 1}, {0, 5}});
  const std::string plan = testing::expect_nan_key_reaches_its_rows(*make_cpu_backend(small), mla, {0, 37, 0});
  EXPECT_NE(plan.find("context_chunks=4"), std::string::npos) << plan;
  testing::expect_nan_key_reaches_its_rows(*make_cpu_backend(small), mla, {0, 52, 0});  // new tokens 50-55
  testing::expect_nan_key_reaches_its_rows(*make_cpu_backend(small), mla, {3, 2, 0});   // no context
}

TEST(CpuCascade, AutoFollowsUseCascadeAttention) {
  // 8 decodes over a 256-token prefix without GQA: FlashDecoding would not run, cascade does.
  const AttentionSpec s = mha_spec(2, 2, 32, DType::bf16, 32);
  std::vector<RequestShape> reqs(8, RequestShape{260, 1});
  reqs[3].context_len = 300;
  const Batch b = make_test_batch(s, reqs, 256);
  const CpuRun run = run_cpu(b);
  EXPECT_EQ(run.summary, "cascade=on prefix=256");
  check_against_both(b, run.out, kTol);

  // Too few requests: auto says no and gives vLLM's reason.
  const Batch few = make_test_batch(s, {{260, 1}, {256, 2}}, 256);
  const CpuRun run_few = run_cpu(few);
  EXPECT_EQ(run_few.summary.rfind("cascade=off (", 0), 0u) << run_few.summary;
  check_against_both(few, run_few.out, kTol);
}

TEST(CpuCascade, ForcedOnFallsBackWhenThePrefixPassNeedsPositions) {
  AttentionSpec s = mha_spec(4, 2, 32);
  s.alibi = true;
  const Batch b = make_test_batch(s, cascade_requests(), 64);
  RunOptions on;
  on.cascade = CascadeMode::on;
  const CpuRun run = run_cpu(b, on);
  EXPECT_NE(run.summary.find("cascade=off (alibi"), std::string::npos) << run.summary;
  check_against_both(b, run.out, kTol);

  const Batch no_prefix = make_test_batch(mha_spec(4, 2, 32), {{20, 1}, {30, 2}});
  EXPECT_EQ(run_cpu(no_prefix, on).summary, "cascade=off (no common prefix)");
}

// ---- MLA ----------------------------------------------------------------------------------------

TEST(CpuMla, DecodeAbsorbsWukAndMatches) {
  const Batch b = make_test_batch(mla_spec(4), {{70, 1}, {5, 1}, {130, 1}});
  const CpuRun run = run_cpu(b);
  EXPECT_NE(run.summary.find("decodes=3 prefills=0"), std::string::npos) << run.summary;
  check_against_both(b, run.out, kTol);
}

TEST(CpuMla, PrefillWithContextChunksIncludingEmptyOnes) {
  // Two prefills with context share a 32-token workspace: 16-token chunks, 4 of them for the
  // 50-token context; the 10-token context is empty from chunk 1 on, the context-free prefill
  // in every chunk. A decode rides along.
  const Batch b = make_test_batch(mla_spec(3), {{50, 6}, {10, 4}, {33, 1}, {0, 5}});
  CpuBackendOptions small;
  small.mla_workspace_tokens = 32;
  const CpuRun run = run_cpu(b, {}, small);
  EXPECT_NE(run.summary.find("decodes=1 prefills=3 context_chunks=4 chunk=16"), std::string::npos) << run.summary;
  check_against_both(b, run.out, kTol);

  // One chunk per context (default workspace) gives the same answer.
  const CpuRun whole = run_cpu(b);
  EXPECT_NE(whole.summary.find("context_chunks=1"), std::string::npos) << whole.summary;
  for (size_t i = 0; i < run.out.o.size(); ++i) ASSERT_NEAR(run.out.o[i], whole.out.o[i], 1e-5) << i;
}

TEST(CpuMla, Fp8CacheSoftCapAndSinks) {
  AttentionSpec s = mla_spec(2, DType::bf16, 64);
  s.kv_cache_dtype = DType::fp8_e4m3;
  s.k_scale = 0.05f;  // latents in [-1, 1) become codes in [-20, 20)
  s.v_scale = 0.05f;
  s.logits_soft_cap = 3.0f;
  s.sinks = true;
  const Batch b = make_test_batch(s, {{90, 1}, {20, 7}, {0, 3}});
  CpuBackendOptions small;
  small.mla_workspace_tokens = 64;
  check_against_both(b, run_cpu(b, {}, small).out, kTol);
}

// ---- run options, poisoning, determinism --------------------------------------------------------

TEST(CpuBackend, ThreadsAndLayersDoNotChangeTheBits) {
  AttentionSpec s = mha_spec(14, 2, 32);
  s.sinks = true;
  const Batch b = make_test_batch(s, {{37, 1}, {0, 20}, {50, 9}});
  RunOptions one, many;
  one.threads = 1;
  many.threads = 3;
  many.num_layers = 2;
  const CpuRun a = run_cpu(b, one), c = run_cpu(b, many);
  EXPECT_EQ(a.out.o, c.out.o);
  EXPECT_EQ(a.out.lse, c.out.lse);
  // The output is the last layer's, over its own cache alone: layer 0's cache all NaN changes nothing.
  many.nan_all_but_last_layer = true;
  const CpuRun d = run_cpu(b, many);
  EXPECT_EQ(a.out.o, d.out.o);
  EXPECT_EQ(a.out.lse, d.out.lse);
}

TEST(CpuBackend, RerunAfterPoisonRewritesEverything) {
  const Batch b = make_test_batch(mha_spec(4, 2, 32), {{21, 3}, {9, 1}});
  auto inst = make_cpu_backend()->create(b, build_common_metadata(b), {});
  inst->plan();
  inst->run();
  const AttentionOutput first = inst->fetch();
  for (int i = 0; i < 2; ++i) {
    inst->poison();
    ASSERT_TRUE(all_nan(inst->fetch().o));
    inst->run();  // the poisoned cache slots of the new tokens are written again
    EXPECT_EQ(inst->fetch().o, first.o);
  }
}

// What `run --timed attention` times: the step's attention over its caches, without their writes.
TEST(CpuBackend, AttentionAloneIsTheStepsWithoutTheCacheWrite) {
  RunOptions two_layers;
  two_layers.num_layers = 2;
  AttentionSpec s = mha_spec(4, 2, 32);
  s.sinks = true;
  testing::expect_attention_alone_is_the_steps(*make_cpu_backend(), make_test_batch(s, {{21, 3}, {9, 1}, {0, 7}}),
                                               two_layers);
  testing::expect_attention_alone_is_the_steps(*make_cpu_backend(),
                                               make_test_batch(mla_spec(3), {{40, 1}, {7, 1}}), two_layers);
  // MLA prefills read their new tokens' latents from the step's input, not from the cache.
  testing::expect_attention_alone_is_the_steps(*make_cpu_backend(), make_test_batch(mla_spec(3), {{40, 6}, {7, 1}}),
                                               two_layers, /*its_own_key_is_cached=*/false);
}

TEST(CpuBackend, RunWithoutPlanPlansFirst) {
  const Batch b = make_test_batch(mha_spec(4, 2, 32), {{21, 3}});
  auto inst = make_cpu_backend()->create(b, build_common_metadata(b), {});
  inst->poison();
  inst->run();
  check_against_both(b, inst->fetch(), kTol);
  EXPECT_FALSE(inst->plan_summary().empty());
}

// ---- supports(), registry, selector -------------------------------------------------------------

TEST(CpuBackend, SupportsSaysWhyNot) {
  auto cpu = make_cpu_backend();
  EXPECT_TRUE(cpu->available().ok);
  EXPECT_FALSE(cpu->features().empty());
  EXPECT_EQ(cpu->name(), "cpu");

  const Batch plain = make_test_batch(mha_spec(4, 2, 32), {{5, 1}});
  EXPECT_TRUE(cpu->supports(plain.spec, plain).ok);

  auto reason = [&](const AttentionSpec& s, int local_chunk = 0) {
    Batch b = plain;
    b.spec = s;
    b.local_attention_chunk = local_chunk;
    const Support r = cpu->supports(s, b);
    EXPECT_FALSE(r.ok);
    return r.reason;
  };
  AttentionSpec mla_window = mla_spec(4);
  mla_window.sliding_window = 64;
  EXPECT_NE(reason(mla_window).find("sliding window"), std::string::npos);
  AttentionSpec mla_alibi = mla_spec(4);
  mla_alibi.alibi = true;
  EXPECT_NE(reason(mla_alibi).find("ALiBi"), std::string::npos);
  EXPECT_NE(reason(mla_spec(4), 64).find("local attention"), std::string::npos);
  EXPECT_NE(reason(mha_spec(6, 4, 32)).find("multiple"), std::string::npos);
  EXPECT_NE(reason(mha_spec(4, 2, 32), 24).find("block_size"), std::string::npos);
  AttentionSpec fp8_model = mha_spec(4, 2, 32);
  fp8_model.dtype = DType::fp8_e4m3;
  EXPECT_NE(reason(fp8_model).find("fp8_e4m3"), std::string::npos);
  AttentionSpec encoder_local = mha_spec(4, 2, 32);
  encoder_local.attn_type = AttentionType::encoder_only;
  EXPECT_NE(reason(encoder_local, 16).find("causal"), std::string::npos);
}

TEST(CpuBackend, CreateRefusesWhatItDoesNotSupport) {
  AttentionSpec s = mla_spec(2);
  s.sliding_window = 32;
  const Batch b = make_test_batch(s, {{10, 1}});
  EXPECT_THROW(make_cpu_backend()->create(b, build_common_metadata(b), {}), InputError);
}

TEST(Registry, CpuIsLastAndTheFallback) {
  const auto registry = make_registry();
  ASSERT_FALSE(registry.empty());
  EXPECT_EQ(registry.back()->name(), "cpu");
#if !defined(ATTN_WITH_CUDA)
  EXPECT_EQ(registry.size(), 1u);
#endif
  const Batch b = make_test_batch(mha_spec(4, 2, 32), {{5, 1}});
  std::string why;
  const Backend* chosen = select_backend(registry, b.spec, b, &why);
  ASSERT_NE(chosen, nullptr) << why;
  EXPECT_TRUE(chosen->supports(b.spec, b).ok);

  AttentionSpec s = mla_spec(2);
  s.sliding_window = 32;
  const Batch bad = make_test_batch(s, {{10, 1}});
  EXPECT_EQ(select_backend(registry, bad.spec, bad, &why), nullptr);
  EXPECT_NE(why.find("cpu: MLA with sliding window"), std::string::npos) << why;
  EXPECT_EQ(select_backend({}, b.spec, b, &why), nullptr);
}

// all_backend_names is every build's registry: this build's backends are among its names, in
// its order, and names match case-insensitively.
TEST(Registry, AllBackendNamesHoldThisBuildsInOrder) {
  const std::vector<std::string>& all = all_backend_names();
  size_t at = 0;
  for (const auto& be : make_registry()) {
    while (at < all.size() && all[at] != be->name()) ++at;
    ASSERT_LT(at, all.size()) << be->name() << " missing from all_backend_names, or out of order";
  }
  EXPECT_EQ(canonical_backend_name("FLASH_ATTN"), std::optional<std::string>("flash_attn"));
  EXPECT_EQ(canonical_backend_name("Cpu"), std::optional<std::string>("cpu"));
  EXPECT_EQ(canonical_backend_name("auto"), std::nullopt);
  EXPECT_EQ(canonical_backend_name("flash-attn"), std::nullopt);
}

// ---- cache writes --------------------------------------------------------------------------------

TEST(CpuCacheOps, NegativeSlotSkippedAndFp8Saturates) {
  for (CacheFormat format : {CacheFormat::flash_attn, CacheFormat::flashinfer}) {
    for (KvLayout layout : {KvLayout::NHD, KvLayout::HND}) {
      KvCacheLayout l;
      l.format = format;
      l.layout = layout;
      l.dtype = DType::fp8_e4m3;
      l.num_blocks = 3;
      l.block_size = 4;
      l.num_kv_heads = 2;
      l.head_size_k = l.head_size_v = 8;
      std::vector<uint8_t> cache(l.bytes());
      for (int64_t i = 0; i < l.num_elements(); ++i) store_nan(l.dtype, cache.data(), static_cast<size_t>(i));

      // Three tokens: slot 5, padding (-1), slot 9. Values up to +-1000: / scale 2 saturates at 448.
      const int64_t n = 3, per_token = 2 * 8;
      std::vector<float> key(n * per_token), value(n * per_token);
      for (size_t i = 0; i < key.size(); ++i) {
        key[i] = static_cast<float>(i % 7) * 300.0f - 900.0f;
        value[i] = static_cast<float>(i % 5) * 0.25f - 0.5f;
      }
      const std::vector<int64_t> slots{5, -1, 9};
      cpu::ReshapeAndCacheParams p;
      p.key = key.data();
      p.value = value.data();
      p.dtype = DType::f32;
      p.slot_mapping = slots.data();
      p.num_tokens = n;
      p.cache = cache.data();
      p.layout = &l;
      p.k_scale = 2.0f;
      p.v_scale = 0.5f;
      cpu::reshape_and_cache(p);

      int64_t written = 0;
      for (int64_t i = 0; i < l.num_elements(); ++i) written += !std::isnan(load_as(l.dtype, cache.data(), static_cast<size_t>(i)));
      EXPECT_EQ(written, 2 * per_token * 2) << "only the two real tokens' K and V may be written";
      for (int t : {0, 2}) {
        const int64_t slot = slots[t];
        for (int h = 0; h < 2; ++h) {
          for (int d = 0; d < 8; ++d) {
            const float k = key[(t * 2 + h) * 8 + d], v = value[(t * 2 + h) * 8 + d];
            const float want_k = std::clamp(round_to(DType::fp8_e4m3, k / 2.0f), -448.0f, 448.0f);
            EXPECT_EQ(load_as(l.dtype, cache.data(), static_cast<size_t>(l.k_index(slot / 4, slot % 4, h, d))), want_k);
            EXPECT_EQ(load_as(l.dtype, cache.data(), static_cast<size_t>(l.v_index(slot / 4, slot % 4, h, d))),
                      round_to(DType::fp8_e4m3, v / 0.5f));
          }
        }
      }
    }
  }
}

TEST(CpuCacheOps, MlaConcatWritesTheLatentEntryOnce) {
  KvCacheLayout l;
  l.format = CacheFormat::flashmla;
  l.dtype = DType::bf16;
  l.num_blocks = 2;
  l.block_size = 4;
  l.num_kv_heads = 1;
  l.head_size_k = 576;
  l.head_size_v = 512;
  std::vector<uint8_t> cache(l.bytes());
  for (int64_t i = 0; i < l.num_elements(); ++i) store_nan(l.dtype, cache.data(), static_cast<size_t>(i));
  std::vector<float> latent(2 * 576);
  for (size_t i = 0; i < latent.size(); ++i) latent[i] = round_to(DType::bf16, std::sin(static_cast<float>(i)));
  const std::vector<int64_t> slots{-7, 6};
  cpu::ConcatAndCacheMlaParams p;
  p.latent = latent.data();
  p.dtype = DType::f32;
  p.slot_mapping = slots.data();
  p.num_tokens = 2;
  p.cache = cache.data();
  p.layout = &l;
  cpu::concat_and_cache_mla(p);
  std::vector<float> row(576);
  cpu::load_cache_row(cache.data(), l.dtype, l.k_index(1, 2, 0, 0), 576, 1.0f, row.data());
  for (int d = 0; d < 576; ++d) ASSERT_EQ(row[d], latent[576 + d]) << d;
  int64_t written = 0;
  for (int64_t i = 0; i < l.num_elements(); ++i) written += !std::isnan(load_as(l.dtype, cache.data(), static_cast<size_t>(i)));
  EXPECT_EQ(written, 576);
}

// ---- merge_attn_states ---------------------------------------------------------------------------

// Attention of one query row over keys [lo, hi) of a fixed random set, in double.
void partial(int lo, int hi, std::vector<double>& o, double& lse) {
  const int dv = 5;
  o.assign(dv, 0.0);
  if (lo >= hi) {
    lse = -kInf;
    return;
  }
  auto logit = [](int j) { return 3.0 * std::sin(1.7 * j + 0.3); };
  auto value = [](int j, int d) { return std::cos(0.9 * j - 0.4 * d); };
  double m = -kInf, denom = 0;
  for (int j = lo; j < hi; ++j) m = std::max(m, logit(j));
  for (int j = lo; j < hi; ++j) denom += std::exp(logit(j) - m);
  for (int j = lo; j < hi; ++j)
    for (int d = 0; d < dv; ++d) o[d] += std::exp(logit(j) - m) / denom * value(j, d);
  lse = m + std::log(denom);
}

TEST(MergeAttnStates, SplitKeysMergeToTheWhole) {
  // Rows (tokens) = different split points over 20 keys, including empty sides.
  const std::vector<int> splits{0, 1, 7, 13, 19, 20};
  const int dv = 5, n = static_cast<int>(splits.size());
  std::vector<float> po(n * dv), so(n * dv), plse(n), slse(n), out(n * dv), out_lse(n);
  std::vector<double> want(n * dv), want_lse(n);
  for (int t = 0; t < n; ++t) {
    std::vector<double> o;
    double lse;
    partial(0, splits[t], o, lse);
    for (int d = 0; d < dv; ++d) po[t * dv + d] = static_cast<float>(o[d]);
    plse[t] = static_cast<float>(lse);
    partial(splits[t], 20, o, lse);
    for (int d = 0; d < dv; ++d) so[t * dv + d] = static_cast<float>(o[d]);
    slse[t] = static_cast<float>(lse);
    partial(0, 20, o, lse);
    for (int d = 0; d < dv; ++d) want[t * dv + d] = o[d];
    want_lse[t] = lse;
  }
  cpu::MergeAttnStatesParams p{out.data(), out_lse.data(), po.data(), plse.data(), so.data(), slse.data(), n, 1, dv, 2};
  cpu::merge_attn_states(p);
  for (int i = 0; i < n * dv; ++i) EXPECT_NEAR(out[i], want[i], 1e-6) << i;
  for (int t = 0; t < n; ++t) EXPECT_NEAR(out_lse[t], want_lse[t], 1e-6) << t;

  // In place (out aliases the suffix), one thread: the same answer.
  cpu::MergeAttnStatesParams q{so.data(), slse.data(), po.data(), plse.data(), so.data(), slse.data(), n, 1, dv, 1};
  cpu::merge_attn_states(q);
  EXPECT_EQ(so, out);
  EXPECT_EQ(slse, out_lse);
}

TEST(MergeAttnStates, EmptySidesNeverLeak) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Token 0: prefix empty with a garbage (NaN) output; token 1: both empty; token 2: suffix empty.
  std::vector<float> po{nan, nan, 0.0f, 0.0f, 0.25f, -0.5f}, plse{-inf, -inf, 1.5f};
  std::vector<float> so{0.75f, -1.0f, nan, 1.0f, nan, nan}, slse{0.5f, -inf, -inf};
  std::vector<float> out(6), out_lse(3);
  cpu::MergeAttnStatesParams p{out.data(), out_lse.data(), po.data(), plse.data(), so.data(), slse.data(), 3, 1, 2, 1};
  cpu::merge_attn_states(p);
  EXPECT_EQ(out, (std::vector<float>{0.75f, -1.0f, 0.0f, 0.0f, 0.25f, -0.5f}));
  EXPECT_EQ(out_lse[0], 0.5f);
  EXPECT_EQ(out_lse[1], -inf);
  EXPECT_EQ(out_lse[2], 1.5f);
}

TEST(CpuOnlineSoftmax, KeylessRowsGiveZeroAndNanRowsGiveNan) {
  // Rows: 0 sees no key; 1 sees two keys whose K is NaN (every score NaN, so its running max stays
  // -inf); 2 sees one NaN key and one finite key; 3 sees the finite key only.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> q(4 * 2, 0.5f), k{nan, nan, nan, nan, 1.0f, 2.0f}, v{1.0f, 2.0f, 3.0f};
  const std::vector<cpu::RowMask> masks{{0, 0}, {0, 2}, {1, 3}, {2, 3}};
  cpu::OnlineSoftmax sm;
  sm.reset(4, 1);
  sm.update(q.data(), 2, masks.data(), k.data(), v.data(), 0, 3, 0.0f);
  float o[4], lse[4];
  for (int r = 0; r < 4; ++r) sm.finalize_row(r, cpu::kNegInf, &o[r], &lse[r]);
  EXPECT_EQ(o[0], 0.0f);
  EXPECT_EQ(lse[0], cpu::kNegInf);
  for (int r : {1, 2}) {
    EXPECT_TRUE(std::isnan(o[r])) << "row " << r << ": o " << o[r];
    EXPECT_TRUE(std::isnan(lse[r])) << "row " << r << ": LSE " << lse[r];
  }
  EXPECT_EQ(o[3], 3.0f);
  EXPECT_FLOAT_EQ(lse[3], 1.5f);
}

TEST(MergeAttnStates, NanSidesReachTheOutput) {
  // A side that read a NaN has a NaN LSE (the kernels' has_keys_or_nan). It must give NaN O and
  // LSE, also beside a side without keys: std::max(-inf, NaN) is -inf, and a merge that took that
  // for "no keys on either side" would write a finite row where the poison should show.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Tokens: (NaN, 0.5), (0.5, NaN), (-inf, NaN), (NaN, -inf); each side's O finite.
  std::vector<float> po(8, 0.25f), plse{nan, 0.5f, -inf, nan};
  std::vector<float> so(8, -0.5f), slse{0.5f, nan, nan, -inf};
  std::vector<float> out(8), out_lse(4);
  cpu::MergeAttnStatesParams p{out.data(), out_lse.data(), po.data(), plse.data(), so.data(), slse.data(), 4, 1, 2, 1};
  cpu::merge_attn_states(p);
  for (int t = 0; t < 4; ++t) {
    EXPECT_TRUE(std::isnan(out_lse[t])) << "token " << t << ": LSE " << out_lse[t];
    for (int d = 0; d < 2; ++d) EXPECT_TRUE(std::isnan(out[t * 2 + d])) << "token " << t << ": O " << out[t * 2 + d];
  }
}

}  // namespace
}  // namespace attn
