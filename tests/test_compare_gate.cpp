// The compare gate's defects a CI user reproduced: a gate that compared nothing passed, rows of
// different work were compared for time, failing rows only in NEW were not gated, few samples
// went unmarked, and a results JSON given to a report verb read as a malformed CSV.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "report/compare.hpp"
#include "report/text.hpp"
#include "report/markdown.hpp"
#include "report/results.hpp"
#include "run_cli.hpp"
#include "test_dir.hpp"

namespace attn {
namespace {

using attn_test::CliResult;
using attn_test::run_cli;

// A row of a small decode batch, timed `us` (0: not timed) over 10 samples.
ResultRow row(const std::string& scenario, const std::string& backend, double us, const std::string& status = "pass") {
  ResultRow r;
  r.scenario = scenario;
  r.backend = backend;
  r.status = status;
  r.num_q_heads = 32;
  r.num_kv_heads = 8;
  r.head_size_qk = r.head_size_v = 128;
  r.dtype = r.kv_cache_dtype = "bf16";
  r.kv_layout = "NHD";
  r.block_size = 16;
  r.num_reqs = r.num_decodes = 5;
  r.num_tokens = 5;
  r.kv_tokens = 1280;
  r.median_time_us = us;
  r.samples = us > 0 ? 10 : 0;
  r.build = "attn-bench 1.0";
  r.git_rev = "abc123";
  r.device = "host cpu";
  return r;
}

std::string cell_of(const CompareReport& r, size_t row_index, const std::string& header) {
  const std::vector<std::string> headers = compare_headers();
  const size_t col = static_cast<size_t>(std::find(headers.begin(), headers.end(), header) - headers.begin());
  EXPECT_LT(col, headers.size()) << header;
  return compare_cells(r).at(row_index).at(col);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- 1. a gate that compared nothing ---------------------------------------------------------

// Defect: an empty NEW, or two files with no row in common, passed "(0 compared, ...)".
TEST(CompareGate, NoRowInCommonChecksNothing) {
  for (const std::vector<ResultRow>& next : {std::vector<ResultRow>{}, std::vector<ResultRow>{row("other", "cpu", 10)}}) {
    const CompareReport r = compare_results({row("a", "cpu", 100)}, next);
    EXPECT_TRUE(r.pass) << r.verdict;  // nothing failed...
    EXPECT_TRUE(r.nothing_checked);    // ...and nothing was checked: exit 4, not a pass
    EXPECT_EQ(r.compared, 0);
    EXPECT_EQ(r.nothing_checked_why, "0 rows in common");
    EXPECT_EQ(r.verdict.rfind("NOTHING CHECKED: no row of NEW could be compared with BASE: 0 rows in common", 0), 0u)
        << r.verdict;
  }
}

// Defect: a timed BASE row against an untimed NEW one (NEW written by validate) read "same" and
// counted as compared.
TEST(CompareGate, TimedAgainstUntimedIsNotTimedNotCompared) {
  CompareReport r = compare_results({row("a", "cpu", 100)}, {row("a", "cpu", 0)});
  EXPECT_EQ(r.rows[0].change, CompareChange::not_timed);
  EXPECT_FALSE(r.rows[0].regression);
  EXPECT_EQ(r.compared, 0);
  EXPECT_EQ(r.not_timed, 1);
  EXPECT_TRUE(r.nothing_checked);
  EXPECT_TRUE(has(r.nothing_checked_why, "none timed on both sides")) << r.nothing_checked_why;
  EXPECT_TRUE(has(format_compare(r), "not timed")) << format_compare(r);

  // One row compared for time is a check: the untimed one is listed and counted beside it.
  r = compare_results({row("a", "cpu", 100), row("b", "cpu", 100)}, {row("a", "cpu", 0), row("b", "cpu", 101)});
  EXPECT_TRUE(r.pass);
  EXPECT_FALSE(r.nothing_checked);
  EXPECT_EQ(r.compared, 1);
  EXPECT_TRUE(has(r.verdict, "1 compared, 0 added, 0 removed, 1 not timed")) << r.verdict;
  EXPECT_TRUE(has(compare_markdown(r), "| a | cpu |")) << "a not-timed row is listed";
}

// A status regression fails the gate (exit 1) even where nothing was compared for time.
TEST(CompareGate, StatusRegressionFailsWhenNothingWasTimed) {
  const CompareReport r = compare_results({row("a", "cpu", 0)}, {row("a", "cpu", 0, "fail")});
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.status_regressions, 1);
  EXPECT_EQ(r.verdict.rfind("FAIL", 0), 0u) << r.verdict;
}

// ---- 2. different work under one name -------------------------------------------------------

// Defect: a 5-request batch against a 3-request one under the same name read "faster -94%", PASS.
TEST(CompareGate, DifferentWorkIsNotComparedForTimeAndFailsTheGate) {
  ResultRow small = row("a", "cpu", 6);
  small.num_reqs = small.num_decodes = 3;
  small.num_tokens = 3;
  CompareReport r = compare_results({row("a", "cpu", 100), row("b", "cpu", 100)}, {small, row("b", "cpu", 100)});
  EXPECT_EQ(r.rows[0].change, CompareChange::different_work);
  EXPECT_EQ(r.rows[0].ratio, 0) << "not compared for time";
  EXPECT_EQ(r.rows[0].detail, "num_reqs 5 -> 3, num_tokens 5 -> 3, num_decodes 5 -> 3");
  EXPECT_TRUE(r.rows[0].regression);
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.different_work, 1);
  EXPECT_EQ(r.compared, 1);
  EXPECT_TRUE(has(r.verdict, "1 row measured different work than BASE (a misconfigured gate")) << r.verdict;
  EXPECT_TRUE(has(cell_of(r, 0, "verdict"), "different work: num_reqs 5 -> 3")) << cell_of(r, 0, "verdict");

  // Allowed: listed and counted, still not compared for time, not gated...
  CompareOptions allow;
  allow.gate_different_work = false;
  r = compare_results({row("a", "cpu", 100), row("b", "cpu", 100)}, {small, row("b", "cpu", 100)}, allow);
  EXPECT_TRUE(r.pass) << r.verdict;
  EXPECT_EQ(r.rows[0].change, CompareChange::different_work);
  EXPECT_TRUE(has(r.verdict, "1 measured different work (not gated)")) << r.verdict;
  // ...but a status that got worse on it still fails.
  small.status = "fail";
  r = compare_results({row("a", "cpu", 100)}, {small}, allow);
  EXPECT_FALSE(r.pass) << r.verdict;
}

// Every measured field is in the check, named with both values; a row that recorded no spec
// (an error before its batch was built) is not, so its status regression reads as one.
TEST(CompareGate, MeasuredWorkDiffersNamesEveryField) {
  const std::vector<std::pair<std::string, std::function<void(ResultRow&)>>> fields = {
      {"num_q_heads 32 -> 64", [](ResultRow& r) { r.num_q_heads = 64; }},
      {"num_kv_heads 8 -> 4", [](ResultRow& r) { r.num_kv_heads = 4; }},
      {"head_size_qk 128 -> 192", [](ResultRow& r) { r.head_size_qk = 192; }},
      {"head_size_v 128 -> 64", [](ResultRow& r) { r.head_size_v = 64; }},
      {"dtype bf16 -> fp16", [](ResultRow& r) { r.dtype = "fp16"; }},
      {"kv_cache_dtype bf16 -> fp8_e4m3", [](ResultRow& r) { r.kv_cache_dtype = "fp8_e4m3"; }},
      {"kv_layout NHD -> HND", [](ResultRow& r) { r.kv_layout = "HND"; }},
      {"block_size 16 -> 32", [](ResultRow& r) { r.block_size = 32; }},
      {"sliding_window 0 -> 128", [](ResultRow& r) { r.sliding_window = 128; }},
      {"logits_soft_cap 0 -> 30.1", [](ResultRow& r) { r.logits_soft_cap = 30.1; }},
      {"alibi false -> true", [](ResultRow& r) { r.alibi = true; }},
      {"sinks false -> true", [](ResultRow& r) { r.sinks = true; }},
      {"causal true -> false", [](ResultRow& r) { r.causal = false; }},
      {"mla false -> true", [](ResultRow& r) { r.mla = true; }},
      {"num_reqs 5 -> 6", [](ResultRow& r) { r.num_reqs = 6; }},
      {"num_tokens 5 -> 70", [](ResultRow& r) { r.num_tokens = 70; }},
      {"num_decodes 5 -> 4", [](ResultRow& r) { r.num_decodes = 4; }},
      {"num_prefills 0 -> 1", [](ResultRow& r) { r.num_prefills = 1; }},
      {"kv_tokens 1280 -> 2560", [](ResultRow& r) { r.kv_tokens = 2560; }},
      {"shared_prefix_len 0 -> 512", [](ResultRow& r) { r.shared_prefix_len = 512; }},
      {"cascade false -> true", [](ResultRow& r) { r.cascade = true; }},
      {"num_layers 1 -> 32", [](ResultRow& r) { r.num_layers = 32; }},
  };
  const ResultRow a = row("a", "cpu", 100);
  EXPECT_EQ(measured_work_differs(a, a), "");
  for (const auto& [says, change] : fields) {
    ResultRow b = a;
    change(b);
    EXPECT_EQ(measured_work_differs(a, b), says);
  }
  ResultRow all = a;
  for (const auto& f : fields) f.second(all);
  EXPECT_TRUE(has(measured_work_differs(a, all), "(+19 more)")) << measured_work_differs(a, all);
  // What each sample ran is, where both sides were timed: the attention alone is not the step (an
  // empty `timed`, from a file of a build that timed only the step, reads as the step).
  ResultRow step = a, attention = a, older = a;
  step.iterations = attention.iterations = older.iterations = 10;
  step.timed = "step";
  attention.timed = "attention";
  EXPECT_EQ(measured_work_differs(step, attention), "timed step -> attention");
  EXPECT_EQ(measured_work_differs(older, attention), "timed step -> attention");
  EXPECT_EQ(measured_work_differs(older, step), "");
  EXPECT_EQ(measured_work_differs(a, attention), "") << "an untimed side: nothing to tell apart";
  // Timing and provenance are not work.
  ResultRow other = a;
  other.median_time_us = 5;
  other.device = "NVIDIA H200";
  other.build = "x";
  EXPECT_EQ(measured_work_differs(a, other), "");

  ResultRow broken;  // a sweep case that threw before its batch was built
  broken.scenario = "a";
  broken.backend = "cpu";
  broken.status = "error";
  const CompareReport r = compare_results({a}, {broken});
  EXPECT_EQ(r.rows[0].change, CompareChange::status_worse);
}

// The console header and the markdown name each side's build, git_rev and device ("mixed" where
// a side's rows disagree); devices that differ are a warning, not a failure.
TEST(CompareGate, ProvenanceOfBothSidesAndDeviceWarning) {
  ResultRow b1 = row("a", "cpu", 100), b2 = row("b", "cpu", 100);
  ResultRow n1 = row("a", "cpu", 100), n2 = row("b", "cpu", 100);
  n1.build = "attn-bench 1.1";
  n1.git_rev = n2.git_rev = "def456";
  n1.device = n2.device = "other cpu";
  b2.device = "";  // a row without a device (a sweep's error row) does not make the side mixed
  CompareOptions opts;
  opts.base_name = "base.csv";
  opts.new_name = "new.csv";
  const CompareReport r = compare_results({b1, b2}, {n1, n2}, opts);
  EXPECT_TRUE(r.pass) << r.verdict;
  EXPECT_FALSE(r.nothing_checked);
  const std::string table = format_compare(r);
  EXPECT_TRUE(has(table, "BASE base.csv: build attn-bench 1.0, git_rev abc123, device host cpu\n")) << table;
  EXPECT_TRUE(has(table, "NEW new.csv: build mixed, git_rev def456, device other cpu\n")) << table;
  EXPECT_EQ(r.device_changes, 1);
  EXPECT_TRUE(has(table, "warning: 1 row ran on another device in NEW than in BASE (a / cpu: host cpu -> other cpu): "
                         "timing across devices is not a regression check"))
      << table;
  const std::string md = compare_markdown(r);
  EXPECT_TRUE(has(md, "BASE base.csv: build attn-bench 1.0")) << md;
  EXPECT_TRUE(has(md, "> warning: 1 row ran on another device")) << md;
  EXPECT_EQ(compare_device_warning(compare_results({b1}, {b1})), "");
}

// ---- 3. failures in NEW ----------------------------------------------------------------------

// Defect: a row only in NEW that failed was "added", not gated; rows failing on both sides were
// not counted.
TEST(CompareGate, AddedFailuresFailAndKnownFailuresAreCounted) {
  const std::vector<ResultRow> base = {row("a", "cpu", 100), row("k", "cpu", 100, "fail"), row("e", "cpu", 0, "error")};
  std::vector<ResultRow> next = {row("a", "cpu", 100), row("k", "cpu", 300, "fail"), row("e", "cpu", 0, "error"),
                                 row("new", "cpu", 0, "fail"), row("skip", "fa", 0, "skipped")};
  CompareReport r = compare_results(base, next);
  EXPECT_FALSE(r.pass) << r.verdict;
  EXPECT_EQ(r.added_failures, 1);
  EXPECT_TRUE(r.rows[3].regression);
  EXPECT_FALSE(r.rows[4].regression) << "an added skipped row is not a failure";
  EXPECT_TRUE(has(r.verdict, "1 row only in NEW fails")) << r.verdict;
  EXPECT_EQ(r.rows[1].change, CompareChange::still_failing);
  EXPECT_FALSE(r.rows[1].regression) << "its slower time is not gated either";
  EXPECT_EQ(r.still_failing, 2);
  EXPECT_TRUE(has(r.verdict, "2 rows fail in NEW and BASE")) << r.verdict;
  const std::string md = compare_markdown(r);
  EXPECT_TRUE(has(md, "2 rows fail in NEW and BASE")) << md;
  EXPECT_TRUE(has(md, "| k | cpu |")) << md;

  // Without the added failure the known ones pass...
  next.erase(next.begin() + 3);
  r = compare_results(base, next);
  EXPECT_TRUE(r.pass) << r.verdict;
  // ...unless every row must pass.
  CompareOptions strict;
  strict.require_pass = true;
  r = compare_results(base, next, strict);
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.required_failures, 2);
  EXPECT_TRUE(has(r.verdict, "2 rows fail (--require-pass)")) << r.verdict;
}

// ---- 4. few samples --------------------------------------------------------------------------

// Defect: the noise of 3 samples was trusted silently. The samples are shown base/new and a
// side under kFewSamples says "few samples"; gating is unchanged.
TEST(CompareGate, FewSamplesAreShownAndMarked) {
  ResultRow b = row("a", "cpu", 100), n = row("a", "cpu", 120);
  n.samples = 3;
  CompareReport r = compare_results({b, row("z", "cpu", 100)}, {n, row("z", "cpu", 100)});
  EXPECT_EQ(cell_of(r, 0, "samples"), "10/3");
  EXPECT_EQ(cell_of(r, 1, "samples"), "10/10");
  EXPECT_EQ(cell_of(r, 0, "verdict"), "slower, few samples (REGRESSION)");
  EXPECT_EQ(cell_of(r, 1, "verdict"), "same");
  EXPECT_EQ(r.rows[0].change, CompareChange::slower);
  EXPECT_FALSE(r.pass);
  EXPECT_TRUE(has(r.verdict, "1 row compared on fewer than 5 samples")) << r.verdict;
  EXPECT_TRUE(has(compare_markdown(r), "| 10/3 |")) << compare_markdown(r);
  EXPECT_EQ(compare_numeric_columns().size(), compare_headers().size());
}

// ---- 5. small ones ---------------------------------------------------------------------------

TEST(CompareGate, AddedRowShowsItsErrorOverFloor) {
  ResultRow added = row("new", "cpu", 10);
  added.err_over_floor = 1.37;
  const CompareReport r = compare_results({row("a", "cpu", 100)}, {row("a", "cpu", 100), added});
  EXPECT_EQ(cell_of(r, 1, "x_floor"), "1.37");
}

// Defect: "No row changed beyond 5.0%" under a row that changed 8% within its noise; "1 rows".
TEST(CompareGate, MarkdownWordsAndPlurals) {
  ResultRow b = row("a", "cpu", 100), n = row("a", "cpu", 97);
  b.stdev_time_us = n.stdev_time_us = 10;
  CompareReport r = compare_results({b}, {n});
  EXPECT_TRUE(has(compare_markdown(r), "No row slowed beyond 5.0% and its noise or changed status.")) << compare_markdown(r);
  CompareOptions plain;
  plain.noise_aware = false;
  r = compare_results({b}, {n}, plain);
  EXPECT_TRUE(has(compare_markdown(r), "No row slowed beyond 5.0% or changed status.")) << compare_markdown(r);
  EXPECT_TRUE(has(results_markdown({b}), "**1 row: 1 pass")) << results_markdown({b});
  EXPECT_EQ(count_of(1, "row"), "1 row");
  EXPECT_EQ(count_of(0, "row"), "0 rows");
  // One row within the noise: "its", not "their".
  n.median_time_us = 108;
  r = compare_results({b}, {n});
  EXPECT_TRUE(has(r.verdict, "1 slower than the threshold within its noise")) << r.verdict;
}

// Rows skipped on both sides are counted under the markdown table, not listed one by one.
TEST(CompareGate, MarkdownCountsRowsSkippedOnBothSides) {
  const std::vector<ResultRow> side = {row("a", "cpu", 100), row("a", "fa", 0, "skipped"), row("b", "fa", 0, "skipped")};
  const std::string md = compare_markdown(compare_results(side, side));
  EXPECT_FALSE(has(md, "| a | fa |")) << md;
  EXPECT_TRUE(has(md, "2 rows skipped in BASE and NEW not listed.")) << md;
  EXPECT_TRUE(has(compare_markdown(compare_results(side, side), true), "| a | fa |"));
}

// ---- end to end ------------------------------------------------------------------------------

class CompareGateCli : public attn_test::TestDir {
 protected:
  std::string csv(const std::string& name, const std::vector<ResultRow>& rows) {
    write_csv(path(name), rows);
    return path(name);
  }
};

TEST_F(CompareGateCli, ExitCodes) {
  const std::string base = csv("base.csv", {row("a", "cpu", 100)});
  CliResult r = run_cli("report compare " + base + " " + csv("empty.csv", {}));
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_TRUE(has(r.output, "no row of NEW could be compared with BASE: 0 rows in common")) << r.output;
  r = run_cli("report compare " + base + " " + csv("untimed.csv", {row("a", "cpu", 0)}));
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_TRUE(has(r.output, "none timed on both sides")) << r.output;
  // Written to a file, the verdict still reaches the log.
  r = run_cli("report compare " + base + " " + path("untimed.csv") + " --format markdown -o " + path("v.md"));
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_TRUE(has(r.output, "NOTHING CHECKED")) << r.output;

  r = run_cli("report compare " + base + " " + csv("failing.csv", {row("a", "cpu", 0, "fail")}));
  EXPECT_EQ(r.code, 1) << r.output;
  ResultRow small = row("a", "cpu", 6);
  small.num_reqs = 3;
  r = run_cli("report compare " + base + " " + csv("small.csv", {small}));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "different work: num_reqs 5 -> 3")) << r.output;
  r = run_cli("report compare " + base + " " + path("small.csv") + " --allow-different-work");
  EXPECT_EQ(r.code, 4) << r.output;

  const std::string known = csv("known.csv", {row("a", "cpu", 100), row("k", "cpu", 0, "fail")});
  r = run_cli("report compare " + known + " " + known);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "1 row fails in NEW and BASE")) << r.output;
  r = run_cli("report compare " + known + " " + known + " --require-pass");
  EXPECT_EQ(r.code, 1) << r.output;

  const std::string help = run_cli("report compare --help").output;
  EXPECT_TRUE(has(help, "4 nothing was checked")) << help;
  EXPECT_TRUE(has(help, "Noise: a row's relative noise is stdev_time_us / median_time_us")) << help;
}

// The reviewer's case: NEW written by validate, which does not time.
TEST_F(CompareGateCli, ValidateOutputAgainstARunChecksNothing) {
  const std::string quick = std::string(ATTN_SOURCE_DIR) + "/scenarios/quickstart.toml --backend cpu -q";
  ASSERT_EQ(run_cli("run " + quick + " --iterations 2 --warmup 0 -o " + path("run.csv")).code, 0);
  ASSERT_EQ(run_cli("validate " + quick + " -o " + path("validate.csv")).code, 0);
  const CliResult r = run_cli("report compare " + path("run.csv") + " " + path("validate.csv"));
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_TRUE(has(r.output, "not timed")) << r.output;
}

// ---- 6. a results JSON given to a report verb -------------------------------------------------

TEST_F(CompareGateCli, ReportVerbsNameAJsonInput) {
  const std::string base = csv("base.csv", {row("a", "cpu", 100)});
  write_json(path("a.json"), {row("a", "cpu", 100)});
  const std::string says = path("a.json") +
                           ": report verbs read results CSV; write one with `-o NAME.csv` (run and sweep can write both)";
  for (const std::string& cmd : {"report compare " + path("a.json") + " " + base, "report compare " + base + " " + path("a.json"),
                                 "report markdown " + path("a.json"),
                                 "report merge " + base + " " + path("a.json") + " -o " + path("m.csv")}) {
    const CliResult r = run_cli(cmd);
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.output;
    EXPECT_TRUE(has(r.output, says)) << cmd << "\n" << r.output;
  }
}

}  // namespace
}  // namespace attn
