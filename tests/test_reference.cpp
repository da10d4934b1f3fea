// compute_reference against a brute-force attention written here straight from the semantics of
// the project (scalar loops over doubles, one (token, head) at a time), on small random batches
// that cover every feature; plus hand-computed cases, the empty-row convention and sampling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "model/batch.hpp"
#include "reference/head_attention.hpp"
#include "reference/reference.hpp"

namespace attn {
namespace {

constexpr double kTol = 1e-12;
const double kInf = std::numeric_limits<double>::infinity();

// ---- the brute force ----------------------------------------------------------------------------

struct BruteResult {
  std::vector<double> o;    // [num_tokens, hq, dv]
  std::vector<double> lse;  // [num_tokens, hq]
};

// Does the query at absolute position p see key `key` of a sequence of seq_len tokens?
bool brute_visible(const Batch& b, int p, int key, int seq_len) {
  if (!b.spec.causal()) return key < seq_len;
  if (key > p) return false;
  if (b.spec.sliding_window > 0 && !(key > p - b.spec.sliding_window)) return false;
  if (b.local_attention_chunk > 0 && key < (p / b.local_attention_chunk) * b.local_attention_chunk) return false;
  return true;
}

// flow: vLLM's MLA data flow (ReferenceOptions::mla_flow_decode_q_len): requests of that query
// length take q_latent = q_nope W_UK^T rounded to the model dtype against the latent rows, the
// others the up-projected K (nope part) and V rounded.
// drop_rope: MLA's rotary part left out of every score (Perturbation::mla_rope_dropped).
BruteResult brute_force(const Batch& b, std::optional<int> flow = std::nullopt, bool drop_rope = false) {
  const AttentionSpec& s = b.spec;
  const bool mla = s.use_mla;
  const int hq = s.num_q_heads;
  const int dqk = mla ? s.mla.qk_nope_head_dim + s.mla.qk_rope_head_dim : s.head_size_qk;
  const int dv = mla ? s.mla.v_head_dim : s.head_size_v;
  const int rank = s.mla.kv_lora_rank, nope = s.mla.qk_nope_head_dim;
  const double scale = s.scale;
  BruteResult out;
  out.o.assign(static_cast<size_t>(b.num_tokens()) * hq * dv, 0.0);
  out.lse.assign(static_cast<size_t>(b.num_tokens()) * hq, 0.0);

  auto rounded = [&](double x) { return static_cast<double>(round_to(s.dtype, static_cast<float>(x))); };
  for (int r = 0; r < b.num_reqs(); ++r) {
    const int ctx = b.requests[r].context_len, seq = b.requests[r].seq_len();
    const bool absorbed = mla && flow && b.requests[r].query_len == *flow;
    const bool up_rounded = mla && flow && !absorbed;
    for (int h = 0; h < hq; ++h) {
      // Every key and value of this (request, head), as plain vectors.
      std::vector<std::vector<double>> keys(seq, std::vector<double>(dqk));
      std::vector<std::vector<double>> vals(seq, std::vector<double>(dv));
      for (int j = 0; j < seq; ++j) {
        if (mla) {
          for (int d = 0; d < nope; ++d) {
            double acc = 0;
            for (int c = 0; c < rank; ++c) acc += double(b.latent(r, j, c)) * double(b.w_uk(h, c, d));
            keys[j][d] = up_rounded ? rounded(acc) : acc;
          }
          for (int d = nope; d < dqk; ++d) keys[j][d] = drop_rope ? 0.0 : b.latent(r, j, rank + (d - nope));
          for (int d = 0; d < dv; ++d) {
            double acc = 0;
            for (int c = 0; c < rank; ++c) acc += double(b.latent(r, j, c)) * double(b.w_uv(h, c, d));
            vals[j][d] = up_rounded ? rounded(acc) : acc;
          }
        } else {
          const int kvh = h / (hq / s.num_kv_heads);
          for (int d = 0; d < dqk; ++d) keys[j][d] = b.k(r, j, kvh, d);
          for (int d = 0; d < dv; ++d) vals[j][d] = b.v(r, j, kvh, d);
        }
      }
      for (int i = 0; i < b.requests[r].query_len; ++i) {
        const int p = ctx + i;
        const int64_t t = b.query_start_loc[r] + i;
        std::vector<double> logit(seq, 0.0);
        std::vector<bool> seen(seq, false);
        std::vector<double> q_latent(absorbed ? rank : 0);  // q_nope W_UK^T, rounded
        for (int c = 0; c < static_cast<int>(q_latent.size()); ++c) {
          double acc = 0;
          for (int d = 0; d < nope; ++d) acc += double(b.q(r, p, h, d)) * double(b.w_uk(h, c, d));
          q_latent[c] = rounded(acc);
        }
        double m = b.sinks.empty() ? -kInf : double(b.sinks[h]);
        for (int j = 0; j < seq; ++j) {
          if (!brute_visible(b, p, j, seq)) continue;
          double dot = 0;
          if (absorbed) {
            for (int c = 0; c < rank; ++c) dot += q_latent[c] * double(b.latent(r, j, c));
            for (int d = nope; d < dqk; ++d) dot += double(b.q(r, p, h, d)) * keys[j][d];
          } else {
            for (int d = 0; d < dqk; ++d) dot += double(b.q(r, p, h, d)) * keys[j][d];
          }
          double x = scale * dot;
          if (s.logits_soft_cap > 0) x = s.logits_soft_cap * std::tanh(x / s.logits_soft_cap);
          if (!b.alibi.empty()) x += double(b.alibi[h]) * -std::abs(double(p - j));
          logit[j] = x;
          seen[j] = true;
          m = std::max(m, x);
        }
        double* o = &out.o[(t * hq + h) * dv];
        double& lse = out.lse[t * hq + h];
        if (m == -kInf) {
          lse = -kInf;
          continue;
        }
        double sum = b.sinks.empty() ? 0.0 : std::exp(double(b.sinks[h]) - m);
        for (int j = 0; j < seq; ++j)
          if (seen[j]) sum += std::exp(logit[j] - m);
        for (int j = 0; j < seq; ++j) {
          if (!seen[j]) continue;
          const double w = std::exp(logit[j] - m) / sum;
          for (int d = 0; d < dv; ++d) o[d] += w * vals[j][d];
        }
        lse = m + std::log(sum);
      }
    }
  }
  return out;
}

// ---- helpers --------------------------------------------------------------------------------------

AttentionSpec mha(int hq, int hkv, int dqk, int dv) {
  AttentionSpec s;
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_size_qk = dqk;
  s.head_size_v = dv;
  s.block_size = 4;
  return s;
}

// Small MLA dimensions keep the brute force cheap; MlaRealDims uses DeepSeek's.
AttentionSpec mla(int hq, MlaDims dims = {32, 8, 16, 12}) {
  AttentionSpec s;
  s.use_mla = true;
  s.mla = dims;
  s.num_q_heads = hq;
  s.num_kv_heads = 1;
  s.head_size_qk = dims.qk_head_dim();
  s.head_size_v = dims.v_head_dim;
  s.block_size = 4;
  return s;
}

Batch batch_of(const AttentionSpec& spec, std::vector<RequestShape> reqs, uint64_t seed, int shared_prefix = 0,
               int local_chunk = 0) {
  BatchShape shape;
  shape.label = "test";
  shape.requests = std::move(reqs);
  shape.shared_prefix_len = shared_prefix;
  shape.local_attention_chunk = local_chunk;
  return make_batch(spec, shape, seed);
}

std::vector<RequestShape> random_requests(uint64_t seed, int n, int min_ctx, int max_ctx, int max_q) {
  std::mt19937_64 rng(seed);
  std::vector<RequestShape> reqs(n);
  for (auto& r : reqs) {
    r.context_len = std::uniform_int_distribution<int>(min_ctx, max_ctx)(rng);
    // Mix decodes (query_len 1) and prefill chunks.
    r.query_len = std::uniform_int_distribution<int>(0, 2)(rng) == 0 ? 1 : std::uniform_int_distribution<int>(2, max_q)(rng);
  }
  return reqs;
}

// Maximum |a - b| with -inf == -inf; NaN on either side fails.
double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;  // also equal infinities
    const double d = std::abs(a[i] - b[i]);
    if (std::isnan(d)) return kInf;
    worst = std::max(worst, d);
  }
  return worst;
}

void expect_matches_brute(const Batch& b) {
  const ReferenceResult ref = compute_reference(b);
  const BruteResult want = brute_force(b);
  const int dv = b.spec.use_mla ? b.spec.mla.v_head_dim : b.spec.head_size_v;
  ASSERT_EQ(ref.num_tokens, b.num_tokens());
  ASSERT_EQ(ref.num_heads, b.spec.num_q_heads);
  ASSERT_EQ(ref.head_size_v, dv);
  ASSERT_EQ(ref.o.size(), want.o.size());
  ASSERT_EQ(ref.lse.size(), want.lse.size());
  EXPECT_EQ(ref.pairs_total, int64_t{b.num_reqs()} * b.spec.num_q_heads);
  EXPECT_EQ(ref.pairs_checked, ref.pairs_total);
  for (uint8_t c : ref.checked) ASSERT_EQ(c, 1);
  EXPECT_LE(max_diff(ref.o, want.o), kTol);
  EXPECT_LE(max_diff(ref.lse, want.lse), kTol);
  // The outputs must be real attention, not a trivially matching constant.
  double spread = 0;
  for (double x : ref.o) spread = std::max(spread, std::abs(x - ref.o[0]));
  EXPECT_GT(spread, 1e-3);
}

// ---- feature coverage against the brute force --------------------------------------------------

TEST(Reference, GqaRatiosCausalWithContext) {
  const std::pair<int, int> heads[] = {{3, 3}, {8, 2}, {14, 2}, {5, 1}};  // ratios 1, 4, 7, MQA
  uint64_t seed = 11;
  for (auto [hq, hkv] : heads) {
    SCOPED_TRACE(testing::Message() << hq << "/" << hkv);
    expect_matches_brute(batch_of(mha(hq, hkv, 16, 8), random_requests(seed, 4, 0, 30, 12), seed));
    ++seed;
  }
}

TEST(Reference, NonCausalSeesEveryKey) {
  AttentionSpec s = mha(4, 2, 16, 16);
  s.attn_type = AttentionType::encoder_only;
  expect_matches_brute(batch_of(s, {{0, 9}, {0, 1}, {6, 5}}, 3));
  // A key after the query changes a non-causal row: row 0 of a 9-token request is not the
  // causal one.
  AttentionSpec c = s;
  c.attn_type = AttentionType::decoder;
  const ReferenceResult nc = compute_reference(batch_of(s, {{0, 9}}, 3));
  const ReferenceResult ca = compute_reference(batch_of(c, {{0, 9}}, 3));
  EXPECT_GT(std::abs(nc.lse[0] - ca.lse[0]), 1e-6);
}

TEST(Reference, SlidingWindowSmallerThanPrefillChunk) {
  AttentionSpec s = mha(4, 1, 16, 8);
  s.sliding_window = 5;
  expect_matches_brute(batch_of(s, {{7, 12}, {0, 9}, {20, 1}, {3, 2}}, 5));
}

TEST(Reference, SoftCap) {
  AttentionSpec s = mha(4, 2, 16, 8);
  s.logits_soft_cap = 0.7f;  // below the typical |logit|, so the cap bends most logits
  expect_matches_brute(batch_of(s, random_requests(7, 3, 0, 25, 10), 7));
}

TEST(Reference, Alibi) {
  AttentionSpec s = mha(6, 3, 16, 8);
  s.alibi = true;
  expect_matches_brute(batch_of(s, random_requests(8, 3, 0, 25, 10), 8));
  s.attn_type = AttentionType::encoder_only;  // keys on both sides: -slope * |p - key|
  expect_matches_brute(batch_of(s, {{0, 10}, {4, 6}}, 8));
}

TEST(Reference, Sinks) {
  AttentionSpec s = mha(4, 2, 16, 8);
  s.sinks = true;
  expect_matches_brute(batch_of(s, random_requests(9, 4, 0, 20, 8), 9));
}

TEST(Reference, ExplicitScale) {
  AttentionSpec s = mha(4, 2, 16, 8);
  s.scale = 0.43f;
  const Batch b = batch_of(s, random_requests(10, 3, 0, 20, 8), 10);
  ASSERT_FLOAT_EQ(b.spec.scale, 0.43f);
  expect_matches_brute(b);
}

TEST(Reference, AllLogitFeaturesTogether) {
  AttentionSpec s = mha(8, 2, 16, 12);
  s.sinks = s.alibi = true;
  s.logits_soft_cap = 1.5f;
  s.sliding_window = 6;
  s.scale = 0.2f;
  expect_matches_brute(batch_of(s, random_requests(12, 4, 0, 30, 14), 12));
}

TEST(Reference, LocalAttentionPrefillSpansSeveralChunks) {
  AttentionSpec s = mha(4, 2, 16, 8);
  // Chunk 8: request 0's new tokens sit at positions 5..24 (chunks 0, 1, 2 and 3).
  const Batch b = batch_of(s, {{5, 20}, {13, 1}, {16, 3}, {0, 9}}, 13, 0, 8);
  expect_matches_brute(b);
  // The chunk really cuts: the same batch without it differs.
  const Batch whole = batch_of(s, {{5, 20}, {13, 1}, {16, 3}, {0, 9}}, 13, 0, 0);
  EXPECT_GT(max_diff(compute_reference(b).lse, compute_reference(whole).lse), 1e-6);
}

TEST(Reference, Fp8CachesWithNonUnitScales) {
  for (DType cache : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    SCOPED_TRACE(std::string(to_string(cache)));
    AttentionSpec s = mha(4, 2, 16, 8);
    s.kv_cache_dtype = cache;
    s.k_scale = 0.37f;
    s.v_scale = 2.5f;
    const std::vector<RequestShape> reqs = random_requests(14, 3, 0, 20, 8);
    const Batch b = batch_of(s, reqs, 14);
    expect_matches_brute(b);
    // The reference sees the dequantized cache: a bf16 cache of the same inputs differs.
    AttentionSpec plain = s;
    plain.kv_cache_dtype = DType::bf16;
    EXPECT_GT(max_diff(compute_reference(b).o, compute_reference(batch_of(plain, reqs, 14)).o), 1e-4);
  }
}

TEST(Reference, Fp8QuantizedQuery) {
  // vLLM's query quantization: the reference attends with the round-tripped query, as every
  // backend does, and that differs from the unquantized one.
  AttentionSpec s = mha(4, 2, 16, 8);
  s.kv_cache_dtype = DType::fp8_e4m3;
  s.k_scale = 0.37f;
  s.q_scale = 0.03f;
  const std::vector<RequestShape> reqs = random_requests(19, 3, 0, 20, 8);
  const Batch b = batch_of(s, reqs, 19);
  expect_matches_brute(b);
  AttentionSpec plain = s;
  plain.q_scale = 0.0f;
  EXPECT_GT(max_diff(compute_reference(b).o, compute_reference(batch_of(plain, reqs, 19)).o), 1e-4);
}

TEST(Reference, MlaDecodeAndPrefill) {
  // Decodes (query_len 1) and prefills share one definition: MHA over up-projected K/V.
  expect_matches_brute(batch_of(mla(3), {{17, 1}, {0, 7}, {9, 6}, {30, 1}}, 15));
  AttentionSpec fp8 = mla(2);
  fp8.kv_cache_dtype = DType::fp8_e4m3;
  fp8.k_scale = fp8.v_scale = 0.05f;
  expect_matches_brute(batch_of(fp8, {{12, 1}, {4, 5}}, 16));
}

// vLLM's MLA data flow: the reference of the flow against the brute force of the same flow (an
// independent derivation: the absorbed decode dots q_latent with the latent rows, the prefill
// rounds its up-projected K/V), and the rounding visible against the exact result.
TEST(Reference, MlaDataFlowRoundsItsStoredIntermediate) {
  const Batch b = batch_of(mla(3), {{17, 1}, {0, 7}, {9, 6}, {30, 1}}, 15);
  ReferenceOptions flow;
  flow.mla_flow_decode_q_len = 1;
  const ReferenceResult got = compute_reference(b, flow);
  const BruteResult want = brute_force(b, 1);
  EXPECT_LE(max_diff(got.o, want.o), kTol);
  EXPECT_LE(max_diff(got.lse, want.lse), kTol);
  const ReferenceResult exact = compute_reference(b);
  EXPECT_GT(max_diff(got.o, exact.o), 1e-5);  // the rounding is there
  EXPECT_LE(max_diff(got.o, exact.o), 0.05);  // and only a rounding
  // Every request a prefill (no decode query length 2 here): the up-projection flow everywhere.
  flow.mla_flow_decode_q_len = 2;
  EXPECT_LE(max_diff(compute_reference(b, flow).o, brute_force(b, 2).o), kTol);
  // A non-MLA batch has no such flow: the option changes nothing.
  const Batch plain = batch_of(mha(4, 2, 16, 8), {{12, 1}, {3, 5}}, 16);
  EXPECT_EQ(max_diff(compute_reference(plain, flow).o, compute_reference(plain).o), 0.0);
}

TEST(Reference, MlaRealDims) {
  AttentionSpec s = mla(2, MlaDims{});  // 512 / 64 / 128 / 128
  ASSERT_EQ(s.head_size_qk, 192);
  expect_matches_brute(batch_of(s, {{9, 1}, {3, 4}}, 17));
}

TEST(Reference, SharedPrefix) {
  AttentionSpec s = mha(4, 2, 16, 8);
  const Batch b = batch_of(s, {{12, 1}, {9, 4}, {8, 1}}, 18, 8);
  expect_matches_brute(b);
  EXPECT_EQ(b.k(0, 3, 1, 5), b.k(2, 3, 1, 5));  // prefix keys are the same tokens
}

// ---- hand-computed cases ------------------------------------------------------------------------

// Two keys, logits 0 and ln 3: weights 1/4 and 3/4.
TEST(ReferenceHeadAttention, HandComputedTwoKeys) {
  Eigen::MatrixXd q(1, 2), k(2, 2), v(2, 2), o;
  Eigen::VectorXd lse;
  q << 1.0, 2.0;
  k << 0.0, 0.0, std::log(3.0), 0.0;
  v << 4.0, -8.0, 8.0, 4.0;
  ref::Visibility vis{true, 2, 0, 0};
  ref::LogitRule rule;
  rule.scale = 1.0;
  ref::attend_head(q, 1, k, v, 0, vis, rule, o, lse);
  EXPECT_NEAR(o(0, 0), 7.0, kTol);
  EXPECT_NEAR(o(0, 1), 1.0, kTol);
  EXPECT_NEAR(lse(0), std::log(4.0), kTol);

  // A sink of ln 4 joins the denominator (1 + 3 + 4 = 8) but carries no value.
  rule.has_sink = true;
  rule.sink = std::log(4.0);
  ref::attend_head(q, 1, k, v, 0, vis, rule, o, lse);
  EXPECT_NEAR(o(0, 0), 3.5, kTol);
  EXPECT_NEAR(o(0, 1), 0.5, kTol);
  EXPECT_NEAR(lse(0), std::log(8.0), kTol);

  // At position 0 the causal mask hides key 1: all weight on key 0.
  rule.has_sink = false;
  ref::attend_head(q, 0, k.topRows(1), v.topRows(1), 0, vis, rule, o, lse);
  EXPECT_NEAR(o(0, 0), 4.0, kTol);
  EXPECT_NEAR(lse(0), 0.0, kTol);
}

// The same two-key case through compute_reference, from the batch's values.
TEST(Reference, HandComputedOneRequestTwoKeys) {
  const Batch b = batch_of(mha(1, 1, 4, 3), {{1, 1}}, 19);
  double l[2];
  for (int j = 0; j < 2; ++j) {
    double dot = 0;
    for (int d = 0; d < 4; ++d) dot += double(b.q(0, 1, 0, d)) * b.k(0, j, 0, d);
    l[j] = dot / 2.0;  // scale 1/sqrt(4)
  }
  const double w1 = 1.0 / (1.0 + std::exp(l[0] - l[1]));
  const ReferenceResult ref = compute_reference(b);
  for (int d = 0; d < 3; ++d) EXPECT_NEAR(ref.o[d], (1 - w1) * b.v(0, 0, 0, d) + w1 * b.v(0, 1, 0, d), kTol);
  EXPECT_NEAR(ref.lse[0], std::log(std::exp(l[0]) + std::exp(l[1])), kTol);
}

// Rows that see no key: o = 0, lse = -inf; with a sink, lse = the sink. Causal chunk 4 over a
// 4-key sequence: rows at positions 2, 3 see keys, rows at 4, 5 (chunk 1) see none.
TEST(ReferenceHeadAttention, EmptyRowConvention) {
  std::mt19937_64 rng(20);
  std::uniform_real_distribution<double> u(-1, 1);
  Eigen::MatrixXd q(4, 3), k(4, 3), v(4, 2), o;
  Eigen::VectorXd lse;
  for (auto* m : {&q, &k, &v})
    for (int i = 0; i < m->size(); ++i) m->data()[i] = u(rng);
  const ref::Visibility vis{true, 4, 0, 4};
  ref::LogitRule rule;
  ref::attend_head(q, 2, k, v, 0, vis, rule, o, lse);
  EXPECT_TRUE(std::isfinite(lse(0)) && std::isfinite(lse(1)));
  EXPECT_NE(o(0, 0), 0.0);
  for (int i = 2; i < 4; ++i) {
    EXPECT_EQ(lse(i), -kInf);
    EXPECT_EQ(o(i, 0), 0.0);
    EXPECT_EQ(o(i, 1), 0.0);
  }
  rule.has_sink = true;
  rule.sink = -0.75;
  ref::attend_head(q, 2, k, v, 0, vis, rule, o, lse);
  for (int i = 2; i < 4; ++i) {
    EXPECT_EQ(lse(i), -0.75);
    EXPECT_EQ(o(i, 0), 0.0);
  }
  // Non-causal with no keys at all.
  const ref::Visibility none{false, 0, 0, 0};
  rule.has_sink = false;
  ref::attend_head(q, 0, Eigen::MatrixXd(0, 3), Eigen::MatrixXd(0, 2), 0, none, rule, o, lse);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(lse(i), -kInf);
  EXPECT_EQ(o.cwiseAbs().maxCoeff(), 0.0);
}

// ---- sampling, threads, errors ---------------------------------------------------------------------

std::set<std::pair<int, int>> checked_pairs(const Batch& b, const ReferenceResult& r) {
  std::set<std::pair<int, int>> pairs;
  for (int req = 0; req < b.num_reqs(); ++req)
    for (int h = 0; h < r.num_heads; ++h) {
      const int64_t t0 = b.query_start_loc[req], t1 = b.query_start_loc[req + 1];
      const uint8_t first = r.checked[t0 * r.num_heads + h];
      for (int64_t t = t0; t < t1; ++t) EXPECT_EQ(r.checked[t * r.num_heads + h], first);  // whole pairs
      if (first) pairs.insert({req, h});
    }
  return pairs;
}

TEST(Reference, SamplingChecksExactlyMaxPairs) {
  const Batch b = batch_of(mha(8, 2, 16, 8), random_requests(21, 6, 0, 20, 6), 21);  // 48 pairs
  const ReferenceResult full = compute_reference(b);
  ReferenceOptions opts;
  opts.max_pairs = 7;
  opts.sample_seed = 1;
  const ReferenceResult a = compute_reference(b, opts);
  EXPECT_EQ(a.pairs_total, 48);
  EXPECT_EQ(a.pairs_checked, 7);
  const auto pairs_a = checked_pairs(b, a);
  EXPECT_EQ(pairs_a.size(), 7u);
  for (size_t row = 0; row < a.lse.size(); ++row) {
    if (a.checked[row]) {
      EXPECT_EQ(a.lse[row], full.lse[row]);
      for (int d = 0; d < a.head_size_v; ++d) EXPECT_EQ(a.o[row * 8 + d], full.o[row * 8 + d]);
    } else {
      EXPECT_TRUE(std::isnan(a.lse[row]));
      EXPECT_TRUE(std::isnan(a.o[row * 8]));
    }
  }
  // Deterministic for a seed, different for another.
  EXPECT_EQ(checked_pairs(b, compute_reference(b, opts)), pairs_a);
  opts.sample_seed = 2;
  const ReferenceResult c = compute_reference(b, opts);
  EXPECT_EQ(c.pairs_checked, 7);
  EXPECT_NE(checked_pairs(b, c), pairs_a);
  // Asking for at least every pair checks them all.
  opts.max_pairs = 48;
  EXPECT_EQ(compute_reference(b, opts).pairs_checked, 48);
  opts.max_pairs = 1000;
  EXPECT_EQ(compute_reference(b, opts).pairs_checked, 48);
}

TEST(Reference, SamplingSpreadsOverPairs) {
  // Over many seeds every pair is eventually drawn (the choice is not stuck on a corner).
  const Batch b = batch_of(mha(4, 4, 8, 8), {{3, 1}, {2, 2}, {0, 1}}, 22);  // 12 pairs
  std::set<std::pair<int, int>> seen;
  ReferenceOptions opts;
  opts.max_pairs = 3;
  for (uint64_t s = 0; s < 40; ++s) {
    opts.sample_seed = s;
    const ReferenceResult r = compute_reference(b, opts);
    ASSERT_EQ(r.pairs_checked, 3);
    for (auto p : checked_pairs(b, r)) seen.insert(p);
  }
  EXPECT_EQ(seen.size(), 12u);
}

TEST(Reference, SamplingChecksEveryRequestFirst) {
  // 30 requests x 8 heads = 240 pairs, 40 sampled: every request has a checked pair (uniform
  // sampling would miss ~8 of them), and the other 10 are spread over the rest. With fewer pairs than
  // requests, as many requests as pairs, one pair each.
  const Batch b = batch_of(mha(8, 2, 16, 8), random_requests(31, 30, 0, 20, 3), 31);
  ReferenceOptions opts;
  opts.max_pairs = 40;
  opts.sample_seed = 5;
  const ReferenceResult r = compute_reference(b, opts);
  EXPECT_EQ(r.pairs_checked, 40);
  std::map<int, int> per_req;
  for (const auto& [req, h] : checked_pairs(b, r)) ++per_req[req];
  EXPECT_EQ(per_req.size(), 30u);
  opts.max_pairs = 12;
  const ReferenceResult few = compute_reference(b, opts);
  std::map<int, int> per_req_few;
  for (const auto& [req, h] : checked_pairs(b, few)) ++per_req_few[req];
  EXPECT_EQ(per_req_few.size(), 12u);
  for (const auto& [req, n] : per_req_few) EXPECT_EQ(n, 1) << req;
}

TEST(Reference, ThreadCountDoesNotChangeResults) {
  const Batch b = batch_of(mha(8, 2, 16, 8), random_requests(23, 5, 0, 40, 20), 23);
  ReferenceOptions one, three;
  one.threads = 1;
  three.threads = 3;
  const ReferenceResult a = compute_reference(b, one), c = compute_reference(b, three);
  EXPECT_EQ(a.o, c.o);
  EXPECT_EQ(a.lse, c.lse);
}

TEST(Reference, RejectsInconsistentBatches) {
  const Batch good = batch_of(mha(4, 2, 8, 8), {{3, 2}, {1, 1}}, 24);
  Batch b = good;
  b.query_start_loc[1] = 1;
  EXPECT_THROW(compute_reference(b), InputError);
  b = good;
  b.spec.num_kv_heads = 3;
  EXPECT_THROW(compute_reference(b), InputError);
  b = good;
  b.spec.alibi = true;  // asked for, but no slopes: would silently drop ALiBi
  EXPECT_THROW(compute_reference(b), InputError);
  b = good;
  b.sinks.assign(3, 0.5f);  // wrong length and not asked for
  EXPECT_THROW(compute_reference(b), InputError);
}


// ---- perturbations (sensitivity): each bug's effect, checked by hand on tiny batches --------------

ReferenceResult perturbed(const Batch& b, Perturbation p) {
  ReferenceOptions o;
  o.perturbation = p;
  return compute_reference(b, o);
}

// Row (token, head) of O as a vector.
std::vector<double> row_of(const ReferenceResult& r, int64_t token, int head) {
  const auto first = r.o.begin() + (token * r.num_heads + head) * r.head_size_v;
  return {first, first + r.head_size_v};
}

TEST(ReferencePerturbation, CausalPlusOneMovesAllButTheLastRow) {
  // One prefill of 5 tokens after 3 cached: rows at positions 3..6; the last sees every key
  // already, so only rows 0..3 change.
  const Batch b = batch_of(mha(2, 1, 16, 8), {{3, 5}}, 31);
  const ReferenceResult ref = compute_reference(b), bug = perturbed(b, Perturbation::causal_plus_one);
  for (int t = 0; t < 5; ++t) {
    const bool last = t == 4;
    EXPECT_EQ(row_of(ref, t, 1) == row_of(bug, t, 1), last) << "token " << t;
  }
}

TEST(ReferencePerturbation, WindowPlusOneMovesOnlyRowsPastTheWindow) {
  AttentionSpec s = mha(2, 1, 16, 8);
  s.sliding_window = 4;
  const Batch b = batch_of(s, {{0, 7}}, 32);  // positions 0..6; rows >= 4 have lo > 0
  const ReferenceResult ref = compute_reference(b), bug = perturbed(b, Perturbation::window_plus_one);
  for (int t = 0; t < 7; ++t) EXPECT_EQ(row_of(ref, t, 0) == row_of(bug, t, 0), t < 4) << "token " << t;
}

TEST(ReferencePerturbation, LocalChunkMinusOneMovesRowsAfterAChunkStart) {
  const Batch b = batch_of(mha(2, 1, 16, 8), {{2, 8}}, 33, 0, 4);  // positions 2..9, chunk 4
  const ReferenceResult ref = compute_reference(b), bug = perturbed(b, Perturbation::local_chunk_minus_one);
  for (int t = 0; t < 8; ++t) EXPECT_EQ(row_of(ref, t, 0) == row_of(bug, t, 0), t + 2 < 4) << "token " << t;
}

TEST(ReferencePerturbation, SinksDroppedRemovesExactlyTheSinkFromTheDenominator) {
  AttentionSpec s = mha(2, 1, 16, 8);
  s.sinks = true;
  const Batch b = batch_of(s, {{5, 2}}, 34);
  const ReferenceResult ref = compute_reference(b), bug = perturbed(b, Perturbation::sinks_dropped);
  for (size_t row = 0; row < ref.lse.size(); ++row) {
    const int h = static_cast<int>(row % 2);
    // lse = log(sum_keys + e^sink): dropping the sink leaves log(e^lse - e^sink).
    EXPECT_NEAR(bug.lse[row], std::log(std::exp(ref.lse[row]) - std::exp(double{b.sinks[h]})), 1e-9);
  }
}

TEST(ReferencePerturbation, SoftCapWithoutTanhMattersOnlyNearTheCap) {
  AttentionSpec s = mha(2, 1, 16, 8);
  s.logits_soft_cap = 1e4f;  // far above every score: the tanh is the identity to ~1e-9
  Batch b = batch_of(s, {{6, 2}}, 35);
  EXPECT_LT(max_diff(compute_reference(b).o, perturbed(b, Perturbation::softcap_no_tanh).o), 1e-6);
  s.logits_soft_cap = 0.5f;  // scores of std 1.33 ([data] logit_std) are squeezed hard
  BatchShape shape;
  shape.label = "test";
  shape.requests = {{6, 2}};
  shape.data.logit_std = 4.0 / 3.0;
  b = make_batch(s, shape, 35);
  EXPECT_GT(max_diff(compute_reference(b).o, perturbed(b, Perturbation::softcap_no_tanh).o), 1e-2);
}

TEST(ReferencePerturbation, Fp8ScalesIgnoredDividesValuesByTheirScale) {
  AttentionSpec s = mha(2, 1, 16, 8);
  s.kv_cache_dtype = DType::fp8_e4m3;
  s.k_scale = 1.0f;  // keys untouched, so the softmax is the same
  s.v_scale = 4.0f;
  const Batch b = batch_of(s, {{6, 2}}, 36);
  const ReferenceResult ref = compute_reference(b), bug = perturbed(b, Perturbation::fp8_scales_ignored);
  for (size_t i = 0; i < ref.o.size(); ++i) EXPECT_NEAR(bug.o[i], ref.o[i] / 4.0, 1e-12);
}

TEST(ReferencePerturbation, Fp8ScalesIgnoredAlsoDropsTheQueryScale) {
  // A quantized query (q_scale 0.5) read without its descale is the codes q / q_scale = 2q: every
  // score doubles, as under a doubled softmax scale (the cache's scales are 1 here).
  AttentionSpec s = mha(2, 1, 16, 8);
  s.kv_cache_dtype = DType::fp8_e4m3;
  s.q_scale = 0.5f;
  const Batch b = batch_of(s, {{6, 2}}, 41);
  const ReferenceResult ref = compute_reference(b), bug = perturbed(b, Perturbation::fp8_scales_ignored);
  EXPECT_GT(max_diff(ref.o, bug.o), 1e-3);
  AttentionSpec doubled = s;
  doubled.scale = 2.0f * b.spec.scale;
  const ReferenceResult want = compute_reference(batch_of(doubled, {{6, 2}}, 41));
  EXPECT_LE(max_diff(bug.o, want.o), 1e-12);
  EXPECT_LE(max_diff(bug.lse, want.lse), 1e-12);
  // q_scale 1: the codes are the values, so forgetting the scale changes nothing.
  s.q_scale = 1.0f;
  const Batch one = batch_of(s, {{6, 2}}, 41);
  EXPECT_EQ(perturbed(one, Perturbation::fp8_scales_ignored).o, compute_reference(one).o);
}

TEST(ReferencePerturbation, GqaShiftReadsTheNextKvHead) {
  const Batch b = batch_of(mha(4, 2, 16, 8), {{5, 1}}, 37);
  const ReferenceResult ref = compute_reference(b), bug = perturbed(b, Perturbation::gqa_shifted);
  // Swapping the two kv heads of heads (0, 1) and (2, 3) is the same as swapping their queries'
  // kv groups: every row changes.
  for (int h = 0; h < 4; ++h) EXPECT_NE(row_of(ref, 0, h), row_of(bug, 0, h)) << "head " << h;
}

TEST(ReferencePerturbation, AlibiDroppedAndCascadeBlockDropped) {
  AttentionSpec s = mha(2, 1, 16, 8);
  s.alibi = true;
  Batch b = batch_of(s, {{9, 1}}, 38);
  EXPECT_GT(max_diff(compute_reference(b).o, perturbed(b, Perturbation::alibi_dropped).o), 1e-3);
  // Shared prefix of 8 (two blocks of 4): dropping keys 4..7 lowers every row's LSE.
  b = batch_of(mha(2, 1, 16, 8), {{12, 1}, {9, 2}}, 39, 8);
  const ReferenceResult ref = compute_reference(b), bug = perturbed(b, Perturbation::cascade_block_dropped);
  for (size_t row = 0; row < ref.lse.size(); ++row) EXPECT_LT(bug.lse[row], ref.lse[row]);
}

TEST(ReferencePerturbation, NoneAndInapplicableLeaveTheOutputBitwise) {
  const Batch b = batch_of(mha(2, 2, 16, 8), {{7, 3}}, 40);  // no window, chunk, cap, sinks, fp8
  const ReferenceResult ref = compute_reference(b);
  for (Perturbation p : {Perturbation::none, Perturbation::window_plus_one, Perturbation::local_chunk_minus_one,
                         Perturbation::softcap_no_tanh, Perturbation::sinks_dropped, Perturbation::alibi_dropped,
                         Perturbation::fp8_scales_ignored, Perturbation::cascade_block_dropped,
                         Perturbation::mla_rope_dropped}) {
    EXPECT_EQ(perturbed(b, p).o, ref.o) << to_string(p);
  }
}

// MLA's rotary part dropped: the scores lose q_pe . k_pe. Checked against the brute force with
// k_pe taken as zero (the same scores), in the up-projected form and in the absorbed decode of
// vLLM's flow alike; a one-key row does not move (its softmax is 1 whatever its score), every
// other row does.
TEST(ReferencePerturbation, MlaRopeDroppedLeavesQPeKPeOutOfEveryScore) {
  const Batch b = batch_of(mla(2), {{0, 1}, {6, 3}, {9, 1}}, 41);
  for (const std::optional<int> flow : {std::optional<int>{}, std::optional<int>{1}}) {
    ReferenceOptions o;
    o.mla_flow_decode_q_len = flow;
    const ReferenceResult ref = compute_reference(b, o);
    o.perturbation = Perturbation::mla_rope_dropped;
    const ReferenceResult bug = compute_reference(b, o);
    const BruteResult want = brute_force(b, flow, true);
    EXPECT_LE(max_diff(bug.o, want.o), kTol);
    EXPECT_LE(max_diff(bug.lse, want.lse), kTol);
    EXPECT_EQ(row_of(bug, 0, 1), row_of(ref, 0, 1));  // the first request: one key
    for (int64_t t = 1; t < b.num_tokens(); ++t) EXPECT_NE(row_of(bug, t, 1), row_of(ref, t, 1)) << "token " << t;
  }
}

}  // namespace
}  // namespace attn
