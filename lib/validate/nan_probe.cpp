#include "validate/nan_probe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace attn {

namespace {

std::optional<TokenKey> context_key(const Batch& b) {
  const AttentionSpec& s = b.spec;
  const int kv_head = s.use_mla ? 0 : s.num_kv_heads - 1;
  if (b.shared_prefix_len > 0) return TokenKey{0, b.shared_prefix_len / 2, kv_head};
  int req = -1;
  for (int r = 0; r < b.num_reqs(); ++r)
    if (b.requests[r].context_len > 0 && (req < 0 || b.requests[r].context_len > b.requests[req].context_len)) req = r;
  if (req < 0) return std::nullopt;
  const RequestShape& rq = b.requests[req];
  const VisibleKeys seen = visible_keys(b, rq.context_len, rq.seq_len());
  const int64_t hi = std::min<int64_t>(seen.hi, rq.context_len - 1);
  // No context key visible to that token (a window or chunk ends before it): any context key; the
  // probe then checks that no row reads it.
  const int64_t pos = seen.lo <= hi ? (seen.lo + hi) / 2 : rq.context_len / 2;
  return TokenKey{req, static_cast<int>(pos), kv_head};
}

std::string describe(const Batch& b, const TokenKey& k) {
  // "new K": a new token's K input, which the run's own cache write stores.
  return fmt::format("the {} K of (request {}, position {}, kv head {})", is_new_token_key(b, k) ? "new" : "cached",
                     k.req, k.pos, k.kv_head);
}

}  // namespace

std::vector<TokenKey> nan_probe_keys(const Batch& b) {
  std::vector<TokenKey> keys;
  const std::optional<TokenKey> ctx = context_key(b);
  if (ctx) keys.push_back(*ctx);
  const bool one_kv_head = b.spec.use_mla || b.spec.num_kv_heads == 1;
  if (ctx && one_kv_head && b.shared_prefix_len > 0) return keys;
  int req = -1;
  for (int r = 0; r < b.num_reqs(); ++r) {
    if (b.requests[r].query_len < 1 || (ctx && one_kv_head && r == ctx->req)) continue;
    if (req < 0 || b.requests[r].query_len > b.requests[req].query_len) req = r;
  }
  if (req >= 0) {
    const RequestShape& rq = b.requests[req];
    keys.push_back(TokenKey{req, rq.context_len + rq.query_len / 2, 0});
  }
  return keys;
}

std::vector<uint8_t> rows_attending(const Batch& b, const TokenKey& key) {
  const AttentionSpec& s = b.spec;
  const int heads = s.num_q_heads, group = s.use_mla ? heads : s.num_q_heads / s.num_kv_heads;
  std::vector<uint8_t> attends(static_cast<size_t>(b.num_tokens() * heads), 0);
  const bool shared = key.pos < b.shared_prefix_len;
  for (int r = 0; r < b.num_reqs(); ++r) {
    if (r != key.req && !shared) continue;
    const RequestShape& rq = b.requests[r];
    for (int i = 0; i < rq.query_len; ++i) {
      const VisibleKeys seen = visible_keys(b, rq.context_len + i, rq.seq_len());
      if (key.pos < seen.lo || key.pos > seen.hi) continue;
      const int64_t token = b.query_start_loc[r] + i;
      for (int h = 0; h < heads; ++h)
        if (s.use_mla || h / group == key.kv_head) attends[static_cast<size_t>(token * heads + h)] = 1;
    }
  }
  return attends;
}

NanProbeResult check_nan_probe(const Batch& b, const std::vector<TokenKey>& keys, const AttentionOutput& clean,
                               const AttentionOutput& planted, bool bitwise) {
  NanProbeResult r;
  // owner[row]: 1 + the first key the row attends, 0 for none.
  std::vector<uint8_t> owner(static_cast<size_t>(b.num_tokens() * b.spec.num_q_heads), 0);
  for (size_t k = keys.size(); k-- > 0;) {
    const std::vector<uint8_t> a = rows_attending(b, keys[k]);
    for (size_t row = 0; row < a.size(); ++row)
      if (a[row]) owner[row] = static_cast<uint8_t>(k + 1);
  }
  const int64_t dv = planted.head_size_v, rows = static_cast<int64_t>(owner.size());
  if (static_cast<int64_t>(planted.o.size()) != rows * dv || clean.o.size() != planted.o.size()) {
    r.pass = false;
    r.failure = fmt::format("{} output elements, expected {}", planted.o.size(), rows * dv);
    return r;
  }
  const bool has_lse = !planted.lse.empty() && planted.lse.size() == clean.lse.size();
  int64_t wrong = 0;
  std::string first;
  const auto row_name = [&](int64_t row) {
    const int64_t token = row / b.spec.num_q_heads;
    const int req = static_cast<int>(std::upper_bound(b.query_start_loc.begin(), b.query_start_loc.end(), token) -
                                     b.query_start_loc.begin()) - 1;
    return fmt::format("token {} (request {}) head {}", token, req, row % b.spec.num_q_heads);
  };
  for (int64_t row = 0; row < rows; ++row) {
    const float* o = planted.o.data() + row * dv;
    const int key = owner[static_cast<size_t>(row)];
    std::string why;
    if (key > 0) {
      ++r.attending_rows;
      const int64_t finite = std::count_if(o, o + dv, [](float x) { return !std::isnan(x); });
      if (finite > 0)
        why = fmt::format("attends it but {} of its {} O elements are not NaN", finite, dv);
      else if (has_lse && !std::isnan(planted.lse[static_cast<size_t>(row)]))
        why = fmt::format("attends it but its LSE is {:.6g}, not NaN", planted.lse[static_cast<size_t>(row)]);
      if (!why.empty()) why = fmt::format("a NaN planted in {}: {} {}", describe(b, keys[key - 1]), row_name(row), why);
    } else {
      const float* want = clean.o.data() + row * dv;
      const auto holds_nan = [&](const AttentionOutput& out, const float* x) {
        return std::any_of(x, x + dv, [](float e) { return std::isnan(e); }) ||
               (has_lse && std::isnan(out.lse[static_cast<size_t>(row)]));
      };
      if (holds_nan(planted, o) && !holds_nan(clean, want))
        why = "holds a NaN";
      else if (bitwise && (std::memcmp(o, want, sizeof(float) * static_cast<size_t>(dv)) != 0 ||
                           (has_lse && std::memcmp(&planted.lse[static_cast<size_t>(row)],
                                                   &clean.lse[static_cast<size_t>(row)], sizeof(float)) != 0)))
        why = "differs from the run without the NaN";
      if (!why.empty()) {
        std::string planted_in;
        for (size_t k = 0; k < keys.size(); ++k) planted_in += (k ? " and " : "") + describe(b, keys[k]);
        why = fmt::format("a NaN planted in {}: {} {} but {}", planted_in, row_name(row),
                          keys.size() > 1 ? "attends neither key" : "does not attend it", why);
      }
    }
    if (!why.empty() && wrong++ == 0) first = why;
  }
  if (wrong > 0) {
    r.pass = false;
    r.failure = first + (wrong > 1 ? fmt::format(" ({} rows wrong, of {} that attend {})", wrong, r.attending_rows,
                                                 keys.size() > 1 ? "a planted key" : "it")
                                   : std::string());
  }
  return r;
}

}  // namespace attn
