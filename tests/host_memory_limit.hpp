#pragma once
// ATTN_HOST_MEMORY_MB for one scope: the host-memory checks (core/host_memory.hpp) read it
// instead of /proc/meminfo, so a test can stand in for a small machine. Restores the old value.
#include <cstdlib>
#include <optional>
#include <string>

namespace attn {

class HostMemoryLimit {
 public:
  explicit HostMemoryLimit(int mb) {
    if (const char* v = std::getenv("ATTN_HOST_MEMORY_MB")) old_ = v;
    ::setenv("ATTN_HOST_MEMORY_MB", std::to_string(mb).c_str(), 1);
  }
  ~HostMemoryLimit() {
    if (old_) ::setenv("ATTN_HOST_MEMORY_MB", old_->c_str(), 1);
    else ::unsetenv("ATTN_HOST_MEMORY_MB");
  }
  HostMemoryLimit(const HostMemoryLimit&) = delete;
  HostMemoryLimit& operator=(const HostMemoryLimit&) = delete;

 private:
  std::optional<std::string> old_;
};

}  // namespace attn
