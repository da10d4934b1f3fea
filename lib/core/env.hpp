#pragma once
// The A/B switches of the environment (docs/PERF_NOTES.md lists them): a switch is on unless its
// variable is set to "0". Callers read each once per process (a function-local static).
// Numeric settings (ATTN_THREADS, ATTN_HOST_MEMORY_MB, ATTN_FA_FUSED_WRITE_ITEMS) are read
// strictly: a value that is not a whole number in the setting's range is never half-read
// (atoi("1e3") = 1); it gets a one-line warning naming the variable and its value, and the caller
// falls back to its default.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace attn {

inline bool ab_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// One line on stderr per (variable, value): the settings are read on every call (tests change
// them at run time), and a bad value must not repeat its warning thousands of times.
inline void env_warning(const char* name, const std::string& value, const std::string& what) {
  static std::mutex m;
  static std::set<std::string> warned;
  const std::lock_guard<std::mutex> lock(m);
  if (!warned.insert(std::string(name) + '=' + value).second) return;
  std::fprintf(stderr, "attn-bench: warning: %s = \"%s\": %s\n", name, value.c_str(), what.c_str());
}

// The integer in [lo, hi] that variable `name` holds; nullopt when unset, or (with a warning
// that says `fallback` is used instead) when it is not such an integer.
inline std::optional<int64_t> env_int_in(const char* name, int64_t lo, int64_t hi, const std::string& fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  const std::string s(v);
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || n < lo || n > hi) {
    env_warning(name, s,
                "not a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]; using " + fallback);
    return std::nullopt;
  }
  return n;
}
// The same in [1, max].
inline std::optional<int64_t> env_positive_int(const char* name, int64_t max, const std::string& fallback) {
  return env_int_in(name, 1, max, fallback);
}

}  // namespace attn
