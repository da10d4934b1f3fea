#pragma once
// Writes of the new tokens into the paged KV cache (vLLM's reshape_and_cache_flash and
// concat_and_cache_mla) and the row loads every host pass reads back through.
#include <cstdint>

#include "core/dtype.hpp"
#include "model/kv_cache.hpp"

namespace attn::cpu {

struct ReshapeAndCacheParams {
  const void* key;              // [num_tokens, num_kv_heads, head_size_k] in `dtype`
  const void* value;            // [num_tokens, num_kv_heads, head_size_v] in `dtype`
  DType dtype = DType::bf16;    // model dtype of key/value
  const int64_t* slot_mapping;  // [num_tokens] block * block_size + offset; < 0 = padding, skipped
  int64_t num_tokens = 0;
  void* cache;                  // laid out by *layout (flash_attn or flashinfer format)
  const KvCacheLayout* layout;
  float k_scale = 1.0f;         // fp8 caches store value / scale (saturating)
  float v_scale = 1.0f;
};
void reshape_and_cache(const ReshapeAndCacheParams& p);

struct ConcatAndCacheMlaParams {
  const void* latent;           // [num_tokens, kv_lora_rank + rope_dim] = kv_c ‖ k_pe, in `dtype`
  DType dtype = DType::bf16;
  const int64_t* slot_mapping;  // [num_tokens]; < 0 = padding, skipped
  int64_t num_tokens = 0;
  void* cache;                  // flashmla format: (num_blocks, block_size, 576)
  const KvCacheLayout* layout;
  float scale = 1.0f;           // fp8 caches store value / scale (the layer's k_scale)
};
void concat_and_cache_mla(const ConcatAndCacheMlaParams& p);

// NaN into the K and V entries of every slot in slot_mapping (negative slots skipped), so a
// cache write that did not happen is seen by the next check.
void poison_cache_slots(void* cache, const KvCacheLayout& layout, const int64_t* slot_mapping /*[num_tokens]*/,
                        int64_t num_tokens);

// Reads n consecutive cache elements starting at `index` as float; fp8 entries are dequantized
// as float(stored * scale), the same expression the reference's values use.
void load_cache_row(const void* cache, DType dtype, int64_t index, int n, float scale, float* out /*[n]*/);

// Converts n elements of a model-dtype buffer, from element `index`, to float.
void load_row(const void* base, DType dtype, int64_t index, int n, float* out /*[n]*/);

}  // namespace attn::cpu
