#include <string>

#include "core/cuda_check.hpp"

namespace attn {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  // Clear a sticky launch error so that a caller that catches this can keep using the device
  // when the error was not fatal (cudaGetLastError resets non-sticky errors only).
  (void)cudaGetLastError();
  throw RuntimeError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
                     cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace attn
