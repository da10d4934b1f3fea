#pragma once
// Paged KV cache layouts of the three backend families, as element-index maps.
#include <cstddef>
#include <cstdint>
#include <vector>

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

// One token's K in one kv head, for the tests of NaN propagation (RunOptions::nan_keys). A context
// token's (pos < context_len) is planted NaN in every layer's cache; a new token's (context_len <=
// pos < seq_len) in the K input that the run's own cache write stores. Either must make every row
// that attends it NaN, also where it falls in one split piece or cascade level of several (a merge
// that weighed a NaN piece as keyless would hide it), and no other row (a mask that adds -inf to a
// NaN score, or a window that reads past its end, would spread it). A key of the shared prefix is
// every request's.
// MLA: a context key is the whole latent entry (kv_c ‖ k_pe, so V as well); a new token's is its
// k_pe alone, so K alone as in MHA. Its V must stay finite: the tokens before it see it masked in
// the same tiles, and a masked key's NaN V still reaches their rows through the products P V
// (0 x NaN) of every tile-based kernel, which no mask can prevent.
struct TokenKey {
  int req = 0;
  int pos = 0;      // < the request's seq_len
  int kv_head = 0;  // MLA: 0, the one latent entry
  bool operator==(const TokenKey&) const = default;
};

// Whether `key` is a new token's of `b` (context_len <= pos < seq_len): the backend plants it in its
// input. Any other key is planted in the cache (cached_key_elements, which rejects one `b` lacks).
bool is_new_token_key(const Batch& b, const TokenKey& key);

// Whether `keys` holds new token `pos` of request `req` in kv head `kv_head`: its K input (MLA: the
// k_pe of its latent input) goes to the backend NaN.
bool nan_in_input(const std::vector<TokenKey>& keys, int req, int pos, int kv_head);

// The elements [first, first + count) of a context token's K in a cache of `layout`; throws for a key
// the batch does not hold in its context.
struct ElementRange {
  int64_t first = 0;
  int64_t count = 0;
};
ElementRange cached_key_elements(const Batch& b, const KvCacheLayout& layout, const TokenKey& key);

// Host fill: every element NaN first (page tails past each sequence, unused blocks, and the
// slots the new tokens will be written to), then the K/V of every context token
// (positions < context_len) through the block table, in the cache dtype.
void fill_cache_host(const Batch& b, const KvCacheLayout& layout, void* cache);

}  // namespace attn
