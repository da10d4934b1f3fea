#pragma once
// A timeline of the mma.sync kernel's CTAs (flash_fwd_kernel.cuh): when each one starts, ends its
// main loop (its last key tile's products) and ends, and on which SM. A single-wave decode's time
// is set by its slowest CTAs, so where they lose it (a late start, a slow SM, the merge after the
// main loop) is what this shows (docs/PERF_NOTES.md Version 50). It exists only in builds with
// -DATTN_FA_CTA_TRACE (scripts/gpu-trace --cta); otherwise every ATTN_FA_CTA_TRACE_AT is empty.
//
// Thread 0 of each CTA stamps %globaltimer; the launcher writes the last launch's stamps, read back
// after it completes, to $ATTN_FA_CTA_TRACE_FILE, and scripts/cta-trace.py reads them.
// File: int32 {ctas, grid x, grid y, grid z}, then int64 [ctas][4] {start, main loop end, end (ns),
// SM id} (-1: not reached), CTA (x, y, z) at x + grid x * (y + grid y * z).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace attn::fa {

enum CtaTracePoint : int { kCtaStart = 0, kCtaMainEnd, kCtaEnd, kCtaSm, kCtaTracePoints };
constexpr int kCtaTraceMax = 16384;  // CTAs stamped per launch (the first ones of a larger grid)

#ifdef ATTN_FA_CTA_TRACE
// One copy per translation unit (static): each instantiation file traces its own kernels.
static __device__ long long g_cta_trace[kCtaTraceMax * kCtaTracePoints];

__device__ __forceinline__ void cta_trace_at(int point) {
  const long long cta = blockIdx.x + static_cast<long long>(gridDim.x) * (blockIdx.y + static_cast<long long>(gridDim.y) * blockIdx.z);
  if (threadIdx.x != 0 || cta >= kCtaTraceMax) return;
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  g_cta_trace[cta * kCtaTracePoints + point] = t;
  if (point == kCtaStart) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    g_cta_trace[cta * kCtaTracePoints + kCtaSm] = sm;
  }
}
#define ATTN_FA_CTA_TRACE_AT(point) ::attn::fa::cta_trace_at(point)

// Host: before a launch, every stamp to -1; after it (when not captured into a graph), the stamps
// to $ATTN_FA_CTA_TRACE_FILE. Synchronous: a traced run's times are not the kernel's.
inline bool cta_trace_on(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return std::getenv("ATTN_FA_CTA_TRACE_FILE") != nullptr && cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
         status == cudaStreamCaptureStatusNone;
}
inline void cta_trace_before_launch(cudaStream_t stream) {
  if (!cta_trace_on(stream)) return;
  const std::vector<long long> unset(static_cast<size_t>(kCtaTraceMax) * kCtaTracePoints, -1);
  (void)cudaMemcpyToSymbol(g_cta_trace, unset.data(), unset.size() * sizeof(long long));
}
inline void cta_trace_after_launch(cudaStream_t stream, dim3 grid) {
  if (!cta_trace_on(stream) || cudaStreamSynchronize(stream) != cudaSuccess) return;
  const long long all = static_cast<long long>(grid.x) * grid.y * grid.z;
  const int ctas = static_cast<int>(all < kCtaTraceMax ? all : kCtaTraceMax);
  std::vector<long long> stamps(static_cast<size_t>(ctas) * kCtaTracePoints);
  if (cudaMemcpyFromSymbol(stamps.data(), g_cta_trace, stamps.size() * sizeof(long long)) != cudaSuccess) return;
  if (FILE* f = std::fopen(std::getenv("ATTN_FA_CTA_TRACE_FILE"), "wb")) {
    const int32_t header[4] = {ctas, static_cast<int32_t>(grid.x), static_cast<int32_t>(grid.y), static_cast<int32_t>(grid.z)};
    std::fwrite(header, sizeof header, 1, f);
    std::fwrite(stamps.data(), sizeof(long long), stamps.size(), f);
    std::fclose(f);
  }
}
#else
#define ATTN_FA_CTA_TRACE_AT(point) ((void)0)
inline void cta_trace_before_launch(cudaStream_t) {}
inline void cta_trace_after_launch(cudaStream_t, dim3) {}
#endif

}  // namespace attn::fa
