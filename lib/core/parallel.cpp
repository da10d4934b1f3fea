#include "core/parallel.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace attn {

int default_threads() {
  if (const char* env = std::getenv("ATTN_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int threads) {
  if (n <= 0) return;
  if (threads <= 0) threads = default_threads();
  const int64_t workers = std::min<int64_t>(threads, n);
  if (workers <= 1) {
    fn(0, n);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers));
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
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace attn
