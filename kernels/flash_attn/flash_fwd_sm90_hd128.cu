// The sm_90a prefill kernel for head size 128 with a 16-bit cache (see flash_fwd_sm90.cuh) and
// its host side. Built for every architecture list; the kernel body exists only in the sm_90a
// image, and sm90_prefill_compiled() tells the launcher whether that image is in this binary.
#include <cuda_runtime.h>

#include "kernels/flash_attn/flash_fwd_sm90.cuh"
#include "kernels/flash_attn/flash_fwd_sm90.hpp"

namespace attn::fa {
namespace {

template <class Element>
void launch(const FlashAttnParams& p, cudaStream_t stream) {
  static const cudaError_t configured = cudaFuncSetAttribute(
      sm90::flash_fwd_sm90_kernel<Element>, cudaFuncAttributeMaxDynamicSharedMemorySize, sm90::kSmemBytes);
  (void)configured;
  const dim3 grid(p.num_tiles, p.num_kv_heads, p.num_splits);
  sm90::flash_fwd_sm90_kernel<Element><<<grid, sm90::kThreads, sm90::kSmemBytes, stream>>>(p);
}

// True when the current device runs an sm_90a image of the kernel (not a JIT of older PTX,
// whose body is empty).
bool compiled_for_current_device() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (major != 9 || minor != 0) return false;
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, sm90::flash_fwd_sm90_kernel<__nv_bfloat16>) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.binaryVersion == 90 && attr.ptxVersion >= 90;
}

}  // namespace

bool sm90_prefill_compiled() {
  static const bool ok = compiled_for_current_device();
  return ok;
}

void run_flash_fwd_sm90(const FlashAttnParams& p, bool fp16, cudaStream_t stream) {
  fp16 ? launch<__half>(p, stream) : launch<__nv_bfloat16>(p, stream);
}

}  // namespace attn::fa
