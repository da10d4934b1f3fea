#pragma once
// Small host helpers of the FLASHMLA backend files (CUDA builds only).
#include <cublas_v2.h>

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "core/device.hpp"
#include "core/error.hpp"

namespace attn::flashmla {

// A device copy of `v` (at least one element allocated, so that an empty table is a valid pointer).
template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer buf(std::max<std::size_t>(v.size(), 1) * sizeof(T));
  if (!v.empty()) buf.upload(v.data(), v.size() * sizeof(T));
  return buf;
}

inline void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw RuntimeError(fmt::format("FLASHMLA: {} failed (cuBLAS status {})", what, static_cast<int>(s)));
}

}  // namespace attn::flashmla
