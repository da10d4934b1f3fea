// Results as JSON: {"schema": "attn-bench-results/1", "rows": [{...}, ...]}, one row object
// per line, keys in the kResultColumns order. Numbers are JSON numbers (shortest round-trip
// text); JSON has no inf/nan, so a non-finite double is written as null.
#include <cmath>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "report/columns.hpp"
#include "report/text.hpp"

namespace attn {

namespace {

constexpr const char* kSchema = "attn-bench-results/1";

void append_json_value(std::string& out, const ResultRow& row, const ResultColumn& c) {
  std::visit(
      [&](auto member) {
        const auto& v = row.*member;
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string>) {
          append_json_string(out, v);
        } else if constexpr (std::is_same_v<V, bool>) {
          out += v ? "true" : "false";
        } else if constexpr (std::is_same_v<V, double>) {
          out += std::isfinite(v) ? format_double(v) : "null";
        } else {
          out += std::to_string(v);
        }
      },
      c.field);
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (u < 0x20 || u == 0x7f) {
          out += fmt::format("\\u{:04x}", u);
        } else {
          out += ch;  // UTF-8 passes through unchanged
        }
    }
  }
  out += '"';
}

std::string rows_to_json(const std::vector<ResultRow>& rows) {
  std::string out = "{\n  \"schema\": ";
  append_json_string(out, kSchema);
  out += ",\n  \"rows\": [";
  for (size_t r = 0; r < rows.size(); ++r) {
    out += r ? ",\n    {" : "\n    {";
    for (size_t i = 0; i < kResultColumns.size(); ++i) {
      if (i) out += ", ";
      append_json_string(out, kResultColumns[i].name);
      out += ": ";
      if (field_applies(rows[r], kResultColumns[i])) {
        append_json_value(out, rows[r], kResultColumns[i]);
      } else {
        out += "null";
      }
    }
    out += '}';
  }
  out += rows.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

void write_json(const std::string& path, const std::vector<ResultRow>& rows) {
  write_file_atomic(path, rows_to_json(rows));
}

}  // namespace attn
