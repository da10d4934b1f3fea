#pragma once
// FlashInfer's batch decode on CUDA cores (GQA group <= 4): one CTA per (work item, kv head).
//
// A thread is (tx, tz): tx owns kVec consecutive head dims (16 or 32 bytes of a cache row),
// tz a slice of the keys; every thread holds the query vectors of all G heads of the kv head's
// group. The bdx threads of a slice sit in consecutive lanes, so a score is a kVec-wide dot
// product reduced by log2(bdx) shuffles. Keys stream through a multi-stage cp.async ring of
// shared memory in pages of the CSR table; each K or V vector is widened to fp32 once and used
// by all G heads (FlashInfer gives each head its own threads, which widens every vector G times:
// measured 2150 GB/s against 2900 for MHA on 64 x 4k; DESIGN.md). Softmax runs online in fp32 in
// log2 units; the slices merge their states in shared memory at the end.
// The copies take their row addresses from a RowAddressTable (fi_attention.cuh), one per stage.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/fp8_widen.cuh"
#include "kernels/common/online_softmax.cuh"
#include "kernels/common/pdl_launch.hpp"
#include "kernels/common/ptx.cuh"
#include "kernels/flashinfer/fi_attention.cuh"
#include "kernels/flashinfer/fi_params.hpp"

// Tuning knobs of the CUDA-core decode (compile-time; measured in docs/PERF_NOTES.md).
#ifndef ATTN_FI_DECODE_STAGE_KEYS
#define ATTN_FI_DECODE_STAGE_KEYS 64
#endif
#ifndef ATTN_FI_DECODE_VEC_BYTES
#define ATTN_FI_DECODE_VEC_BYTES 32
#endif
#ifndef ATTN_FI_DECODE_RING_BYTES
#define ATTN_FI_DECODE_RING_BYTES 65536
#endif
// CTAs per SM that the register allocation must allow (__launch_bounds__' second argument).
#ifndef ATTN_FI_DECODE_MIN_BLOCKS
#define ATTN_FI_DECODE_MIN_BLOCKS 1
#endif

namespace attn::fi {

using namespace attn::kern;

template <int kHeadDim_, class Element_, bool kKvFp8_, int kGroup_>
struct DecodeTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kKvFp8 = kKvFp8_;
  static constexpr int kGroup = kGroup_;
  static constexpr int kKvBytes = kKvFp8 ? 1 : 2;
  // Elements of a row per thread: ATTN_FI_DECODE_VEC_BYTES of a 16-bit row (wider vectors mean
  // fewer lanes per row and one shuffle level fewer per score), at least one 16-byte copy, and at
  // least D / 32 so that bdx <= 32. fp8 rows keep 16 elements (32 would spill at group 4).
  static constexpr int max3(int a, int b, int c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }
  static constexpr int kVec = max3(16 / kKvBytes, ATTN_FI_DECODE_VEC_BYTES / 2, kHeadDim / 32);
  static constexpr int kThreadBytes = kVec * kKvBytes;  // a multiple of 16
  static constexpr int kBdx = kHeadDim / kVec;
  static constexpr int kBdz = 128 / kBdx;  // key slices
  static constexpr int kThreads = kBdx * kBdz;
  // Keys one thread copies (and one slice computes) per stage, so that a stage holds about
  // ATTN_FI_DECODE_STAGE_KEYS keys.
  static constexpr int kTilePerBdx = ATTN_FI_DECODE_STAGE_KEYS / kBdz > 1 ? ATTN_FI_DECODE_STAGE_KEYS / kBdz : 1;
  static constexpr int kStageKeys = kBdz * kTilePerBdx;
  static constexpr int kRowBytes = kHeadDim * kKvBytes;
  static constexpr int kStageBytes = 2 * kStageKeys * kRowBytes;  // K then V
  // About ATTN_FI_DECODE_RING_BYTES of ring per CTA (at least 2 stages): the ring covers the
  // memory latency, and its size sets how many CTAs share an SM (the plan's max_grid).
  static constexpr int stages_for() {
    int s = ATTN_FI_DECODE_RING_BYTES / kStageBytes;
    return s < 2 ? 2 : (s > 8 ? 8 : s);
  }
  static constexpr int kStages = stages_for();
  static constexpr int kRingBytes = kStages * kStageBytes;
  static constexpr int kTableBytes = kStages * kStageKeys * 8;  // row addresses, after the ring
  static constexpr int kEpiBytes = kBdz * kGroup * (kHeadDim + 2) * 4;
  static constexpr int kMainBytes = kRingBytes + kTableBytes;
  static constexpr int kSmemBytes = kMainBytes > kEpiBytes ? kMainBytes : kEpiBytes;
  static_assert(kBdx <= 32 && 32 % kBdx == 0, "a score's lanes must sit in one warp");
  static_assert(kGroup <= kBdz, "the epilogue gives each query head one key slice of threads");
  static_assert(kStageKeys <= kThreads, "one thread per row of a stage's address table");
};

// kVec cache elements (kThreadBytes, 16-byte aligned) -> float.
template <class Tr, bool kE5m2>
__device__ __forceinline__ void load_row_vec(float (&out)[Tr::kVec], const uint8_t* src) {
  using Element = typename Tr::Element;
#pragma unroll
  for (int c = 0; c < Tr::kThreadBytes / 16; ++c) {
    const uint4 raw = *reinterpret_cast<const uint4*>(src + 16 * c);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    if constexpr (Tr::kKvFp8) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint2 h = fp8x4_to_16<__half, kE5m2>(w[i]);  // exact in fp16
        const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&h.x));
        const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&h.y));
        out[16 * c + 4 * i] = a.x;
        out[16 * c + 4 * i + 1] = a.y;
        out[16 * c + 4 * i + 2] = b.x;
        out[16 * c + 4 * i + 3] = b.y;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = to_float2<Element>(w[i]);
        out[8 * c + 2 * i] = f.x;
        out[8 * c + 2 * i + 1] = f.y;
      }
    }
  }
}

// kE5m2: the format of an fp8 cache (e5m2, else e4m3), fixed per kernel (fp8_widen.cuh says why).
template <class Tr, bool kE5m2>
__global__ void __launch_bounds__(Tr::kThreads, ATTN_FI_DECODE_MIN_BLOCKS) fi_decode_kernel(const __grid_constant__ FiAttentionParams p) {
  using Element = typename Tr::Element;
  constexpr int D = Tr::kHeadDim, kVec = Tr::kVec, kBdx = Tr::kBdx, kBdz = Tr::kBdz, G = Tr::kGroup;
  constexpr int kStages = Tr::kStages, kTile = Tr::kTilePerBdx;
  extern __shared__ __align__(16) uint8_t smem[];

  const int work = blockIdx.x;
  if (work >= *p.num_work) {  // CUDA-graph padding: never reads an unplanned entry
    pdl_wait_for_producer();  // no CTA finishes before the kernel ahead of it (below)
    return;
  }
  const int kvh = blockIdx.y;
  const int tx = threadIdx.x, tz = threadIdx.z;

  const int r = p.request_indices[work];
  const int chunk = p.kv_tile_indices[work];
  const int num_chunks = p.o_indptr[r + 1] - p.o_indptr[r];
  const FiKeyRange kr = chunk_keys(p, r, chunk);
  // The query sits at kv_len - 1: a window clips the keys from below.
  int key_begin = kr.begin;
  if (p.window_left >= 0) key_begin = max(key_begin, kr.kv_len - 1 - p.window_left);
  const int key_end = kr.end;

  const int64_t token = p.qo_indptr[r];
  const ScoreScale sc = score_scale(p);

  // q of the group's G heads, dims [tx * kVec, +kVec): [num_tokens, num_qo_heads, D]
  float q[G][kVec];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    const Element* src = static_cast<const Element*>(p.q) + (token * p.num_qo_heads + kvh * G + h) * D + tx * kVec;
#pragma unroll
    for (int i = 0; i < kVec; i += 2) {
      const float2 f = to_float2<Element>(*reinterpret_cast<const uint32_t*>(src + i));
      q[h][i] = f.x * sc.q;
      q[h][i + 1] = f.y * sc.q;
    }
  }

  const int num_iters = key_end > key_begin ? (key_end - key_begin + Tr::kStageKeys - 1) / Tr::kStageKeys : 0;
  const int page_first = p.kv.indptr[r];
  const RowAddressTable<Tr::kStageKeys, kStages> table{reinterpret_cast<int64_t*>(smem + Tr::kRingBytes),
                                                      tz * kBdx + tx};
  // This kernel launches after the step's cache write with programmatic stream serialization:
  // the first stage holding one of the request's new keys (the last qo_len) waits for the write,
  // the stages before it stream meanwhile.
  const int new_keys_begin = kr.kv_len - static_cast<int>(p.qo_indptr[r + 1] - token);
  bool cache_written = false;
  auto load_stage = [&](int iter, int stage) {
    if (!cache_written && key_begin + (iter + 1) * Tr::kStageKeys > new_keys_begin) {
      pdl_wait_for_producer();
      cache_written = true;
    }
    uint8_t* sk = smem + stage * Tr::kStageBytes;
    uint8_t* sv = sk + Tr::kStageKeys * Tr::kRowBytes;
    const int64_t* addr = table.tile(iter);
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      const int row = tz * kTile + j;
      const int key = key_begin + iter * Tr::kStageKeys + row;
      const bool valid = key < key_end;
      const int64_t off = addr[row] + tx * Tr::kThreadBytes;
#pragma unroll
      for (int c = 0; c < Tr::kThreadBytes; c += 16) {
        cp_async_16(sk + row * Tr::kRowBytes + tx * Tr::kThreadBytes + c, static_cast<const uint8_t*>(p.kv.k) + off + c, valid);
        cp_async_16(sv + row * Tr::kRowBytes + tx * Tr::kThreadBytes + c, static_cast<const uint8_t*>(p.kv.v) + off + c, valid);
      }
    }
  };

#pragma unroll
  for (int n = 0; n < kStages; ++n) {
    uint32_t slot;
    const int page_id = table.fetch(p.kv, page_first, key_begin, key_end, n, num_iters, slot);
    table.store(p.kv, n, page_id, slot, kvh, Tr::kKvBytes);
  }
  __syncthreads();  // the first kStages tables
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_iters) load_stage(s, s);
    cp_async_commit();
  }

  OnlineSoftmaxRow st[G];  // per query head, over this slice's keys
  float o[G][kVec];
#pragma unroll
  for (int h = 0; h < G; ++h)
#pragma unroll
    for (int i = 0; i < kVec; ++i) o[h][i] = 0.f;

  for (int it = 0; it < num_iters; ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage it landed for all; every thread is done with stage it - 1
    if (it + kStages - 1 < num_iters) load_stage(it + kStages - 1, (it + kStages - 1) % kStages);
    cp_async_commit();
    uint32_t next_slot;  // table of stage load it + kStages, stored at the end of the iteration
    const int next_page = table.fetch(p.kv, page_first, key_begin, key_end, it + kStages, num_iters, next_slot);

    const uint8_t* sk = smem + (it % kStages) * Tr::kStageBytes + tz * kTile * Tr::kRowBytes + tx * Tr::kThreadBytes;
    const uint8_t* sv = sk + Tr::kStageKeys * Tr::kRowBytes;
    const int key0 = key_begin + it * Tr::kStageKeys + tz * kTile;
    // Each K and V vector is widened once and used by all G heads of the group.
    float s[G][kTile];
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      float kv[kVec];
      load_row_vec<Tr, kE5m2>(kv, sk + j * Tr::kRowBytes);
#pragma unroll
      for (int h = 0; h < G; ++h) {
        float dot[2] = {0.f, 0.f};  // two chains: half the dependent FMA latency
#pragma unroll
        for (int i = 0; i < kVec; ++i) dot[i % 2] = fmaf(q[h][i], kv[i], dot[i % 2]);
        float x = dot[0] + dot[1];
#pragma unroll
        for (int off = kBdx / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
        s[h][j] = x;
      }
    }
    // The soft cap is fixed at plan time (one uniform branch per stage); only a stage reaching
    // past the keys masks.
    if (sc.cap2 > 0.f) {
#pragma unroll
      for (int h = 0; h < G; ++h)
#pragma unroll
        for (int j = 0; j < kTile; ++j) s[h][j] = sc.apply(s[h][j]);
    }
    if (key0 + kTile > key_end) {
#pragma unroll
      for (int j = 0; j < kTile; ++j)
#pragma unroll
        for (int h = 0; h < G; ++h)
          if (key0 + j >= key_end) s[h][j] = -INFINITY;
    }
    // O is rescaled only when some row's running max moved (update_lazy), decided per warp.
    float corr[G];
    bool rescale = false;
#pragma unroll
    for (int h = 0; h < G; ++h) {
      corr[h] = st[h].update_lazy(s[h]);
      rescale |= corr[h] != 1.f;
    }
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int h = 0; h < G; ++h)
#pragma unroll
        for (int i = 0; i < kVec; ++i) o[h][i] *= corr[h];
    }
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      float v[kVec];
      load_row_vec<Tr, kE5m2>(v, sv + j * Tr::kRowBytes);
#pragma unroll
      for (int h = 0; h < G; ++h)
#pragma unroll
        for (int i = 0; i < kVec; ++i) o[h][i] = fmaf(s[h][j], v[i], o[h][i]);
    }
    table.store(p.kv, it + kStages, next_page, next_slot, kvh, Tr::kKvBytes);
  }
  if (!cache_written) pdl_wait_for_producer();  // a chunk without new keys: no CTA ends before the write
  cp_async_wait<0>();
  __syncthreads();

  // ---- merge the key slices: (m, d, o) of every (slice, head) through shared memory ----
  float* so = reinterpret_cast<float*>(smem);  // [bdz][G][D]
  float* smd = so + kBdz * G * D;              // [bdz][G][2]
#pragma unroll
  for (int h = 0; h < G; ++h) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) so[(tz * G + h) * D + tx * kVec + i] = o[h][i];
    if (tx == 0) {
      smd[(tz * G + h) * 2] = st[h].m;
      smd[(tz * G + h) * 2 + 1] = st[h].d;
    }
  }
  __syncthreads();
  if (tz >= G) return;
  const int h = tz;  // slice h finishes query head h
  OnlineSoftmaxRow all;
  float out[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) out[i] = 0.f;
  for (int z = 0; z < kBdz; ++z) {
    const float corr = all.absorb(smd[(z * G + h) * 2], smd[(z * G + h) * 2 + 1]);
#pragma unroll
    for (int i = 0; i < kVec; ++i) out[i] = out[i] * corr + all.last_weight * so[(z * G + h) * D + tx * kVec + i];
  }
  const float inv = all.d > 0.f ? sc.v / all.d : 0.f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) out[i] *= inv;
  write_row<Element, D, kVec>(p, r, num_chunks, chunk, /*qi=*/0, kvh * G + h, out, all.lse2(), tx * kVec, tx == 0);
}

}  // namespace attn::fi

namespace attn::fi {

// Host side of one decode instantiation: grid (padded work items, kv heads), the kernel of the
// cache's fp8 format.
template <int kHeadDim, class Element, bool kKvFp8, int kGroup>
void run_fi_decode(const FiAttentionParams& p, int grid_work, cudaStream_t stream) {
  using Tr = DecodeTraits<kHeadDim, Element, kKvFp8, kGroup>;
  static const cudaError_t configured[2] = {
      cudaFuncSetAttribute(fi_decode_kernel<Tr, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes),
      cudaFuncSetAttribute(fi_decode_kernel<Tr, kKvFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes)};
  (void)configured;
  const auto kernel = kKvFp8 && p.kv_fp8_e5m2 ? fi_decode_kernel<Tr, kKvFp8> : fi_decode_kernel<Tr, false>;
  // After the cache write, which lets it start at once (see the kernel's load_stage).
  (void)kern::launch_after_producer(kernel, dim3(grid_work, p.num_kv_heads), dim3(Tr::kBdx, 1, Tr::kBdz),
                                    Tr::kSmemBytes, stream, p);
}

// CTAs of one instantiation resident per SM (the plan's max_grid = this x SMs): the fewer of the
// two fp8 formats' kernels.
template <int kHeadDim, class Element, bool kKvFp8, int kGroup>
int fi_decode_occupancy() {
  using Tr = DecodeTraits<kHeadDim, Element, kKvFp8, kGroup>;
  int fewest = 1 << 30;
  for (const auto kernel : {fi_decode_kernel<Tr, false>, fi_decode_kernel<Tr, kKvFp8>}) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Tr::kThreads, Tr::kSmemBytes) != cudaSuccess)
      blocks = 1;
    fewest = blocks < fewest ? blocks : fewest;
  }
  return fewest > 0 ? fewest : 1;
}

#define ATTN_FI_DECODE_INSTANTIATE_ONE(D, E, F, G)                                              \
  template void run_fi_decode<D, E, F, G>(const FiAttentionParams&, int, cudaStream_t);          \
  template int fi_decode_occupancy<D, E, F, G>();
#define ATTN_FI_DECODE_INSTANTIATE_GROUPS(D, E, F) \
  ATTN_FI_DECODE_INSTANTIATE_ONE(D, E, F, 1)       \
  ATTN_FI_DECODE_INSTANTIATE_ONE(D, E, F, 2)       \
  ATTN_FI_DECODE_INSTANTIATE_ONE(D, E, F, 3)       \
  ATTN_FI_DECODE_INSTANTIATE_ONE(D, E, F, 4)
// The decode instantiations of one head size (fi_decode_hd<N>.cu): both model dtypes, the
// model-dtype and the fp8 cache, groups 1-4.
#define ATTN_FI_DECODE_INSTANTIATE_HEAD_SIZE(D)                \
  ATTN_FI_DECODE_INSTANTIATE_GROUPS(D, __half, false)          \
  ATTN_FI_DECODE_INSTANTIATE_GROUPS(D, __half, true)           \
  ATTN_FI_DECODE_INSTANTIATE_GROUPS(D, __nv_bfloat16, false)   \
  ATTN_FI_DECODE_INSTANTIATE_GROUPS(D, __nv_bfloat16, true)

}  // namespace attn::fi
