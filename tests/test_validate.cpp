// validate_output on synthetic outputs built from a reference, the budgets, strict mode (the
// naive same-precision implementation, cross-checked against compute_reference), the fp8
// quantization error and diff_outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/batch.hpp"
#include "reference/reference.hpp"
#include "validate/naive.hpp"
#include "validate/validate.hpp"

namespace attn {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

AttentionSpec small_spec(DType dtype) {
  AttentionSpec s;
  s.num_q_heads = 4;
  s.num_kv_heads = 2;
  s.head_size_qk = s.head_size_v = 16;
  s.dtype = s.kv_cache_dtype = dtype;
  s.block_size = 16;
  return s;
}

// Three requests: a decode, a fresh prefill and a chunked prefill. query_start_loc = [0, 1, 5, 8].
// DeepSeek-V3's MLA dimensions (the MlaDims defaults), 64-token blocks.
void make_mla(AttentionSpec& s, int heads) {
  s.use_mla = true;
  s.num_q_heads = heads;
  s.num_kv_heads = 1;
  s.head_size_qk = s.mla.qk_head_dim();
  s.head_size_v = s.mla.v_head_dim;
  s.block_size = 64;
}

Batch small_batch(const AttentionSpec& spec, uint64_t seed = 7) {
  BatchShape shape;
  shape.label = "validate-test";
  shape.requests = {{5, 1}, {0, 4}, {20, 3}};
  return make_batch(spec, shape, seed);
}

// A reference of the batch's shape holding random values (the metrics do not care whether the
// numbers are attention outputs), every row checked.
ReferenceResult random_reference(const Batch& b, uint64_t seed) {
  ReferenceResult r;
  r.num_tokens = b.num_tokens();
  r.num_heads = b.spec.num_q_heads;
  r.head_size_v = b.spec.head_size_v;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> val(-1.0, 1.0), lse(0.5, 6.0);
  r.o.resize(static_cast<size_t>(r.num_tokens) * r.num_heads * r.head_size_v);
  for (double& x : r.o) x = val(rng);
  r.lse.resize(static_cast<size_t>(r.num_tokens) * r.num_heads);
  for (double& x : r.lse) x = lse(rng);
  r.checked.assign(r.lse.size(), 1);
  r.pairs_total = r.pairs_checked = static_cast<int64_t>(b.num_reqs()) * r.num_heads;
  return r;
}

AttentionOutput output_of(const ReferenceResult& r, bool with_lse = false) {
  AttentionOutput o;
  o.num_tokens = r.num_tokens;
  o.num_heads = r.num_heads;
  o.head_size_v = r.head_size_v;
  o.o.assign(r.o.begin(), r.o.end());
  if (with_lse) o.lse.assign(r.lse.begin(), r.lse.end());
  return o;
}

size_t at(const ReferenceResult& r, int64_t t, int h, int d) {
  return (static_cast<size_t>(t) * r.num_heads + h) * r.head_size_v + d;
}

class ValidateTest : public ::testing::Test {
 protected:
  Batch b = small_batch(small_spec(DType::bf16));
  ReferenceResult ref = random_reference(b, 11);
  // The per-element mechanics are exercised with the fixed rule of a [check] override.
  double atol = 1e-2, rtol = 1e-2, max_rel_l2 = 1e-2;
  Budget budget = fixed_budget(atol, rtol, max_rel_l2);

  static Budget fixed_budget(double a, double r, double l2) {
    Budget f = default_budget(DType::bf16);
    f.atol = a;
    f.rtol = r;
    f.max_rel_l2 = l2;
    return f;
  }
};

// ---- budgets ------------------------------------------------------------------------------

TEST(ValidateBudget, DefaultsPerDtype) {
  const Budget f32 = default_budget(DType::f32), f16 = default_budget(DType::f16), bf16 = default_budget(DType::bf16);
  EXPECT_EQ(bf16.precision, DType::bf16);
  EXPECT_DOUBLE_EQ(bf16.k_l2, 1.6);
  EXPECT_DOUBLE_EQ(bf16.k_abs, 4);
  EXPECT_DOUBLE_EQ(f16.k_l2, 1.6);
  EXPECT_EQ(f32.precision, DType::f32);
  EXPECT_DOUBLE_EQ(f32.k_l2, 512);  // fp32 kernels: accumulation, not output rounding, dominates
  EXPECT_FALSE(bf16.atol.has_value());
  EXPECT_FALSE(bf16.max_rel_l2.has_value());
  EXPECT_FALSE(bf16.fixed_elementwise());
  EXPECT_DOUBLE_EQ(bf16.min_cosine, 0.9999);
  EXPECT_DOUBLE_EQ(f32.min_cosine, 0.99999);
  EXPECT_DOUBLE_EQ(unit_roundoff(DType::bf16), 0x1p-8);
  EXPECT_DOUBLE_EQ(unit_roundoff(DType::f16), 0x1p-11);
  EXPECT_DOUBLE_EQ(unit_roundoff(DType::f32), 0x1p-24);
  EXPECT_FALSE(bf16.strict);
}

TEST(ValidateBudget, OverridesReplaceOnlyWhatIsSet) {
  CheckConfig c;
  c.rtol = 0.25;
  c.min_cosine = 0.5;
  c.k_l2 = 3;
  c.strict = true;
  const Budget b = apply_overrides(default_budget(DType::f16), c);
  EXPECT_TRUE(b.fixed_elementwise());
  EXPECT_DOUBLE_EQ(*b.atol, 0.0);  // the fixed rule is exactly what was asked
  EXPECT_DOUBLE_EQ(*b.rtol, 0.25);
  EXPECT_FALSE(b.max_rel_l2.has_value());
  EXPECT_DOUBLE_EQ(b.k_l2, 3);
  EXPECT_DOUBLE_EQ(b.k_abs, 4);
  EXPECT_DOUBLE_EQ(b.min_cosine, 0.5);
  EXPECT_TRUE(b.strict);
}

TEST(ValidateBudget, OverridesRejectNonsense) {
  CheckConfig neg;
  neg.atol = -1e-3;
  EXPECT_THROW(apply_overrides(default_budget(DType::bf16), neg), InputError);
  CheckConfig cos;
  cos.min_cosine = 1.5;
  EXPECT_THROW(apply_overrides(default_budget(DType::bf16), cos), InputError);
  CheckConfig nan;
  nan.max_rel_l2 = kNaN;
  EXPECT_THROW(apply_overrides(default_budget(DType::bf16), nan), InputError);
  CheckConfig below_floor;
  below_floor.k_l2 = 0.5;  // tighter than the rounding floor itself: nothing could pass
  EXPECT_THROW(apply_overrides(default_budget(DType::bf16), below_floor), InputError);
}

// ---- the floor-based rule -------------------------------------------------------------------

class ValidateFloorTest : public ::testing::Test {
 protected:
  Batch b = small_batch(small_spec(DType::bf16));
  ReferenceResult ref = random_reference(b, 17);
  Budget budget = default_budget(DType::bf16);

  // ref + scale * (round_bf16(ref) - ref): an error `scale` times the rounding floor's.
  AttentionOutput scaled_rounding(double scale) const {
    AttentionOutput out = output_of(ref);
    for (size_t i = 0; i < out.o.size(); ++i) {
      const double r = round_to(DType::bf16, static_cast<float>(ref.o[i]));
      out.o[i] = static_cast<float>(ref.o[i] + scale * (r - ref.o[i]));
    }
    return out;
  }
};

TEST_F(ValidateFloorTest, ExactResultRoundedOnceSitsOnTheFloor) {
  const ValidationResult v = validate_output(b, scaled_rounding(1.0), ref, budget);
  EXPECT_TRUE(v.pass) << v.failure;
  EXPECT_GT(v.floor_rel_l2, 5e-4);  // bf16: u / sqrt(3) ~ 2.3e-3 for magnitudes spread over octaves
  EXPECT_LT(v.floor_rel_l2, 4e-3);
  EXPECT_NEAR(v.err_over_floor, 1.0, 1e-3);
  EXPECT_LE(v.max_abs_over_budget, 0.25 + 1e-6);  // half an ulp is u|ref|, a quarter of k_abs u |ref|
}

TEST_F(ValidateFloorTest, TwiceTheFloorFails) {
  const ValidationResult ok = validate_output(b, scaled_rounding(1.3), ref, budget);
  EXPECT_TRUE(ok.pass) << ok.failure;
  const ValidationResult v = validate_output(b, scaled_rounding(2.0), ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_NEAR(v.err_over_floor, 2.0, 1e-3);
  EXPECT_NE(v.failure.find("x floor"), std::string::npos) << v.failure;
  EXPECT_EQ(v.elements_over_budget, 0);  // each element is still inside its own bound
}

// FLASHMLA declares vLLM's MLA data flow: it is checked against the reference of that flow (the
// rounded q_latent included), where the exact flow rounded once sits on O's floor. On peaked
// scores the same output is far from the exact result: a fixed floor factor would fail it.
TEST(ValidateMlaFlow, CheckedAgainstTheReferenceOfTheDeclaredFlow) {
  AttentionSpec s;
  make_mla(s, 4);
  BatchShape shape;
  shape.label = "mla-peaked";
  shape.requests = {{300, 1}, {700, 1}};
  shape.data.logit_std = 12.0;
  const Batch b = make_batch(s, shape, 21);
  AttentionOutput declared;
  declared.mla_flow_decode_q_len = 1;
  const ReferenceOptions opts = reference_options_for(declared, ReferenceOptions{});
  ASSERT_EQ(opts.mla_flow_decode_q_len, 1);
  const ReferenceResult flow = compute_reference(b, opts);
  AttentionOutput out = output_of(flow);
  for (float& x : out.o) x = round_to(DType::bf16, x);
  out.mla_flow_decode_q_len = 1;
  const Budget budget = default_budget(DType::bf16);
  const ValidationResult v = validate_output(b, out, flow, budget);
  EXPECT_TRUE(v.pass) << v.failure;
  EXPECT_LE(v.err_over_floor, 1.0 + 1e-9);
  const ValidationResult exact = validate_output(b, out, compute_reference(b), budget);
  EXPECT_FALSE(exact.pass);
  EXPECT_GT(exact.err_over_floor, budget.k_l2);
}

TEST_F(ValidateFloorTest, CoarseRoundingsAddTheirUnitRoundoffUnderTheRoot) {
  // An e4m3-sized error on every element (FLASH_ATTN's fp8 path rounds P to e4m3): with the
  // rounding declared, the floor of the flow is sqrt(1 + (2^-4 / 2^-8)^2) ~ 16 x O's, so it sits
  // at ~1 x that floor and passes, its cosine (below bf16's 0.9999) implied by the L2 bound.
  auto e4m3_error = [&](double scale) {
    AttentionOutput out = output_of(ref);
    for (size_t i = 0; i < out.o.size(); ++i) {
      const double r = round_to(DType::fp8_e4m3, static_cast<float>(ref.o[i]));
      out.o[i] = static_cast<float>(ref.o[i] + scale * (r - ref.o[i]));
    }
    return out;
  };
  AttentionOutput coarse = e4m3_error(1.0);
  coarse.coarse_roundings = {DType::fp8_e4m3};
  const ValidationResult ok = validate_output(b, coarse, ref, budget);
  EXPECT_TRUE(ok.pass) << ok.failure;
  EXPECT_LT(ok.cosine, budget.min_cosine);
  EXPECT_GT(ok.err_over_floor, 0.7);
  EXPECT_LT(ok.err_over_floor, 1.3);
  const ValidationResult single = validate_output(b, scaled_rounding(1.0), ref, budget);
  EXPECT_NEAR(ok.floor_rel_l2, std::sqrt(257.0) * single.floor_rel_l2, 1e-12);
  // Undeclared, the same error is ~16 x the bf16 floor (and elements exceed their own bound).
  const ValidationResult undeclared = validate_output(b, e4m3_error(1.0), ref, budget);
  EXPECT_FALSE(undeclared.pass);
  EXPECT_GT(undeclared.err_over_floor, 10.0);
  // Twice the error fails even declared.
  AttentionOutput twice = e4m3_error(2.0);
  twice.coarse_roundings = {DType::fp8_e4m3};
  const ValidationResult bug = validate_output(b, twice, ref, budget);
  EXPECT_FALSE(bug.pass);
  EXPECT_NE(bug.failure.find("x floor"), std::string::npos) << bug.failure;
}

TEST_F(ValidateFloorTest, CosineOfARaisedFloorIsTheOneItsL2BoundImplies) {
  // A flow of one rounding (flow 1) keeps the dtype's cosine; a raised floor never tightens it.
  AttentionOutput coarse = scaled_rounding(1.0);
  coarse.coarse_roundings = {DType::fp8_e4m3};
  EXPECT_TRUE(validate_output(b, coarse, ref, budget).pass);
  // A [check] cosine stays what was asked when the L2 rule is a fixed one.
  Budget fixed = budget;
  fixed.max_rel_l2 = 1.0;
  fixed.min_cosine = 0.99999;
  AttentionOutput far = output_of(ref);
  for (size_t i = 0; i < far.o.size(); ++i)
    far.o[i] = static_cast<float>(ref.o[i] + 16.0 * (round_to(DType::bf16, static_cast<float>(ref.o[i])) - ref.o[i]));
  far.coarse_roundings = {DType::fp8_e4m3};
  const ValidationResult v = validate_output(b, far, ref, fixed);
  EXPECT_FALSE(v.pass);
  EXPECT_NE(v.failure.find("cosine"), std::string::npos) << v.failure;
}

TEST_F(ValidateFloorTest, ElementBoundScalesWithTheRow) {
  // An element near zero may be off by a few u times its row's RMS, not by u times itself.
  AttentionOutput out = output_of(ref);
  const size_t row = 3, len = static_cast<size_t>(ref.head_size_v);
  double row2 = 0;
  for (size_t d = 0; d < len; ++d) row2 += ref.o[row * len + d] * ref.o[row * len + d];
  const double rms = std::sqrt(row2 / static_cast<double>(len));
  const double u = unit_roundoff(DType::bf16);
  const size_t i = row * len + 2;
  out.o[i] = static_cast<float>(ref.o[i] + 2 * u * (std::abs(ref.o[i]) + rms));
  ValidationResult v = validate_output(b, out, ref, budget);
  EXPECT_TRUE(v.pass) << v.failure;
  out.o[i] = static_cast<float>(ref.o[i] + 5 * u * (std::abs(ref.o[i]) + rms));
  v = validate_output(b, out, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.elements_over_budget, 1);
  EXPECT_NEAR(v.max_abs_over_budget, 5.0 / 4.0, 1e-3);
  EXPECT_NE(v.failure.find("row rms"), std::string::npos) << v.failure;
}

// Below fp16's normal range (6.1e-5) rounding is absolute: a row of outputs ~1e-8 (a sink or far
// keys taking nearly all the weight) stores as zeros and subnormals, half of 2^-24 off at most.
// That exact result rounded once sits on its floor and passes; an error of a few subnormals fails.
TEST(ValidateSubnormal, Fp16RowsBelowTheNormalRangeRoundAbsolutely) {
  const Batch b = small_batch(small_spec(DType::f16));
  ReferenceResult ref = random_reference(b, 23);
  const size_t len = static_cast<size_t>(ref.head_size_v);
  for (size_t i = 0; i < len; ++i) ref.o[i] *= 1e-7;  // row 0: |o| <= 1e-7, mostly below 2^-24
  const Budget budget = default_budget(DType::f16);
  AttentionOutput out = output_of(ref);
  for (size_t i = 0; i < out.o.size(); ++i) out.o[i] = round_to(DType::f16, static_cast<float>(ref.o[i]));
  ValidationResult v = validate_output(b, out, ref, budget);
  EXPECT_TRUE(v.pass) << v.failure;
  EXPECT_EQ(v.elements_over_budget, 0);
  EXPECT_NEAR(v.err_over_floor, 1.0, 1e-3);
  // Four subnormal steps off in row 0 (4 x 2^-24 ~ 2.4e-7: 8 x eta / 2, twice k_abs x eta / 2).
  out.o[3] = static_cast<float>(ref.o[3] + 4 * 0x1p-24);
  v = validate_output(b, out, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.elements_over_budget, 1);
  EXPECT_NE(v.failure.find("eta"), std::string::npos) << v.failure;
  // The subnormal rounding happens once, when O is stored: a data flow whose coarse intermediates
  // raise the u terms (an e4m3 P, flow ~16 at fp16) does not raise it. A row of rms ~1e-5, inside
  // fp16's normal range, written as zeros fails either way.
  AttentionOutput zeroed = output_of(ref);
  for (size_t i = 0; i < zeroed.o.size(); ++i) zeroed.o[i] = round_to(DType::f16, static_cast<float>(ref.o[i]));
  const size_t row = 2;
  for (size_t d = 0; d < len; ++d) {
    ref.o[row * len + d] *= 1e-5;
    zeroed.o[row * len + d] = 0;
  }
  zeroed.coarse_roundings = {DType::fp8_e4m3};
  v = validate_output(b, zeroed, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_GE(v.elements_over_budget, static_cast<int64_t>(len) / 2);
  EXPECT_NE(v.failure.find("flow="), std::string::npos) << v.failure;
}

// ---- validate_output ----------------------------------------------------------------------

TEST_F(ValidateTest, ExactOutputPasses) {
  const ValidationResult v = validate_output(b, output_of(ref, true), ref, budget);
  EXPECT_TRUE(v.pass) << v.failure;
  EXPECT_EQ(v.failure, "");
  EXPECT_EQ(v.elements_checked, 8 * 4 * 16);
  EXPECT_EQ(v.elements_over_budget, 0);
  EXPECT_EQ(v.nan_mismatches, 0);
  EXPECT_EQ(v.unwritten, 0);
  EXPECT_LT(v.max_abs_err, 1e-7);  // only the float rounding of the output
  EXPECT_LT(v.rel_l2, 1e-7);
  EXPECT_NEAR(v.cosine, 1.0, 1e-12);
  EXPECT_LT(v.nmse, 1e-14);
  EXPECT_LT(v.lse_max_abs_err, 1e-6);
  EXPECT_EQ(v.naive_rel_l2, -1);  // not strict
}

TEST_F(ValidateTest, OneElementBeyondBudgetFailsAndIsLocated) {
  AttentionOutput out = output_of(ref);
  const int64_t t = 6;  // request 2 (tokens 5..7), its second new token: position 20 + 1
  const int h = 3, d = 9;
  const double want = ref.o[at(ref, t, h, d)];
  const double got = want + atol + rtol * std::abs(want) + 0.05;
  out.o[at(ref, t, h, d)] = static_cast<float>(got);
  // A second, smaller violation must not be reported as the worst.
  out.o[at(ref, 1, 0, 0)] += static_cast<float>(1.5 * (atol + rtol * std::abs(ref.o[at(ref, 1, 0, 0)])));

  const ValidationResult v = validate_output(b, out, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.elements_over_budget, 2);
  EXPECT_NE(v.failure.find("exceed"), std::string::npos) << v.failure;
  EXPECT_EQ(v.worst.request, 2);
  EXPECT_EQ(v.worst.token, 6);
  EXPECT_EQ(v.worst.position, 21);
  EXPECT_EQ(v.worst.head, 3);
  EXPECT_EQ(v.worst.dim, 9);
  EXPECT_NEAR(v.worst.got, got, 1e-6);
  EXPECT_DOUBLE_EQ(v.worst.want, want);
  EXPECT_NEAR(v.max_abs_err, got - want, 1e-6);
  EXPECT_NE(v.failure.find("req=2 tok=6 pos=21 head=3 dim=9"), std::string::npos) << v.failure;
}

TEST_F(ValidateTest, ErrorWithinBudgetPasses) {
  AttentionOutput out = output_of(ref);
  const size_t i = at(ref, 3, 2, 4);
  out.o[i] += static_cast<float>(0.5 * (atol + rtol * std::abs(ref.o[i])));
  const ValidationResult v = validate_output(b, out, ref, budget);
  EXPECT_TRUE(v.pass) << v.failure;
  EXPECT_GT(v.max_abs_err, 0.4 * atol);
}

TEST_F(ValidateTest, NanWhereReferenceIsFiniteIsUnwritten) {
  AttentionOutput out = output_of(ref);
  out.o[at(ref, 4, 1, 15)] = std::numeric_limits<float>::quiet_NaN();
  out.o[at(ref, 0, 2, 3)] = std::numeric_limits<float>::infinity();  // a mismatch, but written
  const ValidationResult v = validate_output(b, out, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.nan_mismatches, 2);
  EXPECT_EQ(v.unwritten, 1);
  EXPECT_NE(v.failure.find("non-finite"), std::string::npos) << v.failure;
  // The first mismatch in token order is the one reported.
  EXPECT_EQ(v.worst.token, 0);
  EXPECT_EQ(v.worst.request, 0);
  EXPECT_EQ(v.worst.position, 5);
  EXPECT_EQ(v.worst.head, 2);
  EXPECT_EQ(v.worst.dim, 3);
}

TEST_F(ValidateTest, NonFinitePositionsMustMatchExactly) {
  const size_t nan_at = at(ref, 2, 0, 1), inf_at = at(ref, 7, 3, 2);
  ref.o[nan_at] = kNaN;
  ref.o[inf_at] = kInf;
  AttentionOutput out = output_of(ref);
  ValidationResult v = validate_output(b, out, ref, budget);
  EXPECT_TRUE(v.pass) << v.failure;
  EXPECT_EQ(v.nan_mismatches, 0);

  out.o[nan_at] = 0.25f;  // finite where the reference is NaN: a mismatch, not "unwritten"
  v = validate_output(b, out, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.nan_mismatches, 1);
  EXPECT_EQ(v.unwritten, 0);

  out = output_of(ref);
  out.o[inf_at] = -std::numeric_limits<float>::infinity();  // wrong sign
  v = validate_output(b, out, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.nan_mismatches, 1);
}

TEST_F(ValidateTest, UncheckedRowsAreIgnored) {
  AttentionOutput out = output_of(ref);
  ref.checked[static_cast<size_t>(5) * ref.num_heads + 1] = 0;  // token 5, head 1
  for (int d = 0; d < ref.head_size_v; ++d) out.o[at(ref, 5, 1, d)] = d % 2 ? 1e9f : -3.0f;
  const ValidationResult v = validate_output(b, out, ref, budget);
  EXPECT_TRUE(v.pass) << v.failure;
  EXPECT_EQ(v.elements_checked, (8 * 4 - 1) * 16);
  // Its values are not compared, but a NaN there is an unwritten row (outputs start NaN-poisoned).
  out.o[at(ref, 5, 1, 2)] = std::nanf("");
  EXPECT_FALSE(validate_output(b, out, ref, budget).pass);
  out.o[at(ref, 5, 1, 2)] = 0.5f;

  ReferenceResult none = ref;
  none.checked.assign(none.checked.size(), 0);
  const ValidationResult empty = validate_output(b, out, none, budget);
  EXPECT_FALSE(empty.pass);  // nothing checked is never a pass
  EXPECT_NE(empty.failure.find("no output element"), std::string::npos);
}

TEST_F(ValidateTest, RelativeL2IsGatedBeyondPerElementBudget) {
  // Every element off by 90% of its own budget: each passes, the aggregate does not.
  AttentionOutput out = output_of(ref);
  std::mt19937 rng(3);
  for (size_t i = 0; i < out.o.size(); ++i) {
    const double sign = (rng() & 1) ? 1.0 : -1.0;
    out.o[i] = static_cast<float>(ref.o[i] + sign * 0.9 * (atol + rtol * std::abs(ref.o[i])));
  }
  const ValidationResult v = validate_output(b, out, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.elements_over_budget, 0);
  EXPECT_GT(v.rel_l2, max_rel_l2);
  EXPECT_EQ(v.failure.rfind("rel_l2", 0), 0u) << v.failure;
  EXPECT_NEAR(v.nmse, v.rel_l2 * v.rel_l2, 1e-12);
}

TEST_F(ValidateTest, CosineIsGated) {
  Budget loose = budget;
  loose.atol = 1;
  loose.max_rel_l2 = 1;
  loose.min_cosine = 0.999999;
  AttentionOutput out = output_of(ref);
  std::mt19937 rng(5);
  std::normal_distribution<double> noise(0.0, 0.01);
  for (size_t i = 0; i < out.o.size(); ++i) out.o[i] = static_cast<float>(ref.o[i] + noise(rng));
  const ValidationResult v = validate_output(b, out, ref, loose);
  EXPECT_FALSE(v.pass);
  EXPECT_LT(v.cosine, 0.999999);
  EXPECT_GT(v.cosine, 0.999);
  EXPECT_EQ(v.failure.rfind("cosine", 0), 0u) << v.failure;
}

TEST_F(ValidateTest, LseIsComparedWhenReturned) {
  ref.lse[static_cast<size_t>(1) * ref.num_heads + 2] = -kInf;  // a row with no visible key
  AttentionOutput out = output_of(ref, true);
  ValidationResult v = validate_output(b, out, ref, budget);
  EXPECT_TRUE(v.pass) << v.failure;

  out.lse[static_cast<size_t>(6) * ref.num_heads + 0] += 1.0f;  // far beyond 10 * atol
  v = validate_output(b, out, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.failure.rfind("lse", 0), 0u) << v.failure;
  EXPECT_NEAR(v.lse_max_abs_err, 1.0, 1e-5);
  EXPECT_NE(v.failure.find("req=2 tok=6"), std::string::npos) << v.failure;

  out = output_of(ref, true);
  out.lse[static_cast<size_t>(1) * ref.num_heads + 2] = 0.0f;  // finite where -inf
  v = validate_output(b, out, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.nan_mismatches, 1);

  out = output_of(ref, true);
  out.lse[3] = std::nanf("");  // poison left in the LSE
  v = validate_output(b, out, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.unwritten, 1);

  out = output_of(ref, true);
  out.lse.pop_back();
  v = validate_output(b, out, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_NE(v.failure.find("lse has"), std::string::npos);
}

TEST_F(ValidateTest, ShapeMismatchFailsAndInconsistentReferenceThrows) {
  AttentionOutput out = output_of(ref);
  out.head_size_v = 8;
  ValidationResult v = validate_output(b, out, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_NE(v.failure.find("shape"), std::string::npos);

  ReferenceResult wrong = ref;
  wrong.num_tokens = 7;
  EXPECT_THROW(validate_output(b, output_of(ref), wrong, budget), RuntimeError);
}

// ---- strict mode and the naive implementation ----------------------------------------------

AttentionOutput as_output(const Batch& b, const std::vector<double>& o) {
  AttentionOutput out;
  out.num_tokens = b.num_tokens();
  out.num_heads = b.spec.num_q_heads;
  out.head_size_v = b.spec.head_size_v;
  out.o.assign(o.begin(), o.end());
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

TEST(ValidateStrict, NaiveSameKindOfErrorPassesThreeTimesItFails) {
  const Batch b = small_batch(small_spec(DType::bf16), 21);
  const ReferenceResult ref = compute_reference(b);
  Budget strict = default_budget(DType::bf16);
  strict.strict = true;

  const std::vector<double> naive = naive_attention(b, ref.checked, {});
  const ValidationResult ok = validate_output(b, as_output(b, naive), ref, strict);
  EXPECT_TRUE(ok.pass) << ok.failure;
  EXPECT_GT(ok.naive_rel_l2, 1e-5);  // bf16 rounding is visible...
  EXPECT_LT(ok.naive_rel_l2, 1e-2);  // ...and within the bf16 budget
  EXPECT_NEAR(ok.rel_l2, ok.naive_rel_l2, 1e-6);

  // Three times the naive error: inside the dtype budget once loosened, outside strict mode.
  std::vector<double> worse(naive.size());
  for (size_t i = 0; i < naive.size(); ++i) worse[i] = ref.o[i] + 3.0 * (naive[i] - ref.o[i]);
  Budget loose = strict;
  loose.atol = loose.rtol = loose.max_rel_l2 = 1;
  loose.min_cosine = 0;
  const ValidationResult v = validate_output(b, as_output(b, worse), ref, loose);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.failure.rfind("strict", 0), 0u) << v.failure;
  loose.strict = false;
  EXPECT_TRUE(validate_output(b, as_output(b, worse), ref, loose).pass);
}

// Defect: strict mode's bound (2 x the naive same-precision error) ignored the coarse
// intermediates an output declares, so an e4m3 P that its budget admits by design (the fp8
// tensor-core prefill) failed --strict. The bound takes the floor's data-flow factor too.
TEST(ValidateStrict, CoarseIntermediatesRaiseTheNaiveBoundAsTheyRaiseTheFloor) {
  const Batch b = small_batch(small_spec(DType::bf16), 21);
  const ReferenceResult ref = compute_reference(b);
  Budget strict = default_budget(DType::bf16);
  strict.strict = true;
  AttentionOutput e4m3 = as_output(b, ref.o);
  for (size_t i = 0; i < e4m3.o.size(); ++i)
    e4m3.o[i] = round_to(DType::fp8_e4m3, static_cast<float>(ref.o[i]));
  e4m3.coarse_roundings = {DType::fp8_e4m3};
  const ValidationResult ok = validate_output(b, e4m3, ref, strict);
  EXPECT_TRUE(ok.pass) << ok.failure;
  EXPECT_GT(ok.rel_l2, 4 * ok.naive_rel_l2);  // far beyond the bf16 naive error: the bound moved
  // Three times that error still fails (the floor's rule, before the strict one).
  AttentionOutput worse = e4m3;
  for (size_t i = 0; i < worse.o.size(); ++i) worse.o[i] = static_cast<float>(ref.o[i] + 3.0 * (e4m3.o[i] - ref.o[i]));
  EXPECT_FALSE(validate_output(b, worse, ref, strict).pass);
}

// Defect: with a [check] sample_pairs, rows outside the sample were never looked at, so a
// backend that left them unwritten (NaN-poisoned) passed. Every row is scanned for NaN.
TEST(ValidateSample, UnwrittenRowsOutsideTheSampleFail) {
  const Batch b = small_batch(small_spec(DType::bf16), 5);
  ReferenceOptions opts;
  opts.max_pairs = 3;
  opts.sample_seed = 5;
  const ReferenceResult ref = compute_reference(b, opts);
  ASSERT_LT(ref.pairs_checked, ref.pairs_total);
  size_t outside = ref.checked.size();
  for (size_t r = 0; r < ref.checked.size() && outside == ref.checked.size(); ++r)
    if (!ref.checked[r]) outside = r;
  ASSERT_LT(outside, ref.checked.size());
  // The checked rows right, the others some finite value (unchecked rows are not compared).
  AttentionOutput out = as_output(b, ref.o);
  for (size_t r = 0; r < ref.checked.size(); ++r)
    for (int d = 0; d < ref.head_size_v; ++d) {
      float& x = out.o[r * ref.head_size_v + d];
      x = ref.checked[r] ? round_to(DType::bf16, x) : 0.25f;
    }
  out.lse.assign(ref.lse.size(), 1.0f);
  for (size_t r = 0; r < ref.checked.size(); ++r)
    if (ref.checked[r]) out.lse[r] = static_cast<float>(ref.lse[r]);
  const Budget budget = default_budget(DType::bf16);
  EXPECT_TRUE(validate_output(b, out, ref, budget).pass);

  AttentionOutput nan_o = out;
  nan_o.o[outside * ref.head_size_v + 1] = std::numeric_limits<float>::quiet_NaN();
  ValidationResult v = validate_output(b, nan_o, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.unwritten, 1);
  EXPECT_NE(v.failure.find("outside the checked sample"), std::string::npos) << v.failure;

  AttentionOutput nan_lse = out;
  nan_lse.lse[outside] = std::numeric_limits<float>::quiet_NaN();
  v = validate_output(b, nan_lse, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.unwritten, 1);

  // A row outside the sample given as keyless (O = 0, LSE = -inf, what a work item that never ran
  // over its keys writes): every query sees its own key, so no correct row is keyless.
  AttentionOutput keyless = out;
  for (int d = 0; d < ref.head_size_v; ++d) keyless.o[outside * ref.head_size_v + d] = 0.0f;
  keyless.lse[outside] = -std::numeric_limits<float>::infinity();
  v = validate_output(b, keyless, ref, budget);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.nan_mismatches, 1);
  EXPECT_EQ(v.unwritten, 0);
  EXPECT_NE(v.failure.find("no visible key"), std::string::npos) << v.failure;
}

TEST(ValidateStrict, NaiveOnlyComputesWantedRows) {
  const Batch b = small_batch(small_spec(DType::f32), 4);
  std::vector<uint8_t> rows(static_cast<size_t>(b.num_tokens()) * b.spec.num_q_heads, 0);
  rows[static_cast<size_t>(6) * b.spec.num_q_heads + 3] = 1;
  const std::vector<double> o = naive_attention(b, rows, {});
  const int dv = b.spec.head_size_v;
  for (size_t i = 0; i < o.size(); ++i) {
    const bool wanted = i / dv == static_cast<size_t>(6 * b.spec.num_q_heads + 3);
    EXPECT_EQ(std::isfinite(o[i]), wanted) << i;
  }
  std::vector<uint8_t> bad(3, 1);
  EXPECT_THROW(naive_attention(b, bad, {}), RuntimeError);
}

// The naive implementation in exact arithmetic must agree with compute_reference: two
// independent readings of the same semantics.
struct NaiveCase {
  const char* name;
  void (*tweak)(AttentionSpec&, BatchShape&);
};

class NaiveMatchesReference : public ::testing::TestWithParam<NaiveCase> {};

TEST_P(NaiveMatchesReference, ExactAgreesAndModelPrecisionIsClose) {
  AttentionSpec spec = small_spec(DType::bf16);
  BatchShape shape;
  shape.label = GetParam().name;
  shape.requests = {{33, 1}, {0, 5}, {17, 4}, {40, 2}};
  GetParam().tweak(spec, shape);
  const Batch b = make_batch(spec, shape, 99);
  const ReferenceResult ref = compute_reference(b);
  NaiveOptions exact;
  exact.precision = NaiveOptions::Precision::exact;
  const std::vector<double> o = naive_attention(b, ref.checked, exact);
  EXPECT_LT(max_abs_diff(o, ref.o), 1e-9);
  const double model_err = masked_rel_l2(naive_attention(b, ref.checked, {}), ref.o, ref.checked, b.spec.head_size_v);
  EXPECT_GT(model_err, 0.0);
  EXPECT_LT(model_err, 1e-2);
}

INSTANTIATE_TEST_SUITE_P(
    Validate, NaiveMatchesReference,
    ::testing::Values(
        NaiveCase{"plain", [](AttentionSpec&, BatchShape&) {}},
        NaiveCase{"window_softcap_sinks",
                  [](AttentionSpec& s, BatchShape&) {
                    s.sliding_window = 6;
                    s.logits_soft_cap = 5.0f;
                    s.sinks = true;
                  }},
        NaiveCase{"alibi_gqa4",
                  [](AttentionSpec& s, BatchShape&) {
                    s.num_kv_heads = 1;
                    s.alibi = true;
                  }},
        NaiveCase{"encoder_only",
                  [](AttentionSpec& s, BatchShape& sh) {
                    s.attn_type = AttentionType::encoder_only;
                    sh.requests = {{0, 7}, {0, 3}};
                  }},
        NaiveCase{"local_chunk_shared_prefix",
                  [](AttentionSpec&, BatchShape& sh) {
                    sh.local_attention_chunk = 8;
                    sh.shared_prefix_len = 16;
                    sh.requests = {{16, 3}, {20, 6}, {31, 1}};
                  }},
        NaiveCase{"fp8_cache",
                  [](AttentionSpec& s, BatchShape&) {
                    s.kv_cache_dtype = DType::fp8_e4m3;
                    s.k_scale = 0.02f;
                    s.v_scale = 0.03f;
                  }},
        NaiveCase{"mla",
                  [](AttentionSpec& s, BatchShape& sh) {
                    make_mla(s, 2);
                    sh.requests = {{9, 1}, {0, 3}};
                  }}),
    [](const ::testing::TestParamInfo<NaiveCase>& info) { return std::string(info.param.name); });

TEST(ValidateQuantization, ReportedOnlyForFp8AndOrderedByPrecision) {
  AttentionSpec spec = small_spec(DType::bf16);
  const Batch plain = small_batch(spec, 5);
  EXPECT_EQ(quantization_rel_l2(plain, {}), -1);

  spec.kv_cache_dtype = DType::fp8_e4m3;
  const double e4m3 = quantization_rel_l2(small_batch(spec, 5), {});
  spec.kv_cache_dtype = DType::fp8_e5m2;
  const double e5m2 = quantization_rel_l2(small_batch(spec, 5), {});
  EXPECT_GT(e4m3, 1e-4);  // 3 mantissa bits: a visible error...
  EXPECT_LT(e4m3, 0.2);
  EXPECT_GT(e5m2, e4m3);  // ...and 2 bits give a larger one
}

// ---- diff_outputs --------------------------------------------------------------------------

TEST_F(ValidateTest, DiffOutputs) {
  const AttentionOutput a = output_of(ref);
  AttentionOutput c = a;
  OutputDiff d = diff_outputs(a, c);
  EXPECT_TRUE(d.bitwise_equal);
  EXPECT_EQ(d.max_abs, 0);
  EXPECT_EQ(d.rel_l2, 0);

  c.o[17] += 0.125f;
  d = diff_outputs(a, c);
  EXPECT_FALSE(d.bitwise_equal);
  EXPECT_NEAR(d.max_abs, 0.125, 1e-6);
  EXPECT_GT(d.rel_l2, 0);

  c = a;
  c.o[3] = std::nanf("");
  d = diff_outputs(a, c);
  EXPECT_FALSE(d.bitwise_equal);
  EXPECT_TRUE(std::isinf(d.max_abs));

  c = a;
  c.num_heads = 2;
  EXPECT_THROW(diff_outputs(a, c), RuntimeError);
}

}  // namespace
}  // namespace attn
