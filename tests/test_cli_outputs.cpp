// Bad output paths and inputs of attn-bench's verbs, end to end: each is refused with exit 2
// before anything runs (or is read), naming the flag or file and the value, and leaves no
// output file, and no input replaced.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "run_cli.hpp"
#include "test_dir.hpp"

namespace {

namespace fs = std::filesystem;

using attn_test::CliResult;
using attn_test::run_cli;

std::string scenario(const std::string& name) { return std::string(ATTN_SOURCE_DIR) + "/scenarios/" + name; }
const std::string kQuick = "run " + scenario("quickstart.toml") + " --backend cpu --iterations 1 --warmup 0 -q";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Permissions do not bind root: as root, the command runs as user nobody (setpriv), so that a
// read-only file or folder means what it means to a user. "" when that cannot be done: no
// setpriv, or a checkout nobody cannot enter (a clone under /root), which the probe finds.
std::string unprivileged(std::string& why) {
  if (::geteuid() != 0) return " ";
  if (std::system("command -v setpriv >/dev/null 2>&1") != 0) {
    why = "running as root without setpriv: permissions cannot be tested";
    return "";
  }
  const std::string as = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  if (run_cli("describe " + scenario("quickstart.toml"), as).code != 0) {
    why = "user nobody cannot run " + std::string(ATTN_BINARY_DIR) + "/apps/attn-bench on " +
          scenario("quickstart.toml") + " (a checkout in a private folder): permissions cannot be tested";
    return "";
  }
  return as;
}

class CliOutputs : public attn_test::TestDir {
 protected:
  // A results CSV of the quickstart scenario on the cpu backend.
  std::string results(const std::string& name) {
    const std::string p = path(name);
    const CliResult r = run_cli(kQuick + " -o " + p);
    EXPECT_EQ(r.code, 0) << r.output;
    return p;
  }
  void expect_refused(const CliResult& r, const std::string& says) {
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << "'" << says << "' not in: " << r.output;
    EXPECT_EQ(r.output.find("passed"), std::string::npos) << "refused only after running: " << r.output;
  }
};

// Defect: `--junit out/a.csv -o out/a.csv` wrote both to one file (it held the JUnit XML) and
// exited 0. Two outputs of one command on one file are refused, however the path is spelled.
TEST_F(CliOutputs, TwoOutputsOnOneFileAreRefused) {
  const std::string a = path("a.csv");
  fs::create_directory(dir_ / "sub");
  expect_refused(run_cli(kQuick + " --junit " + a + " -o " + (dir_ / "." / "a.csv").string()), "the same file");
  expect_refused(run_cli(kQuick + " -o " + a + " -o " + (dir_ / "sub" / ".." / "a.csv").string()), "the same file");
  EXPECT_FALSE(fs::exists(a));
  // ... nor may an output be a scenario file it reads.
  const std::string sc = path("s.toml");
  fs::copy_file(scenario("quickstart.toml"), sc);
  const std::string before = slurp(sc);
  expect_refused(run_cli("run " + sc + " --backend cpu -q --junit " + sc), "is also the input");
  EXPECT_EQ(slurp(sc), before);
}

// Defect: `report compare base.csv new.csv -o new.csv` and `report markdown base.csv -o
// base.csv` replaced their input. An output that is one of the inputs is refused.
TEST_F(CliOutputs, ReportsRefuseToReplaceTheirInput) {
  const std::string base = results("base.csv"), next = results("new.csv");
  const std::string base_text = slurp(base), next_text = slurp(next);
  expect_refused(run_cli("report compare " + base + " " + next + " -o " + next), "is also the input");
  expect_refused(run_cli("report compare " + base + " " + next + " -o " + (dir_ / "." / "base.csv").string()),
                 "is also the input");
  expect_refused(run_cli("report markdown " + base + " -o " + base), "is also the input");
  expect_refused(run_cli("report merge " + base + " " + next + " --allow-duplicates -o " + next), "is also the input");
  EXPECT_EQ(slurp(base), base_text);
  EXPECT_EQ(slurp(next), next_text);
  // A sweep's --resume file is its output on purpose; its sweep file is not.
  const std::string sw = path("sw.csv");
  fs::copy_file(scenario("sweeps/cpu_quick.toml"), sw);
  expect_refused(run_cli("sweep " + sw + " -q --validate-only --resume -o " + sw), "is also the input");
}

// Defect: with a read-only folder among the outputs, `run -o a.csv -o rodir/b.json --junit
// j.xml` ran everything, wrote a.csv, then failed (exit 3) and never wrote j.xml; a read-only
// existing output was silently replaced. Both are refused up front (exit 2 naming the path),
// leaving no file written. (Writing the set all or none: ReportAtomic.SetOfFilesIsWrittenAllOrNone.)
TEST_F(CliOutputs, UnwritableOutputsAreRefusedBeforeRunning) {
  std::string why;
  const std::string as = unprivileged(why);
  if (as.empty()) GTEST_SKIP() << why;
  fs::permissions(dir_, fs::perms::all);  // the unprivileged user writes here
  fs::create_directory(dir_ / "rodir");
  fs::permissions(dir_ / "rodir", fs::perms::owner_read | fs::perms::owner_exec | fs::perms::others_read |
                                      fs::perms::others_exec | fs::perms::group_read | fs::perms::group_exec);
  const std::string a = path("a.csv"), j = path("j.xml"), ro_b = (dir_ / "rodir" / "b.json").string();
  CliResult r = run_cli(kQuick + " -o " + a + " -o " + ro_b + " --junit " + j, as);
  expect_refused(r, "rodir is not writable");
  EXPECT_NE(r.output.find(ro_b), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(a));
  EXPECT_FALSE(fs::exists(j));

  const std::string ro = path("ro.csv");
  std::ofstream(ro) << "keep me\n";
  fs::permissions(ro, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  r = run_cli(kQuick + " -o " + ro, as);
  expect_refused(r, "--output " + ro + ": the file exists and is not writable");
  EXPECT_EQ(slurp(ro), "keep me\n");

  // report plot: the folder is checked before Python starts (no traceback).
  const std::string base = results("base.csv");
  r = run_cli("report plot " + base + " --out " + (dir_ / "rodir" / "fig").string(), as);
  expect_refused(r, "rodir is not writable");
  EXPECT_EQ(r.output.find("Traceback"), std::string::npos) << r.output;
}

// Defect: scripts/plot.py printed a traceback when it could not write a figure. It prints one
// line naming the file (a figure's name taken by a folder fails as root too).
TEST_F(CliOutputs, PlotNamesTheFigureItCannotWrite) {
  if (std::system(ATTN_TEST_PLOT_PYTHON " -c 'import matplotlib' 2>/dev/null") != 0)
    GTEST_SKIP() << ATTN_TEST_PLOT_PYTHON << " has no matplotlib (Debian's python3-matplotlib)";
  const std::string base = results("base.csv");
  fs::create_directories(dir_ / "fig" / "throughput.png");
  const CliResult r = run_cli("report plot " + base + " --out " + path("fig"));
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("plot.py: cannot write " + (dir_ / "fig" / "throughput.png").string()), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("Traceback"), std::string::npos) << r.output;
}

// Defect: `run q.toml q.toml -o twice.csv` wrote two identical rows, which compare then refused.
TEST_F(CliOutputs, ScenarioGivenTwiceIsRefused) {
  const std::string out = path("twice.csv"), copy = path("quickstart.toml");
  fs::copy_file(scenario("quickstart.toml"), copy);
  expect_refused(run_cli(kQuick + " " + scenario("quickstart.toml") + " -o " + out),
                 "scenario 'quickstart' is given twice: " + scenario("quickstart.toml") + " and " +
                     scenario("quickstart.toml"));
  // Another file of the same name makes rows of the same name too.
  expect_refused(run_cli(kQuick + " " + copy + " -o " + out), "is given twice");
  EXPECT_FALSE(fs::exists(out));
  // Distinct scenarios still run together.
  const CliResult r = run_cli("validate -q --backend cpu " + scenario("quickstart.toml") +
                              " --model llama3-8b --batch 1x1@16 -o " + out);
  EXPECT_EQ(r.code, 0) << r.output;
}

// Defect: `report compare --max-slowdown 5` was read as a fraction, 500 %, and the gate passed
// "no row slower than +500.0%". A bare number above 1 is refused with the percentage it likely
// meant; "5%" and "0.05" stand, and --help shows the default.
TEST_F(CliOutputs, BareSlowdownAboveOneIsRefused) {
  const std::string base = results("base.csv");
  const std::string compare = "report compare " + base + " " + base + " --max-slowdown ";
  expect_refused(run_cli(compare + "5"),
                 "--max-slowdown 5: a fraction (0.05) or a percentage (5%); did you mean 5%?");
  expect_refused(run_cli(compare + "' 12.5 '"), "did you mean 12.5%?");
  for (const char* ok : {"5%", "0.05", "1", "150%"}) {
    const CliResult r = run_cli(compare + ok);
    EXPECT_EQ(r.code, 0) << ok << "\n" << r.output;
  }
  EXPECT_NE(run_cli("report compare --help").output.find("(default 5%)"), std::string::npos);
}

// Defect: a regular file where the folder should be said "the folder ... does not exist"; a
// folder given to compare said "Header missing".
TEST_F(CliOutputs, PathMessagesSayWhatThePathIs) {
  const std::string base = results("base.csv");
  expect_refused(run_cli(kQuick + " -o " + base + "/x.csv"), base + " is a file, not a folder");
  expect_refused(run_cli("report compare " + base + " " + dir_.string()), dir_.string() + ": is a folder");
  expect_refused(run_cli("report markdown " + dir_.string()), "is a folder, not a results file");
}

// Defect: `sweep --devices ""` ran the whole sweep (exit 0) and `--backend cpu,,cpu` dropped the
// empty entry. An empty list, or an empty entry in one, is refused.
TEST_F(CliOutputs, EmptyListEntriesAreRefused) {
  const std::string out = path("d.csv");
  expect_refused(run_cli("sweep " + scenario("sweeps/cpu_quick.toml") + " -q --validate-only --devices '' -o " + out),
                 "--devices");
  expect_refused(run_cli("sweep " + scenario("sweeps/cpu_quick.toml") + " -q --validate-only --devices 0,,1 -o " + out),
                 "--devices");
  for (const char* list : {"cpu,,cpu", "cpu,", ",cpu"})
    expect_refused(run_cli("run " + scenario("quickstart.toml") + " -q --backend " + list + " -o " + out),
                   "--backend '" + std::string(list) + "': an empty entry");
  EXPECT_FALSE(fs::exists(out));
}

// Defect: compare took a median of -5 or nan as "not timed" and passed the gate; merge
// --allow-duplicates took a row without a scenario. Both refuse the file, naming it and the line.
TEST_F(CliOutputs, CompareAndMergeRefuseInvalidRows) {
  const std::string base = results("base.csv");
  std::ifstream in(base);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  const size_t median_col = [&] {
    size_t col = 0;
    for (size_t i = 0; i < header.find("median_time_us"); ++i) col += header[i] == ',';
    return col;
  }();
  // Where cell `col` of the row starts: after `col` commas outside quotes (the `batch` cell holds
  // quoted commas); a doubled quote inside a quoted cell toggles twice.
  auto cell_start = [&](size_t col) {
    bool quoted = false;
    for (size_t i = 0; i < row.size() && col > 0; ++i) {
      if (row[i] == '"') quoted = !quoted;
      if (row[i] == ',' && !quoted && --col == 0) return i + 1;
    }
    return size_t{0};
  };
  auto with_cell = [&](size_t col, const std::string& value) {
    return row.substr(0, cell_start(col)) + value + row.substr(cell_start(col + 1) - 1);
  };
  for (const char* v : {"-5", "nan"}) {
    const std::string bad = write("bad.csv", header + "\n" + with_cell(median_col, v) + "\n");
    expect_refused(run_cli("report compare " + base + " " + bad),
                   bad + ":2: median_time_us = " + std::string(v) + ": not a valid time");
  }
  const std::string unnamed = write("unnamed.csv", header + "\n" + with_cell(0, "") + "\n");
  expect_refused(run_cli("report compare " + base + " " + unnamed), unnamed + ":2: scenario");
  expect_refused(run_cli("report merge --allow-duplicates " + base + " " + unnamed + " -o " + path("m.csv")),
                 unnamed + ":2: scenario");
  EXPECT_FALSE(fs::exists(path("m.csv")));
}

}  // namespace
