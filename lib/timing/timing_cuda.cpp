// Device timing (nvbench style): CUDA events on the instance's stream around each launch
// sequence, one sample per launch, the stream synchronized after each sample. Cold L2: before
// every sample, outside the events, ColdL2 reads a scratch buffer of twice the L2 size through
// L2, so the timed run finds none of its inputs there and no dirty line to write back
// (cold_l2.hpp). CUDA graph mode captures run() once and times the replays, which removes the
// host launch gaps of multi-kernel backends.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "core/device.hpp"
#include "timing/cold_l2.hpp"
#include "timing/timing.hpp"

namespace attn {
namespace {

// Owners of the captured graph and its executable instance (destructors never throw).
struct GraphGuard {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~GraphGuard() {
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
  }
};

// Captures one sample (inst.run() or inst.run_attention()) on `stream` into g. A throw inside it
// still ends the capture, so the stream is usable afterwards.
void capture_run(BackendInstance& inst, TimedPart part, cudaStream_t stream, GraphGuard& g) {
  ATTN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  try {
    run_timed_part(inst, part);
  } catch (...) {
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(stream, &broken);
    if (broken) (void)cudaGraphDestroy(broken);
    (void)cudaGetLastError();
    throw;
  }
  ATTN_CUDA_CHECK(cudaStreamEndCapture(stream, &g.graph));
  ATTN_CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
}

constexpr int kPlanCalls = 5;

}  // namespace

Timing time_device_instance(BackendInstance& inst, const TimingOptions& opts) {
  if (opts.iterations < 1) throw InputError("timing: iterations must be >= 1");
  const auto stream = static_cast<cudaStream_t>(inst.stream());
  if (opts.cuda_graph && stream == nullptr)
    throw RuntimeError("timing: --cuda-graph needs a backend that runs on its own stream (the legacy default "
                       "stream cannot be captured)");

  // plan(): host scheduling, timed on its own; the last call leaves the instance planned.
  std::vector<double> plan_us;
  for (int i = 0; i < kPlanCalls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    inst.plan();
    const auto t1 = std::chrono::steady_clock::now();
    plan_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }

  std::optional<ColdL2> cold;
  if (opts.cold_l2) cold.emplace(stream);

  GraphGuard graph;
  // One eager run() first: the caches that run_attention() reads, and lazy module loading and
  // first-touch out of the capture.
  if (opts.cuda_graph || opts.part == TimedPart::attention) {
    inst.run();
    ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  if (opts.cuda_graph) {
    if (opts.part == TimedPart::attention) {  // its own launches loaded too
      inst.run_attention();
      ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    capture_run(inst, opts.part, stream, graph);
  }
  auto launch = [&] {
    if (graph.exec)
      ATTN_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream));
    else
      run_timed_part(inst, opts.part);
  };

  for (int i = 0; i < opts.warmup; ++i) launch();
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));

  Event start, stop;
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(opts.iterations));
  for (int i = 0; i < opts.iterations; ++i) {
    if (cold) cold->flush(stream);
    start.record(stream);
    launch();
    stop.record(stream);
    stop.synchronize();
    samples.push_back(1000.0 * static_cast<double>(stop.elapsed_ms_since(start)));
  }

  Timing t = summarize_samples(std::move(samples));
  if (graph.exec && opts.replay_for_check) {
    if (opts.part == TimedPart::attention) {  // the graph writes no cache: the step's caches, NaN O
      inst.run();
      inst.poison_outputs();
    } else {
      inst.poison();
    }
    ATTN_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream));
    t.graph_output = inst.fetch();
  }
  t.plan_us = summarize_samples(std::move(plan_us)).median_us;
  t.method = opts.cuda_graph ? "cuda_graph" : "cuda_events";
  t.cold_l2 = opts.cold_l2;
  return t;
}

}  // namespace attn
