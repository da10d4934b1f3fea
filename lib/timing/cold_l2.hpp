#pragma once
// The cold-L2 state every device timing starts a sample from: none of the run's inputs in L2 and
// no dirty line in it. flush() reads a scratch buffer of twice the L2 size through L2 (outside the
// timed events). Overwriting such a buffer instead, as nvbench does, evicts the inputs too but
// leaves an L2 full of dirty lines that the timed kernel then writes back to DRAM in its own time:
// on the H100 that added 9-10 us to every memory-bound run (decode 64 x 4k 398.5 -> 389.6 us,
// prefill 2 x 4k 600.4 -> 598.4 us). ATTN_TIMING_FLUSH=write restores the overwrite, to compare
// with figures taken that way. CUDA builds only (cold_l2_cuda.cpp).
#include <cuda_runtime_api.h>

#include <functional>

#include "core/device.hpp"

namespace attn {

class ColdL2 {
 public:
  explicit ColdL2(cudaStream_t stream);  // sizes the buffer from the current device's L2
  void flush(cudaStream_t stream);       // stream-ordered; call before each timed sample
  const char* method() const { return write_ ? "overwrite of 2 x L2" : "read of 2 x L2"; }

 private:
  DeviceBuffer buffer_, sink_;
  bool write_ = false;
  int ctas_ = 0;  // flush grid: 4 CTAs per SM
  int calls_ = 0;
};

// Median microseconds of `samples` event-timed calls of f() on `stream`, each from a flushed L2
// (the flush outside the events), after `warmup` untimed calls: the device ceilings and the read
// floor (backend runs go through time_device_instance, which also keeps min, max and stdev).
double time_cold_median_us(cudaStream_t stream, ColdL2& cold, int warmup, int samples, const std::function<void()>& f);

}  // namespace attn
