#pragma once
// Runs the attn-bench executable of this build with `args` (a shell command line), as a user
// would, or any other command (run_command): its exit code and its stdout and stderr together.
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace attn_test {

struct CliResult {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Any shell command line: its exit code and its stdout and stderr together.
inline CliResult run_command(const std::string& command) {
  const std::string cmd = command + " 2>&1";
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

// attn-bench of this build, run by `prefix` when given (e.g. "setpriv ... " to run it as another user).
inline CliResult run_cli(const std::string& args, const std::string& prefix = "") {
  return run_command(prefix + std::string(ATTN_BINARY_DIR) + "/apps/attn-bench " + args);
}

}  // namespace attn_test
