// What a launch's shape costs a short streaming kernel on sm_90a: thread block clusters,
// programmatic stream serialization and the dynamic shared memory that holds two CTAs per SM,
// event-timed the way attn-bench times a row (cold and clean L2 before each sample, outside the
// events, median of 21). Each CTA of 128 threads reads its own contiguous share of `bytes` with
// 16-byte loads, 16 in flight per thread; with 0 bytes the kernel is empty and the time is the
// launch's own. The FLASH_ATTN decode tiling's 2-token decode launch is 256 CTAs in clusters of two,
// 109 KB each (two per SM), over 269 MB.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -I. scripts/probes/launch_probe.cu -o launch_probe && ./launch_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "scripts/probes/probe_check.hpp"

constexpr int kThreads = 128;
constexpr int kInFlight = 16;

__global__ void k_read(const uint4* __restrict__ src, size_t per_cta, uint32_t* sink) {
  const uint4* p = src + blockIdx.x * per_cta;
  uint32_t acc = 0;
  for (size_t i = threadIdx.x; i < per_cta; i += kThreads * kInFlight) {
    uint4 v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const size_t k = i + static_cast<size_t>(j) * kThreads;
      v[j] = k < per_cta ? __ldcs(p + k) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads
}

__global__ void k_flush(const uint4* __restrict__ src, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) acc ^= src[i].x;
  if (acc == 0x9e3779b9u) sink[1] = acc;
}

int main() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const size_t bytes = size_t(268435456);  // the 2-token decode's K and V
  const size_t flush_bytes = size_t(256) << 20;
  uint4 *src = nullptr, *flush = nullptr;
  uint32_t* sink = nullptr;
  CK(cudaMalloc(&src, bytes));
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMalloc(&sink, 64));
  CK(cudaMemset(src, 0x3c, bytes));
  CK(cudaMemset(flush, 1, flush_bytes));
  const int smem_big = 109 * 1024;
  CK(cudaFuncSetAttribute(k_read, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_big));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  struct Cfg {
    int grid, cluster, pdl, smem;
    bool work;
  };
  std::vector<Cfg> cfgs;
  for (const bool work : {false, true})
    for (const int grid : {256, 264})
      for (const int cluster : {1, 2})
        for (const int pdl : {0, 1})
          for (const int smem : {0, smem_big}) cfgs.push_back({grid, cluster, pdl, smem, work});

  std::printf("bytes,grid,cluster,pdl,smem_kb,median_us,min_us,max_us\n");
  for (int round = 0; round < 2; ++round) {
    for (const Cfg& c : cfgs) {
      const size_t per_cta = c.work ? bytes / 16 / c.grid : 0;
      std::vector<float> t;
      for (int s = 0; s < 23; ++s) {
        k_flush<<<264, 1024, 0, stream>>>(flush, flush_bytes / 16, sink);
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(c.grid);
        cfg.blockDim = dim3(kThreads);
        cfg.dynamicSmemBytes = c.smem;
        cfg.stream = stream;
        cudaLaunchAttribute attr[2];
        unsigned n = 0;
        if (c.pdl) {
          attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
          attr[n].val.programmaticStreamSerializationAllowed = 1;
          ++n;
        }
        if (c.cluster > 1) {
          attr[n].id = cudaLaunchAttributeClusterDimension;
          attr[n].val.clusterDim.x = c.cluster;
          attr[n].val.clusterDim.y = 1;
          attr[n].val.clusterDim.z = 1;
          ++n;
        }
        cfg.attrs = n ? attr : nullptr;
        cfg.numAttrs = n;
        CK(cudaEventRecord(e0, stream));
        CK(cudaLaunchKernelEx(&cfg, k_read, static_cast<const uint4*>(src), per_cta, sink));
        CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (s >= 2) t.push_back(ms * 1000.f);
      }
      std::sort(t.begin(), t.end());
      std::printf("%zu,%d,%d,%d,%d,%.2f,%.2f,%.2f\n", c.work ? bytes : 0, c.grid, c.cluster, c.pdl, c.smem / 1024,
                  t[t.size() / 2], t.front(), t.back());
    }
  }
  return 0;
}
