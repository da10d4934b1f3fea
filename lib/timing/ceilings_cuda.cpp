// Device ceilings: a 1 GiB device-to-device copy (bytes read + written) and a bf16 8192^3
// cuBLAS GEMM with fp32 accumulation, each the median of event-timed samples after warm-up,
// every sample from the same cold, clean L2 as the kernels they are compared with (ColdL2).
// The GEMM runs on random data: zeros run measurably faster on tensor cores.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <vector>

#include "core/device.hpp"
#include "core/dtype_convert.hpp"
#include "core/values.hpp"
#include "timing/ceilings.hpp"
#include "timing/cold_l2.hpp"

namespace attn {
namespace {

void check_cublas(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) throw RuntimeError(std::string(call) + " failed: " + cublasGetStatusString(s));
}

struct CublasHandle {
  cublasHandle_t h = nullptr;
  CublasHandle() { check_cublas(cublasCreate(&h), "cublasCreate"); }
  ~CublasHandle() {
    if (h) (void)cublasDestroy(h);
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
};

// n uniform [-1, 1) bf16 values from the counter generator (a random-looking bit pattern).
std::vector<uint16_t> random_bf16(std::size_t n, uint32_t tensor_id) {
  std::vector<uint16_t> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = float_to_bf16_bits(gen_value(0x5eed, ValueTensor::q, tensor_id, static_cast<uint32_t>(i >> 20), 0,
                                        static_cast<uint32_t>(i & 0xfffff)));
  return v;
}

}  // namespace

DeviceCeilings measure_device_ceilings() {
  std::string why;
  if (!cuda_device_present(&why)) throw RuntimeError("device ceilings: " + why);
  const DeviceInfo info = query_device_info();
  DeviceCeilings c;
  c.name = info.name;
  c.cc = info.cc();
  c.num_sms = info.num_sms;
  c.l2_bytes = info.l2_bytes;
  Stream stream;
  ColdL2 cold(stream);

  // ---- copy bandwidth: 1 GiB, far beyond L2 ----
  c.copy_bytes = std::size_t{1} << 30;
  {
    DeviceBuffer src(c.copy_bytes), dst(c.copy_bytes);
    src.memset_async(0x5a, stream);
    dst.memset_async(0, stream);
    c.copy_us = time_cold_median_us(stream, cold, 3, 20, [&] {
      ATTN_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), c.copy_bytes, cudaMemcpyDeviceToDevice, stream));
    });
    c.copy_gbps = 2.0 * static_cast<double>(c.copy_bytes) / (c.copy_us * 1e-6) / 1e9;
  }

  // ---- bf16 GEMM: C = A B, 8192^3, fp32 accumulation ----
  c.gemm_n = 8192;
  {
    const int n = c.gemm_n;
    const std::size_t elems = static_cast<std::size_t>(n) * n;
    DeviceBuffer a(elems * 2), b(elems * 2), out(elems * 2);
    // One random tile repeated: enough bit activity without generating 2 x 64M values on the host.
    const std::size_t tile = std::size_t{1} << 22;  // elements
    const std::vector<uint16_t> ta = random_bf16(tile, 1), tb = random_bf16(tile, 2);
    for (std::size_t off = 0; off < elems; off += tile) {
      a.upload(ta.data(), tile * 2, off * 2);
      b.upload(tb.data(), tile * 2, off * 2);
    }
    CublasHandle h;
    check_cublas(cublasSetStream(h.h, stream), "cublasSetStream");
    const float alpha = 1.0f, beta = 0.0f;
    c.gemm_us = time_cold_median_us(stream, cold, 3, 10, [&] {
      check_cublas(cublasGemmEx(h.h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.data(), CUDA_R_16BF, n, b.data(),
                                CUDA_R_16BF, n, &beta, out.data(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
    });
    c.bf16_tflops = 2.0 * n * static_cast<double>(n) * n / (c.gemm_us * 1e-6) / 1e12;
  }
  c.method = std::string("cudaMemcpyAsync D2D 1 GiB (median of 20, read+write); cublasGemmEx bf16 8192^3 fp32 "
                         "accumulate (median of 10); L2 before each: ") + cold.method();
  return c;
}

}  // namespace attn
