#pragma once
// Hopper (sm_90a) bulk tensor copies (TMA): one instruction moves a box of a global tensor,
// described by a CUtensorMap (kernels/common/tma_map.hpp), into shared memory in the swizzled
// layout the wgmma descriptors name, and completes `bytes` transactions on an mbarrier
// (mbar_arrive_expect_tx). The copy engine does the address arithmetic and the swizzle, so one
// thread feeds a whole tile and no registers hold the data on the way. Outside an sm_90a device
// pass the copies compile to nothing, like wgmma.cuh.
#include <cuda.h>

#include <cstdint>

#include "kernels/common/wgmma.cuh"  // ATTN_SM90A_DEVICE

namespace attn::kern {

// dst: shared-memory address (1024-byte aligned for the 128-byte swizzle); map: the address of
// a __grid_constant__ kernel parameter; c0 is the innermost coordinate (elements).
#if defined(ATTN_SM90A_DEVICE)
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_load_5d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3, int c4,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
      : "memory");
}
// The same copy with an L2 cache policy (l2_evict_first_policy) for the lines it brings in.
__device__ __forceinline__ void tma_load_3d_hint(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar,
                                                 uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void tma_load_4d_hint(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                                 uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "l"(policy)
      : "memory");
}
// An L2 policy under which the lines a copy brings are the first evicted: data streamed once, so
// that it does not push out what is read again soon (a split-KV kernel's partials, read by the merge).
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// `bytes` (a multiple of 16) of global memory from `src` (16-byte aligned) into L2, no completion
// to wait for: data that a later copy of this CTA reads, so that it finds it in L2.
__device__ __forceinline__ void prefetch_l2_bulk(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(reinterpret_cast<uint64_t>(src)), "r"(bytes) : "memory");
}
// True in exactly one active lane of the warp (all lanes must take part). Copies issued under it
// from warp-uniform operands compile to one UTMALDG each; issued from per-lane operands, a copy
// becomes a loop over the active lanes.
__device__ __forceinline__ bool elect_one_sync() {
  uint32_t pred = 0;
  asm volatile(
      "{\n.reg .pred P;\nelect.sync _|P, 0xffffffff;\nselp.b32 %0, 1, 0, P;\n}\n"
      : "=r"(pred));
  return pred != 0;
}
#else
__device__ __forceinline__ bool elect_one_sync() { return (threadIdx.x & 31) == 0; }
__device__ __forceinline__ void tma_load_4d(uint32_t, const CUtensorMap*, int, int, int, int, uint32_t) {}
__device__ __forceinline__ void tma_load_5d(uint32_t, const CUtensorMap*, int, int, int, int, int, uint32_t) {}
__device__ __forceinline__ void tma_load_2d(uint32_t, const CUtensorMap*, int, int, uint32_t) {}
__device__ __forceinline__ void tma_load_3d(uint32_t, const CUtensorMap*, int, int, int, uint32_t) {}
__device__ __forceinline__ void tma_load_3d_hint(uint32_t, const CUtensorMap*, int, int, int, uint32_t, uint64_t) {}
__device__ __forceinline__ uint64_t l2_evict_first_policy() { return 0; }
__device__ __forceinline__ void prefetch_l2_bulk(const void*, uint32_t) {}
__device__ __forceinline__ void tma_load_4d_hint(uint32_t, const CUtensorMap*, int, int, int, int, uint32_t, uint64_t) {}
#endif

}  // namespace attn::kern
