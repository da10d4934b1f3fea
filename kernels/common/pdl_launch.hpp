#pragma once
// Kernel launch with programmatic stream serialization (programmatic dependent launch, sm_90):
// the kernel may start before the kernel ahead of it in the stream has finished, as soon as
// that one lets it (pdl_launch_dependents in kernels/common/ptx.cuh) or, if it never does, as
// its CTAs exit. The launched kernel must call pdl_wait_for_producer before it reads anything
// the kernel ahead writes, and at least one of its threads must call it before the grid ends:
// work after it in the stream, launched the usual way, waits for this grid only, and may read
// what the kernel ahead wrote. Before sm_90, or after a non-kernel stream operation, it is an
// ordinary launch.
#include <cuda_runtime.h>

#include <utility>

namespace attn::kern {

// Whether the current device has programmatic stream serialization (compute capability 9.0 on).
// Asked once per device and host thread: the launches of every step call it.
inline bool pdl_supported() {
  thread_local int cached_dev = -1;
  thread_local bool cached = false;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (dev != cached_dev) {
    int major = 0;
    cached = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9;
    cached_dev = dev;
  }
  return cached;
}

template <class... Params, class... Args>
cudaError_t launch_after_producer(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                                  cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  if (pdl_supported()) {  // the attribute only where the device has it
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace attn::kern
