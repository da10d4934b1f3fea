#include "model/toml_value_text.hpp"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn {

namespace {

std::string float_text(double x) {
  std::string s = fmt::format("{}", x);  // shortest round-trip; "inf" and "nan" as TOML spells them
  if (s.find_first_of(".ein") == std::string::npos) s += ".0";
  return s;
}

// A key bare where TOML allows it, else quoted as toml++ quotes strings.
std::string key_text(std::string_view key) {
  const bool bare = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  if (bare) return std::string(key);
  std::ostringstream os;
  os << toml::value<std::string>(std::string(key));
  return os.str();
}

}  // namespace

std::string toml_value_text(const toml::node& n) {
  if (const toml::value<double>* f = n.as_floating_point()) return float_text(f->get());
  if (const toml::array* a = n.as_array()) {
    if (a->empty()) return "[]";
    std::string s = "[ ";
    for (size_t i = 0; i < a->size(); ++i) s += (i ? ", " : "") + toml_value_text(*a->get(i));
    return s + " ]";
  }
  if (const toml::table* t = n.as_table()) {
    if (t->empty()) return "{}";
    std::string s = "{ ";
    bool first = true;
    for (auto&& [k, v] : *t) {
      s += (first ? "" : ", ") + key_text(k.str()) + " = " + toml_value_text(v);
      first = false;
    }
    return s + " }";
  }
  std::ostringstream os;
  n.visit([&os](const auto& v) { os << v; });
  return os.str();
}

toml::table parse_toml_document(std::string_view text, const std::string& file) {
  try {
    return toml::parse(text, std::string_view(file));
  } catch (const toml::parse_error& e) {
    const toml::source_region& r = e.source();
    throw InputError(InputSite{file, static_cast<long>(r.begin.line), {}, {},
                               "TOML syntax error: " + std::string(e.description()),
                               "at column " + std::to_string(r.begin.column)});
  }
}

}  // namespace attn
