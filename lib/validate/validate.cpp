// validate_output: a backend's O (and LSE) against the float64 reference, on the checked rows.
//
// The budget derives from the precision floor (validate.hpp, DESIGN.md): the exact reference
// rounded once to the output dtype gives floor_rel_l2, and rel_l2 must stay within k_l2 times
// it; each element must stay within k_abs * (flow * u * (|ref| + its row's RMS) + eta / 2), flow
// the data flow's factor (1 unless coarse intermediates round on the way) and eta the dtype's
// smallest subnormal (the rounding of values below its normal range). Aggregates over the
// finite elements: max abs error, max relative error |o - ref| / max(|ref|, flow * u * row RMS + eta / 2),
// relative L2 ||o - ref|| / ||ref||, cosine similarity and NMSE = ||o - ref||^2 / ||ref||^2.
// Non-finite values must sit exactly where the reference has them; a NaN where the reference is
// finite is also counted as unwritten, because outputs are poisoned with NaN before every run.
//
// LSE (when the backend returns it): |lse - ref| <= lse_atol + lse_rtol * |ref|; -inf (no
// visible key) must stay -inf.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "core/dtype_convert.hpp"
#include "core/error.hpp"
#include "validate/naive.hpp"
#include "validate/validate.hpp"

namespace attn {

namespace {

// Strict mode bound floor: a naive result that is exact must not demand bit-exactness.
constexpr double kStrictFloor = 0x1p-24;

bool same_nonfinite(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  return got == want;  // +-inf must match in sign
}

WorstElement locate(const Batch& b, int64_t token, int head, int dim, double got, double want) {
  WorstElement w;
  w.token = token;
  w.head = head;
  w.dim = dim;
  w.got = got;
  w.want = want;
  const auto& qsl = b.query_start_loc;
  const auto it = std::upper_bound(qsl.begin(), qsl.end(), static_cast<int32_t>(token));
  if (it != qsl.begin() && it != qsl.end()) {
    w.request = static_cast<int>(it - qsl.begin()) - 1;
    w.position = b.requests[w.request].context_len + static_cast<int>(token - qsl[w.request]);
  }
  return w;
}

std::string describe(const WorstElement& w) {
  return fmt::format("req={} tok={} pos={} head={} dim={} got={:.6g} want={:.6g}", w.request, w.token, w.position,
                     w.head, w.dim, w.got, w.want);
}

// Error aggregates of `got` against `want` over the rows where checked[t, h] != 0.
struct Accumulated {
  double err2 = 0, ref2 = 0, got2 = 0, dot = 0;
  double max_abs = 0, max_rel = 0;
  int64_t checked = 0, over = 0, nan_mismatches = 0, unwritten = 0;
  // The element furthest beyond its budget (ratio error / allowed); a non-finite mismatch
  // outranks every finite one and the first one found is kept.
  double worst_ratio = -1;
  int64_t worst_index = -1;
  bool worst_nonfinite = false;

  double rel_l2() const { return ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2); }
  double cosine() const {
    if (ref2 == 0 && got2 == 0) return 1;
    if (ref2 == 0 || got2 == 0) return 0;
    return dot / (std::sqrt(ref2) * std::sqrt(got2));
  }
};

// allowed(row, want) -> the largest |got - want| the budget admits; scale(row) -> the magnitude
// below which relative errors are measured against it instead of |want|.
template <class G, class Allowed, class Scale>
Accumulated accumulate(const G* got, const double* want, const std::vector<uint8_t>& checked, int64_t rows,
                       int64_t row_len, Allowed allowed_of, Scale scale_of) {
  Accumulated acc;
  for (int64_t r = 0; r < rows; ++r) {
    if (!checked[static_cast<size_t>(r)]) continue;
    const double scale = scale_of(r);
    for (int64_t d = 0; d < row_len; ++d) {
      const int64_t i = r * row_len + d;
      const double g = static_cast<double>(got[i]), w = want[i];
      ++acc.checked;
      if (!std::isfinite(w) || !std::isfinite(g)) {
        if (std::isfinite(w) || !same_nonfinite(g, w)) {
          ++acc.nan_mismatches;
          if (std::isfinite(w) && std::isnan(g)) ++acc.unwritten;
          if (!acc.worst_nonfinite) {
            acc.worst_nonfinite = true;
            acc.worst_index = i;
          }
        }
        continue;
      }
      const double err = std::abs(g - w);
      const double allowed = allowed_of(r, w);
      acc.err2 += err * err;
      acc.ref2 += w * w;
      acc.got2 += g * g;
      acc.dot += g * w;
      acc.max_abs = std::max(acc.max_abs, err);
      acc.max_rel = std::max(acc.max_rel, err / std::max(std::abs(w), scale));
      if (err > allowed) ++acc.over;
      const double ratio = allowed > 0 ? err / allowed : (err > 0 ? HUGE_VAL : 0);
      if (!acc.worst_nonfinite && ratio > acc.worst_ratio) {
        acc.worst_ratio = ratio;
        acc.worst_index = i;
      }
    }
  }
  return acc;
}

// NaNs of `values` ([rows, row_len]) in the rows where checked[r] == 0.
template <class T>
int64_t unchecked_nans(const std::vector<T>& values, const std::vector<uint8_t>& checked, int64_t row_len) {
  int64_t n = 0;
  for (size_t r = 0; r < checked.size(); ++r) {
    if (checked[r]) continue;
    const size_t begin = r * static_cast<size_t>(row_len);
    for (size_t i = begin; i < begin + static_cast<size_t>(row_len) && i < values.size(); ++i) n += std::isnan(values[i]);
  }
  return n;
}

// The floor of a batch: the reference rounded once to the output dtype, over the checked rows,
// and each row's RMS (the scale of the per-element rule for elements near zero).
struct Floor {
  double rel_l2 = 0;
  std::vector<double> row_rms;  // [rows]; 0 for unchecked rows
};

Floor precision_floor(const std::vector<double>& want, const std::vector<uint8_t>& checked, int64_t rows,
                      int64_t row_len, DType precision) {
  Floor f;
  f.row_rms.assign(static_cast<size_t>(rows), 0.0);
  double err2 = 0, ref2 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (!checked[static_cast<size_t>(r)]) continue;
    double row2 = 0;
    int64_t n = 0;
    for (int64_t d = 0; d < row_len; ++d) {
      const double w = want[static_cast<size_t>(r * row_len + d)];
      if (!std::isfinite(w)) continue;
      const double e = static_cast<double>(round_to(precision, static_cast<float>(w))) - w;
      err2 += e * e;
      row2 += w * w;
      ++n;
    }
    ref2 += row2;
    f.row_rms[static_cast<size_t>(r)] = n > 0 ? std::sqrt(row2 / static_cast<double>(n)) : 0.0;
  }
  f.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0;
  return f;
}

// The data-flow factor of an output's floor: its coarse intermediates round by their own unit
// roundoff, each independently of O's rounding, so the floor of the flow is
// sqrt(1 + sum (u_d / u)^2) times O's rounding alone.
double data_flow_factor(const AttentionOutput& out, double u) {
  double sum = 1.0;
  for (DType d : out.coarse_roundings) {
    const double ratio = unit_roundoff(d) / u;
    sum += ratio * ratio;
  }
  return std::sqrt(sum);
}

// The cosine threshold of a data flow whose floor is raised (flow > 1) under the floor-based L2
// rule: an error of relative L2 r uncorrelated with ref gives a cosine of 1 / sqrt(1 + r^2) >=
// 1 - r^2 / 2, so the L2 bound already implies min_cosine = 1 - (k_l2 x floor)^2 / 2. A fixed
// cosine tighter than that would fail what the L2 rule admits (an e4m3 P: rel_l2 ~ 2-3e-2, cosine
// ~0.9996 against bf16's 0.9999), so the looser of the two is used.
double min_cosine_of_flow(const Budget& budget, double flow, double floor_rel_l2) {
  if (flow <= 1.0 || budget.max_rel_l2) return budget.min_cosine;
  const double l2 = budget.k_l2 * floor_rel_l2;
  return std::min(budget.min_cosine, 1.0 - 0.5 * l2 * l2);
}

// The budget's factors, set by the scenario's [check], are echoed as written (shortest round-trip
// text); the measured numbers to a few digits.
std::string budget_failure(const Accumulated& acc, const Budget& budget, double flow, double floor_rel_l2,
                           double min_cosine, const std::string& worst) {
  if (acc.nan_mismatches > 0) {
    return fmt::format("{} non-finite mismatches ({} unwritten NaN) of {} elements; first at {}", acc.nan_mismatches,
                       acc.unwritten, acc.checked, worst);
  }
  if (acc.over > 0) {
    const std::string rule =
        budget.fixed_elementwise()
            ? fmt::format("atol + rtol*|ref| (atol={} rtol={})", budget.atol.value_or(0), budget.rtol.value_or(0))
            : fmt::format("{} x ({}u x (|ref| + row rms) + eta/2) (u={:g}, eta={:g}, {}{})", budget.k_abs,
                          flow > 1 ? "flow x " : "", unit_roundoff(budget.precision),
                          smallest_subnormal(budget.precision), to_string(budget.precision),
                          flow > 1 ? fmt::format(", flow={:.3g}", flow) : "");
    return fmt::format("{} of {} elements exceed {}; max_abs_err={:.3g} ({:.3g} x allowed); worst {}", acc.over,
                       acc.checked, rule, acc.max_abs, acc.worst_ratio, worst);
  }
  if (budget.max_rel_l2) {
    if (acc.rel_l2() > *budget.max_rel_l2) return fmt::format("rel_l2 {:.3g} > {}", acc.rel_l2(), *budget.max_rel_l2);
  } else if (acc.rel_l2() > budget.k_l2 * floor_rel_l2) {
    return fmt::format("rel_l2 {:.3g} > {} x floor {:.3g} ({} rounding of the exact result): {:.2f} x floor",
                       acc.rel_l2(), budget.k_l2, floor_rel_l2, to_string(budget.precision),
                       acc.rel_l2() / floor_rel_l2);
  }
  if (acc.cosine() < min_cosine) {
    return fmt::format("cosine {:.8f} < {:g}", acc.cosine(), min_cosine);
  }
  return {};
}

}  // namespace

ReferenceOptions reference_options_for(const AttentionOutput& out, ReferenceOptions base) {
  base.mla_flow_decode_q_len = out.mla_flow_decode_q_len;
  return base;
}

ValidationResult validate_output(const Batch& b, const AttentionOutput& out, const ReferenceResult& ref,
                                 const Budget& budget) {
  const int64_t rows = ref.num_tokens * ref.num_heads;
  const size_t o_size = static_cast<size_t>(rows) * ref.head_size_v;
  if (ref.num_tokens != b.num_tokens() || ref.o.size() != o_size || ref.lse.size() != static_cast<size_t>(rows) ||
      ref.checked.size() != static_cast<size_t>(rows)) {
    throw RuntimeError(fmt::format("validate_output: reference does not match the batch ({} tokens x {} heads x {}, "
                                   "batch has {} tokens)",
                                   ref.num_tokens, ref.num_heads, ref.head_size_v, b.num_tokens()));
  }
  ValidationResult v;
  if (out.num_tokens != ref.num_tokens || out.num_heads != ref.num_heads || out.head_size_v != ref.head_size_v ||
      out.o.size() != o_size) {
    v.failure = fmt::format("output shape [{}, {}, {}] ({} values) != reference [{}, {}, {}]", out.num_tokens,
                            out.num_heads, out.head_size_v, out.o.size(), ref.num_tokens, ref.num_heads,
                            ref.head_size_v);
    return v;
  }

  const double u = unit_roundoff(budget.precision);
  Floor floor = precision_floor(ref.o, ref.checked, rows, ref.head_size_v, budget.precision);
  // Coarse intermediates add roundings of their dtype's size, each independent of O's: the floor
  // of the data flow, and the per-element scale, grow by sqrt(1 + sum (u_d / u)^2).
  const double flow = data_flow_factor(out, u);
  floor.rel_l2 *= flow;
  // Below the dtype's normal range the rounding of O is absolute: half the smallest subnormal
  // (fp16: an output of 7e-9 stores as 0, which the floor above already counts). It happens once,
  // when O is stored, so the data flow's factor does not scale it: with an e4m3 P (flow ~128) it
  // would admit a zeroed fp16 row of rms 2e-4.
  const double eta = smallest_subnormal(budget.precision);
  auto row_scale = [&](int64_t r) { return u * flow * floor.row_rms[static_cast<size_t>(r)] + eta / 2; };
  const Accumulated acc = accumulate(
      out.o.data(), ref.o.data(), ref.checked, rows, ref.head_size_v,
      [&](int64_t r, double w) {
        if (budget.fixed_elementwise()) return budget.atol.value_or(0) + budget.rtol.value_or(0) * std::abs(w);
        return budget.k_abs * (flow * u * (std::abs(w) + floor.row_rms[static_cast<size_t>(r)]) + eta / 2);
      },
      row_scale);
  v.elements_checked = acc.checked;
  v.elements_over_budget = acc.over;
  v.nan_mismatches = acc.nan_mismatches;
  v.unwritten = acc.unwritten;
  v.max_abs_err = acc.max_abs;
  v.max_rel_err = acc.max_rel;
  v.rel_l2 = acc.rel_l2();
  v.nmse = acc.ref2 > 0 ? acc.err2 / acc.ref2 : acc.err2;
  v.cosine = acc.cosine();
  v.floor_rel_l2 = floor.rel_l2;
  v.err_over_floor = floor.rel_l2 > 0 ? v.rel_l2 / floor.rel_l2 : 0.0;
  v.max_abs_over_budget = std::max(acc.worst_ratio, 0.0);
  if (acc.worst_index >= 0) {
    const int64_t i = acc.worst_index, dv = ref.head_size_v, row = i / dv;
    v.worst = locate(b, row / ref.num_heads, static_cast<int>(row % ref.num_heads), static_cast<int>(i % dv),
                     out.o[static_cast<size_t>(i)], ref.o[static_cast<size_t>(i)]);
  }
  if (acc.checked == 0) {
    v.failure = fmt::format("no output element checked ({} of {} (request, head) pairs)", ref.pairs_checked,
                            ref.pairs_total);
    return v;
  }
  v.failure = budget_failure(acc, budget, flow, floor.rel_l2, min_cosine_of_flow(budget, flow, floor.rel_l2),
                             describe(v.worst));

  // LSE: one value per row, budget 10 * atol + rtol * |ref|.
  if (v.failure.empty() && !out.lse.empty()) {
    if (out.lse.size() != static_cast<size_t>(rows)) {
      v.failure = fmt::format("lse has {} values, expected {} (num_tokens x num_heads)", out.lse.size(), rows);
    } else {
      const Accumulated lse = accumulate(
          out.lse.data(), ref.lse.data(), ref.checked, rows, 1,
          [&](int64_t, double w) { return budget.lse_atol + budget.lse_rtol * std::abs(w); },
          [&](int64_t) { return budget.lse_atol; });
      v.lse_max_abs_err = lse.max_abs;
      v.nan_mismatches += lse.nan_mismatches;
      v.unwritten += lse.unwritten;
      if (lse.worst_index >= 0 && (lse.nan_mismatches > 0 || lse.over > 0)) {
        const int64_t row = lse.worst_index;
        const WorstElement w = locate(b, row / ref.num_heads, static_cast<int>(row % ref.num_heads), -1,
                                      out.lse[static_cast<size_t>(row)], ref.lse[static_cast<size_t>(row)]);
        if (lse.nan_mismatches > 0) {
          v.failure = fmt::format("lse: {} non-finite mismatches ({} unwritten NaN); first at {}", lse.nan_mismatches,
                                  lse.unwritten, describe(w));
        } else {
          v.failure = fmt::format("lse: {} of {} rows exceed {:g} + {:g}*|ref|; max_abs_err={:.3g}; worst {}", lse.over,
                                  lse.checked, budget.lse_atol, budget.lse_rtol, lse.max_abs, describe(w));
        }
      }
    }
  }

  // Rows outside the reference's sample (a [check] sample_pairs) have no reference values, but no
  // correct output holds a NaN anywhere (a row without keys is 0, its LSE -inf), and outputs are
  // NaN-poisoned before the run: a NaN there is a row the backend never wrote.
  const int64_t unsampled_nans = unchecked_nans(out.o, ref.checked, ref.head_size_v) +
                                 (out.lse.size() == static_cast<size_t>(rows) ? unchecked_nans(out.lse, ref.checked, 1)
                                                                              : 0);
  if (unsampled_nans > 0) {
    v.nan_mismatches += unsampled_nans;
    v.unwritten += unsampled_nans;
    if (v.failure.empty())
      v.failure = fmt::format("{} unwritten NaN in rows outside the checked sample ({} of {} (request, head) pairs "
                              "checked against the reference; every row is scanned for NaN)",
                              unsampled_nans, ref.pairs_checked, ref.pairs_total);
  }
  // Every query sees at least its own key (causal, window and chunk masks all keep it), so no
  // correct row has an infinite LSE, sampled or not. A row outside the sample that says "no
  // visible key" (O = 0, LSE = -inf: a work item that never ran over its keys, or the GPU LSE
  // merges, whose merged LSE is -inf when a partial's is NaN) would otherwise pass there.
  if (out.lse.size() == static_cast<size_t>(rows)) {
    int64_t keyless = 0, first = -1;
    for (size_t r = 0; r < ref.checked.size(); ++r)
      if (!ref.checked[r] && std::isinf(out.lse[r])) {
        ++keyless;
        if (first < 0) first = static_cast<int64_t>(r);
      }
    if (keyless > 0) {
      v.nan_mismatches += keyless;
      if (v.failure.empty()) {
        const WorstElement w = locate(b, first / ref.num_heads, static_cast<int>(first % ref.num_heads), -1,
                                      out.lse[static_cast<size_t>(first)], 0.0);
        v.failure = fmt::format("lse: {} rows outside the checked sample report no visible key (an infinite LSE), "
                                "but every query sees at least its own key; first at {}",
                                keyless, describe(w));
      }
    }
  }

  if (budget.strict) {
    const NaiveOptions opts{NaiveOptions::Precision::model, false, 0};
    const std::vector<double> naive = naive_attention(b, ref.checked, opts);
    v.naive_rel_l2 = masked_rel_l2(naive, ref.o, ref.checked, ref.head_size_v);
    // The naive implementation rounds only where the model dtype does; an output that declares
    // coarse intermediates (an e4m3 P) gets the same data-flow factor as its floor, or strict
    // mode would fail exactly what the budget admits by design.
    const double bound = std::max(2 * v.naive_rel_l2 * flow, kStrictFloor);
    if (v.failure.empty() && v.rel_l2 > bound) {
      v.failure = flow > 1.0 ? fmt::format("strict: rel_l2 {:.3g} > 2 x naive same-precision rel_l2 {:.3g} x the "
                                           "data-flow factor {:.3g} of its coarse intermediates",
                                           v.rel_l2, v.naive_rel_l2, flow)
                             : fmt::format("strict: rel_l2 {:.3g} > 2 x naive same-precision rel_l2 {:.3g}", v.rel_l2,
                                           v.naive_rel_l2);
    }
  }
  v.pass = v.failure.empty();
  return v;
}

OutputDiff diff_outputs(const AttentionOutput& a, const AttentionOutput& b) {
  if (a.num_tokens != b.num_tokens || a.num_heads != b.num_heads || a.head_size_v != b.head_size_v ||
      a.o.size() != b.o.size()) {
    throw RuntimeError(fmt::format("diff_outputs: shapes differ ([{}, {}, {}] vs [{}, {}, {}])", a.num_tokens,
                                   a.num_heads, a.head_size_v, b.num_tokens, b.num_heads, b.head_size_v));
  }
  OutputDiff d;
  // Bitwise: NaNs with the same payload compare equal, +0 and -0 do not.
  d.bitwise_equal = std::equal(a.o.begin(), a.o.end(), b.o.begin(), [](float x, float y) {
    return f32_to_bits(x) == f32_to_bits(y);
  });
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < a.o.size(); ++i) {
    const double x = a.o[i], y = b.o[i];
    if (!std::isfinite(x) || !std::isfinite(y)) {
      // Agreeing non-finite values are no difference; any other pairing is unbounded.
      if (!(std::isnan(x) && std::isnan(y)) && x != y) d.max_abs = HUGE_VAL;
      continue;
    }
    d.max_abs = std::max(d.max_abs, std::abs(x - y));
    err2 += (x - y) * (x - y);
    ref2 += y * y;
  }
  d.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  if (d.max_abs == HUGE_VAL) d.rel_l2 = HUGE_VAL;
  return d;
}

}  // namespace attn
