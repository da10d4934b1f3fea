// End-to-end checks of the attn-bench executable: exit codes, error messages, output files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "report/results.hpp"
#include "run_cli.hpp"
#include "test_dir.hpp"

namespace fs = std::filesystem;

namespace {

using Result = attn_test::CliResult;
using attn_test::run_cli;

std::string scenario(const std::string& name) { return std::string(ATTN_SOURCE_DIR) + "/scenarios/" + name; }

using CliTest = attn_test::TestDir;

TEST_F(CliTest, VersionAndHelp) {
  const Result v = run_cli("--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_NE(v.output.find("attn-bench"), std::string::npos);
  for (const char* verb : {"list", "describe", "run", "validate", "report", "device"}) {
    const Result h = run_cli(std::string(verb) + " --help");
    EXPECT_EQ(h.code, 0) << verb;
  }
  const Result bad = run_cli("no-such-verb");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("unknown verb 'no-such-verb' (verbs: list, describe"), std::string::npos) << bad.output;
}

TEST_F(CliTest, ListShowsPresetsBackendsAndBuild) {
  const Result r = run_cli("list");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* s : {"llama3-8b", "qwen2-7b", "deepseek-v3", "cpu", "CUDA"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s;
  EXPECT_EQ(run_cli("list --format json").code, 0);
}

// Defect: `list --format json` wrote every number as a string ("q_heads": "32"). Numbers are JSON
// numbers and yes/no facts booleans, in list and in the other verbs' tables (describe).
TEST_F(CliTest, JsonTablesWriteNumbersAsNumbers) {
  const std::regex quoted_number(R"(": "-?[0-9]+(\.[0-9]+)?")");
  Result r = run_cli("list --format json");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* s : {R"({"preset": "llama3-8b", "q_heads": 32, "kv_heads": 8, "head_size_qk": 128, "head_size_v": 128, )"
                        R"("dtype": "bf16", "block": 16, )",
                        R"("preset": "deepseek-v3", "q_heads": 128, "kv_heads": 1, "head_size_qk": 192, "head_size_v": 128)",
                        R"({"backend": "cpu", "available": true, "reason": "", )"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\nin " << r.output;
  EXPECT_FALSE(std::regex_search(r.output, quoted_number)) << r.output;
  // CSV has the same columns; the console table keeps one head_size ("192/128" for MLA).
  // A CSV file is one table, named on the command line (it used to print both, one after the other).
  r = run_cli("list presets --format csv");
  EXPECT_EQ(r.output.rfind("preset,q_heads,kv_heads,head_size_qk,head_size_v,dtype,block,features,source\n"
                           "llama3-8b,32,8,128,128,bf16,16,",
                           0),
            0u)
      << r.output;
  EXPECT_EQ(r.output.find("backend,"), std::string::npos) << r.output;
  r = run_cli("list backends --format csv");
  EXPECT_EQ(r.output.rfind("backend,available,reason,description,features\n", 0), 0u) << r.output;
  EXPECT_EQ(r.output.find("preset,"), std::string::npos) << r.output;
  // Booleans as the results files write them; after the GPU backends of a CUDA build.
  EXPECT_NE(r.output.find("\ncpu,true,,"), std::string::npos) << r.output;
  r = run_cli("list --format csv");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("a CSV file holds one table; name it"), std::string::npos) << r.output;
  r = run_cli("list presets --format json");
  EXPECT_EQ(r.output.find("\"backends\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"presets\""), std::string::npos) << r.output;
  r = run_cli("list");
  EXPECT_NE(r.output.find(" 192/128 "), std::string::npos) << r.output;

  r = run_cli("describe --model llama3-8b --batch 48x1@2048,2x512@1024 --format json");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(R"("num_reqs": 50, "num_tokens": 1072, )"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(R"("cascade": false, )"), std::string::npos) << r.output;
  EXPECT_FALSE(std::regex_search(r.output, quoted_number)) << r.output;
}

TEST_F(CliTest, DescribeScenarioAndCompactSpec) {
  Result r = run_cli("describe " + scenario("quickstart.toml"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("cascade"), std::string::npos);
  r = run_cli("describe --model llama3-8b --batch 48x1@2048,2x512@1024 --format csv");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(",50,"), std::string::npos) << r.output;  // 50 requests
  EXPECT_NE(r.output.find(",false,"), std::string::npos) << r.output;  // cascade: no (a CSV boolean)
}

// --set changes a key of every scenario given, file or quick batch, before any check; each takes one
// KEY=VALUE, so a scenario file after it stays a scenario; a bad one exits 2 naming --set.
TEST_F(CliTest, SetOverridesAScenarioKey) {
  Result r = run_cli("describe --set model.kv_cache_dtype=fp8_e4m3 " + scenario("quickstart.toml") +
                     " --set batch.requests.0.count=2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("quickstart[model.kv_cache_dtype=fp8_e4m3,batch.requests[0].count=2]"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("kv_cache=fp8_e4m3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("requests    4  (3 decodes"), std::string::npos) << r.output;  // 2 + 1 decodes (was 3 + 1)
  r = run_cli("run --model llama3-8b --batch 2x1@64 --set model.block_size=32 --set run.iterations=2 --backend cpu -q -o " +
              (dir_ / "set.csv").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<attn::ResultRow> rows = attn::read_csv((dir_ / "set.csv").string());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].scenario, "llama3-8b:2x1@64[model.block_size=32,run.iterations=2]");
  EXPECT_EQ(rows[0].block_size, 32);
  EXPECT_EQ(rows[0].iterations, 2);
  r = run_cli("validate " + scenario("quickstart.toml") + " --set model.kv_cache_dtyp=fp8_e4m3");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--set (" + scenario("quickstart.toml") + "): model.kv_cache_dtyp = \"fp8_e4m3\": unknown key"),
            std::string::npos)
      << r.output;
  r = run_cli("describe " + scenario("quickstart.toml") + " --set model.block_size");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--set: model.block_size: expected KEY=VALUE"), std::string::npos) << r.output;
}

TEST_F(CliTest, BadInputIsExitTwoNamingFileLineKey) {
  Result r = run_cli("describe " + (dir_ / "missing.toml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("missing.toml"), std::string::npos) << r.output;

  const std::string bad = write("bad.toml",
                                "seed = 1\n[model]\npreset = \"llama3-8b\"\nnum_q_heds = 32\n"
                                "[[batch.requests]]\ncount = 1\ncontext_len = 16\nquery_len = 1\n");
  r = run_cli("describe " + bad);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("bad.toml:4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("num_q_heds"), std::string::npos) << r.output;

  r = run_cli("describe --model llama3-8b --batch 4xq@16");
  EXPECT_EQ(r.code, 2) << r.output;
  r = run_cli("run " + scenario("quickstart.toml") + " --backend no_such_backend");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no_such_backend"), std::string::npos);
}

TEST_F(CliTest, RunWritesResultsAtomicallyAndValidateGates) {
  const std::string csv = (dir_ / "r.csv").string(), json = (dir_ / "r.json").string();
  Result r = run_cli("run " + scenario("quickstart.toml") + " --backend cpu --iterations 2 --warmup 1 -q -o " + csv +
                     " -o " + json);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(csv));
  EXPECT_TRUE(fs::exists(json));
  EXPECT_NE(r.output.find("pass"), std::string::npos);

  // Regression gate: a file against itself passes; against a copy twice as fast it fails.
  r = run_cli("report compare " + csv + " " + csv + " --max-slowdown 5%");
  EXPECT_EQ(r.code, 0) << r.output;

  // An output into a folder that does not exist: refused before running, no file left behind.
  const std::string nowhere = (dir_ / "no" / "such" / "dir" / "r.csv").string();
  r = run_cli("run " + scenario("quickstart.toml") + " --backend cpu --iterations 1 --warmup 0 -q -o " + nowhere);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(nowhere));

  // A regular file where the folder should be: refused the same way.
  const std::string blocker = write("blocker", "x");
  const std::string under_file = blocker + "/r.csv";
  r = run_cli("run " + scenario("quickstart.toml") + " --backend cpu --iterations 1 --warmup 0 -q -o " + under_file);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_FALSE(fs::exists(under_file));

  // Bad input before anything ran: exit 2 and no output file.
  const std::string never = (dir_ / "never.csv").string();
  r = run_cli("run " + (dir_ / "missing.toml").string() + " -o " + never);
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(fs::exists(never));

  const std::string junit = (dir_ / "junit.xml").string();
  r = run_cli("validate " + scenario("quickstart.toml") + " --backend cpu -q --junit " + junit);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(junit));
}

// Flags and output paths are checked before anything runs: exit 2, a message naming the flag
// and value (never CLI11's 300-digit bounds), no output file, no silent fallback.
TEST_F(CliTest, FlagsAndOutputPathsAreCheckedBeforeRunning) {
  const std::string quick = "validate --model llama3-8b --batch 1x1@16 --backend cpu -q";
  const std::string out = (dir_ / "ok.csv").string();
  struct Case {
    std::string args, says;
  };
  fs::create_directories(dir_ / "a_folder.csv");
  const std::vector<Case> cases = {
      {quick + " --seed -1", "--seed: -1: not an integer in [0, 2^64)"},
      {quick + " --seed 99999999999999999999", "not an integer in [0, 2^64)"},
      {quick + " --seed abc", "attn-bench: error: --seed: abc: not an integer"},  // the tool's prefix, one line
      {"run --model llama3-8b --batch 1x1@16 --backend cpu -q --host-timeout -1", "--host-timeout"},
      {quick + " --check-sample -1", "-1: must be >= 0"},
      {"sweep " + scenario("sweeps/cpu_quick.toml") + " --shard 0/24 -q --check-sample -1 -o " + out, "-1: must be >= 0"},
      {"sweep " + scenario("sweeps/cpu_quick.toml") + " --shard 0/24 -q --warmup -1 -o " + out, "-1: must be >= 0"},
      {"run --model llama3-8b --batch 1x1@16 --backend cpu -q --iterations 0", "0: must be >= 1"},
      {"validate --model llama3-8b --batch 1x1@16 -q --backend ''", "--backend '': no backend named"},
      {"validate --model llama3-8b --batch 1x1@16 -q --backend ,", "--backend ',': no backend named"},
      {"run --model llama3-8b --batch 1x1@16 --backend cpu -q --cold-l2 --no-cold-l2", "excludes"},
      {quick + " -o " + (dir_ / "a_folder.csv").string() + " -o " + out, "a_folder.csv: is a folder"},
      {quick + " --junit " + (dir_ / "a_folder.csv").string() + " -o " + out, "a_folder.csv: is a folder"},
  };
  for (const Case& c : cases) {
    const Result r = run_cli(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("179769313"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out)) << c.args;
  }
  // An unknown backend in a scenario's [run] names the file and key, not a flag never given.
  const std::string sc = write("b.toml", "seed = 1\n[model]\npreset = \"llama3-8b\"\n[[batch.requests]]\ncount = 1\n"
                                         "context_len = 16\nquery_len = 1\n[run]\nbackends = [\"nosuch\"]\n");
  Result r = run_cli("validate -q " + sc);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("b.toml:9: run.backends = \"nosuch\": unknown backend"), std::string::npos) << r.output;
  // ... when the file loads, so describe refuses it too, and a typo gets its suggestion.
  const std::string typo = write("t.toml", "seed = 1\n[model]\npreset = \"llama3-8b\"\n[[batch.requests]]\ncount = 1\n"
                                           "context_len = 16\nquery_len = 1\n[run]\nbackends = [\"cpu\",\n"
                                           "  \"flash_atn\"]\n");
  r = run_cli("describe " + typo);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("t.toml:10: run.backends = \"flash_atn\": unknown backend"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did you mean \"flash_attn\"?"), std::string::npos) << r.output;
  // report verbs: merge names its format, markdown refuses a folder, plot an empty file and a
  // baseline no row has.
  ASSERT_EQ(run_cli(quick + " -o " + out).code, 0);
  r = run_cli("report merge " + out + " -o " + (dir_ / "m.txt").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("must end in .csv or .json"), std::string::npos) << r.output;
  EXPECT_EQ(run_cli("report markdown " + out + " -o " + (dir_ / "a_folder.csv").string()).code, 2);
  r = run_cli("report plot " + out + " --baseline nosuch --out " + (dir_ / "fig").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--baseline nosuch: no row"), std::string::npos) << r.output;
  std::ifstream in(out);
  std::string header;
  std::getline(in, header);
  const std::string empty = write("empty.csv", header + "\n");
  r = run_cli("report plot " + empty + " --out " + (dir_ / "fig").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no result rows"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "fig"));
}

// --timed attention times the attention alone over the caches a step wrote: its rows say so, and
// their bytes leave out the new K/V the step writes (2 x 8 kv heads x 128 dims x 2 bytes a token).
TEST_F(CliTest, TimedAttentionRowsSayWhatTheySampled) {
  const std::string step = (dir_ / "step.csv").string(), alone = (dir_ / "alone.csv").string();
  const std::string quick = "run --model llama3-8b --batch 2x1@40,1x9@7 --backend cpu --iterations 2 --warmup 0 -q ";
  Result r = run_cli(quick + "-o " + step);
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_cli(quick + "--timed attention -o " + alone);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("note: 1 row timed the attention alone (--timed attention)"), std::string::npos) << r.output;
  const attn::ResultRow a = attn::read_csv(step).at(0), b = attn::read_csv(alone).at(0);
  EXPECT_EQ(a.timed, "step");
  EXPECT_EQ(b.timed, "attention");
  EXPECT_EQ(b.status, "pass") << b.reason;
  EXPECT_EQ(b.samples, 2);
  EXPECT_EQ(a.flops, b.flops);
  EXPECT_DOUBLE_EQ(a.bytes - b.bytes, 11.0 * 2 * 8 * 128 * 2);
  // validate times nothing: its rows leave the column empty.
  r = run_cli("validate --model llama3-8b --batch 1x1@16 --backend cpu -q -o " + step);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(attn::read_csv(step).at(0).timed, "");
  r = run_cli(quick + "--timed kernel");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--timed"), std::string::npos) << r.output;
}

// Defect: `run --backend cpu --cuda-graph` was accepted and its rows quietly said
// timing_method=wall. With no selected backend that can be timed as a CUDA graph here, the flag
// is refused up front; with one that can (a GPU machine), it stands and cpu rows keep wall.
TEST_F(CliTest, CudaGraphIsRefusedWhereNoSelectedBackendCanTakeIt) {
  const std::string out = (dir_ / "r.csv").string();
  const std::string quick = "run --model llama3-8b --batch 1x1@16 --iterations 1 --warmup 0 -q --cuda-graph -o " + out;
  const std::string refusal = "--cuda-graph: backend cpu is timed by wall clock; CUDA graphs apply to GPU backends";
  for (const char* backends : {" --backend cpu", " --backend CPU,cpu"}) {
    const Result r = run_cli(quick + backends);
    EXPECT_EQ(r.code, 2) << backends << "\n" << r.output;
    EXPECT_NE(r.output.find(refusal), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out));
  }
  const std::string cpu_only = "seed = 1\n[model]\npreset = \"llama3-8b\"\n[[batch.requests]]\ncount = 1\n"
                               "context_len = 16\nquery_len = 1\n[run]\nbackends = [\"cpu\"]\niterations = 1\nwarmup = 0\n";
  Result r = run_cli("run " + write("cpu.toml", cpu_only) + " -q --cuda-graph -o " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(refusal), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
  // A file's own cuda_graph = true is its preference, not a request to refuse: the cpu row runs.
  r = run_cli("run " + write("cpu_graph.toml", cpu_only + "cuda_graph = true\n") + " -q -o " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(attn::read_csv(out).at(0).timing_method, "wall");
  fs::remove(out);
  // validate times nothing: it takes no --cuda-graph at all.
  EXPECT_EQ(run_cli("validate --model llama3-8b --batch 1x1@16 --backend cpu -q --cuda-graph").code, 2);

  // all and auto: refused exactly where this build and machine have no GPU backend that can run.
  const auto registry = attn::make_registry();
  const bool gpu = std::any_of(registry.begin(), registry.end(),
                               [](const auto& be) { return attn::runs_on_device(*be) && be->available().ok; });
  for (const char* backends : {" --backend all", " --backend auto"}) {
    r = run_cli(quick + backends);
    if (!gpu) {
      EXPECT_EQ(r.code, 2) << backends << "\n" << r.output;
      EXPECT_NE(r.output.find("--cuda-graph: "), std::string::npos) << r.output;
      // The GPU backends missing their device share one reason, given once.
      const size_t first = r.output.find("cannot run here");
      if (first != std::string::npos) EXPECT_EQ(r.output.find("cannot run here", first + 1), std::string::npos) << r.output;
      continue;
    }
    ASSERT_EQ(r.code, 0) << backends << "\n" << r.output;
    for (const attn::ResultRow& row : attn::read_csv(out))
      if (row.status == "pass") EXPECT_EQ(row.timing_method, row.backend == "cpu" ? "wall" : "cuda_graph") << row.backend;
    fs::remove(out);
  }
}

// Defect: `validate q.toml --backend flash_attn,flashmla` on a machine with no GPU printed "0
// passed, 0 failed, 4 skipped" and exited 0: a CI runner whose GPU driver broke went green having
// checked nothing. With every row skipped, validate and run exit 4 and say why; one row checked
// (the others skipped) is still a pass.
TEST_F(CliTest, ValidateThatChecksNothingExitsFour) {
  // MLA with ALiBi: a valid scenario the cpu backend skips, on every machine and build.
  const std::string skipped_by_cpu = write("mla_alibi.toml", "seed = 1\n[model]\npreset = \"deepseek-v3\"\n"
                                                             "alibi = true\n[[batch.requests]]\ncount = 1\n"
                                                             "context_len = 16\nquery_len = 1\n");
  const std::string junit = (dir_ / "j.xml").string();
  Result r = run_cli("validate " + skipped_by_cpu + " --backend cpu -q --strict --junit " + junit);
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("0 passed, 0 failed, 1 skipped"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nothing was checked: every row was skipped; the first reason: cpu on mla_alibi: MLA with "
                          "ALiBi"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(junit));  // the report still shows the skips
  r = run_cli("run " + skipped_by_cpu + " --backend cpu -q --iterations 1 --warmup 0");
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("nothing was checked"), std::string::npos) << r.output;
  // One row that checks something: the skipped one does not turn the gate red.
  r = run_cli("validate " + skipped_by_cpu + " " + scenario("quickstart.toml") + " --backend cpu -q");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("nothing was checked"), std::string::npos) << r.output;
  // The code is documented where a user looks for it.
  EXPECT_NE(run_cli("--help").output.find("4 run or validate checked nothing"), std::string::npos);

  // The reported case: GPU backends in a CUDA build on a machine whose GPU cannot be used.
  const auto registry = attn::make_registry();
  const auto built_unavailable = [&](const char* name) {
    return std::any_of(registry.begin(), registry.end(),
                       [&](const auto& be) { return be->name() == name && !be->available().ok; });
  };
  // (Not GTEST_SKIP: the checks above ran and count on every machine.)
  if (!built_unavailable("flash_attn") || !built_unavailable("flashmla")) return;
  r = run_cli("validate " + scenario("quickstart.toml") + " " + scenario("mla_decode_deepseek.toml") +
              " --backend flash_attn,flashmla -q --strict --junit " + junit);
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("nothing was checked: every row was skipped; the first reason: "), std::string::npos)
      << r.output;
  // A named backend that checked nothing is a gate that checked nothing, even beside a cpu row
  // that passed (the cpu row used to carry the run to exit 0).
  r = run_cli("validate " + scenario("quickstart.toml") + " --backend flash_attn,cpu -q");
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("nothing was checked on flash_attn, named in --backend"), std::string::npos) << r.output;
  // `auto` falling back to the cpu backend says so (it used to pick it silently).
  r = run_cli("validate " + scenario("quickstart.toml") + " -q");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("note: backend auto -> cpu (passed over flash_attn: "), std::string::npos) << r.output;
}

// Defect: a scenario's floats were echoed with 17 digits (k_abs = 0.9 as 0.90000000000000002 in
// error messages; logits_soft_cap = 30.1 as the float's 30.100000381469727 in results rows).
// Each is echoed as the shortest text that reads back the same.
TEST_F(CliTest, ScenarioFloatsAreEchoedAsWritten) {
  const std::string model = "seed = 1\n[model]\npreset = \"llama3-8b\"\nlogits_soft_cap = 30.1\n";
  const std::string base = model + "[[batch.requests]]\ncount = 1\ncontext_len = 16\nquery_len = 1\n";
  Result r = run_cli("describe " + write("bad.toml", base + "[check]\nk_abs = 0.9\n"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.toml:10: check.k_abs = 0.9: must be >= 1"), std::string::npos) << r.output;
  r = run_cli("describe " + write("arr.toml", model + "[batch.random]\nnum_requests = 2\ncontext_len = [0.1, 1.0]\n"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("arr.toml:7: batch.random.context_len = [ 0.1, 1.0 ]: expected a table"), std::string::npos)
      << r.output;

  const std::string good = write("good.toml", base);
  r = run_cli("describe " + good);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(" soft_cap=30.1\n"), std::string::npos) << r.output;
  const std::string csv = (dir_ / "r.csv").string(), json = (dir_ / "r.json").string();
  r = run_cli("validate -q --backend cpu " + good + " -o " + csv + " -o " + json);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(attn::read_csv(csv).at(0).logits_soft_cap, 30.1);
  std::ifstream in(json);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(R"("logits_soft_cap": 30.1, )"), std::string::npos) << text;

  // A sweep writes its cases as scenario text and echoes their values the same way.
  r = run_cli("sweep --list " + write("sw.toml", "[base]\npreset = \"llama3-8b\"\nlogits_soft_cap = -0.3\n"
                                                  "[axes]\ncontext_len = [16]\n"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("sw.toml:3: base.logits_soft_cap = -0.3: must be >= 0"), std::string::npos) << r.output;
}

TEST_F(CliTest, CompareFailsOnSlowdown) {
  const std::string base = (dir_ / "base.csv").string();
  Result r = run_cli("run " + scenario("quickstart.toml") + " --backend cpu --iterations 2 --warmup 0 -q -o " + base);
  ASSERT_EQ(r.code, 0) << r.output;
  // Make the baseline 10x faster by rewriting its median_time_us column, through the CSV reader
  // and writer: cells such as `batch` ("3x1@256,1x1@300,1x64@64") hold quoted commas.
  std::vector<attn::ResultRow> rows = attn::read_csv(base);
  ASSERT_FALSE(rows.empty());
  for (attn::ResultRow& row : rows) row.median_time_us /= 10.0;
  const std::string fast = (dir_ / "fast.csv").string();
  attn::write_csv(fast, rows);
  r = run_cli("report compare " + fast + " " + base + " --max-slowdown 5%");
  EXPECT_EQ(r.code, 1) << r.output;
}

}  // namespace

namespace attn {
namespace {

// A sweep killed part-way and resumed holds exactly the cases of an uninterrupted one; four
// shards merged hold them too.
TEST(CliSweep, ResumeAndShardsGiveTheWholeSweep) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("attn_sweep_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string sweep = scenario("sweeps/cpu_quick.toml"), whole = (dir / "whole.csv").string();
  Result r = run_cli("sweep " + sweep + " -q --validate-only -o " + whole);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<ResultRow> all = read_csv(whole);
  ASSERT_EQ(all.size(), 24u);
  std::set<std::string> names;
  for (const ResultRow& row : all) names.insert(row.scenario);
  EXPECT_EQ(names.size(), 24u);

  // "Killed" after 10 cases: the first 10 rows, then --resume.
  const std::string part = (dir / "part.csv").string();
  write_csv(part, std::vector<ResultRow>(all.begin(), all.begin() + 10));
  r = run_cli("sweep " + sweep + " -q --validate-only -o " + part);
  EXPECT_EQ(r.code, 2) << "an existing output without --resume is refused: " << r.output;
  r = run_cli("sweep " + sweep + " --validate-only --resume -o " + part);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("10 of 24 cases already"), std::string::npos) << r.output;
  std::vector<ResultRow> resumed = read_csv(part);
  ASSERT_EQ(resumed.size(), 24u);
  for (size_t i = 0; i < resumed.size(); ++i) EXPECT_EQ(resumed[i].scenario, all[i].scenario);

  std::string shards;
  for (int i = 0; i < 4; ++i) {
    const std::string out = (dir / ("shard" + std::to_string(i) + ".csv")).string();
    r = run_cli("sweep " + sweep + " -q --validate-only --shard " + std::to_string(i) + "/4 -o " + out);
    ASSERT_EQ(r.code, 0) << r.output;
    shards += " " + out;
  }
  const std::string merged = (dir / "merged.csv").string();
  r = run_cli("report merge" + shards + " -o " + merged);
  ASSERT_EQ(r.code, 0) << r.output;
  std::set<std::string> merged_names;
  for (const ResultRow& row : read_csv(merged)) {
    merged_names.insert(row.scenario);
    EXPECT_EQ(row.status, "pass") << row.scenario;
  }
  EXPECT_EQ(merged_names, names);

  // One process per "GPU" (the cpu backend ignores the device), merged by the parent.
  const std::string on_devices = (dir / "devices.csv").string();
  r = run_cli("sweep " + sweep + " -q --validate-only --devices 0,1,2 -o " + on_devices);
  ASSERT_EQ(r.code, 0) << r.output;
  std::set<std::string> device_names;
  for (const ResultRow& row : read_csv(on_devices)) device_names.insert(row.scenario);
  EXPECT_EQ(device_names, names);
  EXPECT_TRUE(std::filesystem::exists(dir / "devices.shard2.csv"));
  std::filesystem::remove_all(dir);
}

TEST(CliSweep, BadSweepFilesNameFileLineAndKey) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("attn_badsweep_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const struct {
    const char* text;
    std::vector<std::string> expect;
  } cases[] = {
      {"[base]\npreset = \"llama3-8b\"\n[axes]\nnum_request = [1]\n", {"bad.toml:4:", "axes.num_request", "unknown axis"}},
      {"[base]\npreset = \"llama3-8b\"\n[axes]\ncontext_len = []\n", {"bad.toml:4:", "axes.context_len", "non-empty"}},
      {"[base]\npreset = \"llama3-8b\"\n[axes]\nquery_len = [0]\n", {"bad.toml:4:", "axes.query_len", ">= 1"}},
      {"[axes]\ncontext_len = [16]\n", {"base.preset", "no model"}},
      {"[base]\npreset = \"llama3-8b\"\n[axes]\nkv_cache_dtype = [\"auto\", \"fp9\"]\n", {"invalid case", "kv=fp9", "fp9"}},
      {"[base]\npreset = \"llama3-8b\"\n[axes]\nbackend = [\"cpu\", \"cpu\"]\n", {"bad.toml:4:", "repeats the value cpu"}},
      {"sed = 1\n[axes]\n", {"bad.toml:1:", "sed", "unknown key"}},
  };
  for (const auto& c : cases) {
    const std::string path = (dir / "bad.toml").string();
    std::ofstream(path) << c.text;
    const Result r = run_cli("sweep " + path + " --list");
    EXPECT_EQ(r.code, 2) << c.text << r.output;
    for (const std::string& e : c.expect) EXPECT_NE(r.output.find(e), std::string::npos) << e << " in " << r.output;
  }
  EXPECT_EQ(run_cli("sweep " + scenario("sweeps/cpu_quick.toml") + " --list --shard 4/4").code, 2);
  std::filesystem::remove_all(dir);
}

// sweep --timed, as run --timed: the rows say what they sampled, and a resume that would time the
// other part is refused (the stored rows are no longer this sweep's).
TEST(CliSweep, TimedAttentionRowsAndTheResumeCheck) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("attn_sweep_timed_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string csv = (dir / "t.csv").string();
  const std::string quick = "sweep " + scenario("sweeps/cpu_quick.toml") + " --shard 0/12 -q --iterations 1 --warmup 0 ";
  Result r = run_cli(quick + "--timed attention -o " + csv);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<ResultRow> rows = read_csv(csv);
  ASSERT_FALSE(rows.empty());
  for (const ResultRow& row : rows) EXPECT_EQ(row.timed, "attention") << row.scenario;
  r = run_cli(quick + "--resume -o " + csv);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("timed"), std::string::npos) << r.output;
  EXPECT_EQ(run_cli(quick + "--timed attention --resume -o " + csv).code, 0);
  EXPECT_EQ(run_cli(quick + "--timed kernel -o " + (dir / "u.csv").string()).code, 2);
  // --devices hands it to every shard process.
  const std::string tiny = (dir / "tiny.toml").string();
  std::ofstream(tiny) << "name = \"tiny\"\n[base]\npreset = \"llama3-8b\"\n[axes]\nnum_requests = [1, 2]\n"
                         "context_len = [16]\nbackend = [\"cpu\"]\n[run]\niterations = 1\nwarmup = 0\n";
  const std::string merged = (dir / "m.csv").string();
  r = run_cli("sweep " + tiny + " -q --timed attention --devices 0,1 -o " + merged);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<ResultRow> both = read_csv(merged);
  ASSERT_EQ(both.size(), 2u);
  for (const ResultRow& row : both) EXPECT_EQ(row.timed, "attention") << row.scenario << " (shard " << row.shard << ")";
  std::filesystem::remove_all(dir);
}

TEST(CliPlot, FourFiguresInPngAndSvgWithTheirSeries) {
  if (std::system(ATTN_TEST_PLOT_PYTHON " -c 'import matplotlib' 2>/dev/null") != 0)
    GTEST_SKIP() << ATTN_TEST_PLOT_PYTHON << " has no matplotlib (Debian's python3-matplotlib; scripts/setup.sh installs it)";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("attn_plot_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string csv = (dir / "sweep.csv").string();
  Result r = run_cli("sweep " + scenario("sweeps/cpu_quick.toml") + " -q --iterations 1 --warmup 0 -o " + csv);
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_cli("report plot " + csv + " --out " + (dir / "fig").string());
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* name : {"throughput", "roofline", "speedup", "accuracy"}) {
    for (const char* ext : {".png", ".svg"}) {
      const std::filesystem::path f = dir / "fig" / (std::string(name) + ext);
      ASSERT_TRUE(std::filesystem::exists(f)) << f;
      EXPECT_GT(std::filesystem::file_size(f), 5000u) << f;
    }
  }
  auto text = [&](const char* name) {
    std::ifstream in(dir / "fig" / (std::string(name) + ".svg"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (const char* series : {"cpu, 1 requests", "cpu, 4 requests", "cpu, 8 requests"})
    EXPECT_NE(text("throughput").find(series), std::string::npos) << series;
  EXPECT_NE(text("accuracy").find("1.6 x floor"), std::string::npos);
  EXPECT_NE(text("roofline").find("arithmetic intensity"), std::string::npos);
  // Not a results file: an input error, and no figures.
  const std::string bad = (dir / "bad.csv").string();
  std::ofstream(bad) << "a,b\n1,2\n";
  EXPECT_EQ(run_cli("report plot " + bad + " --out " + (dir / "none").string()).code, 2);
  EXPECT_FALSE(std::filesystem::exists(dir / "none"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attn
