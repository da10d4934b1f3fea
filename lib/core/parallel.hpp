#pragma once
#include <cstdint>
#include <functional>

namespace attn {

// Hardware threads to use (ATTN_THREADS overrides; at least 1, at most 4 x the hardware threads
// and 1024; a value that is not a positive integer warns on stderr and is ignored).
int default_threads();

// Runs fn(begin, end) over [0, n) split into contiguous chunks on up to `threads` std::threads
// (0 = default_threads()). Exceptions from workers are rethrown on the caller.
void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn, int threads = 0);

}  // namespace attn
