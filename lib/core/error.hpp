#pragma once
#include <stdexcept>
#include <string>

namespace attn {

// Exit codes of every attn-bench verb (documented in README.md and `--help`).
enum ExitCode : int {
  kExitOk = 0,
  kExitCheckFailed = 1,  // a check or a regression gate failed
  kExitInput = 2,        // usage or input error: bad scenario, flag, file
  kExitRuntime = 3,      // runtime or device error (CUDA failure, out of memory, no GPU)
};

// Bad user input. The message names the file, line, key and value, and gives a hint.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A failure while running (CUDA error, allocation failure, I/O error on output).
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Formats "file:line: key = value: what (hint)" consistently for InputError messages.
std::string input_error_message(const std::string& file, long line, const std::string& key,
                                const std::string& value, const std::string& what,
                                const std::string& hint = {});

}  // namespace attn
