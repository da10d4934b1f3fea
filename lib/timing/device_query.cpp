// Device query for every build: builds without CUDA answer "built without CUDA"; CUDA builds
// ask the runtime (core/device_cuda.cpp).
#include "timing/device_query.hpp"

#if defined(ATTN_WITH_CUDA)
#include "core/device.hpp"
#endif

namespace attn {

std::optional<DeviceInfo> query_device(std::string* why) {
#if defined(ATTN_WITH_CUDA)
  if (!cuda_device_present(why)) return std::nullopt;
  try {
    return query_device_info();
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return std::nullopt;
  }
#else
  if (why) *why = "built without CUDA";
  return std::nullopt;
#endif
}

}  // namespace attn
