#pragma once
// The read floor of a memory-bound row: how long a bare streaming read of the row's bytes takes
// on this device, timed the way the row is (CUDA events, from the same cold and clean L2 as every
// sample: ColdL2), so its launch, ramp-up and tail are in it. The copy ceiling is measured on
// 1 GiB, where those fixed costs vanish; on a 270 MB decode they are ~10 % of the time, and no
// kernel that must read those bytes can beat the floor. pct_read_floor = floor / row time.
#include <string>

namespace attn {

struct ReadFloor {
  double us = -1;   // median microseconds; < 0: not measured (why says so)
  std::string why;
};

// Median of the fastest of a few grids (2, 4, 8 CTAs of 256 threads per SM), 15 samples each,
// reading `bytes` (rounded up to 16) of a scratch buffer allocated for the call. Results are
// kept per byte count for the process (rows of several backends share one). CPU builds, no
// device, more bytes than half of the free device memory, or no memory for the buffer: us = -1
// and the reason.
ReadFloor measure_read_floor(double bytes);

}  // namespace attn
