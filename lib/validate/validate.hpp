#pragma once
// Compares a backend's output with the float64 reference under the budgets of DESIGN.md.
#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "model/scenario.hpp"
#include "reference/reference.hpp"

namespace attn {

struct Budget {
  double atol = 1e-2;        // per element: |o - ref| <= atol + rtol * |ref|
  double rtol = 1e-2;
  double max_rel_l2 = 1e-2;  // ||o - ref|| / ||ref||
  double min_cosine = 0.9999;
  bool strict = false;       // also bound the error by 2x a same-precision naive implementation
};
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
  double lse_max_abs_err = 0;   // when the backend returns LSE
  int64_t elements_checked = 0;
  int64_t elements_over_budget = 0;
  int64_t nan_mismatches = 0;   // NaN/Inf where the reference is finite, or vice versa
  int64_t unwritten = 0;        // still holding the poison NaN where the reference is finite
  WorstElement worst;
  double naive_rel_l2 = -1;     // strict mode: the naive implementation's error
};

ValidationResult validate_output(const Batch& b, const AttentionOutput& out, const ReferenceResult& ref,
                                 const Budget& budget);

// Cross-backend agreement: max |a - b| and relative L2 between two outputs of one batch.
struct OutputDiff {
  double max_abs = 0, rel_l2 = 0;
  bool bitwise_equal = false;
};
OutputDiff diff_outputs(const AttentionOutput& a, const AttentionOutput& b);

}  // namespace attn
