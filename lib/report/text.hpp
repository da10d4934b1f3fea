#pragma once
// Text escaping shared by the results writers and the CLI's own tables.
#include <string>
#include <string_view>

namespace attn {

// One CSV cell: backslash, CR and LF written as \\, \r, \n (so every row stays on one line, as
// read_csv expects), then RFC 4180 quoting when the cell holds a comma, a quote or edge spaces.
std::string escape_csv_cell(std::string_view s);
// Appends s as a JSON string literal (quotes included).
void append_json_string(std::string& out, std::string_view s);

}  // namespace attn
