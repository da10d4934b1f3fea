#include "reference/head_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace attn::ref {

KeyRange Visibility::keys_of(int64_t p) const {
  if (!causal) return {0, seq_len};
  KeyRange r{0, std::min(p + 1 + extra_hi, seq_len)};
  if (sliding_window > 0) r.lo = std::max(r.lo, p - sliding_window + 1);
  if (local_chunk > 0) r.lo = std::max(r.lo, p / local_chunk * local_chunk);
  if (r.lo > 0) r.lo = std::max<int64_t>(r.lo + extra_lo, 0);
  return r;
}

namespace {

// Query rows per GEMM tile: large enough for Eigen's blocked product to pay off, small enough
// that the [rows, keys] score tile of a 32k-token request stays a few MiB.
constexpr int64_t kRowTile = 64;

}  // namespace

void attend_head(const Eigen::MatrixXd& q, int64_t first_pos, const Eigen::MatrixXd& k,
                 const Eigen::MatrixXd& v, int64_t key_begin, const Visibility& vis,
                 const LogitRule& rule, Eigen::MatrixXd& o, Eigen::VectorXd& lse) {
  const int64_t num_rows = q.rows();
  const int64_t key_end = key_begin + k.rows();
  if (k.cols() != q.cols() || v.rows() != k.rows()) {
    throw std::logic_error("attend_head: q/k/v shapes disagree");
  }
  o.setZero(num_rows, v.cols());
  lse.resize(num_rows);

  Eigen::MatrixXd s;  // [tile rows, tile keys] logits, then probabilities
  for (int64_t r0 = 0; r0 < num_rows; r0 += kRowTile) {
    const int64_t nr = std::min(kRowTile, num_rows - r0);
    // Both ends of the visible range grow with the position, so the tile's keys are the first
    // row's lo up to the last row's hi.
    const int64_t tile_lo = vis.keys_of(first_pos + r0).lo;
    const int64_t tile_hi = vis.keys_of(first_pos + r0 + nr - 1).hi;
    const int64_t nk = std::max<int64_t>(tile_hi - tile_lo, 0);
    if (nk > 0 && (tile_lo < key_begin || tile_hi > key_end)) {
      throw std::logic_error("attend_head: visible keys outside the materialized range");
    }
    if (nk > 0) {
      s.noalias() = q.middleRows(r0, nr) * k.middleRows(tile_lo - key_begin, nk).transpose();
    } else {
      s.resize(nr, 0);
    }

    for (int64_t i = 0; i < nr; ++i) {
      const int64_t p = first_pos + r0 + i;
      const KeyRange vis_keys = vis.keys_of(p);
      const int64_t lo = std::max(vis_keys.lo, tile_lo) - tile_lo;
      const int64_t hi = std::min(vis_keys.hi, tile_hi) - tile_lo;

      double row_max = rule.has_sink ? rule.sink : -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t key = tile_lo + j;
        if (j < lo || j >= hi || (key >= vis.hidden_lo && key < vis.hidden_hi)) {
          s(i, j) = 0.0;
          continue;
        }
        double x = rule.scale * s(i, j);
        if (rule.soft_cap > 0) x = rule.soft_cap * std::tanh(x / rule.soft_cap);
        if (rule.alibi_slope != 0) {
          x -= rule.alibi_slope * static_cast<double>(std::abs(p - (tile_lo + j)));
        }
        s(i, j) = x;
        row_max = std::max(row_max, x);
      }
      if (hi <= lo && !rule.has_sink) {  // nothing visible: o stays 0
        lse(r0 + i) = -std::numeric_limits<double>::infinity();
        continue;
      }
      // Numerically stable softmax: every exponent is <= 0, so nothing overflows.
      double denom = rule.has_sink ? std::exp(rule.sink - row_max) : 0.0;
      for (int64_t j = lo; j < hi; ++j) {
        const int64_t key = tile_lo + j;
        if (key >= vis.hidden_lo && key < vis.hidden_hi) continue;  // stays 0
        s(i, j) = std::exp(s(i, j) - row_max);
        denom += s(i, j);
      }
      s.row(i) /= denom;
      lse(r0 + i) = row_max + std::log(denom);
    }
    if (nk > 0) {
      o.middleRows(r0, nr).noalias() = s * v.middleRows(tile_lo - key_begin, nk);
    }
  }
}

}  // namespace attn::ref
