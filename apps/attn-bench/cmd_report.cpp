// `attn-bench report compare BASE.csv NEW.csv --max-slowdown 5%`: the regression gate;
// `attn-bench report markdown results.csv`: a summary for pull requests and CI job pages;
// `attn-bench report plot results.csv --out DIR`: the figures of scripts/plot.py.
#include <sys/wait.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "cli_common.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "report/compare.hpp"
#include "report/markdown.hpp"
#include "report/merge.hpp"
#include "report/results.hpp"

namespace attn::cli {

namespace {

struct CompareArgs {
  std::string base, next;
  std::string max_slowdown = "5%";
  bool ignore_noise = false;
  bool allow_different_work = false;
  bool require_pass = false;
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

// The report verbs read results CSV only: a results JSON (or JUnit XML) given to one is named
// as such, where the CSV reader would say "scenario: missing column" of its first line.
void check_results_csv(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (ext == ".json" || ext == ".xml") {
    throw InputError(fmt::format(
        "{}: report verbs read results CSV; write one with `-o NAME.csv` (run and sweep can write both)", path));
  }
}

int run_compare(const CompareArgs& a) {
  if (!a.output.empty()) {
    check_output_path("--output", a.output);
    check_distinct_paths({{"--output", a.output}}, {{"base", a.base}, {"new", a.next}});
  }
  CompareOptions opts;
  opts.max_slowdown = parse_slowdown(a.max_slowdown, "--max-slowdown");
  opts.noise_aware = !a.ignore_noise;
  opts.gate_different_work = !a.allow_different_work;
  opts.require_pass = a.require_pass;
  opts.base_name = a.base;
  opts.new_name = a.next;
  check_results_csv(a.base);
  check_results_csv(a.next);
  const CompareReport r = compare_results(read_csv(a.base), read_csv(a.next), opts);
  emit(a.format == "markdown" ? compare_markdown(r) : format_compare(r), a.output);
  // Written to a file, the report is not in the job's log: its verdict is.
  if (!a.output.empty()) fmt::print(stderr, "{}\n", r.verdict);
  if (!r.pass) return kExitCheckFailed;
  return r.nothing_checked ? kExitNothingChecked : kExitOk;
}

struct MarkdownArgs {
  std::string results;
  int top = 5;
  std::string output;
};

struct MergeArgs {
  std::vector<std::string> inputs;
  std::string output;
  bool allow_mixed = false, allow_duplicates = false;
};

int run_merge(const MergeArgs& a) {
  check_output_path("--output", a.output, {".csv", ".json"});
  std::vector<PathArg> input_paths;
  for (const std::string& p : a.inputs) {
    check_results_csv(p);
    input_paths.push_back({"input", p});
  }
  check_distinct_paths({{"--output", a.output}}, input_paths);
  std::vector<MergeInput> inputs;
  for (const std::string& p : a.inputs) inputs.push_back({p, read_csv(p)});
  MergeOptions opts;
  opts.allow_mixed = a.allow_mixed;
  opts.allow_duplicates = a.allow_duplicates;
  const std::vector<ResultRow> rows = merge_results(inputs, opts);
  if (a.output.size() >= 5 && a.output.compare(a.output.size() - 5, 5, ".json") == 0) {
    write_json(a.output, rows);
  } else {
    write_csv(a.output, rows);
  }
  fmt::print(stderr, "wrote {} rows from {} files to {}\n", rows.size(), inputs.size(), a.output);
  return kExitOk;
}

struct PlotArgs {
  std::string results, out, baseline;
};

// Single-quoted for /bin/sh: every ' becomes '\''.
std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

int run_plot(const PlotArgs& a) {
  // Input errors are named here, before Python starts: a malformed or empty file, a baseline
  // no row has, an output folder that is a file or not writable.
  check_results_csv(a.results);
  const std::vector<ResultRow> rows = read_csv(a.results);
  if (rows.empty()) throw InputError(fmt::format("{}: no result rows to plot", a.results));
  if (!a.baseline.empty() &&
      std::none_of(rows.begin(), rows.end(), [&](const ResultRow& r) { return r.backend == a.baseline; })) {
    std::string known;
    for (const ResultRow& r : rows)
      if (known.find(r.backend) == std::string::npos) known += (known.empty() ? "" : ", ") + r.backend;
    throw InputError(fmt::format("--baseline {}: no row of {} has this backend (backends: {})", a.baseline,
                                 a.results, known));
  }
  check_output_folder("--out", a.out);
  std::string cmd = sh_quote(ATTN_PLOT_PYTHON) + " " + sh_quote(ATTN_PLOT_SCRIPT) + " " + sh_quote(a.results) +
                    " --out " + sh_quote(a.out);
  if (!a.baseline.empty()) cmd += " --baseline " + sh_quote(a.baseline);
  const int status = std::system(cmd.c_str());
  if (status != 0) {
    // system() returns a wait status (exit code 1 reads 256): say what the script did.
    const std::string how = status == -1                ? "could not be started"
                            : WIFEXITED(status)         ? fmt::format("exited with code {}", WEXITSTATUS(status))
                            : WIFSIGNALED(status)       ? fmt::format("was killed by signal {}", WTERMSIG(status))
                                                        : fmt::format("ended with wait status {}", status);
    throw RuntimeError(fmt::format("report plot: {} {} (its message is above)", ATTN_PLOT_SCRIPT, how));
  }
  return kExitOk;
}

int run_markdown(const MarkdownArgs& a) {
  if (!a.output.empty()) {
    check_output_path("--output", a.output);
    check_distinct_paths({{"--output", a.output}}, {{"results", a.results}});
  }
  check_results_csv(a.results);
  emit(results_markdown(read_csv(a.results), a.top), a.output);
  return kExitOk;
}

}  // namespace

void add_report(CLI::App& app, Commands& c) {
  auto* report = app.add_subcommand("report", "Work with results files");
  report->require_subcommand(1);
  auto* cmp = report->add_subcommand(
      "compare",
      "Regression gate: fail on slowdowns beyond the threshold and the noise, on rows whose status got worse, on "
      "rows only in NEW that fail, and on rows that measured different work");
  auto a = std::make_shared<CompareArgs>();
  cmp->add_option("base", a->base, "Baseline results CSV")->required();
  cmp->add_option("new", a->next, "New results CSV")->required();
  cmp->add_option("--max-slowdown", a->max_slowdown,
                  "Allowed slowdown of the median time (default 5%): a percentage (5%) or a fraction (0.05); a "
                  "bare number above 1 is refused");
  cmp->add_flag("--ignore-noise", a->ignore_noise,
                "Gate on the threshold alone (by default a change within the rows' noise, the smaller stdev / "
                "median of the two sides, is not a slowdown)");
  cmp->add_flag("--allow-different-work", a->allow_different_work,
                "List rows whose two sides measured different work (shape, spec or batch) without failing the "
                "gate; they are never compared for time");
  cmp->add_flag("--require-pass", a->require_pass,
                "Fail on every row of NEW that fails or errs, also one that failed in BASE too");
  cmp->footer(
      "Noise: a row's relative noise is stdev_time_us / median_time_us of its samples (rows of 2 samples or "
      "more); a change no larger than the smaller noise of the two sides is not a slowdown. The samples column "
      "shows base/new sample counts; a row with fewer than 5 on a side says \"few samples\": its noise is a "
      "rough guess.\n"
      "Rows are compared for time only when both sides were timed, measured the same work (spec and batch "
      "shape) and have the same status.\n"
      "Exit codes: 0 the gate passed; 1 it failed (a slowdown, a status regression, a failing row only in NEW, "
      "rows of different work, or with --require-pass any failing row); 2 usage or input error; 4 nothing was "
      "checked: no row could be compared for time (no rows in common, or none timed on both sides, e.g. NEW "
      "written by validate) and nothing failed.");
  cmp->add_option("--format", a->format,
                  "table (default) or markdown (the verdict, both sides' build and device, then the rows that "
                  "changed, failed or were not compared)")
      ->check(CLI::IsMember({"table", "markdown"}));
  cmp->add_option("-o,--output", a->output, "Write the report here (atomically) instead of stdout");
  cmp->callback([&c, a] { c.selected = [a] { return run_compare(*a); }; });

  auto* md = report->add_subcommand(
      "markdown", "Markdown summary of a results CSV: counts, a table per backend, the backends side by side, slowest and least accurate rows");
  auto m = std::make_shared<MarkdownArgs>();
  md->add_option("results", m->results, "Results CSV (from run, validate or sweep)")->required();
  md->add_option("--top", m->top, "Rows in the slowest / least accurate lists")->check(at_least(0));
  md->add_option("-o,--output", m->output, "Write the markdown here (atomically) instead of stdout");
  md->callback([&c, m] { c.selected = [m] { return run_markdown(*m); }; });

  auto* pl = report->add_subcommand(
      "plot", "Figures of a results CSV (PNG + SVG): throughput vs context, roofline, speedup, accuracy");
  auto p = std::make_shared<PlotArgs>();
  pl->add_option("results", p->results, "Results CSV (from run, validate or sweep)")->required()->check(CLI::ExistingFile);
  pl->add_option("--out", p->out, "Folder for the figures (created if missing)")->required();
  pl->add_option("--baseline", p->baseline, "Backend the speedups are taken over (default: the first timed one)");
  pl->callback([&c, p] { c.selected = [p] { return run_plot(*p); }; });

  auto* mg = report->add_subcommand("merge", "One results file from the shards of a run (several processes, GPUs or nodes)");
  auto g = std::make_shared<MergeArgs>();
  mg->add_option("inputs", g->inputs, "Results CSVs, in order")->required()->check(CLI::ExistingFile);
  mg->add_option("-o,--output", g->output, "Merged results (.csv or .json), written atomically")->required();
  mg->add_flag("--allow-mixed", g->allow_mixed, "Merge rows of different builds or devices");
  mg->add_flag("--allow-duplicates", g->allow_duplicates, "A (scenario, backend) in several files: keep the last");
  mg->callback([&c, g] { c.selected = [g] { return run_merge(*g); }; });
}

}  // namespace attn::cli
