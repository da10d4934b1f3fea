// Paged KV-cache kernels: reshape_and_cache_flash, concat_and_cache_mla, copy_blocks, the NaN
// fill and the device fill of a batch's context tokens. Conversions use the ATTN_HD functions of
// core/dtype_convert.hpp, so every stored bit equals what the host path stores.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/cuda_check.hpp"
#include "core/dtype_convert.hpp"
#include "core/values.hpp"
#include "kernels/cache/cache_launch.hpp"
#include "kernels/common/fast_div.hpp"
#include "kernels/common/fp8_widen.cuh"
#include "kernels/common/ptx.cuh"

namespace attn {
namespace {

constexpr int kThreads = 128;  // per token

// ---- storage types and conversions ---------------------------------------------------------

template <DType T> struct Storage;
template <> struct Storage<DType::f32> { using type = float; };
template <> struct Storage<DType::f16> { using type = uint16_t; };
template <> struct Storage<DType::bf16> { using type = uint16_t; };
template <> struct Storage<DType::fp8_e4m3> { using type = uint8_t; };
template <> struct Storage<DType::fp8_e5m2> { using type = uint8_t; };

template <DType T>
__device__ __forceinline__ float load_elem(typename Storage<T>::type x) {
  if constexpr (T == DType::f32) return x;
  else if constexpr (T == DType::f16) return fp16_bits_to_float(x);
  else if constexpr (T == DType::bf16) return bf16_bits_to_float(x);
  else if constexpr (T == DType::fp8_e4m3) return e4m3_to_float(x);
  else return e5m2_to_float(x);
}

// Cache store of an input value: fp8 quantizes x / scale (saturating); others round x.
template <DType C>
__device__ __forceinline__ typename Storage<C>::type store_elem(float x, float scale) {
  if constexpr (C == DType::f32) return x;
  else if constexpr (C == DType::f16) return float_to_fp16_bits(x);
  else if constexpr (C == DType::bf16) return float_to_bf16_bits(x);
  else if constexpr (C == DType::fp8_e4m3) return float_to_e4m3(x / scale);
  else return float_to_e5m2(x / scale);
}

// round_to() of core/dtype.cpp, for the device.
__device__ __forceinline__ float round_to_dev(DType t, float x) {
  switch (t) {
    case DType::f16: return fp16_bits_to_float(float_to_fp16_bits(x));
    case DType::bf16: return bf16_bits_to_float(float_to_bf16_bits(x));
    case DType::fp8_e4m3: return e4m3_to_float(float_to_e4m3(x));
    case DType::fp8_e5m2: return e5m2_to_float(float_to_e5m2(x));
    default: return x;
  }
}

// N elements moved as one aligned access (16 bytes for 8 x 16-bit).
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// One access of VEC elements stored as the cache holds them.
template <DType In, DType C, int VEC>
__device__ __forceinline__ Vec<typename Storage<C>::type, VEC> convert_vec(const Vec<typename Storage<In>::type, VEC>& a,
                                                                           float scale) {
  Vec<typename Storage<C>::type, VEC> b;
  if constexpr ((C == DType::fp8_e4m3 || C == DType::fp8_e5m2) && VEC % 2 == 0) {
    // A conversion instruction per pair (kern::f32x2_to_fp8x2_exact: the same codes as store_elem).
#pragma unroll
    for (int j = 0; j < VEC; j += 2) {
      const float lo = load_elem<In>(a.v[j]) / scale, hi = load_elem<In>(a.v[j + 1]) / scale;
      const uint32_t c = kern::f32x2_to_fp8x2_exact<C == DType::fp8_e5m2>(lo, hi);
      b.v[j] = static_cast<uint8_t>(c);
      b.v[j + 1] = static_cast<uint8_t>(c >> 8);
    }
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) b.v[j] = store_elem<C>(load_elem<In>(a.v[j]), scale);
  }
  return b;
}

// `rows` rows of `n` elements each (n % VEC == 0), row r at src + r * src_row / dst + r * dst_row:
// dst = store(load(src)), VEC elements per access. Rows and chunks are flattened over the
// `threads` threads of the token (thread `thread` of them) so that every thread has work even
// when a row is shorter than that.
template <DType In, DType C, int VEC>
__device__ __forceinline__ void convert_rows(const typename Storage<In>::type* src, int64_t src_row,
                                             typename Storage<C>::type* dst, int64_t dst_row, int rows, int n,
                                             float scale, int thread, int threads) {
  using InV = Vec<typename Storage<In>::type, VEC>;
  using OutV = Vec<typename Storage<C>::type, VEC>;
  const int chunks = n / VEC;
  for (int i = thread; i < rows * chunks; i += threads) {
    const int r = i / chunks, d = (i - r * chunks) * VEC;
    const InV a = *reinterpret_cast<const InV*>(src + r * src_row + d);
    *reinterpret_cast<OutV*>(dst + r * dst_row + d) = convert_vec<In, C, VEC>(a, scale);
  }
}

// K and V rows of one token at once, where both have the same row length n: the loads of a K chunk
// and of its V chunk are both in flight before either store (convert_rows twice would wait for the
// K load, store, then wait for the V load: with one chunk of each per thread, as 8 heads of 128
// take, the write streamed ~3 TB/s, latency-bound; docs/PERF_NOTES.md Version 75).
// chunks: n / VEC as a multiply-high (the division by a runtime value cost ~20 instructions a thread).
template <DType In, DType C, int VEC>
__device__ __forceinline__ void convert_kv_rows(const typename Storage<In>::type* k, const typename Storage<In>::type* v,
                                                typename Storage<C>::type* kc, int64_t kc_row,
                                                typename Storage<C>::type* vc, int64_t vc_row, int rows, int n,
                                                const FastDivU32& chunks, float ks, float vs, int thread, int threads) {
  using InV = Vec<typename Storage<In>::type, VEC>;
  using OutV = Vec<typename Storage<C>::type, VEC>;
  for (int i = thread; i < rows * static_cast<int>(chunks.d); i += threads) {
    uint32_t r, c;
    chunks.divmod(static_cast<uint32_t>(i), r, c);
    const int d = static_cast<int>(c) * VEC;
    const InV a = *reinterpret_cast<const InV*>(k + r * n + d);
    const InV b = *reinterpret_cast<const InV*>(v + r * n + d);
    *reinterpret_cast<OutV*>(kc + r * kc_row + d) = convert_vec<In, C, VEC>(a, ks);
    *reinterpret_cast<OutV*>(vc + r * vc_row + d) = convert_vec<In, C, VEC>(b, vs);
  }
}

// ---- reshape_and_cache_flash ---------------------------------------------------------------

// kThreads threads per new token, p.tokens_per_cta tokens per CTA; each kv head's row of D
// elements is contiguous on both sides. An attention kernel launched after this one with
// programmatic stream serialization starts at once and waits for these writes only before the
// tile with its new keys (kernels/common/pdl_launch.hpp); its CTAs need a whole SM each, so a
// CTA per token held them off as many SMs as the step has decodes (packed: an eighth).
// The launch's divisors (kernels/common/fast_div.hpp): each thread splits its token's slot into
// block and offset and its index into row and chunk by multiply-highs, where the divisions by runtime
// values were 8 % of the fp8 write's instructions (15.0 -> 13.8 M; docs/PERF_NOTES.md Version 83).
struct CacheWriteDivisors {
  FastDivU32 block_size;  // slots below 2^32
  FastDivU32 chunks;      // VEC-element chunks of a row, where head_size_k == head_size_v
};

template <DType In, DType C, int VEC>
__global__ void __launch_bounds__(kThreads * kCacheWriteOverlapTokens)
    reshape_and_cache_kernel(const ReshapeAndCacheParams p, const CacheWriteDivisors divs) {
  using InT = typename Storage<In>::type;
  using CT = typename Storage<C>::type;
  kern::pdl_launch_dependents();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * p.tokens_per_cta + threadIdx.x / kThreads;
  if (t >= p.num_tokens) return;
  const int thread = static_cast<int>(threadIdx.x % kThreads);
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0) return;  // padding token
  int64_t block;
  int offset;
  if (slot <= int64_t{UINT32_MAX}) {
    uint32_t b, o;
    divs.block_size.divmod(static_cast<uint32_t>(slot), b, o);
    block = b;
    offset = static_cast<int>(o);
  } else {
    block = slot / p.block_size;
    offset = static_cast<int>(slot % p.block_size);
  }
  const float ks = p.k_scale_ptr ? *p.k_scale_ptr : p.k_scale;
  const float vs = p.v_scale_ptr ? *p.v_scale_ptr : p.v_scale;
  const InT* key = static_cast<const InT*>(p.key) + t * p.key_stride;        // [num_kv_heads, head_size_k]
  const InT* value = static_cast<const InT*>(p.value) + t * p.value_stride;  // [num_kv_heads, head_size_v]
  CT* kc = static_cast<CT*>(p.k_cache) + block * p.k_strides.block + offset * p.k_strides.slot;
  CT* vc = static_cast<CT*>(p.v_cache) + block * p.v_strides.block + offset * p.v_strides.slot;
  if (p.head_size_k == p.head_size_v) {
    convert_kv_rows<In, C, VEC>(key, value, kc, p.k_strides.head, vc, p.v_strides.head, p.num_kv_heads, p.head_size_k,
                                divs.chunks, ks, vs, thread, kThreads);
    return;
  }
  convert_rows<In, C, VEC>(key, p.head_size_k, kc, p.k_strides.head, p.num_kv_heads, p.head_size_k, ks, thread,
                           kThreads);
  convert_rows<In, C, VEC>(value, p.head_size_v, vc, p.v_strides.head, p.num_kv_heads, p.head_size_v, vs, thread,
                           kThreads);
}

// ---- concat_and_cache_mla ------------------------------------------------------------------

template <DType In, DType C, int VEC>
__global__ void __launch_bounds__(kThreads) concat_and_cache_mla_kernel(const ConcatAndCacheMlaParams p) {
  using InT = typename Storage<In>::type;
  using CT = typename Storage<C>::type;
  const int64_t t = blockIdx.x;
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0) return;
  const int64_t block = slot / p.block_size;
  const int offset = static_cast<int>(slot % p.block_size);
  const float s = p.scale_ptr ? *p.scale_ptr : p.scale;
  CT* entry = static_cast<CT*>(p.cache) + block * p.block_stride + offset * p.entry_stride;  // [rank + rope]
  convert_rows<In, C, VEC>(static_cast<const InT*>(p.kv_c) + t * p.kv_c_stride, 0, entry, 0, 1, p.kv_lora_rank, s,
                           threadIdx.x, blockDim.x);
  convert_rows<In, C, VEC>(static_cast<const InT*>(p.k_pe) + t * p.k_pe_stride, 0, entry + p.kv_lora_rank, 0, 1,
                           p.rope_dim, s, threadIdx.x, blockDim.x);
}

// ---- dtype dispatch ------------------------------------------------------------------------

[[noreturn]] void unsupported(const char* what, DType in, DType cache) {
  throw RuntimeError(std::string(what) + ": unsupported dtype pair input=" + std::string(to_string(in)) +
                     " cache=" + std::string(to_string(cache)));
}

// A dtype as a type, so a generic lambda can receive it as a compile-time constant (C++17).
template <DType T>
struct DTypeTag {
  static constexpr DType value = T;
};

// Calls f(DTypeTag<In>{}, DTypeTag<C>{}) for a runtime (input, cache) pair.
template <class F>
void dispatch_dtypes(const char* what, DType in, DType cache, F&& f) {
  auto with_cache = [&](auto in_tag) {
    switch (cache) {
      case DType::f32: f(in_tag, DTypeTag<DType::f32>{}); return;
      case DType::f16: f(in_tag, DTypeTag<DType::f16>{}); return;
      case DType::bf16: f(in_tag, DTypeTag<DType::bf16>{}); return;
      case DType::fp8_e4m3: f(in_tag, DTypeTag<DType::fp8_e4m3>{}); return;
      case DType::fp8_e5m2: f(in_tag, DTypeTag<DType::fp8_e5m2>{}); return;
    }
    unsupported(what, in, cache);
  };
  switch (in) {
    case DType::f32: with_cache(DTypeTag<DType::f32>{}); return;
    case DType::f16: with_cache(DTypeTag<DType::f16>{}); return;
    case DType::bf16: with_cache(DTypeTag<DType::bf16>{}); return;
    default: unsupported(what, in, cache);
  }
}

bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// ---- NaN fill ------------------------------------------------------------------------------

// Writes `pattern` (4 bytes, little-endian) over [0, bytes): 16-byte stores, then the tail.
__global__ void fill_pattern_kernel(uint8_t* data, int64_t bytes, uint32_t pattern) {
  const int64_t n16 = bytes / 16;
  uint4* d16 = reinterpret_cast<uint4*>(data);
  const uint4 v = make_uint4(pattern, pattern, pattern, pattern);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n16; i += stride) d16[i] = v;
  const int64_t tail = bytes - n16 * 16;  // < 16, and a multiple of the element size
  if (blockIdx.x == 0 && threadIdx.x < tail)
    data[n16 * 16 + threadIdx.x] = static_cast<uint8_t>(pattern >> (8 * (threadIdx.x % 4)));
}

// ---- device fill of the context tokens -----------------------------------------------------

__device__ __forceinline__ void store_cache(DType c, void* base, int64_t i, float x, float scale) {
  switch (c) {
    case DType::f32: static_cast<float*>(base)[i] = x; return;
    case DType::f16: static_cast<uint16_t*>(base)[i] = float_to_fp16_bits(x); return;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(x); return;
    case DType::fp8_e4m3: static_cast<uint8_t*>(base)[i] = float_to_e4m3(x / scale); return;
    case DType::fp8_e5m2: static_cast<uint8_t*>(base)[i] = float_to_e5m2(x / scale); return;
  }
}

// One CTA per context token (flattened over requests).
__global__ void __launch_bounds__(kThreads) fill_cache_kernel(const FillCacheParams p) {
  const int64_t t = blockIdx.x;
  // The request owning flattened context token t: last r with context_start[r] <= t.
  int lo = 0, hi = p.num_reqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.context_start[mid] <= t) lo = mid; else hi = mid - 1;
  }
  const int r = lo;
  const int pos = static_cast<int>(t - p.context_start[r]);
  const int32_t* row = p.block_table + static_cast<int64_t>(r) * p.max_blocks_per_req;  // [max_blocks_per_req]
  const int32_t block = row[pos / p.block_size];
  const bool shared = pos < p.shared_prefix_len;
  // A shared-prefix block that request 0 also maps (and already writes) would get the very same
  // values again: write it once.
  if (shared && r > 0 && pos < p.context_start[1] && p.block_table[pos / p.block_size] == block) return;
  const uint32_t id = shared ? kSharedPrefixRequest : p.req_ids[r];
  const int offset = pos % p.block_size;
  const ValueTensor kt = p.mla ? ValueTensor::latent : ValueTensor::k;

  const int64_t k_base = block * p.k_strides.block + offset * p.k_strides.slot;
  for (int i = threadIdx.x; i < p.num_kv_heads * p.head_size_k; i += blockDim.x) {
    const int h = i / p.head_size_k, d = i % p.head_size_k;
    const float x = round_to_dev(p.model_dtype, regime_value(p.regime, p.seed, kt, id, pos, h, d));
    store_cache(p.cache_dtype, p.k_cache, k_base + h * p.k_strides.head + d, x, p.k_scale);
  }
  if (p.v_cache == nullptr) return;  // FlashMLA: V is a view of the latent entry
  const ValueTensor vt = p.mla ? ValueTensor::latent : ValueTensor::v;
  const int64_t v_base = block * p.v_strides.block + offset * p.v_strides.slot;
  for (int i = threadIdx.x; i < p.num_kv_heads * p.head_size_v; i += blockDim.x) {
    const int h = i / p.head_size_v, d = i % p.head_size_v;
    const float x = round_to_dev(p.model_dtype, regime_value(p.regime, p.seed, vt, id, pos, h, d));
    store_cache(p.cache_dtype, p.v_cache, v_base + h * p.v_strides.head + d, x, p.v_scale);
  }
}

// ---- copy_blocks ---------------------------------------------------------------------------

// grid (num_pairs, num_caches); 16-byte copies when the block payload and stride allow.
template <class T>
__global__ void copy_blocks_kernel(const CopyBlocksParams p) {
  const int64_t pair = blockIdx.x;
  uint8_t* base = reinterpret_cast<uint8_t*>(p.cache_ptrs[blockIdx.y]);
  const int64_t src = p.block_mapping[2 * pair], dst = p.block_mapping[2 * pair + 1];
  const T* s = reinterpret_cast<const T*>(base + src * p.block_stride_bytes);
  T* d = reinterpret_cast<T*>(base + dst * p.block_stride_bytes);
  const int64_t n = p.block_bytes / static_cast<int64_t>(sizeof(T));
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------------

void launch_reshape_and_cache_flash(const ReshapeAndCacheParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  if (p.block_size <= 0 || p.num_kv_heads <= 0 || p.head_size_k <= 0 || p.head_size_v <= 0)
    throw RuntimeError("reshape_and_cache_flash: bad shape (block_size, num_kv_heads or head sizes <= 0)");
  if (p.tokens_per_cta != 1 && p.tokens_per_cta != kCacheWriteOverlapTokens)
    throw RuntimeError("reshape_and_cache_flash: tokens_per_cta must be 1 or " + std::to_string(kCacheWriteOverlapTokens) +
                       ", got " + std::to_string(p.tokens_per_cta));
  const std::size_t in_b = dtype_size(p.input_dtype), c_b = dtype_size(p.cache_dtype);
  // The vector path needs whole 8-element groups everywhere: rows, strides and bases.
  const bool vec8 = p.head_size_k % 8 == 0 && p.head_size_v % 8 == 0 && p.key_stride % 8 == 0 &&
                    p.value_stride % 8 == 0 && p.k_strides.block % 8 == 0 && p.k_strides.slot % 8 == 0 &&
                    p.k_strides.head % 8 == 0 && p.v_strides.block % 8 == 0 && p.v_strides.slot % 8 == 0 &&
                    p.v_strides.head % 8 == 0 && aligned(p.key, 8 * in_b) && aligned(p.value, 8 * in_b) &&
                    aligned(p.k_cache, 8 * c_b) && aligned(p.v_cache, 8 * c_b);
  dispatch_dtypes("reshape_and_cache_flash", p.input_dtype, p.cache_dtype, [&](auto in_tag, auto cache_tag) {
    constexpr DType I = decltype(in_tag)::value;
    constexpr DType C = decltype(cache_tag)::value;
    const auto ctas = static_cast<unsigned>((p.num_tokens + p.tokens_per_cta - 1) / p.tokens_per_cta);
    const unsigned threads = kThreads * p.tokens_per_cta;
    const CacheWriteDivisors divs{FastDivU32(static_cast<uint32_t>(p.block_size)),
                                  FastDivU32(static_cast<uint32_t>(p.head_size_k / (vec8 ? 8 : 1)))};
    if (vec8)
      reshape_and_cache_kernel<I, C, 8><<<ctas, threads, 0, stream>>>(p, divs);
    else
      reshape_and_cache_kernel<I, C, 1><<<ctas, threads, 0, stream>>>(p, divs);
  });
  ATTN_CUDA_CHECK_LAUNCH();
}

void launch_concat_and_cache_mla(const ConcatAndCacheMlaParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  if (p.block_size <= 0 || p.kv_lora_rank <= 0 || p.rope_dim <= 0)
    throw RuntimeError("concat_and_cache_mla: bad shape (block_size, kv_lora_rank or rope_dim <= 0)");
  const std::size_t in_b = dtype_size(p.input_dtype), c_b = dtype_size(p.cache_dtype);
  const bool vec8 = p.kv_lora_rank % 8 == 0 && p.rope_dim % 8 == 0 && p.kv_c_stride % 8 == 0 &&
                    p.k_pe_stride % 8 == 0 && p.block_stride % 8 == 0 && p.entry_stride % 8 == 0 &&
                    aligned(p.kv_c, 8 * in_b) && aligned(p.k_pe, 8 * in_b) && aligned(p.cache, 8 * c_b);
  dispatch_dtypes("concat_and_cache_mla", p.input_dtype, p.cache_dtype, [&](auto in_tag, auto cache_tag) {
    constexpr DType I = decltype(in_tag)::value;
    constexpr DType C = decltype(cache_tag)::value;
    if (vec8)
      concat_and_cache_mla_kernel<I, C, 8><<<static_cast<unsigned>(p.num_tokens), kThreads, 0, stream>>>(p);
    else
      concat_and_cache_mla_kernel<I, C, 1><<<static_cast<unsigned>(p.num_tokens), kThreads, 0, stream>>>(p);
  });
  ATTN_CUDA_CHECK_LAUNCH();
}

void launch_copy_blocks(const CopyBlocksParams& p, cudaStream_t stream) {
  if (p.num_pairs == 0 || p.num_caches == 0) return;
  if (p.block_bytes <= 0 || p.block_stride_bytes < p.block_bytes || p.num_pairs > 0x7fffffff ||
      p.num_caches > 65535)
    throw RuntimeError("copy_blocks: bad block size, stride or counts");
  const dim3 grid(static_cast<unsigned>(p.num_pairs), static_cast<unsigned>(p.num_caches));
  // Cache bases come from cudaMalloc (256-byte aligned): alignment follows from the sizes.
  if (p.block_bytes % 16 == 0 && p.block_stride_bytes % 16 == 0)
    copy_blocks_kernel<uint4><<<grid, 256, 0, stream>>>(p);
  else
    copy_blocks_kernel<uint8_t><<<grid, 256, 0, stream>>>(p);
  ATTN_CUDA_CHECK_LAUNCH();
}

void swap_blocks(const void* src, void* dst, int64_t block_bytes, int64_t block_stride_bytes,
                 const int64_t* block_mapping, int64_t num_pairs, cudaMemcpyKind kind, cudaStream_t stream) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < num_pairs; ++i) {
    const int64_t from = block_mapping[2 * i], to = block_mapping[2 * i + 1];
    ATTN_CUDA_CHECK(cudaMemcpyAsync(d + to * block_stride_bytes, s + from * block_stride_bytes,
                                    static_cast<std::size_t>(block_bytes), kind, stream));
  }
}

void launch_fill_nan(void* data, int64_t num_elements, DType dtype, cudaStream_t stream) {
  if (num_elements <= 0) return;
  uint32_t pattern = 0;
  switch (dtype) {
    case DType::f32: pattern = 0x7fc00000u; break;
    case DType::f16: pattern = 0x7e007e00u; break;
    case DType::bf16: pattern = 0x7fc07fc0u; break;
    case DType::fp8_e4m3: pattern = 0x7f7f7f7fu; break;
    case DType::fp8_e5m2: pattern = 0x7e7e7e7eu; break;
  }
  const int64_t bytes = num_elements * static_cast<int64_t>(dtype_size(dtype));
  if (!aligned(data, 16)) throw RuntimeError("fill_nan: buffer not 16-byte aligned");
  const int64_t n16 = bytes / 16;
  const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n16 + 255) / 256, 132 * 32)));
  fill_pattern_kernel<<<blocks, 256, 0, stream>>>(static_cast<uint8_t*>(data), bytes, pattern);
  ATTN_CUDA_CHECK_LAUNCH();
}

void launch_fill_cache(const FillCacheParams& p, cudaStream_t stream) {
  if (p.total_context_tokens == 0 || p.num_reqs == 0) return;
  if (p.block_size <= 0 || p.num_kv_heads <= 0 || p.head_size_k <= 0 || (p.v_cache && p.head_size_v <= 0))
    throw RuntimeError("fill_cache: bad shape (block_size, num_kv_heads or head sizes <= 0)");
  if (p.total_context_tokens > 0x7fffffff) throw RuntimeError("fill_cache: too many context tokens for one grid");
  fill_cache_kernel<<<static_cast<unsigned>(p.total_context_tokens), kThreads, 0, stream>>>(p);
  ATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace attn
