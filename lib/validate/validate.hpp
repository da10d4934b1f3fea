#pragma once
// Compares a backend's output with the float64 reference under the budgets of DESIGN.md.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "model/scenario.hpp"
#include "reference/reference.hpp"

namespace attn {

// Budgets derive from the precision floor (DESIGN.md, "Accuracy budgets"): the error of the exact
// result rounded once to the dtype O is stored in. Per checked batch:
//   floor_rel_l2 = ||round(ref) - ref|| / ||ref||
//   rel_l2      <= k_l2 * floor_rel_l2
//   |o - ref|   <= k_abs * (u * (|ref| + rms of ref over its (token, head) row) + eta / 2)
// with u the unit roundoff of that dtype (2^-8 bf16, 2^-11 fp16, 2^-24 fp32): the row term
// covers elements near zero, whose error scales with the row, not with themselves; eta, the
// dtype's smallest subnormal, covers rows below its normal range (fp16). Coarse intermediates
// (an e4m3 P) scale the u terms by the data flow's factor (validate.cpp). A [check]
// override of atol/rtol (max_rel_l2) replaces the per-element (L2) rule by the fixed one.
struct Budget {
  DType precision = DType::bf16;  // the dtype O was stored in: sets the floor and u
  double k_l2 = 1.6;
  double k_abs = 4;
  // Fixed rules, set only by [check] overrides: |o - ref| <= atol + rtol * |ref|, rel_l2 <= max_rel_l2.
  std::optional<double> atol, rtol, max_rel_l2;
  double min_cosine = 0.9999;
  // LSE (natural log, fp32 in every backend): |lse - ref| <= lse_atol + lse_rtol * |ref|.
  double lse_atol = 1e-1, lse_rtol = 1e-2;
  bool strict = false;  // also bound the error by 2x a same-precision naive implementation
  bool fixed_elementwise() const { return atol.has_value() || rtol.has_value(); }
};
// Unit roundoff (half an ulp at 1) of a storage dtype.
double unit_roundoff(DType t);
// The spacing of a storage dtype below its normal range (its smallest positive subnormal): a
// value that small rounds with an absolute error up to half of it, not u times itself. fp16's is
// 2^-24 ~ 6e-8, which outputs of rows whose sink or far keys take nearly all the weight reach.
double smallest_subnormal(DType t);
Budget default_budget(DType model_dtype);
Budget apply_overrides(Budget b, const CheckConfig& c);

struct WorstElement {
  int request = -1;
  int64_t token = -1;  // flattened token index
  int position = -1;   // absolute position within the request
  int head = -1;
  int dim = -1;
  double got = 0, want = 0;
};

struct ValidationResult {
  bool pass = false;
  std::string failure;  // first failed criterion, human-readable ("" when pass)
  double max_abs_err = 0, max_rel_err = 0, rel_l2 = 0, cosine = 1, nmse = 0;
  double floor_rel_l2 = 0;    // the exact reference rounded once to the output dtype
  double err_over_floor = 0;  // rel_l2 / floor_rel_l2 (0 when the floor is 0)
  double max_abs_over_budget = 0;  // largest |o - ref| / allowed of any element
  double lse_max_abs_err = 0;   // when the backend returns LSE
  int64_t elements_checked = 0;
  int64_t elements_over_budget = 0;
  int64_t nan_mismatches = 0;   // NaN/Inf where the reference is finite, or vice versa
  int64_t unwritten = 0;        // still holding the poison NaN where the reference is finite
  WorstElement worst;
  double naive_rel_l2 = -1;     // strict mode: the naive implementation's error
};

// The reference an output is checked against: `base` (the exact result), or the result of the
// data flow the output declares (AttentionOutput::mla_flow_decode_q_len) with base's sample.
ReferenceOptions reference_options_for(const AttentionOutput& out, ReferenceOptions base);

ValidationResult validate_output(const Batch& b, const AttentionOutput& out, const ReferenceResult& ref,
                                 const Budget& budget);

// Cross-backend agreement: max |a - b| and relative L2 between two outputs of one batch.
struct OutputDiff {
  double max_abs = 0, rel_l2 = 0;
  bool bitwise_equal = false;
};
OutputDiff diff_outputs(const AttentionOutput& a, const AttentionOutput& b);

}  // namespace attn
