// Cascade attention: when every request starts with the same cached blocks, attend to them once
// for all query tokens (prefix pass), then per request to the rest (suffix pass), and merge.
#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "metadata/common.hpp"

namespace attn {

namespace {

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Thresholds of the rule: below them cascade is not worth a second launch and a merge.
constexpr int kMinPrefixTokens = 256;
constexpr int kMinRequests = 8;
// FlashAttention's default tile sizes, used by the rough CTA-count model below.
constexpr int kQTile = 128;
constexpr int kKvTile = 128;

}  // namespace

int common_prefix_len(const Batch& b, const CommonAttentionMetadata& m) {
  if (m.num_reqs == 0 || m.num_computed_tokens.empty() || b.block_size <= 0) return 0;
  int len = b.shared_blocks() * b.block_size;  // only whole blocks are shared
  if (len == 0) return 0;
  // The prefix pass reads the cache only: the shared part must already be computed for every
  // request (a request still prefilling inside the prefix cannot use it), and the cut must fall
  // on a block boundary since the suffix pass starts at a block-table column.
  const int32_t min_computed = *std::min_element(m.num_computed_tokens.begin(), m.num_computed_tokens.end());
  len = std::min(len, static_cast<int>(min_computed));
  return len / b.block_size * b.block_size;
}

CascadeDecision use_cascade_attention(int common_prefix_len, std::span<const int32_t> query_lens,
                                      int num_q_heads, int num_kv_heads, bool use_alibi,
                                      bool use_sliding_window, bool use_local_attention, int num_sms) {
  if (num_q_heads <= 0 || num_kv_heads <= 0 || num_q_heads % num_kv_heads != 0)
    throw InputError(fmt::format("use_cascade_attention: {} q heads / {} kv heads is not a valid GQA layout",
                                 num_q_heads, num_kv_heads));
  if (num_sms <= 0) throw InputError(fmt::format("use_cascade_attention: num_sms = {} must be > 0", num_sms));

  // The common case (no shared prefix) answers first and cheapest.
  if (common_prefix_len < kMinPrefixTokens)
    return {false, fmt::format("prefix {} < {} tokens", common_prefix_len, kMinPrefixTokens)};
  // The prefix pass is a plain non-causal pass: it cannot apply per-position masks or biases.
  if (use_alibi) return {false, "ALiBi in use"};
  if (use_sliding_window) return {false, "sliding window in use"};
  if (use_local_attention) return {false, "local attention in use"};
  const int64_t num_reqs = static_cast<int64_t>(query_lens.size());
  if (num_reqs < kMinRequests) return {false, fmt::format("{} requests < {}", num_reqs, kMinRequests)};

  // Without FlashDecoding (split-KV for pure-decode GQA batches), the normal kernel reads the
  // prefix once per request while cascade reads it once: cascade wins on bandwidth.
  const int gqa = num_q_heads / num_kv_heads;
  const bool all_decode = std::all_of(query_lens.begin(), query_lens.end(), [](int32_t q) { return q == 1; });
  if (gqa <= 1) return {true, "FlashDecoding not used: cascade (no GQA)"};
  if (!all_decode) return {true, "FlashDecoding not used: cascade (query_len > 1)"};

  // FlashDecoding may fill the GPU better than cascade's one long prefix pass. Compare the
  // waves of CTAs each would launch over the prefix, with the decode tokens as queries.
  const int64_t prefix_tiles = cdiv(common_prefix_len, kKvTile);
  const int64_t cascade_ctas = num_q_heads * cdiv(num_reqs, kQTile);
  const int64_t cascade_cost = cdiv(cascade_ctas, num_sms) * prefix_tiles;
  const int64_t fd_ctas = num_reqs * num_kv_heads * cdiv(gqa, kQTile) * prefix_tiles;
  const int64_t fd_cost = cdiv(fd_ctas, num_sms);
  if (cascade_cost < fd_cost)
    return {true, fmt::format("cascade cost {} < FlashDecoding cost {}", cascade_cost, fd_cost)};
  return {false, fmt::format("cascade cost {} >= FlashDecoding cost {}", cascade_cost, fd_cost)};
}

CascadeChoice choose_cascade(const Batch& b, const CommonAttentionMetadata& m, CascadeMode mode, int num_sms) {
  const AttentionSpec& spec = b.spec;
  CascadeChoice c;
  const int prefix = common_prefix_len(b, m);
  if (mode == CascadeMode::off) {
    c.reason = "off by option";
  } else if (prefix <= 0) {
    c.reason = "no shared prefix";
  } else if (!m.causal) {
    c.reason = "non-causal attention";
  } else if (spec.alibi || spec.sliding_window > 0 || b.local_attention_chunk > 0) {
    c.reason = "ALiBi, sliding window or local attention in use";
  } else if (mode == CascadeMode::on) {
    c.use = true;
    c.reason = "on by option";
  } else {
    std::vector<int32_t> query_lens(static_cast<std::size_t>(m.num_reqs));
    for (int r = 0; r < m.num_reqs; ++r) query_lens[static_cast<std::size_t>(r)] = m.query_len(r);
    const CascadeDecision d = use_cascade_attention(prefix, query_lens, spec.num_q_heads, spec.num_kv_heads, spec.alibi,
                                                    spec.sliding_window > 0, b.local_attention_chunk > 0, num_sms);
    c.use = d.use;
    c.reason = d.reason;
  }
  if (c.use) c.prefix_len = prefix;
  return c;
}

}  // namespace attn
