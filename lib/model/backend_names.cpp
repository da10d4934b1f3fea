#include "model/backend_names.hpp"

#include <algorithm>
#include <cctype>

namespace attn {

const std::vector<std::string>& all_backend_names() {
  static const std::vector<std::string> names = {"flash_attn", "flashinfer", "flashmla", "cpu"};
  return names;
}

bool same_backend_name(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  });
}

std::optional<std::string> canonical_backend_name(std::string_view name) {
  for (const std::string& b : all_backend_names())
    if (same_backend_name(b, name)) return b;
  return std::nullopt;
}

std::optional<std::string> backend_choice(std::string_view entry) {
  if (entry == "auto" || entry == "all") return std::string(entry);
  return canonical_backend_name(entry);
}

std::string backend_choices() {
  std::string s;
  for (const std::string& b : all_backend_names()) s += b + ", ";
  return s + "auto, all";
}

}  // namespace attn
