// Where the dynamic shared memory of a CTA starts when two CTAs of ~113 KB share an SM (sm_90a):
// its shared-window address, and that address mod 1024 (the 128-byte swizzle atoms of the bulk
// tensor copies and the wgmma descriptors need 1024-byte alignment, which the sm_90a kernels buy
// with 1 KB of slack). Also the largest request that still gives two CTAs per SM. 256 threads a CTA,
// two per SM (launch bounds), no static shared memory; each CTA spins ~1 ms so that pairs co-reside.
// docs/PERF_NOTES.md Version 64 has the H200's answer.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -I. scripts/probes/smem_base_probe.cu -o smem_base_probe && ./smem_base_probe
#include <cuda_runtime.h>

#include <cstdio>
#include <set>
#include <vector>

#include "scripts/probes/probe_check.hpp"

extern __shared__ __align__(16) unsigned char smem_raw[];

__global__ void __launch_bounds__(256, 2) smem_base(unsigned* out) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = addr;
    out[2 * blockIdx.x + 1] = smid;
  }
  const long long t0 = clock64();
  while (clock64() - t0 < 2000000) {
  }
}

int main() {
  int sms = 0, optin = 0, per_sm = 0, reserved = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  CK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
  CK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, 0));
  std::printf("SMs %d, per CTA (opt-in) %d B, per SM %d B, reserved per CTA %d B\n", sms, optin, per_sm, reserved);
  const int two_per_sm = per_sm / 2 - reserved;  // the most a CTA can take with two per SM
  unsigned* d = nullptr;
  CK(cudaMalloc(&d, sizeof(unsigned) * 4 * sms));
  for (int bytes : {112 * 1024, two_per_sm - 1024, two_per_sm, two_per_sm + 1}) {
    CK(cudaFuncSetAttribute(smem_base, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    int occupancy = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occupancy, smem_base, 256, bytes));
    smem_base<<<2 * sms, 256, bytes>>>(d);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<unsigned> h(4 * sms);
    CK(cudaMemcpy(h.data(), d, sizeof(unsigned) * h.size(), cudaMemcpyDeviceToHost));
    std::set<unsigned> bases, mods;
    for (int b = 0; b < 2 * sms; ++b) {
      bases.insert(h[2 * b]);
      mods.insert(h[2 * b] & 1023u);
    }
    std::printf("%d B: %d CTAs per SM; dynamic shared memory starts at", bytes, occupancy);
    for (unsigned a : bases) std::printf(" 0x%x", a);
    std::printf(" (mod 1024:");
    for (unsigned m : mods) std::printf(" %u", m);
    std::printf(")\n");
  }
  return 0;
}
