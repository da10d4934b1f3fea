// Results as CSV: one header line (the kResultColumns names) and one line per row.
//
// Cells follow RFC 4180 quoting (a cell with a comma, a quote or a leading/trailing space is
// quoted, inner quotes doubled). Line breaks never appear inside a cell: string values escape
// backslash, LF and CR as \\, \n and \r, so every row is one physical line (what the line
// based reader expects, and what grep/diff show). Numbers use the shortest text that reads
// back to the same double, so read_csv(rows_to_csv(rows)) == rows.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include <fmt/format.h>
// The parser copies file names with strncpy into a fixed buffer, which GCC flags.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-truncation"
#include <libfccp/csv.h>
#pragma GCC diagnostic pop

#include "core/error.hpp"
#include "report/columns.hpp"
#include "report/text.hpp"

namespace attn {

namespace {

constexpr unsigned kNumColumns = static_cast<unsigned>(kResultColumns.size());
using CsvReader = io::CSVReader<kNumColumns, io::trim_chars<' '>, io::double_quote_escape<',', '"'>>;

// Columns a file must have: the row identity and its verdict. Others may be missing (files of
// an older schema read with defaults) and unknown columns are ignored (a newer schema).
constexpr std::array<std::string_view, 3> kRequiredColumns{"scenario", "backend", "status"};

// Times in microseconds: where a row has one (a timed row) it is a finite number >= 0; a row
// without timings leaves the cell empty (field_applies), so no sentinel such as -1 is written.
// The -1 sentinels of pct_peak_bw, read_floor_us, ... ("unknown") are other columns.
constexpr std::array<std::string_view, 5> kTimeColumns{"plan_us", "median_time_us", "min_time_us", "max_time_us",
                                                       "stdev_time_us"};

bool is_time_column(std::string_view name) {
  return std::find(kTimeColumns.begin(), kTimeColumns.end(), name) != kTimeColumns.end();
}

// Inverse of the backslash escapes of escape_csv_cell; an unknown escape is kept verbatim.
std::string unescape_csv_cell(std::string_view s) {
  std::string u;
  u.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char n = s[i + 1];
      if (n == '\\' || n == 'n' || n == 'r') {
        u += n == 'n' ? '\n' : n == 'r' ? '\r' : '\\';
        ++i;
        continue;
      }
    }
    u += s[i];
  }
  return u;
}

template <size_t... I>
void read_header(CsvReader& in, std::index_sequence<I...>) {
  in.read_header(io::ignore_extra_column | io::ignore_missing_column, std::string(kResultColumns[I].name)...);
}

template <size_t... I>
bool read_row(CsvReader& in, std::array<std::string, kNumColumns>& cells, std::index_sequence<I...>) {
  return in.read_row(cells[I]...);
}

}  // namespace

std::string escape_csv_cell(std::string_view s) {
  std::string e;
  e.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '\\': e += "\\\\"; break;
      case '\n': e += "\\n"; break;
      case '\r': e += "\\r"; break;
      default: e += ch;
    }
  }
  const bool quote = e.find_first_of(",\"") != std::string::npos ||
                     (!e.empty() && (e.front() == ' ' || e.back() == ' '));  // the reader trims spaces
  if (!quote) return e;
  std::string q = "\"";
  for (char ch : e) {
    if (ch == '"') q += '"';
    q += ch;
  }
  q += '"';
  return q;
}

std::string rows_to_csv(const std::vector<ResultRow>& rows) {
  std::string out;
  for (size_t i = 0; i < kResultColumns.size(); ++i) {
    if (i) out += ',';
    out += kResultColumns[i].name;
  }
  out += '\n';
  for (const ResultRow& r : rows) {
    for (size_t i = 0; i < kResultColumns.size(); ++i) {
      if (i) out += ',';
      if (field_applies(r, kResultColumns[i])) out += escape_csv_cell(field_text(r, kResultColumns[i]));
    }
    out += '\n';
  }
  return out;
}

void write_csv(const std::string& path, const std::vector<ResultRow>& rows) {
  write_file_atomic(path, rows_to_csv(rows));
}

std::vector<ResultRow> read_csv(const std::string& path) {
  const std::string hint = "expected a results CSV written by attn-bench (docs/RESULTS.md)";
  std::vector<ResultRow> rows;
  long line = 0;
  std::error_code ec;
  // The parser would open a folder and report its empty read as a missing header.
  if (std::filesystem::is_directory(path, ec))
    throw InputError(InputSite{path, 0, "", "", "is a folder, not a results file", hint});
  try {
    CsvReader in(path);
    read_header(in, std::make_index_sequence<kNumColumns>{});
    line = static_cast<long>(in.get_file_line());
    std::array<bool, kNumColumns> present{};
    for (unsigned i = 0; i < kNumColumns; ++i) present[i] = in.has_column(kResultColumns[i].name);
    for (std::string_view required : kRequiredColumns) {
      if (!in.has_column(std::string(required))) {
        throw InputError(InputSite{path, line, std::string(required), "", "missing column", hint});
      }
    }
    std::array<std::string, kNumColumns> cells;
    for (;;) {
      for (std::string& c : cells) c.clear();  // the reader leaves missing columns untouched
      if (!read_row(in, cells, std::make_index_sequence<kNumColumns>{})) break;
      line = static_cast<long>(in.get_file_line());
      ResultRow row;
      for (unsigned i = 0; i < kNumColumns; ++i) {
        if (!present[i]) continue;
        const ResultColumn& col = kResultColumns[i];
        const bool is_string = std::holds_alternative<std::string ResultRow::*>(col.field);
        const std::string text = is_string ? unescape_csv_cell(cells[i]) : cells[i];
        if (!set_field(row, col, text)) {
          throw InputError(InputSite{path, line, col.name, cells[i], "not a valid value for this column",
                                               hint});
        }
        // A negative or NaN time would read as "not timed" to the compare gate (which times
        // only median > 0) and let a row through unjudged.
        if (is_time_column(col.name) && !text.empty()) {
          const double v = row.*std::get<double ResultRow::*>(col.field);
          if (!(v >= 0) || !std::isfinite(v))
            throw InputError(InputSite{path, line, col.name, cells[i], "not a valid time",
                                       "a finite number of microseconds >= 0, or empty where the row was not timed"});
        }
      }
      // The row's identity: an empty one cannot be matched by compare or merge.
      if (row.scenario.empty()) throw InputError(InputSite{path, line, "scenario", "", "must not be empty", hint});
      if (row.backend.empty()) throw InputError(InputSite{path, line, "backend", "", "must not be empty", hint});
      if (!parse_row_status(row.status)) {
        throw InputError(InputSite{path, line, "status", row.status, "unknown status",
                                             "one of pass, fail, skipped, error"});
      }
      rows.push_back(std::move(row));
    }
  } catch (const io::error::can_not_open_file& e) {
    throw InputError(InputSite{path, 0, "", "", "cannot open results file",
                                         e.errno_value ? std::strerror(e.errno_value) : "missing or unreadable"});
  } catch (const io::error::base& e) {
    // The parser's own errors carry the line they stopped on; fall back to the last good one + 1.
    long at = line + 1;
    if (const auto* fl = dynamic_cast<const io::error::with_file_line*>(&e); fl && fl->file_line > 0) at = fl->file_line;
    throw InputError(InputSite{path, at, "", "", fmt::format("malformed CSV: {}", e.what()), hint});
  }
  return rows;
}

}  // namespace attn
