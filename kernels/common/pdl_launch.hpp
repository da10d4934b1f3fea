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

// The same launch in thread block clusters of `cluster` CTAs (sm_90; a cluster of one CTA, the
// default, adds no attribute). The grid must be a whole number of clusters in each dimension.
template <class... Params, class... Args>
cudaError_t launch_after_producer_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, dim3 cluster,
                                              size_t smem_bytes, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (pdl_supported()) {  // the attribute only where the device has it
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (cluster.x * cluster.y * cluster.z > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster.x;
    attr[n].val.clusterDim.y = cluster.y;
    attr[n].val.clusterDim.z = cluster.z;
    ++n;
  }
  cfg.attrs = n > 0 ? attr : nullptr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

template <class... Params, class... Args>
cudaError_t launch_after_producer(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                                  cudaStream_t stream, Args&&... args) {
  return launch_after_producer_in_clusters(kernel, grid, block, dim3(1, 1, 1), smem_bytes, stream,
                                           std::forward<Args>(args)...);
}

}  // namespace attn::kern
