// ColdL2 (cold_l2.hpp): the read-only L2 flush of every device timing.
#include "timing/cold_l2.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernels/common/stream_read_launch.hpp"
#include "timing/device_query.hpp"
#include "timing/timing.hpp"

namespace attn {

ColdL2::ColdL2(cudaStream_t stream) {
  std::string why;
  const std::optional<DeviceInfo> dev = query_device(&why);
  if (!dev) throw RuntimeError("timing: " + why);
  const char* mode = std::getenv("ATTN_TIMING_FLUSH");
  write_ = mode != nullptr && std::strcmp(mode, "write") == 0;
  buffer_ = DeviceBuffer(std::max<std::size_t>(2 * dev->l2_bytes, std::size_t{1} << 20) / 16 * 16);
  sink_ = DeviceBuffer(sizeof(uint32_t));
  ctas_ = 4 * std::max(dev->num_sms, 1);
  buffer_.memset_async(0x5a, stream);
}

void ColdL2::flush(cudaStream_t stream) {
  if (write_)
    buffer_.memset_async(++calls_ & 0xff, stream);  // a changing byte, so no layer can treat it as a no-op
  else
    launch_stream_read(buffer_.data(), buffer_.bytes(), sink_.as<uint32_t>(), ctas_, stream);
}

double time_cold_median_us(cudaStream_t stream, ColdL2& cold, int warmup, int samples, const std::function<void()>& f) {
  for (int i = 0; i < warmup; ++i) f();
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  Event start, stop;
  std::vector<double> us;
  for (int i = 0; i < samples; ++i) {
    cold.flush(stream);
    start.record(stream);
    f();
    stop.record(stream);
    stop.synchronize();
    us.push_back(1000.0 * static_cast<double>(stop.elapsed_ms_since(start)));
  }
  return summarize_samples(std::move(us)).median_us;
}

}  // namespace attn
