#pragma once
// The device ceilings attn-bench measures itself (not datasheet figures): the memory bandwidth
// a large device-to-device copy reaches and the bf16 tensor-core rate of a large cuBLAS GEMM.
// Results report their GB/s and TFLOP/s as a percentage of these.
#include <cstddef>
#include <string>

namespace attn {

struct DeviceCeilings {
  std::string name;                 // device name
  std::string cc;                   // compute capability, "9.0"
  int num_sms = 0;
  std::size_t l2_bytes = 0;
  std::size_t copy_bytes = 0;       // bytes copied per sample (each read once and written once)
  double copy_us = 0;               // median over samples
  double copy_gbps = 0;             // 2 * copy_bytes / copy_us: bytes read plus written
  int gemm_n = 0;                   // m = n = k
  double gemm_us = 0;               // median over samples
  double bf16_tflops = 0;           // 2 n^3 / gemm_us (bf16 inputs, fp32 accumulation)
  std::string method;               // how they were measured, for the report
};

// Runs on the current device (about a second). Throws RuntimeError when there is no device,
// and "built without CUDA" in builds without it.
DeviceCeilings measure_device_ceilings();

}  // namespace attn
