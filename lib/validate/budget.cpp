// Accuracy budgets per model dtype (docs/DESIGN.md, "Accuracy budgets").
//
// The reference sees the same K/V values the backend reads (after any fp8 round trip), so a
// budget only has to cover the arithmetic of the backend: rounding of inputs, P and O to the
// model dtype and fp32 accumulation order.
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "validate/validate.hpp"

namespace attn {

Budget default_budget(DType model_dtype) {
  Budget b;
  switch (model_dtype) {
    case DType::f32:
      b.atol = b.rtol = 1e-5;
      b.max_rel_l2 = 1e-5;
      b.min_cosine = 0.99999;
      break;
    case DType::f16:
      // fp16 keeps 3 more mantissa bits than bf16, so its budget is ~5x tighter.
      b.atol = b.rtol = 2e-3;
      b.max_rel_l2 = 2e-3;
      b.min_cosine = 0.9999;
      break;
    case DType::bf16:
      b.atol = b.rtol = 1e-2;
      b.max_rel_l2 = 1e-2;
      b.min_cosine = 0.9999;
      break;
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
      // Not a model dtype (only KV caches are fp8); a caller that still asks gets a budget
      // scaled to fp8's 2-3 mantissa bits rather than a silent bf16 one.
      b.atol = b.rtol = 1e-1;
      b.max_rel_l2 = 1e-1;
      b.min_cosine = 0.999;
      break;
  }
  return b;
}

namespace {

void require_in_range(const char* key, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi)) {  // also rejects NaN
    throw InputError(input_error_message("[check]", 0, key, std::to_string(v),
                                         "out of range", "expected a value in [" + std::to_string(lo) +
                                                             ", " + std::to_string(hi) + "]"));
  }
}

}  // namespace

Budget apply_overrides(Budget b, const CheckConfig& c) {
  if (c.atol) b.atol = *c.atol;
  if (c.rtol) b.rtol = *c.rtol;
  if (c.max_rel_l2) b.max_rel_l2 = *c.max_rel_l2;
  if (c.min_cosine) b.min_cosine = *c.min_cosine;
  b.strict = b.strict || c.strict;
  require_in_range("atol", b.atol, 0.0, HUGE_VAL);
  require_in_range("rtol", b.rtol, 0.0, HUGE_VAL);
  require_in_range("max_rel_l2", b.max_rel_l2, 0.0, HUGE_VAL);
  require_in_range("min_cosine", b.min_cosine, -1.0, 1.0);
  return b;
}

}  // namespace attn
