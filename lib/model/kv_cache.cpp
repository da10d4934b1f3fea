// Paged KV cache layouts as element-index maps, and the host fill of a cache from a Batch.
#include "model/kv_cache.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/parallel.hpp"

namespace attn {

const char* to_string(CacheFormat f) {
  switch (f) {
    case CacheFormat::flash_attn: return "flash_attn";
    case CacheFormat::flashinfer: return "flashinfer";
    case CacheFormat::flashmla: return "flashmla";
  }
  return "?";
}

namespace {

// Innermost extent of the K and V halves of the two-tensor formats. Both halves share one
// 5-D shape, so when the K and V head sizes differ the narrower half is padded to the wider.
int64_t head_stride(const KvCacheLayout& l) { return std::max(l.head_size_k, l.head_size_v); }

// Index of (kv = 0 for K / 1 for V, block, slot, head, d) in the formats that keep K and V apart.
int64_t two_tensor_index(const KvCacheLayout& l, int kv, int64_t block, int slot, int head, int d) {
  const int64_t D = head_stride(l), H = l.num_kv_heads, bs = l.block_size;
  // Offset of the [block_size, heads, D] (NHD) or [heads, block_size, D] (HND) page.
  int64_t page;
  if (l.format == CacheFormat::flash_attn) {
    page = (static_cast<int64_t>(kv) * l.num_blocks + block) * bs * H * D;  // (2, nb, ...)
  } else {
    page = (block * 2 + kv) * bs * H * D;  // (nb, 2, ...)
  }
  const int64_t in_page = l.layout == KvLayout::NHD ? (slot * H + head) * D + d : (head * bs + slot) * D + d;
  return page + in_page;
}

}  // namespace

int64_t KvCacheLayout::k_index(int64_t block, int slot, int head, int d) const {
  if (format == CacheFormat::flashmla) return (block * block_size + slot) * head_size_k + d;  // head is always 0
  return two_tensor_index(*this, 0, block, slot, head, d);
}

int64_t KvCacheLayout::v_index(int64_t block, int slot, int head, int d) const {
  // FlashMLA's V is a view of the first head_size_v (512) dims of the same latent entry.
  if (format == CacheFormat::flashmla) return (block * block_size + slot) * head_size_k + d;
  return two_tensor_index(*this, 1, block, slot, head, d);
}

int64_t KvCacheLayout::num_elements() const {
  if (format == CacheFormat::flashmla) return num_blocks * block_size * head_size_k;
  return 2 * num_blocks * block_size * num_kv_heads * head_stride(*this);
}

KvCacheLayout make_cache_layout(const Batch& b, CacheFormat format) {
  const AttentionSpec& s = b.spec;
  if (format == CacheFormat::flashmla && !s.use_mla)
    throw InputError(InputSite{b.label.empty() ? "<batch>" : b.label, 0, "cache format", "flashmla",
                                         "needs an MLA model", "add a [model.mla] table"});
  KvCacheLayout l;
  l.format = format;
  l.layout = format == CacheFormat::flashmla ? KvLayout::NHD : s.kv_layout;
  l.dtype = s.kv_cache_dtype;
  l.num_blocks = b.num_blocks;
  l.block_size = b.block_size;
  if (s.use_mla) {  // one latent entry per token: kv_c ‖ k_pe as "K", kv_c as "V"
    l.num_kv_heads = 1;
    l.head_size_k = s.mla.latent_dim();
    l.head_size_v = s.mla.kv_lora_rank;
  } else {
    l.num_kv_heads = s.num_kv_heads;
    l.head_size_k = s.head_size_qk;
    l.head_size_v = s.head_size_v;
  }
  return l;
}

bool is_new_token_key(const Batch& b, const TokenKey& key) {
  if (key.req < 0 || key.req >= b.num_reqs()) return false;
  const RequestShape& r = b.requests[static_cast<size_t>(key.req)];
  return key.pos >= r.context_len && key.pos < r.seq_len();
}

bool nan_in_input(const std::vector<TokenKey>& keys, int req, int pos, int kv_head) {
  return std::find(keys.begin(), keys.end(), TokenKey{req, pos, kv_head}) != keys.end();
}

ElementRange cached_key_elements(const Batch& b, const KvCacheLayout& layout, const TokenKey& key) {
  if (key.req < 0 || key.req >= b.num_reqs() || key.pos < 0 || key.pos >= b.requests[key.req].context_len ||
      key.kv_head < 0 || key.kv_head >= layout.num_kv_heads)
    throw RuntimeError("cached_key_elements: (request " + std::to_string(key.req) + ", position " +
                       std::to_string(key.pos) + ", kv head " + std::to_string(key.kv_head) +
                       ") is not a context token's K of this batch");
  const int32_t* row = b.block_table.data() + static_cast<size_t>(key.req) * b.max_blocks_per_req;
  return {layout.k_index(row[key.pos / b.block_size], key.pos % b.block_size, key.kv_head, 0), layout.head_size_k};
}

void fill_cache_host(const Batch& b, const KvCacheLayout& layout, void* cache) {
  const DType dt = layout.dtype;
  const bool fp8 = is_fp8(dt);
  const float k_scale = fp8 ? b.spec.k_scale : 1.0f, v_scale = fp8 ? b.spec.v_scale : 1.0f;

  // 1. Poison: page tails, unused blocks, the null block and the new tokens' slots stay NaN.
  parallel_for(layout.num_elements(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) store_nan(dt, cache, static_cast<std::size_t>(i));
  });
  if (b.num_reqs() == 0) return;

  // 2. Context tokens [pos_begin, pos_end) of request r through its block-table row. For fp8
  // the stored code is quant(x / scale), so load * scale reproduces Batch::k()/v() exactly.
  const int bs = b.block_size;
  auto write_tokens = [&](int r, int pos_begin, int pos_end) {
    const int32_t* row = b.block_table.data() + static_cast<size_t>(r) * b.max_blocks_per_req;  // [max_blocks_per_req]
    for (int pos = pos_begin; pos < pos_end; ++pos) {
      const int64_t block = row[pos / bs];
      const int slot = pos % bs;
      if (b.spec.use_mla) {
        for (int d = 0; d < layout.head_size_k; ++d)
          store_as(dt, cache, static_cast<std::size_t>(layout.k_index(block, slot, 0, d)), b.latent_input(r, pos, d) / k_scale);
        if (layout.format != CacheFormat::flashmla)  // separate V half: kv_c again
          for (int d = 0; d < layout.head_size_v; ++d)
            store_as(dt, cache, static_cast<std::size_t>(layout.v_index(block, slot, 0, d)),
                     b.latent_input(r, pos, d) / k_scale);
        continue;
      }
      for (int h = 0; h < layout.num_kv_heads; ++h) {
        for (int d = 0; d < layout.head_size_k; ++d)
          store_as(dt, cache, static_cast<std::size_t>(layout.k_index(block, slot, h, d)), b.k_input(r, pos, h, d) / k_scale);
        for (int d = 0; d < layout.head_size_v; ++d)
          store_as(dt, cache, static_cast<std::size_t>(layout.v_index(block, slot, h, d)), b.v_input(r, pos, h, d) / v_scale);
      }
    }
  };

  // The shared prefix lives in blocks every row points at: write it once (through row 0) so no
  // two threads touch the same element, then each request's own tokens in parallel.
  parallel_for(b.shared_prefix_len, [&](int64_t begin, int64_t end) {
    write_tokens(0, static_cast<int>(begin), static_cast<int>(end));
  });
  parallel_for(b.num_reqs(), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      write_tokens(static_cast<int>(r), b.shared_prefix_len, b.requests[r].context_len);
  });
}

}  // namespace attn
