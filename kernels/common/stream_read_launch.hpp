#pragma once
// A bare streaming read of a device buffer. Two users: the cold-L2 flush of the device timing
// (ColdL2, lib/timing/cold_l2.hpp) and the read floor of memory-bound rows
// (lib/timing/read_floor.hpp). Plain C++: includable from host .cpp files; pointers are device
// memory.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace attn {

// Reads `bytes` (a multiple of 16) of `buf` through L2 and folds them into one word that reaches
// *sink only on an impossible match, so the reads cannot be dropped. Reading twice the L2 size
// leaves every L2 line clean and holding `buf`: none of the next kernel's inputs stay cached, and
// none of the previous writes (the flush of a memset, the last run's outputs) are left dirty for
// the next kernel to write back to DRAM inside its own timing.
// `ctas`: the grid of 256-thread CTAs (a few per SM keep the device's loads in flight).
void launch_stream_read(const void* buf, std::size_t bytes, uint32_t* sink, int ctas, cudaStream_t stream);

}  // namespace attn
