#pragma once
// Paged KV cache layouts of the three backend families, as element-index maps.
#include <cstddef>
#include <cstdint>

#include "model/batch.hpp"

namespace attn {

enum class CacheFormat : uint8_t {
  flash_attn,  // (2, num_blocks, block_size, num_kv_heads, head_size); HND: (2, nb, H, bs, D)
  flashinfer,  // (num_blocks, 2, block_size, num_kv_heads, head_size); HND: (nb, 2, H, bs, D)
  flashmla,    // (num_blocks, block_size, 576): kv_c (512) ‖ k_pe (64); V = the first 512
};

const char* to_string(CacheFormat f);

struct KvCacheLayout {
  CacheFormat format = CacheFormat::flash_attn;
  KvLayout layout = KvLayout::NHD;
  DType dtype = DType::bf16;
  int64_t num_blocks = 0;
  int block_size = 16;
  int num_kv_heads = 8;
  int head_size_k = 128;  // MLA: 576
  int head_size_v = 128;  // MLA: 512 (a view of the same entry)

  // Element index of K/V (block, slot in block, kv head, dim).
  int64_t k_index(int64_t block, int slot, int head, int d) const;
  int64_t v_index(int64_t block, int slot, int head, int d) const;
  int64_t num_elements() const;
  std::size_t bytes() const { return static_cast<std::size_t>(num_elements()) * dtype_size(dtype); }
};

KvCacheLayout make_cache_layout(const Batch& b, CacheFormat format);

// One context token's cached K, for the tests of NaN propagation (RunOptions::nan_key): planted NaN
// in every layer's cache, it must make every row that attends it NaN, also where it falls in one
// split piece or cascade level of several (a merge that weighed a NaN piece as keyless would hide
// it). A key of the shared prefix is every request's.
struct CachedKey {
  int req = -1;     // -1: none
  int pos = 0;      // < the request's context_len (the run's cache write owns the new slots)
  int kv_head = 0;  // MLA: 0, the one latent entry (kv_c ‖ k_pe, so V as well)
  bool set() const { return req >= 0; }
};

// The elements [first, first + count) of that K in a cache of `layout`; throws for a key the batch
// does not hold.
struct ElementRange {
  int64_t first = 0;
  int64_t count = 0;
};
ElementRange cached_key_elements(const Batch& b, const KvCacheLayout& layout, const CachedKey& key);

// Host fill: every element NaN first (page tails past each sequence, unused blocks, and the
// slots the new tokens will be written to), then the K/V of every context token
// (positions < context_len) through the block table, in the cache dtype.
void fill_cache_host(const Batch& b, const KvCacheLayout& layout, void* cache);

}  // namespace attn
