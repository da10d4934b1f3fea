#pragma once
// POD parameters of the paged KV-cache kernels (cache writes, block copies, the device fill).
// Includable from plain C++; every pointer carries its shape. Cache tensors are addressed by
// element strides, so one kernel serves every layout:
//   FLASH_ATTN  NHD (2, num_blocks, block_size, H, D): block = bs*H*D, slot = H*D, head = D
//               HND (2, num_blocks, H, block_size, D): block = H*bs*D, slot = D,   head = bs*D
//   FLASHINFER  NHD (num_blocks, 2, block_size, H, D): block = 2*bs*H*D, slot = H*D, head = D
//               HND (num_blocks, 2, H, block_size, D): block = 2*H*bs*D, slot = D,  head = bs*D
//   FLASHMLA    (num_blocks, block_size, 576):          block = bs*576, slot = 576, head = 0
// with the V tensor's base at the K base plus the offset of its half. The innermost (dim)
// stride is always 1.
#include <cstdint>

#include "core/dtype.hpp"
#include "core/values.hpp"

namespace attn {

struct CacheStrides {
  int64_t block = 0;  // elements between physical blocks
  int64_t slot = 0;   // elements between the slots (tokens) of one block
  int64_t head = 0;   // elements between kv heads
};

constexpr int kCacheWriteOverlapTokens = 8;  // ReshapeAndCacheParams::tokens_per_cta when packed

// tokens_per_cta for a write that the next kernel overlaps (it starts at once and needs whole SMs):
// packed for a step of up to a wave of packed CTAs; a larger step (a prefill, whose first tiles
// hold new keys anyway) keeps a CTA per token, the faster write on its own.
inline int overlapped_cache_write_tokens_per_cta(int64_t num_tokens, int num_sms) {
  return num_tokens <= int64_t{kCacheWriteOverlapTokens} * num_sms ? kCacheWriteOverlapTokens : 1;
}

// reshape_and_cache_flash: scatter the new tokens' K/V into the paged cache.
// fp8 caches store convert(value / scale) with saturation; other caches store the value
// rounded to the cache dtype (scales unused). A negative slot (padding) is skipped.
struct ReshapeAndCacheParams {
  const void* key;             // [num_tokens, num_kv_heads, head_size_k], input_dtype, row stride key_stride
  const void* value;           // [num_tokens, num_kv_heads, head_size_v], input_dtype, row stride value_stride
  int64_t key_stride = 0;      // elements between tokens (>= num_kv_heads * head_size_k)
  int64_t value_stride = 0;
  const int64_t* slot_mapping; // [num_tokens] block * block_size + offset, < 0 = skip
  void* k_cache;               // K half of the cache (see the layouts above), cache_dtype
  void* v_cache;               // V half
  CacheStrides k_strides, v_strides;
  int64_t num_tokens = 0;
  int num_kv_heads = 0;
  int head_size_k = 0;
  int head_size_v = 0;
  int block_size = 0;
  float k_scale = 1.0f;             // used when k_scale_ptr is null
  float v_scale = 1.0f;
  const float* k_scale_ptr = nullptr;  // [1] device scalar (dynamic scales, graph friendly)
  const float* v_scale_ptr = nullptr;  // [1]
  // Tokens per CTA: 1, or kCacheWriteOverlapTokens when the attention kernel after the write
  // overlaps it (programmatic dependent launch: it starts on every SM the write leaves free, so
  // a small step's write is packed onto few SMs; packed, the write itself runs ~1.7 us slower).
  int tokens_per_cta = 1;
  DType input_dtype = DType::bf16;  // f32 | f16 | bf16
  DType cache_dtype = DType::bf16;  // f32 | f16 | bf16 | fp8_e4m3 | fp8_e5m2
};

// concat_and_cache_mla: kv_c ‖ k_pe of each new token into one latent cache entry.
struct ConcatAndCacheMlaParams {
  const void* kv_c;            // [num_tokens, kv_lora_rank], input_dtype, row stride kv_c_stride
  const void* k_pe;            // [num_tokens, rope_dim], input_dtype, row stride k_pe_stride
  int64_t kv_c_stride = 0;
  int64_t k_pe_stride = 0;
  const int64_t* slot_mapping; // [num_tokens], < 0 = skip
  void* cache;                 // [num_blocks, block_size, kv_lora_rank + rope_dim] (entry may be padded)
  int64_t block_stride = 0;    // elements
  int64_t entry_stride = 0;    // elements between slots
  int64_t num_tokens = 0;
  int kv_lora_rank = 512;
  int rope_dim = 64;
  int block_size = 0;
  float scale = 1.0f;
  const float* scale_ptr = nullptr;  // [1] or null
  DType input_dtype = DType::bf16;
  DType cache_dtype = DType::bf16;
};

// copy_blocks: for every cache tensor c and pair p, block dst[p] of c = block src[p] of c.
struct CopyBlocksParams {
  const uint64_t* cache_ptrs;    // [num_caches] device addresses of each K, V (or joint) cache tensor
  int num_caches = 0;
  const int64_t* block_mapping;  // [num_pairs, 2] (src block, dst block)
  int64_t num_pairs = 0;
  int64_t block_bytes = 0;         // bytes of one block's payload
  int64_t block_stride_bytes = 0;  // bytes between consecutive blocks (>= block_bytes)
};

// The device fill of a batch's cache (the device twin of fill_cache_host): every element NaN,
// then each request's context tokens (pos < context_len) through its block table, with
//   x = round_to(model_dtype, regime_value(regime, seed, K|V|latent, req id, pos, head, d))
//   stored = fp8 cache ? float_to_fp8(x / scale) : x rounded to the cache dtype
// (MLA: the latent tensor, both halves scaled by k_scale).
struct FillCacheParams {
  void* k_cache;                   // K half (FlashMLA: the latent cache)
  void* v_cache;                   // V half; null when V is a view of K (FlashMLA)
  CacheStrides k_strides, v_strides;
  const int32_t* block_table;      // [num_reqs, max_blocks_per_req]
  const int64_t* context_start;    // [num_reqs + 1] exclusive prefix sum of the context lengths
  const uint32_t* req_ids;         // [num_reqs] generator id of each request's own tokens
  int num_reqs = 0;
  int max_blocks_per_req = 0;
  int64_t total_context_tokens = 0;
  int block_size = 0;
  int shared_prefix_len = 0;       // positions below it use kSharedPrefixRequest
  int num_kv_heads = 0;            // MLA: 1
  int head_size_k = 0;             // MLA: 576
  int head_size_v = 0;             // MLA: unused
  uint64_t seed = 0;
  ValueRegime regime;              // [data]: distribution and K outlier channels (core/values.hpp)
  float k_scale = 1.0f;            // MLA: the latent scale
  float v_scale = 1.0f;            // MLA: equal to k_scale (both halves hold the latent)
  DType model_dtype = DType::bf16;
  DType cache_dtype = DType::bf16;
  bool mla = false;                // values are the MLA latent (head 0; V = its first head_size_v dims)
};

}  // namespace attn
