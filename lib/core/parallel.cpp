#include "core/parallel.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "core/env.hpp"
#include "core/error.hpp"

namespace attn {

namespace {

int hardware_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// More threads than this only add stacks and scheduling: the work is CPU-bound. A request for
// 100000 threads would run out of address space or thread ids before doing anything useful.
int max_threads() { return std::min(1024, 4 * hardware_threads()); }

}  // namespace

int default_threads() {
  const int hw = hardware_threads();
  const std::optional<int64_t> n =
      env_positive_int("ATTN_THREADS", 1 << 30, std::to_string(hw) + " (the hardware threads)");
  if (!n) return hw;
  if (*n > max_threads()) {
    env_warning("ATTN_THREADS", std::to_string(*n),
                "more than " + std::to_string(max_threads()) + " (4 x the hardware threads, at most 1024); using " +
                    std::to_string(max_threads()));
    return max_threads();
  }
  return static_cast<int>(*n);
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int threads) {
  if (n <= 0) return;
  if (threads <= 0) threads = default_threads();
  threads = std::min(threads, max_threads());
  const int64_t workers = std::min<int64_t>(threads, n);
  if (workers <= 1) {
    fn(0, n);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers));
  try {
    for (int64_t w = 0; w < workers; ++w) {
      const int64_t begin = n * w / workers, end = n * (w + 1) / workers;
      pool.emplace_back([&, begin, end] {
        try {
          fn(begin, end);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (!error) error = std::current_exception();
        }
      });
    }
  } catch (const std::system_error& e) {
    // A joinable std::thread destroyed unjoined calls std::terminate: join the workers that
    // started before reporting that the rest could not (their chunks were never run).
    for (auto& t : pool) t.join();
    throw RuntimeError("cannot start worker thread " + std::to_string(pool.size() + 1) + " of " +
                       std::to_string(workers) + ": " + e.what() + " (set ATTN_THREADS lower)");
  }
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace attn
