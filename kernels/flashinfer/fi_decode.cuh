#pragma once
// FlashInfer's batch decode on CUDA cores (GQA group <= 4): one CTA per (work item, kv head).
//
// A thread is (tx, ty, tz): tx owns kVec consecutive head dims (one 16-byte vector of a cache
// row), ty is the query head within the kv head's group, tz a slice of the keys. The bdx
// threads of one (ty, tz) sit in consecutive lanes, so a score is a kVec-wide dot product
// reduced by log2(bdx) shuffles. Keys stream through a multi-stage cp.async ring of shared
// memory in pages of the CSR table; every thread of a tz slice loads K and V rows that all bdy
// query heads then read, so each cache byte is read from memory once per kv head. Softmax runs
// online in fp32 in log2 units; the tz slices merge their states in shared memory at the end.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/fp8_widen.cuh"
#include "kernels/common/online_softmax.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/flashinfer/fi_attention.cuh"
#include "kernels/flashinfer/fi_params.hpp"

// Tuning knobs of the CUDA-core decode (compile-time; measured in docs/PERF_NOTES.md).
#ifndef ATTN_FI_DECODE_STAGE_KEYS
#define ATTN_FI_DECODE_STAGE_KEYS 32
#endif
#ifndef ATTN_FI_DECODE_RING_BYTES
#define ATTN_FI_DECODE_RING_BYTES 32768
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
  // One 16-byte vector per thread and row (at least D / 32 elements so bdx <= 32).
  static constexpr int kVec = (16 / kKvBytes) > kHeadDim / 32 ? 16 / kKvBytes : kHeadDim / 32;
  static constexpr int kBdx = kHeadDim / kVec;
  static constexpr int kBdy = kGroup;
  // About 128 threads, in whole warps (the shuffles run on full warps).
  static constexpr int bdz_for() {
    int z = 128 / (kBdx * kBdy);
    while (z > 1 && (kBdx * kBdy * z) % 32 != 0) --z;
    return z < 1 ? 1 : z;
  }
  static constexpr int kBdz = bdz_for();
  static constexpr int kThreads = kBdx * kBdy * kBdz;
  // Keys one thread copies per stage, so that a stage holds about kStageKeysTarget keys: one
  // barrier per stage, and a decode CTA does little work per key, so few large stages beat many
  // small ones. (FlashInfer itself takes 1 key per thread with GQA, 2-4 for MHA.)
  static constexpr int kStageKeysTarget = ATTN_FI_DECODE_STAGE_KEYS;
  static constexpr int kTilePerBdx =
      kStageKeysTarget / (kBdy * kBdz) > 1 ? kStageKeysTarget / (kBdy * kBdz) : 1;
  static constexpr int kKeysPerZ = kBdy * kTilePerBdx;
  static constexpr int kStageKeys = kBdz * kKeysPerZ;
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
  static constexpr int kEpiBytes = kBdz * kBdy * (kHeadDim + 2) * 4;
  static constexpr int kSmemBytes = kRingBytes > kEpiBytes ? kRingBytes : kEpiBytes;
  static_assert(kBdx <= 32 && 32 % kBdx == 0, "a score's lanes must sit in one warp");
  static_assert(kThreads % 32 == 0, "whole warps");
};

// kVec cache elements (16 bytes) -> float.
template <class Tr>
__device__ __forceinline__ void load_row_vec(float (&out)[Tr::kVec], const uint8_t* src, bool e5m2) {
  using Element = typename Tr::Element;
  const uint4 raw = *reinterpret_cast<const uint4*>(src);
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (Tr::kKvFp8) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint2 h = fp8x4_to_16<__half>(w[i], e5m2);  // exact in fp16
      const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&h.x));
      const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&h.y));
      out[4 * i] = a.x;
      out[4 * i + 1] = a.y;
      out[4 * i + 2] = b.x;
      out[4 * i + 3] = b.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = to_float2<Element>(w[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
}

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads) fi_decode_kernel(const __grid_constant__ FiAttentionParams p) {
  using Element = typename Tr::Element;
  constexpr int D = Tr::kHeadDim, kVec = Tr::kVec, kBdx = Tr::kBdx, kBdy = Tr::kBdy, kBdz = Tr::kBdz;
  constexpr int kStages = Tr::kStages;
  extern __shared__ __align__(16) uint8_t smem[];

  const int work = blockIdx.x;
  if (work >= *p.num_work) return;  // CUDA-graph padding: never reads an unplanned entry
  const int kvh = blockIdx.y;
  const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;

  const int r = p.request_indices[work];
  const int chunk = p.kv_tile_indices[work];
  const int num_chunks = p.o_indptr[r + 1] - p.o_indptr[r];
  const FiKeyRange kr = chunk_keys(p, r, chunk);
  // The query sits at kv_len - 1: a window clips the keys from below.
  int key_begin = kr.begin;
  if (p.window_left >= 0) key_begin = max(key_begin, kr.kv_len - 1 - p.window_left);
  const int key_end = kr.end;

  const int head = kvh * kBdy + ty;
  const int64_t token = p.qo_indptr[r];
  const ScoreScale sc = score_scale(p);
  const bool e5m2 = p.kv_fp8_e5m2 != 0;

  // q: [num_tokens, num_qo_heads, D]
  float q[kVec];
  {
    const Element* src = static_cast<const Element*>(p.q) + (token * p.num_qo_heads + head) * D + tx * kVec;
#pragma unroll
    for (int i = 0; i < kVec; i += 2) {
      const float2 f = to_float2<Element>(*reinterpret_cast<const uint32_t*>(src + i));
      q[i] = f.x * sc.q;
      q[i + 1] = f.y * sc.q;
    }
  }

  const int page_first = p.kv.indptr[r];
  auto load_stage = [&](int iter, int stage) {
    uint8_t* sk = smem + stage * Tr::kStageBytes;
    uint8_t* sv = sk + Tr::kStageKeys * Tr::kRowBytes;
#pragma unroll
    for (int j = 0; j < Tr::kTilePerBdx; ++j) {
      const int row = tz * Tr::kKeysPerZ + ty * Tr::kTilePerBdx + j;
      const int key = key_begin + iter * Tr::kStageKeys + row;
      const bool valid = key < key_end;
      const int64_t off = valid ? kv_offset(p.kv, page_first, key, kvh) * Tr::kKvBytes + tx * 16 : 0;
      cp_async_16(sk + row * Tr::kRowBytes + tx * 16, static_cast<const uint8_t*>(p.kv.k) + off, valid);
      cp_async_16(sv + row * Tr::kRowBytes + tx * 16, static_cast<const uint8_t*>(p.kv.v) + off, valid);
    }
  };

  const int num_iters = key_end > key_begin ? (key_end - key_begin + Tr::kStageKeys - 1) / Tr::kStageKeys : 0;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_iters) load_stage(s, s);
    cp_async_commit();
  }

  OnlineSoftmaxRow st;  // this thread's query head over its tz slice of the keys
  float o[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) o[i] = 0.f;

  for (int it = 0; it < num_iters; ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage it landed for all; every thread is done with stage it - 1
    if (it + kStages - 1 < num_iters) load_stage(it + kStages - 1, (it + kStages - 1) % kStages);
    cp_async_commit();

    const uint8_t* sk = smem + (it % kStages) * Tr::kStageBytes;
    const uint8_t* sv = sk + Tr::kStageKeys * Tr::kRowBytes;
    const int key0 = key_begin + it * Tr::kStageKeys + tz * Tr::kKeysPerZ;
    float s[Tr::kKeysPerZ];
#pragma unroll
    for (int j = 0; j < Tr::kKeysPerZ; ++j) {
      float kv[kVec];
      load_row_vec<Tr>(kv, sk + (tz * Tr::kKeysPerZ + j) * Tr::kRowBytes + tx * 16, e5m2);
      float dot = 0.f;
#pragma unroll
      for (int i = 0; i < kVec; ++i) dot = fmaf(q[i], kv[i], dot);
#pragma unroll
      for (int off = kBdx / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      s[j] = key0 + j < key_end ? sc.apply(dot) : -INFINITY;
    }
    const float corr = st.update(s);
#pragma unroll
    for (int i = 0; i < kVec; ++i) o[i] *= corr;
#pragma unroll
    for (int j = 0; j < Tr::kKeysPerZ; ++j) {
      float v[kVec];
      load_row_vec<Tr>(v, sv + (tz * Tr::kKeysPerZ + j) * Tr::kRowBytes + tx * 16, e5m2);
#pragma unroll
      for (int i = 0; i < kVec; ++i) o[i] = fmaf(s[j], v[i], o[i]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // ---- merge the tz slices: (m, d, o) of every (ty, tz) through shared memory ----
  float* so = reinterpret_cast<float*>(smem);  // [bdz][bdy][D]
  float* smd = so + kBdz * kBdy * D;           // [bdz][bdy][2]
#pragma unroll
  for (int i = 0; i < kVec; ++i) so[(tz * kBdy + ty) * D + tx * kVec + i] = o[i];
  if (tx == 0) {
    smd[(tz * kBdy + ty) * 2] = st.m;
    smd[(tz * kBdy + ty) * 2 + 1] = st.d;
  }
  __syncthreads();
  if (tz != 0) return;
  OnlineSoftmaxRow all;
  float out[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) out[i] = 0.f;
  for (int z = 0; z < kBdz; ++z) {
    const float corr_all = all.absorb(smd[(z * kBdy + ty) * 2], smd[(z * kBdy + ty) * 2 + 1]);
    const float w = all.last_weight;
#pragma unroll
    for (int i = 0; i < kVec; ++i) out[i] = out[i] * corr_all + w * so[(z * kBdy + ty) * D + tx * kVec + i];
  }
  const float inv = all.d > 0.f ? sc.v / all.d : 0.f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) out[i] *= inv;
  write_row<Element, D, kVec>(p, r, num_chunks, chunk, /*qi=*/0, head, out, all.lse2(), tx * kVec, tx == 0);
}

}  // namespace attn::fi

namespace attn::fi {

// Host side of one decode instantiation: grid (padded work items, kv heads).
template <int kHeadDim, class Element, bool kKvFp8, int kGroup>
void run_fi_decode(const FiAttentionParams& p, int grid_work, cudaStream_t stream) {
  using Tr = DecodeTraits<kHeadDim, Element, kKvFp8, kGroup>;
  static const cudaError_t configured =
      cudaFuncSetAttribute(fi_decode_kernel<Tr>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
  (void)configured;
  fi_decode_kernel<Tr><<<dim3(grid_work, p.num_kv_heads), dim3(Tr::kBdx, Tr::kBdy, Tr::kBdz), Tr::kSmemBytes, stream>>>(p);
}

// CTAs of one instantiation resident per SM (the plan's max_grid = this x SMs).
template <int kHeadDim, class Element, bool kKvFp8, int kGroup>
int fi_decode_occupancy() {
  using Tr = DecodeTraits<kHeadDim, Element, kKvFp8, kGroup>;
  cudaFuncSetAttribute(fi_decode_kernel<Tr>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fi_decode_kernel<Tr>, Tr::kThreads, Tr::kSmemBytes) !=
      cudaSuccess)
    blocks = 1;
  return blocks > 0 ? blocks : 1;
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
