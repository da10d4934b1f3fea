#pragma once
// A timeline of the sm_90a kernel's work items (flash_fwd_sm90.cuh), to see where a persistent
// CTA's time goes between its items and inside them. It exists only in builds with
// -DATTN_SM90_TRACE (scripts/gpu-trace); otherwise every ATTN_SM90_TRACE_AT is empty.
//
// Per CTA and round (the CTA's item index), thread 0 of the producer and of each consumer stamp
// clock64() at the points below; the launcher writes the last launch's stamps, read back after it
// completes, to $ATTN_SM90_TRACE_FILE, and scripts/sm90-trace.py turns them into per-item phases.
// File: int32 {ctas, rounds, points, grid}, then int64 stamps[ctas][rounds][points] (-1: not
// reached), then int64 {globaltimer, clock64} at each CTA's start and end [ctas][4].
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace attn::fa::sm90 {

// Stamped points of a round. The producer's, then each consumer's (consumer c: kTraceConsumer0 +
// kTraceConsumerPoints * c + the point). Turn, FirstS and LastPv are stamped on the overlapped
// schedule (kOverlap) and on the plain one (there Turn is the item's first stage full, its turn
// taken where there are turns), not on the fp8 tensor-core ping-pong.
enum TracePoint : int {
  kTraceTiles = 0,         // the item's key tiles (a count, not a stamp)
  kTraceProducerItem,      // the producer starts the item
  kTraceProducerFirst,     // its first tile's copies are issued (a free slot was waited for)
  kTraceProducerLast,      // its last tile's copies are issued
  kTraceConsumer0,
};
enum TraceConsumerPoint : int {
  kTraceItem = 0,  // the consumer starts the item
  kTraceQ,         // its rows of Q landed
  kTraceTurn,      // it holds the turn for its first Q K^T
  kTraceFirstS,    // the first S landed
  kTraceLastPv,    // the last P V completed
  kTraceEnd,       // the epilogue's stores are issued
  kTraceEpiFields, // the epilogue has the item's fields (after the last P V)
  kTraceEpiRows,   // the epilogue's row ends are done and its rows staged (before the stores)
  kTraceConsumerPoints,
};
constexpr int kTraceCtas = 160, kTraceRounds = 64, kTracePoints = kTraceConsumer0 + 3 * kTraceConsumerPoints;

#ifdef ATTN_SM90_TRACE
// One copy per translation unit (static): each instantiation file traces its own kernels.
static __device__ long long g_trace[kTraceCtas * kTraceRounds * kTracePoints];
static __device__ long long g_trace_cta[kTraceCtas * 4];

__device__ __forceinline__ long long trace_globaltimer() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void trace_at(int round, int point, long long value) {
  if (round < kTraceRounds && blockIdx.x < kTraceCtas) g_trace[(blockIdx.x * kTraceRounds + round) * kTracePoints + point] = value;
}
// The CTA's start (end = false) or end on the common clock and on the SM's own.
__device__ __forceinline__ void trace_cta(bool end) {
  if (blockIdx.x < kTraceCtas) {
    g_trace_cta[blockIdx.x * 4 + (end ? 2 : 0)] = trace_globaltimer();
    g_trace_cta[blockIdx.x * 4 + (end ? 3 : 1)] = clock64();
  }
}
#define ATTN_SM90_TRACE_AT(round, point, value) ::attn::fa::sm90::trace_at((round), (point), (value))
#define ATTN_SM90_TRACE_CTA(end) ::attn::fa::sm90::trace_cta(end)

// Host: before a launch, every stamp to -1; after it (when not captured into a graph), the stamps
// to $ATTN_SM90_TRACE_FILE. Synchronous: a traced run's times are not the kernel's.
inline const char* trace_file() { return std::getenv("ATTN_SM90_TRACE_FILE"); }
inline bool trace_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) != cudaSuccess || status != cudaStreamCaptureStatusNone;
}
inline void trace_before_launch(cudaStream_t stream) {
  if (trace_file() == nullptr || trace_capturing(stream)) return;
  const std::vector<long long> unset(static_cast<size_t>(kTraceCtas) * kTraceRounds * kTracePoints, -1);
  (void)cudaMemcpyToSymbol(g_trace, unset.data(), unset.size() * sizeof(long long));
}
inline void trace_after_launch(cudaStream_t stream, int grid) {
  const char* path = trace_file();
  if (path == nullptr || trace_capturing(stream) || cudaStreamSynchronize(stream) != cudaSuccess) return;
  std::vector<long long> stamps(static_cast<size_t>(kTraceCtas) * kTraceRounds * kTracePoints), ctas(kTraceCtas * 4);
  if (cudaMemcpyFromSymbol(stamps.data(), g_trace, stamps.size() * sizeof(long long)) != cudaSuccess ||
      cudaMemcpyFromSymbol(ctas.data(), g_trace_cta, ctas.size() * sizeof(long long)) != cudaSuccess)
    return;
  if (FILE* f = std::fopen(path, "wb")) {
    const int32_t header[4] = {kTraceCtas, kTraceRounds, kTracePoints, grid};
    std::fwrite(header, sizeof header, 1, f);
    std::fwrite(stamps.data(), sizeof(long long), stamps.size(), f);
    std::fwrite(ctas.data(), sizeof(long long), ctas.size(), f);
    std::fclose(f);
  }
}
#else
#define ATTN_SM90_TRACE_AT(round, point, value) ((void)0)
#define ATTN_SM90_TRACE_CTA(end) ((void)0)
inline void trace_before_launch(cudaStream_t) {}
inline void trace_after_launch(cudaStream_t, int) {}
#endif

}  // namespace attn::fa::sm90
