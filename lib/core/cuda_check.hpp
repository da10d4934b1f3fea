#pragma once
// Checked CUDA runtime calls (plain C++: include only from .cpp/.cu files of CUDA builds).
// Every call is checked; a failure throws RuntimeError naming the call, file and line.
#include <cuda_runtime_api.h>

#include <string>

#include "core/error.hpp"

namespace attn {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

}  // namespace attn

#define ATTN_CUDA_CHECK(call)                                                      \
  do {                                                                             \
    const cudaError_t attn_err_ = (call);                                          \
    if (attn_err_ != cudaSuccess) ::attn::throw_cuda_error(attn_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: catches launch-configuration errors without synchronizing.
#define ATTN_CUDA_CHECK_LAUNCH() ATTN_CUDA_CHECK(cudaGetLastError())
