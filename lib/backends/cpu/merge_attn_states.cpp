#include "backends/cpu/merge_attn_states.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/parallel.hpp"

namespace attn::cpu {

namespace {

void merge_rows(const MergeAttnStatesParams& p, int64_t begin, int64_t end) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t row = begin; row < end; ++row) {  // row = token * num_heads + head
    const float lp = p.prefix_lse[row], ls = p.suffix_lse[row];
    const float m = std::max(lp, ls);
    const int64_t base = row * p.head_size;
    // Neither side saw a key. Tested on both LSEs, not on m: std::max(-inf, NaN) is -inf, and a
    // side that read a NaN must reach the output (NaN O and LSE), not vanish as a keyless one.
    if (lp == neg_inf && ls == neg_inf) {
      for (int d = 0; d < p.head_size; ++d) p.out[base + d] = 0.0f;
      if (p.out_lse) p.out_lse[row] = neg_inf;
      continue;
    }
    const float ep = lp == neg_inf ? 0.0f : std::exp(lp - m);
    const float es = ls == neg_inf ? 0.0f : std::exp(ls - m);
    const float sum = ep + es;
    const float wp = ep / sum, ws = es / sum;
    for (int d = 0; d < p.head_size; ++d) {
      const float a = p.prefix_o[base + d], b = p.suffix_o[base + d];
      // A side with weight 0 contributes nothing, even if its rows were never written.
      p.out[base + d] = (wp == 0.0f ? 0.0f : wp * a) + (ws == 0.0f ? 0.0f : ws * b);
    }
    if (p.out_lse) p.out_lse[row] = m + std::log(sum);
  }
}

}  // namespace

void merge_attn_states(const MergeAttnStatesParams& p) {
  const int64_t rows = p.num_tokens * p.num_heads;
  if (p.threads == 1) {
    merge_rows(p, 0, rows);
    return;
  }
  parallel_for(rows, [&](int64_t begin, int64_t end) { merge_rows(p, begin, end); }, p.threads);
}

}  // namespace attn::cpu
