#pragma once
// Text shared by the results writers, the console table and the markdown summary.
#include <string>
#include <string_view>

namespace attn {

// One CSV cell: backslash, CR and LF written as \\, \r, \n (so every row stays on one line, as
// read_csv expects), then RFC 4180 quoting when the cell holds a comma, a quote or edge spaces.
std::string escape_csv_cell(std::string_view s);
// Appends s as a JSON string literal (quotes included).
void append_json_string(std::string& out, std::string_view s);
// A measured figure for reading: `decimals` places at 10 and above (571.1 TFLOP/s, 4285 GB/s),
// 3 significant digits below, so a CPU row's 0.00905 TFLOP/s or 2.26 GB/s does not round to 0.
std::string figure_text(double v, int decimals);
// A count with its noun: "1 row", "2 rows".
std::string count_of(int n, std::string_view noun);

}  // namespace attn
