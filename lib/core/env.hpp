#pragma once
// The A/B switches of the environment (docs/PERF_NOTES.md lists them): a switch is on unless its
// variable is set to "0". Callers read each once per process (a function-local static).
#include <cstdlib>
#include <cstring>

namespace attn {

inline bool ab_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace attn
