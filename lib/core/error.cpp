#include "core/error.hpp"

#include <fmt/format.h>

namespace attn {

std::string input_error_message(const std::string& file, long line, const std::string& key,
                                const std::string& value, const std::string& what,
                                const std::string& hint) {
  std::string m = line > 0 ? fmt::format("{}:{}: ", file, line) : fmt::format("{}: ", file);
  if (!key.empty()) m += value.empty() ? fmt::format("{}: ", key) : fmt::format("{} = {}: ", key, value);
  m += what;
  if (!hint.empty()) m += fmt::format(" ({})", hint);
  return m;
}

}  // namespace attn
