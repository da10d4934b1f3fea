// Request traces: CSV loading and its errors, the scheduler model's invariants, trace_shapes.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
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

TEST(Trace, AdvanceClockMatchesRepeatedAddition) {
  // Bit for bit, across binade boundaries, from zero, and where step_s / ulp is a tie
  // (2^-6 at 2^47 s: half an ulp, so the clock sticks on an even multiple).
  std::mt19937 rng(5);
  const double steps_s[] = {0.015, 0.01, 0.0373, 0.015625, 3.0 / 1024, 1.5 * 0x1p-52, 0x1p-6, 1e-3, 7.0};
  const double clocks[] = {0.0, 1e-300, 0.0078, 0.99999, 1.0, 3.9999999, 1234.5678, 3501.721937, 0x1p47 - 0x1p-4,
                           0x1p47 + 0x1p-5, 1e15};
  std::uniform_int_distribution<long> small_k(0, 70), big_k(0, 200000);
  std::uniform_real_distribution<double> random_clock(0.0, 4000.0);
  int cases = 0;
  for (double step_s : steps_s)
    for (int c = 0; c < 16; ++c) {
      const double start = c < 11 ? clocks[c] : random_clock(rng);
      const long k = c % 2 ? small_k(rng) : big_k(rng);
      double want = start;
      for (long i = 0; i < k; ++i) want += step_s;
      const double got = advance_clock(start, step_s, k);
      ASSERT_EQ(std::memcmp(&got, &want, sizeof got), 0)
          << std::hexfloat << "clock " << start << " step " << step_s << " k " << k << ": " << got << " != " << want;
      ++cases;
    }
  EXPECT_EQ(cases, 9 * 16);
}

// The step `target` of a plain replay (every step passed to on_step, filtered here), or none when
// the trace drains first; steps: the steps made.
struct PickedStep {
  std::optional<ScheduledStep> step;
  long steps = 0;
};
PickedStep naive_step(const std::vector<TraceRequest>& t, const SchedulerConfig& cfg, long target, long max_steps = 0) {
  PickedStep p;
  long seen = 0;
  p.steps = replay_trace(t, cfg, [&](const ScheduledStep& st) {
    seen = st.step + 1;
    if (st.step < target) return true;
    p.step = st;
    return false;
  }, max_steps);
  EXPECT_EQ(p.steps, seen);
  return p;
}
// The same step with report_from = target: the steps before it are fast-forwarded.
PickedStep fast_step(const std::vector<TraceRequest>& t, const SchedulerConfig& cfg, long target, long max_steps = 0) {
  PickedStep p;
  int calls = 0;
  p.steps = replay_trace(t, cfg, [&](const ScheduledStep& st) {
    ++calls;
    p.step = st;
    return false;
  }, max_steps, target);
  EXPECT_LE(calls, 1);
  return p;
}

void expect_same_step(const PickedStep& fast, const PickedStep& naive) {
  EXPECT_EQ(fast.steps, naive.steps);
  ASSERT_EQ(fast.step.has_value(), naive.step.has_value());
  if (!naive.step) return;
  const ScheduledStep &a = *fast.step, &b = *naive.step;
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.clock_s, b.clock_s) << std::hexfloat << a.clock_s << " vs " << b.clock_s;  // exactly
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].context_len, b.requests[i].context_len) << "request " << i;
    EXPECT_EQ(a.requests[i].query_len, b.requests[i].query_len) << "request " << i;
  }
  EXPECT_EQ(a.trace_rows, b.trace_rows);
}

TEST(Trace, FastForwardPicksTheSameStepAsAPlainReplay) {
  std::mt19937 rng(2024);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 120; ++trial) {
    SchedulerConfig cfg;
    const int budgets[] = {1, 2, 3, 7, 16, 64, 512, 8192};
    cfg.max_num_batched_tokens = budgets[pick(0, 7)];
    cfg.max_num_seqs = pick(0, 2) == 0 ? 2147483647 : pick(1, 6);
    cfg.step_ms = std::array<double, 4>{15.0, 10.0, 0.37, 125.0}[pick(0, 3)];
    // Prompts from a few tokens to far past the budget; outputs from none to long decodes;
    // arrivals in bursts (equal timestamps) or spread over many steps. With 125 ms steps (exact
    // in binary) arrivals sit on the step grid, so some land exactly on a step's clock.
    const int rows = pick(1, 24);
    const double mean_gap = std::array<double, 4>{0.0, 0.004, 0.3, 4.0}[trial % 4];
    std::exponential_distribution<double> gap(mean_gap > 0 ? 1.0 / mean_gap : 1.0);
    std::vector<TraceRequest> t;
    double clock = 0;
    for (int i = 0; i < rows; ++i) {
      const int kind = pick(0, 9);
      const int prompt = kind < 5 ? pick(1, 40) : kind < 8 ? pick(1, 3000) : pick(1, 60000);
      const int out = pick(0, 3) == 0 ? pick(0, 2) : pick(0, 3) == 0 ? pick(0, 3000) : pick(0, 300);
      t.push_back({cfg.step_ms == 125.0 ? std::round(clock * 8) / 8 : clock, prompt, out});
      if (mean_gap > 0 && pick(0, 4) != 0) clock += gap(rng);  // some rows share a timestamp
    }
    SCOPED_TRACE(testing::Message() << "trial " << trial << " rows " << rows << " budget " << cfg.max_num_batched_tokens
                                    << " seqs " << cfg.max_num_seqs << " step_ms " << cfg.step_ms);

    const long total = replay_trace(t, cfg, [](const ScheduledStep&) { return true; });
    ASSERT_GT(total, 0);
    std::vector<long> targets = {0, 1, total - 1, total, total + 7};
    for (int i = 0; i < 4; ++i) targets.push_back(std::uniform_int_distribution<long>(0, total - 1)(rng));
    for (long target : targets) {
      SCOPED_TRACE(testing::Message() << "step " << target << " of " << total);
      expect_same_step(fast_step(t, cfg, target), naive_step(t, cfg, target));
      // max_steps still stops the replay, fast-forwarded or not.
      const long cap = std::uniform_int_distribution<long>(1, total + 2)(rng);
      expect_same_step(fast_step(t, cfg, target, cap), naive_step(t, cfg, target, cap));
      if (HasFailure()) return;
    }
  }
}

TEST(Trace, FastForwardOnTheShippedTrace) {
  const auto t = load_trace_csv(kShippedTrace);
  const SchedulerConfig cfg{2048, 128, 15.0};  // scenarios/trace_azure_conv.toml
  for (long target : {0L, 1L, 2570L, 9999L}) {
    SCOPED_TRACE(target);
    expect_same_step(fast_step(t, cfg, target), naive_step(t, cfg, target));
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

TEST(Trace, LateStepsOfHugeRequestsAreFastForwarded) {
  // Not a timing assertion: made one by one, the steps these replays pass are some 7e10 (about
  // 15 minutes at ~14 ns a step), past ctest's 600 s per-test timeout, so the suite fails if the
  // fast-forward breaks. With it the test takes milliseconds.
  TempDir dir;
  // 16 requests of 2e9 outputs, one at a time (max_num_seqs 1): 3.2e10 steps. The later rows
  // arrive during the first one's decodes and wait for the slot.
  std::string csv;
  for (int i = 0; i < 16; ++i) csv += std::to_string(i) + ",10,2000000000\n";
  Scenario s = trace_file_scenario(dir, csv, "max_num_batched_tokens = 8192\nmax_num_seqs = 1\nstep = 31999999999\n");
  std::vector<BatchShape> shapes = expand_shapes(s);
  ASSERT_EQ(shapes.size(), 1u);
  ASSERT_EQ(shapes[0].requests.size(), 1u);
  EXPECT_EQ(shapes[0].requests[0].context_len, 10 + 1999999999 - 1);  // prompt + generated - 1
  EXPECT_EQ(shapes[0].requests[0].query_len, 1);
  s.batch.trace.step = 32000000000;
  try {
    expand_shapes(s);
    FAIL() << "no error for a step past the end";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("the trace drains after 32000000000 steps"), std::string::npos) << e.what();
  }

  // Two side by side: the second arrives 1000 s in, and its admission ends a quiet stretch at the
  // first step whose clock (additions of 0.015, one by one) reaches 1000.
  const std::vector<TraceRequest> two = {{0.0, 10, 2000000000}, {1000.0, 5, 3}};
  const SchedulerConfig two_cfg{8192, 2, 15.0};
  long joins = 0;
  for (double clock = 0; clock < 1000.0; clock += 0.015) ++joins;
  const PickedStep before = fast_step(two, two_cfg, joins - 1), at = fast_step(two, two_cfg, joins);
  ASSERT_TRUE(before.step.has_value());
  ASSERT_TRUE(at.step.has_value());
  EXPECT_EQ(before.step->trace_rows, std::vector<int>{0});
  EXPECT_EQ(at.step->trace_rows, (std::vector<int>{0, 1}));
  EXPECT_EQ(at.step->requests[1].query_len, 5);
  const PickedStep last_decode = fast_step(two, two_cfg, 1999999999);
  ASSERT_TRUE(last_decode.step.has_value());
  EXPECT_EQ(last_decode.step->trace_rows, std::vector<int>{0});
  EXPECT_EQ(last_decode.step->requests[0].context_len, 10 + 1999999999 - 1);
  EXPECT_EQ(last_decode.step->clock_s, 30000000.761927065);  // 1999999999 additions of 0.015, one by one

  // A 2^31 - 1 token prompt in 16-token chunks: 134217728 steps, the last one 15 tokens.
  const std::vector<TraceRequest> huge = {{0.0, 2147483647, 1}};
  const SchedulerConfig cfg{16, 8, 15.0};
  const PickedStep last = fast_step(huge, cfg, 134217727);
  ASSERT_TRUE(last.step.has_value());
  ASSERT_EQ(last.step->requests.size(), 1u);
  EXPECT_EQ(last.step->requests[0].context_len, 2147483632);
  EXPECT_EQ(last.step->requests[0].query_len, 15);
  // 134217727 additions of 0.015 one by one (checked once with a plain loop; 0.006 below the product).
  EXPECT_EQ(last.step->clock_s, 2013265.8992612602);
  const PickedStep past = fast_step(huge, cfg, 134217728);
  EXPECT_FALSE(past.step.has_value());
  EXPECT_EQ(past.steps, 134217728);
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
