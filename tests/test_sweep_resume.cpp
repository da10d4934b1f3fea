// `sweep --resume` against a changed sweep file (refused, naming case, column and values), with
// error and fail rows stored (errors run again in place, every row counted in the verdict), and
// the sweep/shard columns that `report merge` checks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "report/results.hpp"
#include "run_cli.hpp"
#include "test_dir.hpp"

namespace attn {
namespace {

using attn_test::CliResult;
using attn_test::run_cli;

using SweepResume = attn_test::TestDir;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Four cpu cases of a few microseconds each (cpu_quick's model, smaller batches).
std::string tiny_sweep(const std::string& base_extra = "", const std::string& seed = "7",
                       const std::string& run_extra = "") {
  return "name = \"tiny\"\nseed = " + seed + "\n[base]\npreset = \"llama3-8b\"\n" + base_extra +
         "[axes]\nnum_requests = [1, 2]\ncontext_len = [16, 32]\nbackend = [\"cpu\"]\n"
         "[run]\nwarmup = 1\niterations = 3\nhost_timeout = 0.5\n" +
         run_extra;
}

std::vector<std::string> names(const std::vector<ResultRow>& rows) {
  std::vector<std::string> n;
  for (const ResultRow& r : rows) n.push_back(r.scenario);
  return n;
}

TEST_F(SweepResume, RowsCarryTheSweepAndCaseAndTheSettings) {
  const std::string sw = write("tiny.toml", tiny_sweep());
  const CliResult r = run_cli("sweep " + sw + " -q -o " + path("a.csv"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<ResultRow> rows = read_csv(path("a.csv"));
  ASSERT_EQ(rows.size(), 4u);
  const char* batches[] = {"1x1@16", "1x1@32", "2x1@16", "2x1@32"};
  for (int i = 0; i < 4; ++i) {
    const ResultRow& row = rows[static_cast<size_t>(i)];
    EXPECT_EQ(row.sweep, "tiny");
    EXPECT_EQ(row.shard, "");
    EXPECT_EQ(row.case_index, i);
    EXPECT_EQ(row.batch, batches[i]);
    EXPECT_EQ(row.seed, 7u);
    EXPECT_EQ(row.warmup, 1);
    EXPECT_EQ(row.iterations, 3);
    EXPECT_EQ(row.host_timeout_s, 0.5);  // [run] host_timeout
  }
  // --host-timeout overrides [run] host_timeout, as run's does.
  ASSERT_EQ(run_cli("sweep " + sw + " -q --host-timeout 0.25 -o " + path("b.csv")).code, 0);
  EXPECT_EQ(read_csv(path("b.csv")).at(0).host_timeout_s, 0.25);
}

// After an edit of the sweep (a [base] key, the seed, [run] iterations) or another --iterations,
// the stored rows are of another experiment under the same case names: refused, not mixed.
TEST_F(SweepResume, RefusesRowsThatTheChangedSweepWouldNotMake) {
  const std::string out = path("out.csv");
  ASSERT_EQ(run_cli("sweep " + write("tiny.toml", tiny_sweep()) + " -q -o " + out).code, 0);
  const std::string before = read_csv(out).empty() ? "" : rows_to_csv(read_csv(out));
  const std::string fix = "delete the file or the rows, or run without --resume";

  CliResult r = run_cli("sweep " + write("fp8.toml", tiny_sweep("kv_cache_dtype = \"fp8_e4m3\"\n")) +
                        " -q --resume -o " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, out + ":2: kv_cache_dtype = \"bf16\": case llama3-8b:1x1@16:cpu (backend cpu) ran with "
                            "this, but runs with \"fp8_e4m3\" now")) << r.output;
  EXPECT_TRUE(has(r.output, fix)) << r.output;

  r = run_cli("sweep " + write("seed.toml", tiny_sweep("", "8")) + " -q --resume -o " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "seed = \"7\": case llama3-8b:1x1@16:cpu (backend cpu) ran with this, but runs with "
                            "\"8\" now")) << r.output;

  r = run_cli("sweep " + path("tiny.toml") + " -q --resume --iterations 5 -o " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "iterations = \"3\"")) << r.output;
  EXPECT_TRUE(has(r.output, "\"5\" now")) << r.output;

  r = run_cli("sweep " + path("tiny.toml") + " -q --resume --validate-only -o " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "warmup = \"1\"")) << r.output;
  EXPECT_TRUE(has(r.output, "runs with empty now")) << r.output;

  EXPECT_EQ(rows_to_csv(read_csv(out)), before);  // refused before anything ran or was written
  // Unchanged: resumed, nothing to run.
  r = run_cli("sweep " + path("tiny.toml") + " --resume -o " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "4 of 4 cases already in")) << r.output;
}

// A stored error (out of memory, a transient device error) is run again, its rows replaced in
// place; a stored fail is a result: kept, and counted with every other row of the file.
TEST_F(SweepResume, ErrorsRunAgainAndEveryStoredFailureCounts) {
  const std::string sw = write("tiny.toml", tiny_sweep());
  const std::string out = path("out.csv");
  ASSERT_EQ(run_cli("sweep " + sw + " -q -o " + out).code, 0);
  std::vector<ResultRow> rows = read_csv(out);
  ASSERT_EQ(rows.size(), 4u);
  const std::vector<std::string> order = names(rows);
  rows[1].status = "error";
  rows[1].reason = "out of device memory (planted)";
  rows[2].status = "fail";
  rows[2].reason = "planted fail";
  write_csv(out, rows);

  CliResult r = run_cli("sweep " + sw + " --resume -o " + out);
  EXPECT_EQ(r.code, 1) << r.output;  // the stored fail
  EXPECT_TRUE(has(r.output, "3 of 4 cases already in")) << r.output;
  EXPECT_TRUE(has(r.output, "1 with an error row run again")) << r.output;
  EXPECT_TRUE(has(r.output, "1 cases run, 4 rows in")) << r.output;
  EXPECT_TRUE(has(r.output, "(1 failed or errored)")) << r.output;
  rows = read_csv(out);
  EXPECT_EQ(names(rows), order);  // replaced in place: the sweep's order
  EXPECT_EQ(rows[1].status, "pass") << rows[1].reason;
  EXPECT_EQ(rows[2].status, "fail");
  EXPECT_EQ(rows[2].reason, "planted fail");

  // Nothing left to run: the verdict is still the file's.
  r = run_cli("sweep " + sw + " --resume -o " + out);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "0 cases run, 4 rows in")) << r.output;
  EXPECT_TRUE(has(r.output, "(1 failed or errored)")) << r.output;
}

TEST_F(SweepResume, ShardsMergeInCaseOrderAndAMissingShardIsRefused) {
  const std::string sw = write("tiny.toml", tiny_sweep());
  ASSERT_EQ(run_cli("sweep " + sw + " -q -o " + path("whole.csv")).code, 0);
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);
    ASSERT_EQ(run_cli("sweep " + sw + " -q --shard " + n + "/3 -o " + path("s" + n + ".csv")).code, 0);
  }
  const std::vector<ResultRow> s2 = read_csv(path("s2.csv"));
  ASSERT_FALSE(s2.empty());
  EXPECT_EQ(s2[0].shard, "2/3");

  CliResult r = run_cli("report merge " + path("s2.csv") + " " + path("s0.csv") + " " + path("s1.csv") + " -o " +
                        path("all.csv"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(names(read_csv(path("all.csv"))), names(read_csv(path("whole.csv"))));

  r = run_cli("report merge " + path("s0.csv") + " " + path("s2.csv") + " -o " + path("part.csv"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "sweep tiny: shard 1/3 is missing")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(path("part.csv")));
  r = run_cli("report merge " + path("s0.csv") + " " + path("s1.csv") + " " + path("s2.csv") + " " + path("s1.csv") +
              " -o " + path("twice.csv"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "shard 1/3 of sweep tiny is in both")) << r.output;
}

}  // namespace
}  // namespace attn
