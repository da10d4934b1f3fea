// Sweep inputs that must be refused (or accepted) up front: stale --devices shard files, the
// backend axis, a [base] model without a preset, where case errors point, duplicate --devices.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "core/error.hpp"
#include "report/results.hpp"
#include "run_cli.hpp"
#include "test_dir.hpp"
#include "sweep/sweep.hpp"

namespace attn {
namespace {

namespace fs = std::filesystem;

using Result = attn_test::CliResult;
using attn_test::run_cli;

// The message of the InputError that parsing `text` (as sweep file "sw.toml") throws; "" if none.
std::string parse_error(const std::string& text) {
  try {
    parse_sweep(text, "sw.toml");
  } catch (const InputError& e) {
    return e.what();
  }
  return {};
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

using SweepInputs = attn_test::TestDir;

// Small sweeps the cpu backend checks in well under a second.
const char* kSweepA = "[base]\npreset = \"llama3-8b\"\n[axes]\nnum_requests = [1, 2]\ncontext_len = [16, 32]\n"
                      "backend = [\"cpu\"]\n";
const char* kSweepB = "[base]\npreset = \"qwen2-7b\"\n[axes]\ncontext_len = [16]\nbackend = [\"cpu\"]\n";

// Defect: OUTPUT.shard<i>.csv left by an earlier --devices run were resumed without --resume,
// merging another sweep's rows into the new output.
TEST_F(SweepInputs, DevicesRefuseStaleShardFilesWithoutResume) {
  const std::string a = write("a.toml", kSweepA), b = write("b.toml", kSweepB), out = path("r.csv");
  Result r = run_cli("sweep " + a + " -q --validate-only --devices 0,1 -o " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_EQ(read_csv(out).size(), 4u);
  fs::remove(out);

  // Another sweep into the same name: refused, naming the stale file and --resume; nothing written.
  for (const char* devices : {"0,1", "0,1,2"}) {
    r = run_cli("sweep " + b + " -q --validate-only --devices " + std::string(devices) + " -o " + out);
    EXPECT_EQ(r.code, 2) << devices << ": " << r.output;
    EXPECT_TRUE(has(r.output, "r.shard0.csv")) << r.output;
    EXPECT_TRUE(has(r.output, "--resume")) << r.output;
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(path("r.shard2.csv")));
  }
  // --resume of another sweep, or of another device count, is refused too.
  r = run_cli("sweep " + b + " -q --validate-only --resume --devices 0,1 -o " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "llama3-8b")) << r.output;
  r = run_cli("sweep " + a + " -q --validate-only --resume --devices 0 -o " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "r.shard1.csv")) << r.output;
  EXPECT_FALSE(fs::exists(out));

  // Resuming the same sweep on the same devices finds every case done and merges again.
  r = run_cli("sweep " + a + " -q --validate-only --resume --devices 0,1 -o " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  std::set<std::string> names;
  for (const ResultRow& row : read_csv(out)) names.insert(row.scenario);
  EXPECT_EQ(names.size(), 4u);
  for (const std::string& n : names) EXPECT_TRUE(has(n, "llama3-8b")) << n;

  // Once the shard files are gone the other sweep runs into the name.
  fs::remove(out);
  fs::remove(path("r.shard0.csv"));
  fs::remove(path("r.shard1.csv"));
  r = run_cli("sweep " + b + " -q --validate-only --devices 0,1 -o " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<ResultRow> rows = read_csv(out);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].scenario, "qwen2-7b:1x1@16:cpu");
}

// A single --shard --resume into a file of another split is refused, not extended.
TEST_F(SweepInputs, SweepResumeRefusesRowsOfOtherCases) {
  const std::string a = write("a.toml", kSweepA), out = path("s.csv");
  Result r = run_cli("sweep " + a + " -q --validate-only --shard 0/2 -o " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_cli("sweep " + a + " -q --validate-only --shard 1/2 --resume -o " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "shard 1/2")) << r.output;
  r = run_cli("sweep " + a + " -q --validate-only --shard 0/2 --resume -o " + out);
  EXPECT_EQ(r.code, 0) << r.output;
}

// Defect: an unknown backend passed --list and became an error row blaming `--backend`.
TEST_F(SweepInputs, SweepBackendAxisIsCheckedAtLoad) {
  std::string e = parse_error("[base]\npreset = \"llama3-8b\"\n[axes]\nbackend = [\"cpu\", \"nosuch\"]\n");
  EXPECT_TRUE(has(e, "sw.toml:4: axes.backend = \"nosuch\": unknown backend")) << e;
  EXPECT_TRUE(has(e, "cpu")) << e;
  EXPECT_TRUE(has(e, "auto, all")) << e;
  EXPECT_FALSE(has(e, "--backend")) << e;

  // Names match case-insensitively (as --backend's do): "CPU" is cpu, so listing both repeats it.
  e = parse_error("[base]\npreset = \"llama3-8b\"\n[axes]\nbackend = [\"CPU\",\n  \"cpu\"]\n");
  EXPECT_TRUE(has(e, "sw.toml:5: axes.backend = \"cpu\": repeats the value cpu")) << e;
  const Sweep one = parse_sweep("[base]\npreset = \"llama3-8b\"\n[axes]\nbackend = [\"CPU\"]\n", "sw.toml");
  ASSERT_EQ(one.cases.size(), 1u);
  EXPECT_EQ(one.cases[0].name, "llama3-8b:1x1@0:cpu");
  ASSERT_EQ(one.cases[0].scenario.run.backends.size(), 1u);
  EXPECT_EQ(one.cases[0].scenario.run.backends[0], "cpu");

  // The executable: an input error before any case runs.
  const std::string bad = write("bad.toml", "[base]\npreset = \"llama3-8b\"\n[axes]\nbackend = [\"cpu\", \"nosuch\"]\n");
  Result r = run_cli("sweep " + bad + " --list");
  EXPECT_EQ(r.code, 2) << r.output;
  r = run_cli("sweep " + bad + " -q --validate-only -o " + path("bad.csv"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "bad.toml:4: axes.backend")) << r.output;
  EXPECT_FALSE(fs::exists(path("bad.csv")));
}

// Defect: `sweep scenarios/quickstart.toml` printed ":12: batch = { requests = [ {...},{...},{...} ] }:
// unknown key": the whole batch table as the value. A scenario file is named as one, and a
// table or array in a sweep error is abbreviated.
TEST_F(SweepInputs, ScenarioFileGivenToSweepIsNamed) {
  const std::string quick = std::string(ATTN_SOURCE_DIR) + "/scenarios/quickstart.toml";
  Result r = run_cli("sweep " + quick + " --list");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, quick + ": a scenario file, not a sweep (run it with `attn-bench run " + quick + "`; "
                                    "a sweep has [base] and [axes]")) << r.output;
  EXPECT_FALSE(has(r.output, "requests")) << r.output;
  std::string e = parse_error("[model]\npreset = \"llama3-8b\"\n[[batch.requests]]\ncount = 1\ncontext_len = 16\n");
  EXPECT_TRUE(has(e, "sw.toml: a scenario file, not a sweep")) << e;

  // A sweep with a stray table or array: the key and a short value, never the whole of it.
  e = parse_error("[base]\npreset = \"llama3-8b\"\n[axes]\ncontext_len = [16]\n[batch]\n"
                  "requests = [{ count = 1, context_len = 16 }, { count = 2, context_len = 32 }]\n");
  EXPECT_TRUE(has(e, "sw.toml:5: batch = { ... }: unknown key (expected one of: name,")) << e;
  EXPECT_FALSE(has(e, "context_len = 16")) << e;
  e = parse_error("[base]\npreset = \"llama3-8b\"\n[axes]\ncontext_lens = [16, 32]\n");
  EXPECT_TRUE(has(e, "sw.toml:4: axes.context_lens = [ ... ]: unknown axis")) << e;
  e = parse_error("[base]\npreset = \"llama3-8b\"\n[axes]\ncontext_len = []\n");
  EXPECT_TRUE(has(e, "axes.context_len = []: expected a non-empty array")) << e;
}

// Defect: [base] without preset was refused although [base] takes a scenario's [model] keys.
// sweep --set changes every case's scenario as run --set does; the case names carry the overrides
// before their backend (so rows of one case on two backends still pair on the name without it),
// and --devices hands them to its shard processes: their rows are the parent's cases.
TEST_F(SweepInputs, SetOverridesEveryCase) {
  const std::vector<ScenarioOverride> o{parse_override("model.block_size=32"), parse_override("run.iterations=2")};
  const Sweep sw = parse_sweep(kSweepA, "sw.toml", ".", o);
  ASSERT_EQ(sw.cases.size(), 4u);
  EXPECT_EQ(sw.cases[0].name, "llama3-8b:1x1@16[model.block_size=32,run.iterations=2]:cpu");
  for (const SweepCase& c : sw.cases) {
    EXPECT_EQ(c.scenario.name, c.name);
    EXPECT_EQ(c.scenario.spec.block_size, 32);
    EXPECT_EQ(c.scenario.run.iterations, 2);
  }
  try {
    parse_sweep(kSweepA, "sw.toml", ".", {parse_override("model.block_size=0")});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "--set (sw.toml): model.block_size = 0:")) << e.what();
    EXPECT_TRUE(has(e.what(), "(in the invalid case llama3-8b:1x1@16[model.block_size=0]:cpu)")) << e.what();
  }
  // A sweep names its cases: --set name= is refused, not ignored.
  try {
    parse_sweep(kSweepA, "sw.toml", ".", {parse_override("name=x")});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "--set (sw.toml): name = x: a sweep names each of its cases")) << e.what();
  }
  const std::string sweep = write("a.toml", kSweepA);
  Result r = run_cli("sweep " + sweep + " -q --validate-only --devices 0,1 --set check.k_l2=1000 -o " + path("d.csv"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<ResultRow> rows = read_csv(path("d.csv"));
  ASSERT_EQ(rows.size(), 4u);
  for (const ResultRow& row : rows) EXPECT_TRUE(has(row.scenario, "[check.k_l2=1000]:cpu")) << row.scenario;
  // Resuming without the override names other cases: refused, not mixed.
  r = run_cli("sweep " + sweep + " -q --validate-only --resume -o " + path("d.csv"));
  EXPECT_EQ(r.code, 2) << r.output;
#if !defined(ATTN_WITH_CUDA)
  // A backend this build lacks, named by --set: the override is named, not the file's axes line.
  r = run_cli("sweep " + sweep + " -q --validate-only --set 'run.backends=[\"flash_attn\"]' -o " + path("e.csv"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "--set (" + sweep + "): run.backends = \"flash_attn\": not compiled into this build"))
      << r.output;
#endif
}

TEST_F(SweepInputs, SweepBaseWithoutPresetIsAnExplicitModel) {
  const Sweep gqa = parse_sweep(
      "name = \"mine\"\n[base]\nnum_q_heads = 8\nnum_kv_heads = 2\nhead_size = 64\n[axes]\ncontext_len = [16, 32]\n",
      "sw.toml");
  ASSERT_EQ(gqa.cases.size(), 2u);
  EXPECT_EQ(gqa.cases[0].name, "mine:1x1@16:auto");
  EXPECT_EQ(gqa.cases[0].scenario.spec.num_q_heads, 8);
  EXPECT_EQ(gqa.cases[0].scenario.spec.num_kv_heads, 2);
  EXPECT_EQ(gqa.cases[0].scenario.spec.head_size_qk, 64);

  const std::string mla_text =
      "[base]\nnum_q_heads = 16\n[base.mla]\nkv_lora_rank = 512\nqk_rope_head_dim = 64\nqk_nope_head_dim = 128\n"
      "v_head_dim = 128\n[axes]\ncontext_len = [16]\nbackend = [\"cpu\"]\n";
  const Sweep mla = parse_sweep(mla_text, "sw.toml");
  ASSERT_EQ(mla.cases.size(), 1u);
  EXPECT_TRUE(mla.cases[0].scenario.spec.use_mla);
  EXPECT_EQ(mla.cases[0].scenario.spec.num_q_heads, 16);

  // It runs, too; a sweep with no [base] at all still has no model.
  const Result r = run_cli("sweep " + write("mla.toml", mla_text) + " -q --validate-only -o " + path("mla.csv"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(parse_error("[axes]\ncontext_len = [16]\n"), "base.preset: no model"));
}

// Defect: a case's error cited the line of the generated scenario (":14" for [run] on line 6).
TEST_F(SweepInputs, SweepCaseErrorsPointAtTheSweepLineAndKey) {
  std::string e = parse_error("[base]\npreset = \"llama3-8b\"\n[axes]\ncontext_len = [16]\n[run]\niterations = 0\n");
  EXPECT_EQ(e.rfind("sw.toml:6: run.iterations = 0: must be >= 1", 0), 0u) << e;
  EXPECT_TRUE(has(e, "invalid case llama3-8b:1x1@16:auto")) << e;

  e = parse_error("[base]\npreset = \"llama3-8b\"\n[axes]\nkv_cache_dtype = [\"auto\",\n  \"fp9\"]\n");
  EXPECT_EQ(e.rfind("sw.toml:5: axes.kv_cache_dtype = \"fp9\": unknown kv cache dtype", 0), 0u) << e;
  EXPECT_TRUE(has(e, "kv=fp9")) << e;

  e = parse_error("[base]\npreset = \"llama3-8b\"\nsliding_windw = 4\n[axes]\ncontext_len = [16]\n");
  EXPECT_EQ(e.rfind("sw.toml:3: base.sliding_windw = 4: unknown key", 0), 0u) << e;

  e = parse_error("[base]\nnum_q_heads = 8\nnum_kv_heads = 3\n[axes]\ncontext_len = [16]\n");
  EXPECT_EQ(e.rfind("sw.toml:3: base.num_kv_heads = 3:", 0), 0u) << e;

  e = parse_error("[base]\npreset = \"llama3-8b\"\n[axes]\nblock_size = [16, 24]\nshared_prefix_len = [16]\n"
                  "context_len = [64]\n");
  EXPECT_EQ(e.rfind("sw.toml:5: axes.shared_prefix_len = 16:", 0), 0u) << e;
  EXPECT_TRUE(has(e, "block=24")) << e;

  e = parse_error("[base]\nnum_q_heads = 16\n[base.mla]\nkv_lora_rank = 0\n[axes]\ncontext_len = [16]\n");
  EXPECT_EQ(e.rfind("sw.toml:4: base.mla.kv_lora_rank = 0:", 0), 0u) << e;
}

// Defect: --devices 0,0 ran two shards on one GPU.
TEST_F(SweepInputs, SweepDevicesRefuseARepeatedGpu) {
  const std::string a = write("a.toml", kSweepA), out = path("d.csv");
  for (const char* devices : {"0,0", "1,2,01"}) {
    const Result r = run_cli("sweep " + a + " -q --validate-only --devices " + devices + " -o " + out);
    EXPECT_EQ(r.code, 2) << devices << ": " << r.output;
    EXPECT_TRUE(has(r.output, std::string("--devices = ") + devices)) << r.output;
    EXPECT_TRUE(has(r.output, "twice")) << r.output;
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(path("d.shard0.csv")));
}

// Defect: the progress line showed "eta -35791394m-8s" (an estimate past 2^31 seconds, or a
// garbage one, wrapped the int it was printed from). Unknown or absurd durations print "?".
TEST(SweepProgress, DurationTextIsNeverNegativeOrAbsurd) {
  EXPECT_EQ(duration_text(0), "0m00s");
  EXPECT_EQ(duration_text(65.4), "1m05s");
  EXPECT_EQ(duration_text(2 * 3600 + 180), "2h03m");
  EXPECT_EQ(duration_text(998 * 3600.0), "998h00m");
  for (double garbage : {-1.0, -1e-9, std::nan(""), 999 * 3600.0, 2147483648.0, 1e20, HUGE_VAL, -HUGE_VAL})
    EXPECT_EQ(duration_text(garbage), "?") << garbage;
}

}  // namespace
}  // namespace attn
