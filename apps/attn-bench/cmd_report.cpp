// `attn-bench report compare BASE.csv NEW.csv --max-slowdown 5%`: the regression gate.
#include <fmt/format.h>
#include <memory>

#include "cli_common.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "report/compare.hpp"
#include "report/results.hpp"

namespace attn::cli {

namespace {

struct CompareArgs {
  std::string base, next;
  std::string max_slowdown = "5%";
};

int run_compare(const CompareArgs& a) {
  CompareOptions opts;
  opts.max_slowdown = parse_slowdown(a.max_slowdown);
  const CompareReport r = compare_results(read_csv(a.base), read_csv(a.next), opts);
  fmt::print("{}", format_compare(r));
  return r.pass ? kExitOk : kExitCheckFailed;
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
  cmp->callback([&c, a] { c.selected = [a] { return run_compare(*a); }; });
}

}  // namespace attn::cli
