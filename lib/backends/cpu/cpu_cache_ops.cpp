#include "backends/cpu/cpu_cache_ops.hpp"

#include <cstring>

#include "core/dtype_convert.hpp"
#include "core/error.hpp"

namespace attn::cpu {

namespace {

// Stores x into element i of a cache of dtype t; fp8 caches hold x / scale, saturated.
inline void store_cache(DType t, void* cache, int64_t i, float x, float scale) {
  store_as(t, cache, static_cast<size_t>(i), is_fp8(t) ? x / scale : x);
}

void check_slot(int64_t slot, const KvCacheLayout& l) {
  if (slot >= l.num_blocks * l.block_size) {
    throw RuntimeError("cpu reshape_and_cache: slot " + std::to_string(slot) + " is past the cache (" +
                       std::to_string(l.num_blocks) + " blocks of " + std::to_string(l.block_size) + ")");
  }
}

// fp8 codes decoded once into a table: the decode sits in the innermost loop of every pass.
struct Fp8Table {
  float e4m3[256];
  float e5m2[256];
  Fp8Table() {
    for (int c = 0; c < 256; ++c) {
      e4m3[c] = e4m3_to_float(static_cast<uint8_t>(c));
      e5m2[c] = e5m2_to_float(static_cast<uint8_t>(c));
    }
  }
};

const Fp8Table& fp8_table() {
  static const Fp8Table table;
  return table;
}

}  // namespace

void reshape_and_cache(const ReshapeAndCacheParams& p) {
  const KvCacheLayout& l = *p.layout;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) continue;  // padding token
    check_slot(slot, l);
    const int64_t block = slot / l.block_size;
    const int offset = static_cast<int>(slot % l.block_size);
    for (int h = 0; h < l.num_kv_heads; ++h) {
      const int64_t kin = (t * l.num_kv_heads + h) * l.head_size_k;
      const int64_t vin = (t * l.num_kv_heads + h) * l.head_size_v;
      const int64_t kc = l.k_index(block, offset, h, 0), vc = l.v_index(block, offset, h, 0);
      for (int d = 0; d < l.head_size_k; ++d) {
        store_cache(l.dtype, p.cache, kc + d, load_as(p.dtype, p.key, static_cast<size_t>(kin + d)), p.k_scale);
      }
      for (int d = 0; d < l.head_size_v; ++d) {
        store_cache(l.dtype, p.cache, vc + d, load_as(p.dtype, p.value, static_cast<size_t>(vin + d)), p.v_scale);
      }
    }
  }
}

void concat_and_cache_mla(const ConcatAndCacheMlaParams& p) {
  const KvCacheLayout& l = *p.layout;
  const int width = l.head_size_k;  // 576: V is a view of the first 512
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) continue;
    check_slot(slot, l);
    const int64_t kc = l.k_index(slot / l.block_size, static_cast<int>(slot % l.block_size), 0, 0);
    for (int d = 0; d < width; ++d) {
      store_cache(l.dtype, p.cache, kc + d, load_as(p.dtype, p.latent, static_cast<size_t>(t * width + d)), p.scale);
    }
  }
}

void poison_cache_slots(void* cache, const KvCacheLayout& l, const int64_t* slot_mapping, int64_t num_tokens) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0 || slot >= l.num_blocks * l.block_size) continue;
    const int64_t block = slot / l.block_size;
    const int offset = static_cast<int>(slot % l.block_size);
    for (int h = 0; h < l.num_kv_heads; ++h) {
      const int64_t kc = l.k_index(block, offset, h, 0), vc = l.v_index(block, offset, h, 0);
      for (int d = 0; d < l.head_size_k; ++d) store_nan(l.dtype, cache, static_cast<size_t>(kc + d));
      for (int d = 0; d < l.head_size_v; ++d) store_nan(l.dtype, cache, static_cast<size_t>(vc + d));
    }
  }
}

void load_row(const void* base, DType dtype, int64_t index, int n, float* out) {
  switch (dtype) {
    case DType::f32:
      std::memcpy(out, static_cast<const float*>(base) + index, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::f16: {
      const auto* s = static_cast<const uint16_t*>(base) + index;
      for (int d = 0; d < n; ++d) out[d] = fp16_bits_to_float(s[d]);
      return;
    }
    case DType::bf16: {
      const auto* s = static_cast<const uint16_t*>(base) + index;
      for (int d = 0; d < n; ++d) out[d] = bf16_bits_to_float(s[d]);
      return;
    }
    case DType::fp8_e4m3: {
      const auto* s = static_cast<const uint8_t*>(base) + index;
      const float* table = fp8_table().e4m3;
      for (int d = 0; d < n; ++d) out[d] = table[s[d]];
      return;
    }
    case DType::fp8_e5m2: {
      const auto* s = static_cast<const uint8_t*>(base) + index;
      const float* table = fp8_table().e5m2;
      for (int d = 0; d < n; ++d) out[d] = table[s[d]];
      return;
    }
  }
}

void load_cache_row(const void* cache, DType dtype, int64_t index, int n, float scale, float* out) {
  load_row(cache, dtype, index, n, out);
  if (is_fp8(dtype)) {
    for (int d = 0; d < n; ++d) out[d] = out[d] * scale;
  }
}

}  // namespace attn::cpu
