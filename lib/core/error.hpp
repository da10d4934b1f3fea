#pragma once
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace attn {

// Exit codes of every attn-bench verb (documented in README.md and `--help`).
enum ExitCode : int {
  kExitOk = 0,
  kExitCheckFailed = 1,  // a check or a regression gate failed
  kExitInput = 2,        // usage or input error: bad scenario, flag, file
  kExitRuntime = 3,      // runtime or device error (CUDA failure, out of memory, no GPU)
  kExitNothingChecked = 4,  // nothing was checked, so a gate that checked nothing never reads as a pass: run / validate
                            // skipped every row, or every row of a backend named in --backend; report compare
                            // compared no row for time and found no failure
};

// Where bad input was found and what is wrong with it: "file:line: key = value: what (hint)".
// line 0: no line; key and value may be empty.
struct InputSite {
  InputSite(std::string file_, long line_, std::string key_, std::string value_, std::string what_,
            std::string hint_ = {})
      : file(std::move(file_)), line(line_), key(std::move(key_)), value(std::move(value_)), what(std::move(what_)),
        hint(std::move(hint_)) {}
  std::string file;
  long line = 0;
  std::string key, value, what, hint;
};

// Bad user input. The message names the file, line, key and value, and gives a hint; an error
// built from its InputSite keeps it, so that a caller can point it elsewhere (a sweep re-points a
// case's scenario error at the sweep file's own line and key) without reading the text back.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
  explicit InputError(InputSite site);
  const std::optional<InputSite>& site() const { return site_; }

 private:
  std::optional<InputSite> site_;
};

// A failure while running (CUDA error, allocation failure, I/O error on output).
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Formats "file:line: key = value: what (hint)" consistently for InputError messages.
std::string input_error_message(const std::string& file, long line, const std::string& key,
                                const std::string& value, const std::string& what,
                                const std::string& hint = {});
std::string input_error_message(const InputSite& s);

}  // namespace attn
