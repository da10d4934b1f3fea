// summarize_samples and the host (wall-clock) path of time_instance.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "timing/timing.hpp"

namespace attn {
namespace {

TEST(TimingSummary, OddEvenEmptySingle) {
  Timing t = summarize_samples({5, 1, 3, 2, 4});
  EXPECT_EQ(t.samples, 5);
  EXPECT_DOUBLE_EQ(t.median_us, 3);
  EXPECT_DOUBLE_EQ(t.min_us, 1);
  EXPECT_DOUBLE_EQ(t.max_us, 5);
  EXPECT_DOUBLE_EQ(t.mean_us, 3);
  EXPECT_DOUBLE_EQ(t.stdev_us, std::sqrt(2.5));  // sample stdev (n - 1)

  t = summarize_samples({8, 2, 4, 6});
  EXPECT_DOUBLE_EQ(t.median_us, 5);  // mean of the middle two

  t = summarize_samples({});
  EXPECT_EQ(t.samples, 0);
  EXPECT_EQ(t.median_us, 0);

  t = summarize_samples({7.5});
  EXPECT_DOUBLE_EQ(t.median_us, 7.5);
  EXPECT_EQ(t.stdev_us, 0);
}

TEST(TimingSummary, RandomSamplesAgreeWithDirectFormulas) {
  std::mt19937 rng(17);
  std::lognormal_distribution<double> d(3.0, 0.5);
  std::vector<double> s(101);
  for (double& x : s) x = d(rng);
  const Timing t = summarize_samples(s);
  std::vector<double> sorted = s;
  std::nth_element(sorted.begin(), sorted.begin() + 50, sorted.end());
  EXPECT_DOUBLE_EQ(t.median_us, sorted[50]);
  EXPECT_DOUBLE_EQ(t.min_us, *std::min_element(s.begin(), s.end()));
  EXPECT_DOUBLE_EQ(t.max_us, *std::max_element(s.begin(), s.end()));
  const double mean = std::accumulate(s.begin(), s.end(), 0.0) / s.size();
  double ss = 0;
  for (double x : s) ss += (x - mean) * (x - mean);
  EXPECT_NEAR(t.mean_us, mean, 1e-9 * mean);
  EXPECT_NEAR(t.stdev_us, std::sqrt(ss / 100), 1e-9 * mean);
  EXPECT_LE(t.min_us, t.median_us);
  EXPECT_LE(t.median_us, t.max_us);
}

// A host instance that spins for a fixed time per run() (and per run_attention(), its own time)
// and counts its calls.
class SpinInstance : public BackendInstance {
 public:
  explicit SpinInstance(double run_us, bool device = false, double attention_us = 0)
      : run_us_(run_us), attention_us_(attention_us), device_(device) {}
  void plan() override { ++plans; }
  void run() override {
    ++runs;
    spin(run_us_);
  }
  void run_attention() override {
    ++attention_runs;
    spin(attention_us_);
  }
  void poison() override {}
  void poison_outputs() override {}
  void synchronize() override { ++syncs; }
  AttentionOutput fetch() override { return {}; }
  bool on_device() const override { return device_; }
  int plans = 0, runs = 0, attention_runs = 0, syncs = 0;

 private:
  static void spin(double us) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(us);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  double run_us_;
  double attention_us_;
  bool device_;
};

TEST(TimingHost, WallClockAroundEachRun) {
  SpinInstance inst(200.0);
  TimingOptions opts;
  opts.warmup = 3;
  opts.iterations = 7;
  opts.cold_l2 = true;  // not meaningful on the host: recorded as false
  const Timing t = time_instance(inst, opts);
  EXPECT_EQ(inst.runs, 10);
  EXPECT_EQ(inst.syncs, 10);
  EXPECT_EQ(inst.plans, 5);
  EXPECT_EQ(t.samples, 7);
  EXPECT_EQ(t.method, "wall");
  EXPECT_FALSE(t.cold_l2);
  EXPECT_GE(t.min_us, 200.0);
  EXPECT_LT(t.median_us, 200.0 * 50);  // loose: a shared machine may preempt
  EXPECT_LE(t.min_us, t.median_us);
  EXPECT_LE(t.median_us, t.max_us);
  EXPECT_GE(t.plan_us, 0.0);
  EXPECT_LT(t.plan_us, t.min_us);  // plan() does nothing here
}

// --timed attention: one untimed run() first (the caches the attention reads), then every warm-up
// call and sample is run_attention().
TEST(TimingHost, AttentionAloneAfterOneStep) {
  SpinInstance inst(5000.0, false, 200.0);
  TimingOptions opts;
  opts.warmup = 3;
  opts.iterations = 7;
  opts.part = TimedPart::attention;
  const Timing t = time_instance(inst, opts);
  EXPECT_EQ(inst.runs, 1);
  EXPECT_EQ(inst.attention_runs, 10);
  EXPECT_EQ(t.samples, 7);
  EXPECT_GE(t.min_us, 200.0);
  EXPECT_LT(t.min_us, 5000.0);  // not the step's 5 ms: the samples ran the attention alone
}

// A CPU row of a real batch takes seconds per call: the budget stops its warm-up after a fifth of
// it (one call at least) and its samples after all of it (kMinHostSamples at least), where
// 10 + 50 calls would take minutes.
TEST(TimingHost, BudgetStopsSlowRowsAfterTheMinimumSamples) {
  SpinInstance slow(20000.0);  // 20 ms a call
  TimingOptions opts;
  opts.warmup = 10;
  opts.iterations = 50;
  opts.host_timeout_s = 0.01;  // below one call: one warm-up, the minimum samples
  Timing t = time_instance(slow, opts);
  EXPECT_EQ(t.samples, kMinHostSamples);
  EXPECT_EQ(slow.runs, 1 + kMinHostSamples);

  SpinInstance mid(2000.0);  // 2 ms a call, 50 ms of budget: ~10 warm-up calls' worth, then ~25 samples
  opts.host_timeout_s = 0.05;
  t = time_instance(mid, opts);
  EXPECT_GT(t.samples, kMinHostSamples);
  EXPECT_LT(t.samples, 50);

  // No budget, or a fast row: every call runs.
  SpinInstance all(2000.0);
  opts.warmup = 2;
  opts.iterations = 6;
  opts.host_timeout_s = 0;
  t = time_instance(all, opts);
  EXPECT_EQ(t.samples, 6);
  EXPECT_EQ(all.runs, 8);
  SpinInstance fast(10.0);
  opts.host_timeout_s = 5.0;
  t = time_instance(fast, opts);
  EXPECT_EQ(t.samples, 6);
  EXPECT_EQ(fast.runs, 8);

  opts.host_timeout_s = -1;
  EXPECT_THROW(time_instance(fast, opts), InputError);
}

TEST(TimingHost, RejectsBadOptions) {
  SpinInstance inst(1.0);
  TimingOptions opts;
  opts.iterations = 0;
  EXPECT_THROW(time_instance(inst, opts), InputError);
  opts.iterations = 1;
  opts.warmup = -1;
  EXPECT_THROW(time_instance(inst, opts), InputError);
  EXPECT_EQ(inst.runs, 0);
}

#if !defined(ATTN_WITH_CUDA)
TEST(TimingHost, DeviceInstanceNeedsACudaBuild) {
  SpinInstance inst(1.0, /*device=*/true);
  EXPECT_THROW(time_instance(inst, {}), RuntimeError);
}
#endif

}  // namespace
}  // namespace attn
