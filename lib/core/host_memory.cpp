#include "core/host_memory.hpp"

#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "core/env.hpp"
#include "core/error.hpp"

namespace attn {

std::size_t available_host_bytes() {
  // At most 2^40 MB (an exabyte): larger would overflow the byte count.
  if (const std::optional<int64_t> mb = env_positive_int("ATTN_HOST_MEMORY_MB", int64_t{1} << 40, "MemAvailable of /proc/meminfo"))
    return static_cast<std::size_t>(*mb) << 20;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream in(line);
    std::string key;
    unsigned long long kb = 0;
    if (in >> key >> kb && key == "MemAvailable:") return static_cast<std::size_t>(kb) << 10;
  }
  return 0;
}

std::string format_bytes(double bytes) {
  if (bytes >= 1e12) return fmt::format("{:.1f} TB", bytes / 1e12);
  if (bytes >= 1e9) return fmt::format("{:.1f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.0f} kB", bytes / 1e3);
}

std::size_t require_host_bytes(double bytes, const std::string& what) {
  const std::size_t avail = available_host_bytes();
  if (avail > 0 && bytes > static_cast<double>(avail))
    throw RuntimeError(fmt::format("{} needs {} of host memory; {} available", what, format_bytes(bytes),
                                   format_bytes(static_cast<double>(avail))));
  return avail;
}

}  // namespace attn
