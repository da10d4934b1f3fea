#include <exception>

#include "cli_common.hpp"
#include "timing/ceilings.hpp"
#include "timing/device_query.hpp"

namespace attn::cli {

Ceilings device_ceilings() {
  Ceilings c;
  std::string why;
  const std::optional<DeviceInfo> dev = query_device(&why);
  if (!dev) {
    c.note = why;
    return c;
  }
  c.device = dev->name;
  try {
    const DeviceCeilings m = measure_device_ceilings();
    c.copy_gbs = m.copy_gbps;
    c.bf16_tflops = m.bf16_tflops;
  } catch (const std::exception& e) {
    c.note = e.what();  // % of peak stays unknown; the run itself goes on
  }
  return c;
}

void apply_device_ceilings(PipelineOptions& opts) {
  const Ceilings c = device_ceilings();
  opts.peak_bandwidth_gbs = c.copy_gbs;
  opts.peak_tflops = c.bf16_tflops;
  opts.device_name = c.device;
}

}  // namespace attn::cli
