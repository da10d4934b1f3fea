// scripts/plot.py on hand-written results files: the speedup figure pairs a sweep's cases across
// backends (their names end in :BACKEND), a figure with nothing to draw says why, and the
// roofline's legend stays clear of its "device ceilings unknown" note.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "run_cli.hpp"
#include "test_dir.hpp"

namespace attn {
namespace {

using attn_test::CliResult;

class CliPlotPairs : public attn_test::TestDir {
 protected:
  void SetUp() override {
    if (std::system(ATTN_TEST_PLOT_PYTHON " -c 'import matplotlib' 2>/dev/null") != 0)
      GTEST_SKIP() << ATTN_TEST_PLOT_PYTHON
                   << " has no matplotlib (Debian's python3-matplotlib; scripts/setup.sh installs it)";
    TestDir::SetUp();
  }

  // `python ARGS` with its stdout and stderr together, as run_cli does for attn-bench.
  static CliResult python(const std::string& args) {
    return attn_test::run_command(std::string(ATTN_TEST_PLOT_PYTHON) + " " + args);
  }

  static std::string plot_py() { return std::string(ATTN_SOURCE_DIR) + "/scripts/plot.py"; }

  // A results CSV of timed rows: (scenario, backend, median us, FLOPs per byte, TFLOP/s), no
  // % of peak (-1, as host rows have).
  std::string results(const std::vector<std::tuple<std::string, std::string, double, double, double>>& rows) {
    std::string text =
        "scenario,backend,status,samples,median_time_us,tflops,tb_per_sec,flops,bytes,kv_tokens,num_reqs,"
        "num_prefill_tokens,rel_l2,floor_rel_l2,err_over_floor,pct_peak_bw,pct_peak_flops\n";
    for (const auto& [scenario, backend, us, intensity, tflops] : rows)
      text += fmt::format("{},{},pass,3,{},{},0.002,{},1000000,128,1,0,0.001,0,0,-1,-1\n", scenario, backend, us,
                          tflops, intensity * 1e6);
    return write("results.csv", text);
  }

  std::string svg(const std::string& name) const {
    std::ifstream in(dir_ / "fig" / (name + ".svg"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

TEST_F(CliPlotPairs, SweepCasesPairAcrossBackendsInNaturalOrder) {
  std::vector<std::tuple<std::string, std::string, double, double, double>> rows;
  for (const char* be : {"cpu", "flash_attn"})
    for (const char* c : {"llama3-8b:1x16@1024", "llama3-8b:4x1@128", "llama3-8b:1x16@128", "llama3-8b:1x1@128"})
      rows.emplace_back(std::string(c) + ":" + be, be, be == std::string("cpu") ? 100.0 : 20.0, 10.0, 0.01);
  const CliResult r = python(plot_py() + " " + results(rows) + " --out " + path("fig"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("nothing to draw"), std::string::npos) << r.output;
  const std::string s = svg("speedup");
  EXPECT_NE(s.find("flash_attn over cpu"), std::string::npos);
  // One tick per case, named without its backend, numbers in numeric order (1x16@128 before
  // 1x16@1024, which a plain string sort swaps).
  size_t last = 0;
  for (const char* c : {"llama3-8b:1x1@128<", "llama3-8b:1x16@128<", "llama3-8b:1x16@1024<", "llama3-8b:4x1@128<"}) {
    const size_t at = s.find(c);
    ASSERT_NE(at, std::string::npos) << c << " is not a tick of the speedup figure";
    EXPECT_GT(at, last) << c << " out of order";
    last = at;
  }
  EXPECT_EQ(s.find(":cpu<"), std::string::npos) << "ticks name cases, not one backend's rows";
}

TEST_F(CliPlotPairs, FigureWithNothingToDrawSaysWhy) {
  // Both backends timed, on no common case: no bar to draw, which the old figure showed as a
  // legend over empty axes without a word.
  const CliResult r =
      python(plot_py() + " " +
             results({{"a:1x1@128:cpu", "cpu", 100, 10, 0.01}, {"b:1x1@128:flash_attn", "flash_attn", 20, 10, 0.05}}) +
             " --out " + path("fig"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("plot.py: speedup: nothing to draw: no case was timed on both cpu and flash_attn\n"),
            std::string::npos)
      << r.output;
  EXPECT_NE(svg("speedup").find("no case was timed on both"), std::string::npos);
  EXPECT_EQ(svg("speedup").find("flash_attn over cpu"), std::string::npos) << "no legend over empty axes";
}

TEST_F(CliPlotPairs, RooflineLegendClearOfTheCeilingsNote) {
  // Points in three corners of the roofline leave the top left to the legend, where the note
  // on unknown ceilings used to be.
  std::vector<std::tuple<std::string, std::string, double, double, double>> rows;
  const double points[][2] = {{1, 0.001}, {100, 0.001}, {100, 0.1}, {10, 0.01}, {50, 0.05}, {2, 0.0012}};
  for (const char* be : {"cpu", "cpu_ref"})
    for (size_t i = 0; i < std::size(points); ++i)
      rows.emplace_back(fmt::format("c{}:{}", i, be), be, 10.0, points[i][0], points[i][1]);
  const std::string csv = results(rows);
  // The figure as plot.py draws it (its save() replaced), the two boxes measured once laid out.
  const std::string check = write("check.py", R"(import csv, importlib.util, sys
spec = importlib.util.spec_from_file_location("plot", sys.argv[1])
plot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot)
figs = []
plot.save = lambda fig, out, name: figs.append(fig)
plot.roofline(list(csv.DictReader(open(sys.argv[2]))), ".")
fig = figs[0]
fig.tight_layout()
fig.canvas.draw()
renderer = fig.canvas.get_renderer()
ax = fig.axes[0]
note = [t for t in ax.texts if "ceilings unknown" in t.get_text()]
assert note, "no note on the unknown ceilings"
legend = ax.get_legend().get_window_extent(renderer)
print("overlap" if legend.overlaps(note[0].get_window_extent(renderer)) else "clear")
)");
  const CliResult r = python(check + " " + plot_py() + " " + csv);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, "clear\n");
}

}  // namespace
}  // namespace attn
