// `attn-bench device`: the device's own ceilings, measured (copy bandwidth, bf16 matrix rate), beside
// one datasheet figure for scale: the DRAM peak the runtime's memory clock and bus width give.
#include <fmt/format.h>
#include <memory>

#include "cli_common.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "timing/ceilings.hpp"
#include "timing/device_query.hpp"

namespace attn::cli {

namespace {

int run_device(Format f) {
  std::string why;
  const std::optional<DeviceInfo> dev = query_device(&why);
  if (!dev) throw RuntimeError(why);
  const DeviceCeilings m = measure_device_ceilings();
  Table t{{"device", "cc", "sms", "l2_mb", "memory_gb", "copy_gb_per_sec", "dram_peak_gb_per_sec", "bf16_tflops", "method"}, {}};
  const auto fixed = [](double x, int decimals) { return Cell::number(fmt::format("{:.{}f}", x, decimals)); };
  t.rows.push_back({m.name, m.cc, m.num_sms, fixed(m.l2_bytes / 1048576.0, 0), fixed(dev->total_memory_bytes / 1e9, 1),
                    fixed(m.copy_gbps, 0), fixed(dev->dram_peak_bytes_per_sec() / 1e9, 0), fixed(m.bf16_tflops, 0),
                    m.method});
  fmt::print("{}", t.render(f));
  return 0;
}

}  // namespace

void add_device(CLI::App& app, Commands& c) {
  auto* cmd = app.add_subcommand("device", "Measure the GPU's ceilings: copy bandwidth and bf16 matrix rate");
  auto f = std::make_shared<Format>(Format::table);
  add_format_option(*cmd, *f);
  cmd->callback([&c, f] { c.selected = [f] { return run_device(*f); }; });
}

}  // namespace attn::cli
