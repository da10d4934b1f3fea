#pragma once
// Host check shared by the sm_90a kernels' launchers: does the current device run this binary's
// sm_90a image of a kernel? Compute capability 9.0, and machine code for sm_90 in the binary (a
// build without it would JIT older PTX, in which the sm_90a-only kernel bodies are empty).
#include <cuda_runtime.h>

namespace attn::kern {

inline bool runs_sm90a_image(const void* kernel) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (major != 9 || minor != 0) return false;
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.binaryVersion == 90 && attr.ptxVersion >= 90;
}

}  // namespace attn::kern
