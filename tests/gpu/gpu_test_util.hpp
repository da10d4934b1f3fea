#pragma once
// Helpers of the GPU tests: they skip, with the runtime's reason, where no CUDA device is usable
// (CI has none), and never pass vacuously there.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

#include "core/device.hpp"

// First statement of every GPU test body.
#define ATTN_REQUIRE_CUDA_DEVICE()                                     \
  do {                                                                 \
    std::string attn_why_;                                             \
    if (!::attn::cuda_device_present(&attn_why_))                      \
      GTEST_SKIP() << attn_why_;                                       \
  } while (0)

namespace attn::testing {

// An sm_90 (Hopper) device: the one the sm_90a kernels run on.
inline bool sm90_device() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;
}

// Copies a whole device buffer back to the host.
template <class T = uint8_t>
std::vector<T> download_all(const DeviceBuffer& buf) {
  std::vector<T> out(buf.bytes() / sizeof(T));
  buf.download(out.data(), out.size() * sizeof(T));
  return out;
}

template <class T>
DeviceBuffer upload_vector(const std::vector<T>& v) {
  DeviceBuffer buf(v.size() * sizeof(T));
  buf.upload(v.data(), buf.bytes());
  return buf;
}

// Index of the first differing byte, or -1.
inline long first_mismatch(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<long>(i);
  return -1;
}

}  // namespace attn::testing
