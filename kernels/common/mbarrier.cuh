#pragma once
// Hopper (sm_90a) synchronisation for warp-specialised kernels: shared-memory mbarriers (a
// producer fills a ring stage and arrives on its "full" barrier, consumers wait on it with the
// stage's phase parity and arrive on its "empty" barrier when their MMAs no longer read it),
// bulk-copy (TMA) transaction counts on a barrier, named barriers (two consumer warpgroups
// taking turns on the tensor cores), and setmaxnreg
// (registers moved from the producer warpgroup to the consumers). Outside an sm_90a device pass
// they compile to nothing, like wgmma.cuh, so a .cu including them still builds for sm_80.
#include <cstdint>

#include "kernels/common/wgmma.cuh"  // ATTN_SM90A_DEVICE

namespace attn::kern {

#if defined(ATTN_SM90A_DEVICE)
// bar: shared-memory address of a 64-bit mbarrier; count: arrivals that complete a phase.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Release: this thread's earlier writes are visible to whoever completes a wait on the phase.
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.release.cta.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
// Arrival that also announces `bytes` of bulk-copy (TMA) transactions for the current phase: the
// phase completes once every arrival came and the copies delivered that many bytes.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Makes initialised barriers visible to the async proxy (bulk copies complete on them).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Acquire: returns once the phase with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Named barrier `id` (1..15; 0 is __syncthreads) over `count` threads: sync waits, arrive does not.
__device__ __forceinline__ void named_bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
#else
__device__ __forceinline__ void mbar_init(uint32_t, int) {}
__device__ __forceinline__ void mbar_arrive(uint32_t) {}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t, uint32_t) {}
__device__ __forceinline__ void fence_barrier_init() {}
__device__ __forceinline__ void mbar_wait(uint32_t, uint32_t) {}
__device__ __forceinline__ void named_bar_sync(int, int) {}
__device__ __forceinline__ void named_bar_arrive(int, int) {}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {}
#endif

}  // namespace attn::kern
