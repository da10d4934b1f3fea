#pragma once
// Environment variables for one scope, restored after: ScopedEnv for any variable (nullopt:
// unset it), HostMemoryLimit for ATTN_HOST_MEMORY_MB, which the host-memory checks
// (core/host_memory.hpp) read instead of /proc/meminfo, so a test can stand in for a small machine.
#include <cstdlib>
#include <optional>
#include <string>

namespace attn {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v;
    if (value) ::setenv(name, value->c_str(), 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class HostMemoryLimit : public ScopedEnv {
 public:
  explicit HostMemoryLimit(int mb) : ScopedEnv("ATTN_HOST_MEMORY_MB", std::to_string(mb)) {}
};

}  // namespace attn
