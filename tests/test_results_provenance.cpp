// What a results row says about how to make it again (docs/RESULTS.md): the data seed actually
// used, the batch as `--batch` takes it, the timing settings, the sweep and shard; and what
// `report merge` checks with them (every shard of a sweep once, rows in the sweep's case order).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/scenario.hpp"
#include "pipeline/pipeline.hpp"
#include "report/columns.hpp"
#include "report/merge.hpp"
#include "report/results.hpp"
#include "run_cli.hpp"
#include "test_dir.hpp"

namespace attn {
namespace {

using attn_test::CliResult;
using attn_test::run_cli;

using Provenance = attn_test::TestDir;

std::string scenario_path(const std::string& name) { return std::string(ATTN_SOURCE_DIR) + "/scenarios/" + name; }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const ResultColumn& column(const std::string& name) {
  for (const ResultColumn& c : kResultColumns)
    if (name == c.name) return c;
  ADD_FAILURE() << "no column " << name;
  return kResultColumns.front();
}

std::vector<RequestShape> requests_of(const std::vector<RequestGroup>& groups) {
  std::vector<RequestShape> r;
  for (const RequestGroup& g : groups)
    for (int i = 0; i < g.count; ++i) r.push_back({g.context_len, g.query_len});
  return r;
}

bool same_requests(const std::vector<RequestShape>& a, const std::vector<RequestShape>& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](const RequestShape& x, const RequestShape& y) {
           return x.context_len == y.context_len && x.query_len == y.query_len;
         });
}

// ---- the batch column ------------------------------------------------------------------------

TEST(BatchSpecText, GroupsRunsOfEqualRequestsInOrderAndRoundTrips) {
  EXPECT_EQ(batch_spec_text(requests_of(parse_batch_spec("48x1@2048,2x512@1024"))), "48x1@2048,2x512@1024");
  // Context 0 is written, not left out; adjacent equal groups are one run; order is kept.
  EXPECT_EQ(batch_spec_text(requests_of(parse_batch_spec("2x16,1x1@8,3x1@8,1x16@0"))), "2x16@0,4x1@8,1x16@0");
  EXPECT_EQ(batch_spec_text({}), "");
  for (const char* spec : {"1x1@0", "3x1@256,1x1@300,1x64@64", "1x7@9,2x7@10,1x7@9", "5x2@2147483645"}) {
    const std::vector<RequestShape> r = requests_of(parse_batch_spec(spec));
    EXPECT_TRUE(same_requests(requests_of(parse_batch_spec(batch_spec_text(r))), r)) << spec;
  }
}

// ---- run rows ----------------------------------------------------------------------------------

TEST_F(Provenance, RunRowsSayTheSeedBatchAndTimingSettingsTheyRanWith) {
  const std::string out = path("r.csv");
  // --seed overrides the scenario's seed and keeps its name: only the seed column tells them apart.
  const CliResult r = run_cli("run " + scenario_path("quickstart.toml") +
                              " --backend cpu --iterations 3 --warmup 1 --host-timeout 0.25 --seed 42 -q -o " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<ResultRow> rows = read_csv(out);
  ASSERT_EQ(rows.size(), 1u);
  const ResultRow& row = rows[0];
  EXPECT_EQ(row.scenario, "quickstart");
  EXPECT_EQ(row.seed, 42u);
  EXPECT_EQ(row.batch, "3x1@256,1x1@300,1x64@64");
  EXPECT_EQ(row.warmup, 1);
  EXPECT_EQ(row.iterations, 3);
  EXPECT_EQ(row.host_timeout_s, 0.25);
  EXPECT_TRUE(row.sweep.empty());
  EXPECT_TRUE(row.shard.empty());
  EXPECT_FALSE(field_applies(row, column("case_index")));  // not a sweep row: written empty
  // The batch reproduces the run: --batch of it gives the same requests.
  const Scenario s = load_scenario(scenario_path("quickstart.toml"));
  EXPECT_TRUE(same_requests(requests_of(parse_batch_spec(row.batch)), requests_of(s.batch.groups)));

  // Without --seed: the scenario's own seed; the JSON says it too, and the settings.
  const std::string js = path("r.json");
  const CliResult j =
      run_cli("run " + scenario_path("quickstart.toml") + " --backend cpu --iterations 2 --warmup 0 -q -o " + js);
  ASSERT_EQ(j.code, 0) << j.output;
  const std::string text = slurp(js);
  EXPECT_TRUE(has(text, "\"batch\": \"3x1@256,1x1@300,1x64@64\", \"seed\": " + std::to_string(s.seed) + ",")) << text;
  EXPECT_TRUE(has(text, "\"warmup\": 0, \"iterations\": 2, \"host_timeout_s\": 5,")) << text;
  EXPECT_TRUE(has(text, "\"sweep\": \"\", \"shard\": \"\", \"case_index\": null}")) << text;
}

TEST_F(Provenance, UntimedRowsLeaveTheTimingSettingsEmpty) {
  const std::string out = path("v.csv");
  const CliResult r = run_cli("validate " + scenario_path("quickstart.toml") + " --backend cpu -q -o " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<ResultRow> rows = read_csv(out);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].iterations, 0);
  EXPECT_EQ(rows[0].host_timeout_s, -1);
  for (const char* c : {"warmup", "iterations", "host_timeout_s", "samples"})
    EXPECT_FALSE(field_applies(rows[0], column(c))) << c;
  EXPECT_TRUE(field_applies(rows[0], column("seed")));
  EXPECT_EQ(rows[0].batch, "3x1@256,1x1@300,1x64@64");
}

// A device row has no host time budget: an empty cell (CSV), null (JSON); and such an empty cell
// reads back as "does not apply", not as a budget of 0 (every iteration runs).
TEST(ProvenanceColumns, HostTimeoutIsEmptyWhereItDoesNotApply) {
  ResultRow device;
  device.scenario = "s";
  device.backend = "flash_attn";
  device.iterations = 50;
  device.warmup = 10;
  ResultRow host = device;
  host.backend = "cpu";
  host.host_timeout_s = 0;  // a setting: no budget
  const std::string csv = rows_to_csv({device, host});
  const std::string json = rows_to_json({device, host});
  EXPECT_TRUE(has(csv, ",10,50,,")) << csv;
  EXPECT_TRUE(has(csv, ",10,50,0,")) << csv;
  EXPECT_TRUE(has(json, "\"warmup\": 10, \"iterations\": 50, \"host_timeout_s\": null,")) << json;
  EXPECT_TRUE(has(json, "\"warmup\": 10, \"iterations\": 50, \"host_timeout_s\": 0,")) << json;
}

TEST_F(Provenance, CsvRoundTripsTheNewColumnsAndReadsFilesWithoutThem) {
  ResultRow r;
  r.scenario = "cpu_quick:4x16@512:cpu";
  r.backend = "cpu";
  r.batch = "4x16@512,1x1@8";  // quoted in the CSV: it holds a comma
  r.seed = 18446744073709551615ull;  // a seed in [0, 2^64) survives whole
  r.warmup = 1;
  r.iterations = 3;
  r.host_timeout_s = 0.5;
  r.sweep = "cpu_quick";
  r.shard = "1/4";
  r.case_index = 7;
  const std::string p = path("new.csv");
  write_csv(p, {r});
  const std::vector<ResultRow> back = read_csv(p);
  ASSERT_EQ(back.size(), 1u);
  for (const ResultColumn& c : kResultColumns) {
    EXPECT_EQ(field_applies(back[0], c), field_applies(r, c)) << c.name;
    EXPECT_EQ(field_text(back[0], c), field_text(r, c)) << c.name;
  }
  // An older build's file (none of the new columns): read with defaults that say "not known".
  const std::string old = write("old.csv", "scenario,backend,status,samples\nq,cpu,pass,3\n");
  const std::vector<ResultRow> o = read_csv(old);
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].batch, "");
  EXPECT_EQ(o[0].seed, 0u);
  EXPECT_EQ(o[0].iterations, 0);
  EXPECT_EQ(o[0].host_timeout_s, -1);
  EXPECT_EQ(o[0].sweep, "");
  EXPECT_EQ(o[0].samples, 3);
}

// ---- [run] host_timeout ----------------------------------------------------------------------

TEST(ProvenanceScenario, RunHostTimeoutKey) {
  const std::string base = "name = \"t\"\n[model]\npreset = \"llama3-8b\"\n[batch]\n[[batch.requests]]\ncount = 1\n"
                           "context_len = 16\nquery_len = 1\n[run]\n";
  EXPECT_EQ(parse_scenario(base + "host_timeout = 0.25\n", "t.toml").run.host_timeout_s, 0.25);
  EXPECT_EQ(parse_scenario(base + "host_timeout = 0\n", "t.toml").run.host_timeout_s, 0.0);
  EXPECT_EQ(parse_scenario(base, "t.toml").run.host_timeout_s, 5.0);
  try {
    parse_scenario(base + "host_timeout = -1\n", "t.toml");
    ADD_FAILURE() << "a negative host_timeout was accepted";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "t.toml:10: run.host_timeout = -1")) << e.what();
  }
}

TEST_F(Provenance, RunHostTimeoutKeyIsTheRowsBudgetUnlessTheFlagOverridesIt) {
  std::string text = slurp(scenario_path("quickstart.toml"));
  const size_t at = text.find("[run]");
  ASSERT_NE(at, std::string::npos);
  text.insert(at + 6, "host_timeout = 0.125\n");
  const std::string file = write("q.toml", text);
  CliResult r = run_cli("run " + file + " --backend cpu --iterations 3 --warmup 0 -q -o " + path("a.csv"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_csv(path("a.csv")).at(0).host_timeout_s, 0.125);
  r = run_cli("run " + file + " --backend cpu --iterations 3 --warmup 0 --host-timeout 2 -q -o " + path("b.csv"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_csv(path("b.csv")).at(0).host_timeout_s, 2.0);
}

// ---- report merge and shards -------------------------------------------------------------------

ResultRow sweep_row(const std::string& sweep, const std::string& shard, int case_index) {
  ResultRow r;
  r.scenario = sweep + ":case" + std::to_string(case_index);
  r.backend = "cpu";
  r.device = "host cpu";
  r.build = "b";
  r.sweep = sweep;
  r.shard = shard;
  r.case_index = case_index;
  return r;
}

std::string merge_error(const std::vector<MergeInput>& inputs, const MergeOptions& opts = {}) {
  try {
    merge_results(inputs, opts);
  } catch (const InputError& e) {
    return e.what();
  }
  return {};
}

TEST(ProvenanceMerge, RefusesAMissingOrRepeatedShardAndOrdersRowsByCase) {
  // Shard 0 ran cases 0 and 3, shard 1 cases 1 and 2 (cost-balanced).
  const MergeInput s0{"s0.csv", {sweep_row("sw", "0/2", 0), sweep_row("sw", "0/2", 3)}};
  const MergeInput s1{"s1.csv", {sweep_row("sw", "1/2", 1), sweep_row("sw", "1/2", 2)}};
  const std::vector<ResultRow> all = merge_results({s1, s0});
  ASSERT_EQ(all.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(all[static_cast<size_t>(i)].case_index, i);

  const std::string missing = merge_error({s0});
  EXPECT_TRUE(has(missing, "sweep sw: shard 1/2 is missing")) << missing;
  const MergeInput again{"again.csv", s0.rows};
  const std::string twice = merge_error({s0, s1, again});
  EXPECT_TRUE(has(twice, "shard 0/2 of sweep sw is in both s0.csv and again.csv")) << twice;
  EXPECT_EQ(merge_results({s0, s1, again}, {false, true}).size(), 4u);  // --allow-duplicates: the last wins
  const MergeInput other_split{"s3.csv", {sweep_row("sw", "1/3", 1)}};
  const std::string split = merge_error({s0, other_split});
  EXPECT_TRUE(has(split, "s3.csv holds shard 1/3 of sweep sw, but s0.csv a shard of 2")) << split;
  const MergeInput bad{"bad.csv", {sweep_row("sw", "2/2", 1)}};
  EXPECT_TRUE(has(merge_error({bad}), "bad.csv:2: shard = 2/2: not a shard")) << merge_error({bad});
}

// More shards than cases: the last shards have no case and their files no rows. Those files
// stand for the shards no row names, but a missing shard that had a case is still refused.
TEST(ProvenanceMerge, EmptyShardFilesStandForShardsWithoutCases) {
  const MergeInput s0{"s0.csv", {sweep_row("sw", "0/4", 1)}};
  const MergeInput s1{"s1.csv", {sweep_row("sw", "1/4", 0)}};
  const MergeInput e2{"s2.csv", {}}, e3{"s3.csv", {}};
  EXPECT_EQ(merge_results({s0, s1, e2, e3}).size(), 2u);
  EXPECT_TRUE(has(merge_error({s0, s1, e2}), "sweep sw: shards 2/4, 3/4 are missing")) << merge_error({s0, s1, e2});
  EXPECT_TRUE(has(merge_error({s0, e2, e3}), "shards 1/4, 2/4, 3/4 are missing")) << merge_error({s0, e2, e3});
}

TEST(ProvenanceMerge, PlainRunFilesMergeAsBefore) {
  ResultRow a, b;
  a.scenario = "x";
  b.scenario = "y";
  a.backend = b.backend = "cpu";
  a.device = b.device = "host cpu";
  const std::vector<ResultRow> all = merge_results({{"b.csv", {b}}, {"a.csv", {a}}});
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].scenario, "y");  // input order: run rows have no case order
  EXPECT_EQ(all[1].scenario, "x");
}

}  // namespace
}  // namespace attn
