#pragma once
// Helpers of the GPU tests: they skip, with the runtime's reason, where no CUDA device is usable
// (CI has none), and never pass vacuously there.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/backend.hpp"
#include "core/device.hpp"
#include "metadata/common.hpp"
#include "mha_spec.hpp"
#include "model/scenario.hpp"
#include "reference/reference.hpp"
#include "validate/validate.hpp"

// First statement of every GPU test body.
#define ATTN_REQUIRE_CUDA_DEVICE()                                     \
  do {                                                                 \
    std::string attn_why_;                                             \
    if (!::attn::cuda_device_present(&attn_why_))                      \
      GTEST_SKIP() << attn_why_;                                       \
  } while (0)

// An Outcome that must pass, with what a failure needs to be read.
#define EXPECT_VALID(r)                                                                                          \
  EXPECT_TRUE((r).v.pass) << (r).v.failure << " | plan: " << (r).plan << " | max_abs " << (r).v.max_abs_err     \
                          << " rel_l2 " << (r).v.rel_l2 << " x floor " << (r).v.err_over_floor                   \
                          << " lse_err " << (r).v.lse_max_abs_err << " unwritten " << (r).v.unwritten          \
                          << " nan " << (r).v.nan_mismatches

namespace attn::testing {

// An sm_90 (Hopper) device: the one the sm_90a kernels run on.
inline bool sm90_device() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;
}

// SMs of the current device (0 where it cannot be told).
inline int device_sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 0;
  return sms;
}

// Many short prefills: 16 ragged ones of 512-612 tokens, (context_len, query_len). At 8/2 heads of
// size 128 they are 572 sm_90a work items, which the kernel's snake of fixed rounds leaves uneven
// on 132 SMs, so the planner lists each CTA's items (balance_fixed_rounds, "rounds=balanced").
inline std::vector<RequestShape> short_prefill_rounds() {
  std::vector<RequestShape> r;
  for (int i = 0; i < 16; ++i) r.push_back({0, 512 + (i * 37) % 101});
  return r;
}

// Two causal prefills whose K/V outgrow L2 at 32/32 heads of 128 (96 MB): the planner's list deals
// their sm_90a items in four groups of (kv head, sequence) pairs ("l2_groups=4" on 132 SMs;
// balance_fixed_rounds). Validate them on a sample of (request, head) pairs: the whole reference is
// ~70 GFLOP of float64.
inline std::vector<RequestShape> l2_grouped_prefill() { return {{0, 3000}, {37, 2900}}; }

// One backend's run of a batch, validated: what it wrote, the verdict and its plan.
struct Outcome {
  AttentionOutput out;
  ValidationResult v;
  std::string plan;
};

// Create, plan, poison, run and fetch on `backend`: one step's output and its plan summary (the
// instance and its caches are gone when it returns).
inline std::pair<AttentionOutput, std::string> run_once(const Backend& backend, const Batch& b,
                                                        const CommonAttentionMetadata& m, const RunOptions& opts) {
  auto inst = backend.create(b, m, opts);
  inst->plan();
  inst->poison();
  inst->run();
  AttentionOutput out = inst->fetch();
  return {std::move(out), inst->plan_summary()};
}

// run_once, then validated against the float64 reference on max_pairs sampled (request, head)
// pairs (0 = all) under the model dtype's default budget.
inline Outcome run_and_validate(const Backend& backend, const Batch& b, const RunOptions& opts = {},
                                int64_t max_pairs = 0) {
  const CommonAttentionMetadata m = build_common_metadata(b);
  const Support sup = backend.supports(b.spec, b);
  EXPECT_TRUE(sup.ok) << sup.reason;
  Outcome r;
  std::tie(r.out, r.plan) = run_once(backend, b, m, opts);
  ReferenceOptions ro;
  ro.max_pairs = max_pairs;
  ro.sample_seed = 5;
  r.v = validate_output(b, r.out, compute_reference(b, reference_options_for(r.out, ro)), default_budget(b.spec.dtype));
  return r;
}

// Copies a whole device buffer back to the host.
template <class T = uint8_t>
std::vector<T> download_all(const DeviceBuffer& buf) {
  std::vector<T> out(buf.bytes() / sizeof(T));
  buf.download(out.data(), out.size() * sizeof(T));
  return out;
}

template <class T>
DeviceBuffer upload_vector(const std::vector<T>& v) {
  DeviceBuffer buf(v.size() * sizeof(T));
  buf.upload(v.data(), buf.bytes());
  return buf;
}

// Captures inst.run() into a CUDA graph, poisons the outputs and replays the graph once: *out is
// what the replay wrote. A CUDA error is a fatal failure of the calling test (check
// HasFatalFailure() after the call).
inline void replay_in_graph(BackendInstance& inst, AttentionOutput* out) {
  inst.synchronize();
  auto stream = static_cast<cudaStream_t>(inst.stream());
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  inst.run();
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  ASSERT_EQ(made, cudaSuccess);
  inst.poison();
  const cudaError_t launched = cudaGraphLaunch(exec, stream);
  if (launched == cudaSuccess) *out = inst.fetch();
  cudaGraphExecDestroy(exec);
  ASSERT_EQ(launched, cudaSuccess);
}

// [run] num_layers: an instance of `layers` layers (planned once, each layer's cache write and
// attention over a cache of its own) is poisoned (every layer's new slots) and run, twice. Each
// time it must pass the reference and give bitwise the one-layer instance's O and LSE: a layer that
// reads a cache its own write did not reach reads the poisoned new slots, and the last layer's
// output is what fetch() returns. Then the same with every cache but the last NaN throughout
// (RunOptions::nan_all_but_last_layer): a last layer that reads any other cache, or a loop that
// runs every layer over one cache, gives NaN.
inline void expect_layers_like_one(const Backend& backend, const Batch& b, int layers, RunOptions opts = {}) {
  const CommonAttentionMetadata m = build_common_metadata(b);
  const Support sup = backend.supports(b.spec, b);
  ASSERT_TRUE(sup.ok) << sup.reason;
  const AttentionOutput want = run_once(backend, b, m, opts).first;
  opts.num_layers = layers;
  auto many = backend.create(b, m, opts);
  many->plan();
  ReferenceOptions ro;
  ro.max_pairs = 64;
  ro.sample_seed = 5;
  const ReferenceResult ref = compute_reference(b, reference_options_for(want, ro));
  for (int launch = 0; launch < 2; ++launch) {
    many->poison();
    many->run();
    const AttentionOutput got = many->fetch();
    const ValidationResult v = validate_output(b, got, ref, default_budget(b.spec.dtype));
    EXPECT_TRUE(v.pass) << backend.name() << " " << layers << " layers, launch " << launch << ": " << v.failure
                        << " | plan: " << many->plan_summary();
    EXPECT_TRUE(got.o == want.o) << backend.name() << ": " << layers << " layers' O differs from one layer's";
    EXPECT_TRUE(got.lse == want.lse) << backend.name() << ": " << layers << " layers' LSE differs from one layer's";
  }
  many.reset();
  opts.nan_all_but_last_layer = true;
  const AttentionOutput got = run_once(backend, b, m, opts).first;
  const ValidationResult v = validate_output(b, got, ref, default_budget(b.spec.dtype));
  EXPECT_TRUE(v.pass) << backend.name() << " " << layers << " layers, every cache but the last NaN: " << v.failure;
  EXPECT_TRUE(got.o == want.o) << backend.name() << ": the last layer's O differs from one layer's";
}

// Index of the first differing byte, or -1.
inline long first_mismatch(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<long>(i);
  return -1;
}

}  // namespace attn::testing
