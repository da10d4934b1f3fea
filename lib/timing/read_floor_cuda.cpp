// measure_read_floor (read_floor.hpp): a bare streaming read of the row's bytes, event-timed from
// a cold, clean L2.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "core/device.hpp"
#include "kernels/common/stream_read_launch.hpp"
#include "timing/cold_l2.hpp"
#include "timing/device_query.hpp"
#include "timing/read_floor.hpp"

namespace attn {
namespace {

constexpr int kSamples = 15;
constexpr int kWarmup = 2;

ReadFloor measure(std::size_t bytes) {
  std::string why;
  const std::optional<DeviceInfo> dev = query_device(&why);
  if (!dev) return {-1, why};
  // The row's instance still holds its cache; a floor buffer must not crowd it (a cascade row
  // counts the shared prefix once per request: its logical bytes can exceed the device).
  if (bytes > dev->free_memory_bytes / 2)
    return {-1, "the row's " + std::to_string(bytes >> 20) + " MiB exceed half of the free device memory"};
  try {
    Stream stream;
    DeviceBuffer buf(bytes), sink(sizeof(uint32_t));
    buf.memset_async(0x5a, stream);  // first touch outside the samples
    ColdL2 cold(stream);
    double best = -1;
    for (const int per_sm : {2, 4, 8}) {
      const int ctas = per_sm * std::max(dev->num_sms, 1);
      const double m = time_cold_median_us(stream, cold, kWarmup, kSamples, [&] {
        launch_stream_read(buf.data(), bytes, sink.as<uint32_t>(), ctas, stream);
      });
      if (best < 0 || m < best) best = m;
    }
    return {best, {}};
  } catch (const std::exception& e) {
    (void)cudaGetLastError();  // an out-of-memory allocation leaves its error behind
    return {-1, e.what()};
  }
}

}  // namespace

ReadFloor measure_read_floor(double bytes) {
  if (!(bytes >= 16) || !std::isfinite(bytes)) return {-1, "no bytes to read"};
  const std::size_t n = (static_cast<std::size_t>(bytes) + 15) / 16 * 16;
  static std::mutex mu;
  static std::map<std::size_t, ReadFloor> done;
  const std::lock_guard<std::mutex> lock(mu);
  const auto it = done.find(n);
  if (it != done.end()) return it->second;
  return done[n] = measure(n);
}

}  // namespace attn
