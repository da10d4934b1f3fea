#pragma once
// The device facts attn-bench reports (`attn-bench device`, the results rows), as a plain
// struct that needs no CUDA header, so every build can include it.
#include <cstddef>
#include <optional>
#include <string>

namespace attn {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;                 // "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0;   // compute capability
  int num_sms = 0;
  std::size_t l2_bytes = 0;
  std::size_t total_memory_bytes = 0;
  std::size_t free_memory_bytes = 0;
  int sm_clock_khz = 0;             // peak SM clock (0 when the runtime does not report it)
  int memory_clock_khz = 0;
  int memory_bus_bits = 0;
  std::size_t max_smem_per_block_optin = 0;

  std::string cc() const { return std::to_string(cc_major) + "." + std::to_string(cc_minor); }
  // The DRAM's datasheet peak, two transfers per memory clock over the bus (3.35 TB/s on the H100
  // SXM), or 0 when the runtime does not report the clock. A copy reaches about 0.9 of it.
  double dram_peak_bytes_per_sec() const {
    return memory_clock_khz > 0 && memory_bus_bits > 0 ? 2.0 * memory_clock_khz * 1e3 * memory_bus_bits / 8.0 : 0.0;
  }
};

// The current device, or nullopt with *why filled: "built without CUDA" in builds without
// ATTN_WITH_CUDA, the runtime's reason when no device or driver is usable.
std::optional<DeviceInfo> query_device(std::string* why);

}  // namespace attn
