#pragma once
// Markdown summaries for pull-request comments and CI job summaries: `attn-bench report
// markdown results.csv` and `attn-bench report compare --format markdown`.
#include <string>
#include <vector>

#include "report/compare.hpp"
#include "report/results.hpp"
#include "report/text.hpp"  // figure_text, count_of

namespace attn {

// A GitHub-flavoured table; `right[i]` aligns column i right (numbers). Cells are escaped
// (`|` and line breaks), so any reason text is safe.
std::string markdown_table(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows,
                           const std::vector<bool>& right);

// Pass/fail counts, one compact table per backend, then the `top` slowest and least accurate
// (err_over_floor where measured, else rel_l2) checked rows. A backend skipped on every row for
// one reason (a GPU backend on a machine without one) is one line under the tables, not a table.
std::string results_markdown(const std::vector<ResultRow>& rows, int top = 5);

// The compare verdict first (bold), the two sides' build, git_rev and device (and a warning
// when devices differ), then the rows that changed, failed or were not compared (or all, with
// `all_rows`); rows skipped on both sides are counted under the table, not listed.
std::string compare_markdown(const CompareReport& report, bool all_rows = false);

}  // namespace attn
