// Request traces: CSV loading and its errors, the scheduler model's invariants, trace_shapes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/batch.hpp"
#include "model/trace.hpp"
#include "host_memory_limit.hpp"

namespace attn {
namespace {

namespace fs = std::filesystem;

const std::string kShippedTrace = std::string(ATTN_SOURCE_DIR) + "/scenarios/traces/azure_llm_2023_conv.csv";

// A scratch folder removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("attn_trace_" + std::to_string(std::random_device{}()) + "_" + testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path p = path / name;
    std::ofstream(p) << text;
    return p.string();
  }
};

// Records every step and checks the scheduler's invariants as it goes.
struct Checker {
  const std::vector<TraceRequest>& trace;
  SchedulerConfig cfg;
  std::vector<int64_t> prompt_done, decodes;
  std::vector<long> last_step;  // step of the previous scheduling of each row
  long steps = 0;
  double last_clock = -1;

  Checker(const std::vector<TraceRequest>& t, const SchedulerConfig& c)
      : trace(t), cfg(c), prompt_done(t.size(), 0), decodes(t.size(), 0), last_step(t.size(), -2) {}

  bool operator()(const ScheduledStep& st) {
    EXPECT_EQ(st.step, steps);
    EXPECT_GE(st.clock_s, last_clock);
    last_clock = st.clock_s;
    EXPECT_EQ(st.requests.size(), st.trace_rows.size());
    EXPECT_FALSE(st.requests.empty());
    EXPECT_LE(static_cast<int>(st.requests.size()), cfg.max_num_seqs);
    int64_t tokens = 0;
    bool seen_prefill = false;
    for (size_t i = 0; i < st.requests.size(); ++i) {
      const RequestShape& r = st.requests[i];
      const int row = st.trace_rows[i];
      const TraceRequest& tr = trace[static_cast<size_t>(row)];
      EXPECT_LE(tr.arrival_s, st.clock_s + 1e-9) << "scheduled before it arrived";
      EXPECT_NE(last_step[row], st.step) << "row " << row << " twice in one step";
      tokens += r.query_len;
      EXPECT_GE(r.query_len, 1);
      if (prompt_done[row] < tr.prompt_tokens) {  // a prefill chunk: continues exactly where it stopped
        seen_prefill = true;
        EXPECT_EQ(r.context_len, prompt_done[row]);
        EXPECT_LE(prompt_done[row] + r.query_len, tr.prompt_tokens);
        prompt_done[row] += r.query_len;
      } else {  // a decode: after every prefill... and one token further each step
        EXPECT_FALSE(seen_prefill) << "decode after a prefill chunk in step " << st.step;
        EXPECT_EQ(r.query_len, 1);
        EXPECT_EQ(r.context_len, tr.prompt_tokens + decodes[row]);
        EXPECT_EQ(last_step[row], st.step - 1) << "a running decode skipped a step";
        ++decodes[row];
      }
      last_step[row] = st.step;
    }
    EXPECT_LE(tokens, cfg.max_num_batched_tokens);
    ++steps;
    return !testing::Test::HasFailure();  // stop at the first broken step
  }

  void expect_drained() const {
    for (size_t i = 0; i < trace.size(); ++i) {
      ASSERT_EQ(prompt_done[i], trace[i].prompt_tokens) << "row " << i;
      ASSERT_EQ(decodes[i], std::max(trace[i].output_tokens, 1) - 1) << "row " << i;
    }
  }
};

TEST(Trace, LoadsTheShippedTrace) {
  const auto t = load_trace_csv(kShippedTrace);
  ASSERT_EQ(t.size(), 19366u);
  EXPECT_EQ(t[0].arrival_s, 0.0);
  EXPECT_EQ(t[0].prompt_tokens, 374);
  EXPECT_EQ(t[0].output_tokens, 44);
  // 18:15:50.9951690 - 18:15:46.6805900
  EXPECT_NEAR(t[1].arrival_s, 4.3145790, 1e-9);
  EXPECT_EQ(t.back().prompt_tokens, 197);
  EXPECT_NEAR(t.back().arrival_s, 3501.7219370, 1e-6);  // 19:14:08.4025270
  for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i].arrival_s, t[i - 1].arrival_s);
}

TEST(Trace, CsvErrorsNameFileLineColumnAndValue) {
  TempDir dir;
  struct Case {
    const char* name;
    std::string text;
    std::vector<std::string> expect;  // substrings of the message
  };
  const std::string header = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  const std::string ok = "2023-11-16 18:15:46.0,10,5\n";
  const Case cases[] = {
      {"negative.csv", header + ok + "2023-11-16 18:15:47.0,-3,5\n", {":3", "ContextTokens", "-3"}},
      {"text.csv", header + ok + ok + "2023-11-16 18:15:48.0,12,many\n", {":4", "GeneratedTokens", "many"}},
      {"float.csv", header + "2023-11-16 18:15:48.0,12.5,3\n", {":2", "ContextTokens", "12.5"}},
      {"unsorted.csv", header + "2023-11-16 18:15:48.0,1,1\n2023-11-16 18:15:47.9,1,1\n",
       {":3", "TIMESTAMP", "18:15:47.9", "sorted"}},
      {"badtime.csv", header + "2023-13-16 18:15:48.0,1,1\n", {":2", "TIMESTAMP", "2023-13-16"}},
      {"nocolumn.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:48.0,1\n", {"GeneratedTokens"}},
      {"fewcols.csv", header + ok + "2023-11-16 18:15:48.0,4\n", {"3"}},
      {"zero_prompt.csv", header + "2023-11-16 18:15:48.0,0,4\n", {":2", "ContextTokens", ">= 1"}},
      {"empty.csv", header, {"no requests"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.write(c.name, c.text);
    try {
      load_trace_csv(path);
      ADD_FAILURE() << "no error";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(c.name), std::string::npos) << msg;
      for (const auto& s : c.expect) EXPECT_NE(msg.find(s), std::string::npos) << "'" << s << "' not in: " << msg;
    }
  }
  EXPECT_THROW(load_trace_csv((dir.path / "missing.csv").string()), InputError);
  // Extra columns, other column order, CRLF and plain-second timestamps are fine.
  const auto t = load_trace_csv(dir.write("ok.csv", "GeneratedTokens,Extra,ContextTokens,TIMESTAMP\r\n3,x,7,1.5\r\n4,y,8,2.25\r\n"));
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].prompt_tokens, 8);
  EXPECT_EQ(t[1].output_tokens, 4);
  EXPECT_DOUBLE_EQ(t[1].arrival_s, 0.75);
}

TEST(Trace, HandComputedSchedule) {
  // Budget 4: A (prompt 6, 3 outputs) and B (prompt 3, 1 output) arrive together.
  const std::vector<TraceRequest> t = {{0.0, 6, 3}, {0.0, 3, 1}};
  std::vector<std::vector<std::pair<int, int>>> got;  // (context, query) per step
  replay_trace(t, {4, 8, 10.0}, [&](const ScheduledStep& st) {
    std::vector<std::pair<int, int>> s;
    for (const auto& r : st.requests) s.push_back({r.context_len, r.query_len});
    got.push_back(s);
    return true;
  });
  const std::vector<std::vector<std::pair<int, int>>> want = {
      {{0, 4}},          // A's first chunk fills the budget
      {{4, 2}, {0, 2}},  // A finishes its prompt (first token), B starts
      {{6, 1}, {2, 1}},  // A decodes; B finishes its prompt and, with one output, leaves
      {{7, 1}},          // A's last decode (3 outputs = prefill token + 2 decodes)
  };
  EXPECT_EQ(got, want);
}

TEST(Trace, IdleTimeIsSkippedAndClockAdvances) {
  // Two requests an hour apart: no empty steps in between.
  const std::vector<TraceRequest> t = {{0.0, 5, 3}, {3600.0, 5, 2}};
  std::vector<double> clocks;
  replay_trace(t, {8192, 256, 15.0}, [&](const ScheduledStep& st) {
    clocks.push_back(st.clock_s);
    return true;
  });
  ASSERT_EQ(clocks.size(), 3u + 2u);
  EXPECT_DOUBLE_EQ(clocks[1], 0.015);
  EXPECT_DOUBLE_EQ(clocks[3], 3600.0);
  // A request arriving mid-step waits for the next step boundary.
  const std::vector<TraceRequest> t2 = {{0.0, 5, 4}, {0.02, 5, 1}};
  std::vector<size_t> sizes;
  replay_trace(t2, {8192, 256, 15.0}, [&](const ScheduledStep& st) {
    sizes.push_back(st.requests.size());
    return true;
  });
  EXPECT_EQ(sizes, (std::vector<size_t>{1, 1, 2, 1}));  // joins at clock 0.03
}

TEST(Trace, SyntheticSchedulesKeepTheInvariants) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<TraceRequest> t;
    std::uniform_int_distribution<int> prompt(1, 700), out(0, 40);
    std::exponential_distribution<double> gap(trial % 2 ? 200.0 : 5.0);
    double clock = 0;
    for (int i = 0; i < 60; ++i) {
      t.push_back({clock, prompt(rng), out(rng)});
      clock += gap(rng);
    }
    const SchedulerConfig cfg{64 + trial * 37, 1 + trial % 9, 10.0};
    SCOPED_TRACE(testing::Message() << "trial " << trial << " budget " << cfg.max_num_batched_tokens << " seqs "
                                    << cfg.max_num_seqs);
    Checker check(t, cfg);
    replay_trace(t, cfg, std::ref(check));
    ASSERT_FALSE(HasFailure());
    check.expect_drained();
  }
}

TEST(Trace, ShippedTraceReplaysFastAndKeepsTheInvariants) {
  const auto t = load_trace_csv(kShippedTrace);
  const SchedulerConfig cfg{8192, 256, 15.0};
  long plain_steps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  replay_trace(t, cfg, [&](const ScheduledStep&) {
    ++plain_steps;
    return true;
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 5.0);
  Checker check(t, cfg);
  replay_trace(t, cfg, std::ref(check));
  ASSERT_FALSE(HasFailure());
  check.expect_drained();
  EXPECT_EQ(check.steps, plain_steps);
  // max_steps stops early.
  long capped = 0;
  replay_trace(t, cfg, [&](const ScheduledStep&) { return ++capped, true; }, 100);
  EXPECT_EQ(capped, 100);
}

Scenario trace_scenario(const std::string& file) {
  Scenario s;
  s.file = "trace_test.toml";
  s.name = "conv";
  s.batch.source = BatchSource::trace;
  s.batch.block_allocation = BlockAllocation::contiguous;
  s.batch.num_blocks = 123456;
  s.batch.trace.file = file;
  s.batch.trace.max_num_batched_tokens = 2048;
  s.batch.trace.max_num_seqs = 64;
  return s;
}

TEST(Trace, TraceShapesOneStepAllStepsAndTooFar) {
  Scenario s = trace_scenario(kShippedTrace);
  s.batch.trace.step = 500;
  const auto one = trace_shapes(s);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].label, "conv@500");
  EXPECT_EQ(one[0].step, 500);
  EXPECT_EQ(one[0].num_blocks, 123456);
  EXPECT_EQ(one[0].block_allocation, BlockAllocation::contiguous);

  s.batch.trace.all_steps = true;
  s.batch.trace.max_steps = 501;
  const auto all = trace_shapes(s);
  ASSERT_EQ(all.size(), 501u);
  EXPECT_EQ(all[500].label, one[0].label);
  ASSERT_EQ(all[500].requests.size(), one[0].requests.size());
  for (size_t i = 0; i < one[0].requests.size(); ++i) {
    EXPECT_EQ(all[500].requests[i].context_len, one[0].requests[i].context_len);
    EXPECT_EQ(all[500].requests[i].query_len, one[0].requests[i].query_len);
  }

  TempDir dir;
  Scenario small = trace_scenario(dir.write("two.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,2\n0.001,20,1\n"));
  // Step 0: A's prefill (B arrives 1 ms later). Step 1: A's decode and B's prefill. Then drained.
  small.batch.trace.step = 2;
  try {
    trace_shapes(small);
    FAIL() << "no error for a step past the end";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("trace_test.toml"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 steps"), std::string::npos) << msg;
  }
  small.batch.trace.step = 1;
  const auto last = trace_shapes(small);
  ASSERT_EQ(last.size(), 1u);
  ASSERT_EQ(last[0].requests.size(), 2u);
  EXPECT_EQ(last[0].requests[0].context_len, 10);  // the decode first
  EXPECT_EQ(last[0].requests[0].query_len, 1);
  EXPECT_EQ(last[0].requests[1].context_len, 0);
  EXPECT_EQ(last[0].requests[1].query_len, 20);
}

// A trace scenario file over `csv`, with these [batch.trace] keys after `file` (line 5 on).
Scenario trace_file_scenario(const TempDir& dir, const std::string& csv, const std::string& keys) {
  dir.write("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n" + csv);
  return parse_scenario("[model]\npreset = \"llama3-8b\"\n[batch.trace]\nfile = \"t.csv\"\n" + keys, "tr.toml",
                        dir.path.string());
}

TEST(Trace, HugeMaxNumSeqsReplaysWithoutReservingThatMany) {
  TempDir dir;
  // It once reserved max_num_seqs running slots: 2^31 - 1 of them ran out of host memory.
  const Scenario s = trace_file_scenario(dir, "0,100,3\n0.01,50,2\n0.02,20,5\n",
                                         "max_num_batched_tokens = 64\nmax_num_seqs = 2147483647\nstep = 1\n");
  const std::vector<BatchShape> shapes = expand_shapes(s);
  ASSERT_EQ(shapes.size(), 1u);
  EXPECT_EQ(shapes[0].requests.size(), 2u);
}

TEST(Trace, ScenarioErrorsNameFileLineAndFullKey) {
  TempDir dir;
  const std::string csv = "0,100,3\n0.01,50,2\n0.02,20,5\n";
  Scenario s = trace_file_scenario(dir, csv, "max_num_batched_tokens = 64\nmax_num_seqs = 8\nstep = 1000\n");
  try {
    expand_shapes(s);
    FAIL() << "no error for a step past the end";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tr.toml:7: batch.trace.step = 1000: the trace drains after"), std::string::npos) << msg;
  }
  // A trace key out of range names itself.
  try {
    trace_file_scenario(dir, csv, "max_num_seqs = 2147483648\n");
    FAIL() << "no error for max_num_seqs past int32";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tr.toml:5: batch.trace.max_num_seqs = 2147483648"), std::string::npos)
        << e.what();
  }
}

TEST(Trace, CsvRowsWhoseLastDecodeOverflowsAreErrors) {
  TempDir dir;
  const std::string path =
      dir.write("o.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,3\n1,2147483000,1000\n");
  try {
    load_trace_csv(path);
    FAIL() << "no error for prompt + output past int32";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path + ":3: GeneratedTokens = 1000"), std::string::npos) << msg;
    EXPECT_NE(msg.find("32-bit sequence length"), std::string::npos) << msg;
  }
}

TEST(Trace, StepTooLargeForHostMemoryNamesTheStep) {
  TempDir dir;
  const Scenario s = trace_file_scenario(dir, "0,67108864,1\n", "max_num_batched_tokens = 67108864\nstep = 0\n");
  const std::vector<BatchShape> shapes = expand_shapes(s);
  ASSERT_EQ(shapes.size(), 1u);
  std::string msg = "<no RuntimeError>";
  try {
    const HostMemoryLimit limit(64);
    make_batch(s.spec, shapes[0], s.seed);
  } catch (const RuntimeError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("tr.toml:6: batch.trace.step = 0:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("of host memory"), std::string::npos) << msg;
}

}  // namespace
}  // namespace attn
