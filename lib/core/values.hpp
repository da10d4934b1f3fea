#pragma once
// Counter-based value generator: every input value of a batch is a pure function of
// (seed, tensor, request, position, head, dim). A device fill kernel and the host reference
// evaluate the same function, bit-identically, so no host copy of a large KV cache is needed.
#include <cstdint>

#include "core/hd.hpp"

namespace attn {

// Which tensor a value belongs to (part of the counter).
enum class ValueTensor : uint32_t {
  q = 1,        // query of a new token            (req, pos, q head, dim)
  k = 2,        // key of any token                 (req, pos, kv head, dim)
  v = 3,        // value of any token               (req, pos, kv head, dim)
  sink = 4,     // per-head sink logit              (0, 0, q head, 0)
  latent = 5,   // MLA latent kv_c ‖ k_pe (576)     (req, pos, 0, dim)
  w_uk = 6,     // MLA up-projection for keys       (0, latent dim, head, nope dim)
  w_uv = 7,     // MLA up-projection for values     (0, latent dim, head, v dim)
};

// Tokens of the shared prefix use this request id, so every request sees identical K/V there.
constexpr uint32_t kSharedPrefixRequest = 0xffffffffu;

// splitmix64's finalizer: a bijective 64-bit mix with good avalanche.
ATTN_HD uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Uniform in [-1, 1), a multiple of 2^-23 (exact in float, so every consumer agrees).
ATTN_HD float gen_value(uint64_t seed, ValueTensor t, uint32_t req, uint32_t pos, uint32_t head,
                        uint32_t dim) {
  uint64_t h = mix64(seed ^ (static_cast<uint64_t>(t) << 56));
  h = mix64(h ^ (static_cast<uint64_t>(req) << 32 | pos));
  h = mix64(h ^ (static_cast<uint64_t>(head) << 32 | dim));
  const int32_t r = static_cast<int32_t>(static_cast<uint32_t>(h >> 40)) - (1 << 23);  // [-2^23, 2^23)
  return static_cast<float>(r) * (1.0f / 8388608.0f);
}

// A bell-shaped value of the same variance as gen_value's (1/3): the sum of four independent
// 16-bit uniforms of one hash, times 2^-16 (Irwin-Hall, n = 4), exact in float on any side.
ATTN_HD float gen_bell(uint64_t seed, ValueTensor t, uint32_t req, uint32_t pos, uint32_t head, uint32_t dim) {
  uint64_t h = mix64(seed ^ (static_cast<uint64_t>(t) << 56) ^ 0x5bd1e995ull);
  h = mix64(h ^ (static_cast<uint64_t>(req) << 32 | pos));
  h = mix64(h ^ (static_cast<uint64_t>(head) << 32 | dim));
  int32_t sum = 0;
  for (int i = 0; i < 4; ++i) sum += static_cast<int32_t>(static_cast<uint32_t>(h >> (16 * i)) & 0xffffu) - 32768;
  return static_cast<float>(sum) * (1.0f / 65536.0f);
}

// The value regime of a scenario's [data] section that the device cache fill must share with
// the host generator (Q and the sinks are host-only and live in Batch).
struct ValueRegime {
  uint32_t bell = 0;             // 0: uniform in [-1, 1); 1: gen_bell (same variance)
  // K outlier channels: exactly k_outlier_count of the k_outlier_dims head dims, spread evenly
  // (the dims d with d * count mod dims < count: dim 0, then one every dims / count), are
  // multiplied by k_outlier_scale. count 0 = none.
  uint32_t k_outlier_count = 0;
  uint32_t k_outlier_dims = 0;
  float k_outlier_scale = 1.0f;
};

ATTN_HD bool is_k_outlier(const ValueRegime& r, uint32_t dim) {
  return r.k_outlier_count != 0 && dim * r.k_outlier_count % r.k_outlier_dims < r.k_outlier_count;
}

ATTN_HD float regime_value(const ValueRegime& r, uint64_t seed, ValueTensor t, uint32_t req, uint32_t pos,
                           uint32_t head, uint32_t dim) {
  float x = r.bell ? gen_bell(seed, t, req, pos, head, dim) : gen_value(seed, t, req, pos, head, dim);
  if (t == ValueTensor::k && is_k_outlier(r, dim)) x *= r.k_outlier_scale;
  return x;
}

}  // namespace attn
