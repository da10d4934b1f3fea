#include "core/error.hpp"

#include <utility>

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

std::string input_error_message(const InputSite& s) {
  return input_error_message(s.file, s.line, s.key, s.value, s.what, s.hint);
}

InputError::InputError(InputSite site) : std::runtime_error(input_error_message(site)), site_(std::move(site)) {}

}  // namespace attn
