// Sample statistics and the host (wall-clock) timer. Device instances go to
// time_device_instance (timing_cuda.cpp), which times with CUDA events.
#include "timing/timing.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <string>

#include "core/error.hpp"

namespace attn {

namespace {

// plan() is host scheduling that real serving runs once per step; a few calls give a stable
// median without making plan-heavy backends slow to benchmark.
constexpr int kPlanCalls = 5;

double median_of_sorted(const std::vector<double>& s) {
  const size_t n = s.size();
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

template <class F>
double wall_us(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

}  // namespace

void run_timed_part(BackendInstance& inst, TimedPart part) {
  if (part == TimedPart::attention)
    inst.run_attention();
  else
    inst.run();
}

Timing summarize_samples(std::vector<double> samples_us) {
  Timing t;
  t.samples = static_cast<int>(samples_us.size());
  if (samples_us.empty()) return t;
  std::sort(samples_us.begin(), samples_us.end());
  const double n = static_cast<double>(samples_us.size());
  t.median_us = median_of_sorted(samples_us);
  t.min_us = samples_us.front();
  t.max_us = samples_us.back();
  t.mean_us = std::accumulate(samples_us.begin(), samples_us.end(), 0.0) / n;
  if (samples_us.size() > 1) {  // sample (n - 1) standard deviation
    double ss = 0;
    for (double x : samples_us) ss += (x - t.mean_us) * (x - t.mean_us);
    t.stdev_us = std::sqrt(ss / (n - 1));
  }
  return t;
}

Timing time_instance(BackendInstance& inst, const TimingOptions& opts) {
  if (!(opts.host_timeout_s >= 0)) {
    throw InputError(InputSite{"--host-timeout", 0, "host_timeout_s", std::to_string(opts.host_timeout_s),
                               "out of range", "seconds >= 0 (0: no budget)"});
  }
  if (opts.iterations < 1 || opts.warmup < 0) {
    throw InputError(InputSite{"[run]", 0, opts.iterations < 1 ? "iterations" : "warmup",
                                         std::to_string(opts.iterations < 1 ? opts.iterations : opts.warmup),
                                         "out of range", "iterations >= 1, warmup >= 0"});
  }
  if (inst.on_device()) {
#if defined(ATTN_WITH_CUDA)
    return time_device_instance(inst, opts);
#else
    throw RuntimeError("time_instance: a device instance in a build without CUDA (rebuild with -DATTN_CUDA=ON)");
#endif
  }

  std::vector<double> plan_samples;
  plan_samples.reserve(kPlanCalls);
  for (int i = 0; i < kPlanCalls; ++i) plan_samples.push_back(wall_us([&] { inst.plan(); }));
  std::sort(plan_samples.begin(), plan_samples.end());

  if (opts.part == TimedPart::attention) {  // the caches the attention reads: the step's
    inst.run();
    inst.synchronize();
  }
  auto run_once = [&] {
    run_timed_part(inst, opts.part);
    inst.synchronize();  // host backends may run on worker threads: the sample ends when they do
  };
  const double budget_us = opts.host_timeout_s > 0 ? opts.host_timeout_s * 1e6 : 0.0;
  double spent_us = 0;
  for (int i = 0; i < opts.warmup; ++i) {
    if (budget_us > 0 && i > 0 && spent_us >= budget_us / 5) break;
    spent_us += wall_us(run_once);
  }
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(opts.iterations));
  spent_us = 0;
  for (int i = 0; i < opts.iterations; ++i) {
    if (budget_us > 0 && i >= kMinHostSamples && spent_us >= budget_us) break;
    samples.push_back(wall_us(run_once));
    spent_us += samples.back();
  }

  Timing t = summarize_samples(std::move(samples));
  t.plan_us = median_of_sorted(plan_samples);
  t.method = "wall";
  // Flushing a device L2 means nothing here and the host caches are not flushed: every host
  // sample is warm, and the row says so.
  t.cold_l2 = false;
  return t;
}

}  // namespace attn
