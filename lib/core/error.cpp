#include "core/error.hpp"

namespace attn {

std::string input_error_message(const std::string& file, long line, const std::string& key,
                                const std::string& value, const std::string& what,
                                const std::string& hint) {
  std::string m = file;
  if (line > 0) m += ":" + std::to_string(line);
  m += ": ";
  if (!key.empty()) {
    m += key;
    if (!value.empty()) m += " = " + value;
    m += ": ";
  }
  m += what;
  if (!hint.empty()) m += " (" + hint + ")";
  return m;
}

}  // namespace attn
