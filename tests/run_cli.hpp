#pragma once
// Runs the attn-bench executable of this build with `args` (a shell command line), as a user
// would: its exit code and its stdout and stderr together.
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace attn_test {

struct CliResult {
  int code = -1;
  std::string output;  // stdout and stderr together
};

inline CliResult run_cli(const std::string& args) {
  const std::string cmd = std::string(ATTN_BINARY_DIR) + "/apps/attn-bench " + args + " 2>&1";
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace attn_test
