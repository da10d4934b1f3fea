#pragma once
// Timing of a bound backend (nvbench-style): warm-up, N samples, median/min/max/stdev.
// Host instances: steady_clock around each run(). Device instances: CUDA events around each
// launch sequence (or its CUDA-graph replay), with L2 flushed before every sample in cold mode.
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.hpp"

namespace attn {

struct TimingOptions {
  int warmup = 10;
  int iterations = 50;
  bool cold_l2 = true;
  bool cuda_graph = false;
  // step: each sample is run(). attention: one untimed run() first (the caches then hold the
  // step's K/V), then each sample (and warm-up, and the captured graph) is run_attention().
  TimedPart part = TimedPart::step;
  // Host (wall-clock) rows only, as nvbench's --timeout: the samples stop once they have taken
  // this many seconds and number at least kMinHostSamples (or `iterations`, if fewer), and the
  // warm-up once it has taken a fifth of it (at least one call). A CPU row of a real batch takes
  // seconds per call: 10 + 50 calls would be minutes. 0: no budget (every call runs). The row's
  // `samples` says how many ran. Device rows always take every call (they are microseconds).
  double host_timeout_s = 5.0;
  // cuda_graph: after the samples, poison() the instance (attention: run(), then poison_outputs(),
  // since that graph writes no cache) and replay the timed graph once more; Timing::graph_output
  // holds what it wrote (fetch()), for the caller to check.
  bool replay_for_check = false;
};
inline constexpr int kMinHostSamples = 3;

struct Timing {
  int samples = 0;
  double median_us = 0, min_us = 0, max_us = 0, mean_us = 0, stdev_us = 0;
  double plan_us = 0;   // host metadata/scheduling time (median of the plan calls)
  std::string method;   // "wall" | "cuda_events" | "cuda_graph"
  bool cold_l2 = false;
  // cuda_graph with replay_for_check: what the timed graph wrote when replayed once more after
  // poison(). A run() that is right when launched but not when captured (work on another stream, a
  // host-side step, a value read at capture time) would be timed without ever being checked.
  std::optional<AttentionOutput> graph_output;
};

Timing summarize_samples(std::vector<double> samples_us);
// Dispatches on inst.on_device(): wall clock on the host, CUDA events on the device.
Timing time_instance(BackendInstance& inst, const TimingOptions& opts);
// What one sample runs: inst.run() or inst.run_attention() (opts.part).
void run_timed_part(BackendInstance& inst, TimedPart part);
#if defined(ATTN_WITH_CUDA)
// CUDA events on inst.stream(); cold_l2 flushes L2 before each sample; cuda_graph captures one
// sample (run_timed_part) once and times graph replays. Defined in timing_cuda.cpp.
Timing time_device_instance(BackendInstance& inst, const TimingOptions& opts);
#endif

}  // namespace attn
