#include "backends/cpu/cpu_attention.hpp"

#include <algorithm>
#include <atomic>

#include "backends/cpu/cpu_cache_ops.hpp"
#include "backends/cpu/online_softmax.hpp"
#include "core/parallel.hpp"

namespace attn::cpu {

std::vector<PagedWorkItem> plan_paged_attention(const int32_t* query_start_loc, int num_reqs, int num_q_heads,
                                                int num_kv_heads, int rows_per_item) {
  const int group = num_q_heads / num_kv_heads;
  const int tile = std::max(1, rows_per_item / group);
  std::vector<PagedWorkItem> work;
  for (int r = 0; r < num_reqs; ++r) {
    for (int32_t t = query_start_loc[r]; t < query_start_loc[r + 1]; t += tile) {
      const int32_t end = std::min<int32_t>(t + tile, query_start_loc[r + 1]);
      for (int g = 0; g < num_kv_heads; ++g) work.push_back({r, g, t, end});
    }
  }
  return work;
}

namespace {

// Per-thread buffers, sized once per thread and reused across its items.
struct Scratch {
  std::vector<float> q;        // [rows, head_size_qk] scaled queries
  std::vector<RowMask> masks;  // [rows]
  std::vector<float> k, v;     // [block_size, head_size] one block of keys / values
  OnlineSoftmax softmax;
};

void run_item(const PagedAttentionParams& p, const PagedWorkItem& w, Scratch& s) {
  const KvCacheLayout& l = *p.layout;
  const int group = p.num_q_heads / p.num_kv_heads;
  const int dqk = p.head_size_qk, dv = p.head_size_v;
  const int rows = (w.token_end - w.token_begin) * group;
  const int32_t seq_len = p.seq_lens[w.req];
  const int32_t q_start = p.query_start_loc[w.req];
  const int32_t first_pos = seq_len - (p.query_start_loc[w.req + 1] - q_start);

  // Scaled queries and each row's visible key range.
  s.q.resize(static_cast<size_t>(rows) * dqk);
  s.masks.resize(static_cast<size_t>(rows));
  int32_t kv_lo = seq_len, kv_hi = 0;  // keys any row of the item can see
  for (int r = 0; r < rows; ++r) {
    const int32_t token = w.token_begin + r / group;
    const int head = w.kv_head * group + r % group;
    float* qr = s.q.data() + static_cast<int64_t>(r) * dqk;
    load_row(p.q, p.q_dtype, (static_cast<int64_t>(token) * p.num_q_heads + head) * dqk, dqk, qr);
    for (int d = 0; d < dqk; ++d) qr[d] *= p.scale;
    const float slope = p.alibi_slopes ? p.alibi_slopes[head] : 0.0f;
    s.masks[r] = make_row_mask(first_pos + (token - q_start), seq_len, p.causal, p.window, slope);
    if (s.masks[r].lo < s.masks[r].hi) {
      kv_lo = std::min(kv_lo, s.masks[r].lo);
      kv_hi = std::max(kv_hi, s.masks[r].hi);
    }
  }

  s.softmax.reset(rows, dv);
  const int bs = l.block_size;
  s.k.resize(static_cast<size_t>(bs) * dqk);
  s.v.resize(static_cast<size_t>(bs) * dv);
  const int32_t* table = p.block_table + static_cast<int64_t>(w.req) * p.max_blocks_per_req;
  // kv_hi <= seq_len, so no slot at or past seq_len is ever loaded.
  for (int32_t key0 = kv_lo; key0 < kv_hi;) {
    const int32_t logical = key0 / bs;
    const int32_t key1 = std::min<int32_t>((logical + 1) * bs, kv_hi);
    const int64_t block = table[logical];
    for (int32_t key = key0; key < key1; ++key) {
      const int slot = key - logical * bs;
      const int j = key - key0;
      load_cache_row(p.cache, l.dtype, l.k_index(block, slot, w.kv_head, 0), dqk, p.k_scale,
                     s.k.data() + static_cast<int64_t>(j) * dqk);
      load_cache_row(p.cache, l.dtype, l.v_index(block, slot, w.kv_head, 0), dv, p.v_scale,
                     s.v.data() + static_cast<int64_t>(j) * dv);
    }
    s.softmax.update(s.q.data(), dqk, s.masks.data(), s.k.data(), s.v.data(), key0, key1 - key0, p.soft_cap);
    key0 = key1;
  }

  for (int r = 0; r < rows; ++r) {
    const int64_t token = w.token_begin + r / group;
    const int head = w.kv_head * group + r % group;
    const int64_t row = token * p.num_q_heads + head;
    const float sink = p.sinks ? p.sinks[head] : kNegInf;
    s.softmax.finalize_row(r, sink, p.o + row * dv, p.lse + row);
  }
}

}  // namespace

void paged_attention(const PagedAttentionParams& p) {
  // Causal tiles late in a request cost more than early ones: workers pull items one at a time
  // instead of taking fixed contiguous ranges.
  std::atomic<int64_t> next{0};
  const int workers = static_cast<int>(std::min<int64_t>(p.threads > 0 ? p.threads : default_threads(), p.num_work));
  parallel_for(
      workers,
      [&](int64_t, int64_t) {
        Scratch s;
        for (int64_t i = next++; i < p.num_work; i = next++) run_item(p, p.work[i], s);
      },
      workers);
}

}  // namespace attn::cpu
