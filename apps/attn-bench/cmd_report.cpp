// `attn-bench report compare BASE.csv NEW.csv --max-slowdown 5%`: the regression gate;
// `attn-bench report markdown results.csv`: a summary for pull requests and CI job pages.
#include <fmt/format.h>
#include <memory>

#include "cli_common.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "report/compare.hpp"
#include "report/markdown.hpp"
#include "report/results.hpp"

namespace attn::cli {

namespace {

struct CompareArgs {
  std::string base, next;
  std::string max_slowdown = "5%";
  std::string format = "table";
  std::string output;
};

// Prints `text`, or writes it atomically to `path` when one is given.
void emit(const std::string& text, const std::string& path) {
  if (path.empty()) {
    fmt::print("{}", text);
  } else {
    write_file_atomic(path, text);
    fmt::print(stderr, "wrote {}\n", path);
  }
}

int run_compare(const CompareArgs& a) {
  CompareOptions opts;
  opts.max_slowdown = parse_slowdown(a.max_slowdown);
  const CompareReport r = compare_results(read_csv(a.base), read_csv(a.next), opts);
  emit(a.format == "markdown" ? compare_markdown(r) : format_compare(r), a.output);
  return r.pass ? kExitOk : kExitCheckFailed;
}

struct MarkdownArgs {
  std::string results;
  int top = 5;
  std::string output;
};

int run_markdown(const MarkdownArgs& a) {
  emit(results_markdown(read_csv(a.results), a.top), a.output);
  return kExitOk;
}

}  // namespace

void add_report(CLI::App& app, Commands& c) {
  auto* report = app.add_subcommand("report", "Work with results files");
  report->require_subcommand(1);
  auto* cmp = report->add_subcommand(
      "compare", "Regression gate: fail on slowdowns beyond the threshold or on rows whose status got worse");
  auto a = std::make_shared<CompareArgs>();
  cmp->add_option("base", a->base, "Baseline results CSV")->required();
  cmp->add_option("new", a->next, "New results CSV")->required();
  cmp->add_option("--max-slowdown", a->max_slowdown, "Allowed slowdown of the median time, e.g. 5% or 0.05");
  cmp->add_option("--format", a->format, "table (default) or markdown (the verdict, then the rows that changed)")
      ->check(CLI::IsMember({"table", "markdown"}));
  cmp->add_option("-o,--output", a->output, "Write the report here (atomically) instead of stdout");
  cmp->callback([&c, a] { c.selected = [a] { return run_compare(*a); }; });

  auto* md = report->add_subcommand(
      "markdown", "Markdown summary of a results CSV: counts, a table per backend, slowest and least accurate rows");
  auto m = std::make_shared<MarkdownArgs>();
  md->add_option("results", m->results, "Results CSV (from run, validate or sweep)")->required();
  md->add_option("--top", m->top, "Rows in the slowest / least accurate lists")->check(CLI::NonNegativeNumber);
  md->add_option("-o,--output", m->output, "Write the markdown here (atomically) instead of stdout");
  md->callback([&c, m] { c.selected = [m] { return run_markdown(*m); }; });
}

}  // namespace attn::cli
