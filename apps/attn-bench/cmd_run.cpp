// `attn-bench run` (check + time + report) and `attn-bench validate` (the CI gate: checks only).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <memory>
#include <optional>
#include <unistd.h>

#include "backends/backend.hpp"
#include "model/backend_names.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "pipeline/pipeline.hpp"
#include "report/results.hpp"
#include "report/side_by_side.hpp"

namespace attn::cli {

namespace {

struct RunArgs {
  ScenarioArgs scenarios;
  std::string backend;  // "a,b" | auto | all
  bool backend_given = false;
  std::vector<std::string> outputs;
  std::string junit;
  std::optional<int> iterations, warmup;
  std::optional<double> host_timeout;
  std::optional<int64_t> check_sample;
  bool cold_l2 = false, no_cold_l2 = false, cuda_graph = false, no_invariance = false, no_nan_probe = false;
  bool quiet = false;
  bool no_read_floor = false;
  bool strict = false;
  std::string cascade;
  std::string timed;  // step | attention; empty: the scenario's [run] timed
  bool validate_only = false;
};

int run_verb(const RunArgs& a) {
  const std::vector<Scenario> scenarios = a.scenarios.load();
  a.scenarios.check_distinct(scenarios);
  // Output paths are checked before anything runs, so a typo costs no benchmark time.
  std::vector<PathArg> outputs;
  for (const std::string& out : a.outputs) {
    check_output_path("--output", out, {".csv", ".json"});
    outputs.push_back({"--output", out});
  }
  if (!a.junit.empty()) {
    check_output_path("--junit", a.junit);
    outputs.push_back({"--junit", a.junit});
  }
  std::vector<PathArg> inputs;
  for (const std::string& f : a.scenarios.files) inputs.push_back({"scenario", f});
  check_distinct_paths(outputs, inputs);

  PipelineOptions opts;
  if (a.backend_given) {
    if (a.backend.find_first_not_of(',') == std::string::npos)
      throw InputError(fmt::format("--backend '{}': no backend named (auto, all, or names, comma-separated)", a.backend));
    opts.backends = split_list("--backend", a.backend);
  }
  opts.iterations = a.iterations;
  opts.warmup = a.warmup;
  opts.host_timeout_s = a.host_timeout;
  if (a.cold_l2) opts.cold_l2 = true;
  if (a.no_cold_l2) opts.cold_l2 = false;
  if (a.cuda_graph) opts.cuda_graph = true;
  opts.timed = timed_part_named(a.timed);  // empty: the scenario's [run] timed
  opts.read_floor = !a.no_read_floor;
  if (a.cascade == "on") opts.cascade = CascadeMode::on;
  if (a.cascade == "off") opts.cascade = CascadeMode::off;
  if (a.cascade == "auto") opts.cascade = CascadeMode::auto_;
  opts.check_sample = a.check_sample;
  opts.strict = a.strict;
  opts.time = !a.validate_only;
  opts.batch_invariance = !a.no_invariance;
  opts.nan_probe = !a.no_nan_probe;
  const bool interactive = isatty(fileno(stderr)) != 0;
  if (!a.quiet)
    opts.progress = [interactive](const std::string& line) {
      if (interactive) {
        std::fprintf(stderr, "\r\033[K%s", line.c_str());
      } else {
        std::fprintf(stderr, "%s\n", line.c_str());
      }
      std::fflush(stderr);
    };

  const auto registry = make_registry();
  check_cuda_graph_request(scenarios, registry, opts);
  if (opts.time) apply_device_ceilings(opts);

  std::vector<ResultRow> rows;
  std::vector<DiffEntry> diffs;
  std::vector<std::string> auto_notes;
  for (const Scenario& s : scenarios) {
    PipelineResult r = run_scenario(s, registry, opts);
    rows.insert(rows.end(), r.rows.begin(), r.rows.end());
    diffs.insert(diffs.end(), r.diffs.begin(), r.diffs.end());
    for (std::string& n : r.auto_notes)
      if (std::find(auto_notes.begin(), auto_notes.end(), n) == auto_notes.end()) auto_notes.push_back(std::move(n));
  }
  if (opts.progress && interactive) std::fprintf(stderr, "\r\033[K");

  fmt::print("{}", format_table(rows));
  if (!diffs.empty()) {
    Table t{{"batch", "backend a", "backend b", "max |a-b|", "rel L2"}, {}};
    for (const DiffEntry& d : diffs)
      t.rows.push_back({d.scenario, d.a, d.b, fmt::format("{:.3g}", d.max_abs), fmt::format("{:.3g}", d.rel_l2)});
    fmt::print("\nCross-backend agreement\n{}", t.render(Format::table));
  }
  if (const std::string speed = side_by_side_text(side_by_side(rows)); !speed.empty())
    fmt::print("\nSpeed side by side (each backend's median time / the fastest one's on the batch; ~: within noise)\n{}",
               speed);
  for (const std::string& n : auto_notes) fmt::print("note: backend {}\n", n);
  // The times say what they are: a row timed as the attention alone is not the step a serving
  // engine runs (the `timed` column of the results files says it per row).
  const long attention_alone =
      std::count_if(rows.begin(), rows.end(), [](const ResultRow& r) { return r.samples > 0 && r.timed == "attention"; });
  if (attention_alone > 0)
    fmt::print("note: {} {} the attention alone (--timed attention): no cache write in the samples, as the torch "
               "peers are timed\n", attention_alone, attention_alone == 1 ? "row timed" : "rows timed");
  for (const ResultRow& r : rows) {
    if (!r.deterministic) fmt::print("note: {} on {}: two runs differ bitwise\n", r.backend, r.scenario);
    if (!r.batch_invariant) {
      // Reported, never gated: a plan made for the whole batch (a cascade over a shared prefix,
      // KV splits sized by the batch, another tiling) sums in another order than the request's own.
      fmt::print("note: {} on {}: a request run alone differs bitwise from its rows in the batch (the batch's plan: "
                 "{}, which may sum in another order than the request's own; reported, not gated)\n",
                 r.backend, r.scenario, r.plan_summary.empty() ? "no plan recorded" : r.plan_summary);
    }
    if (r.status == "fail" && !r.worst.empty()) fmt::print("worst element of {} on {}: {}\n", r.backend, r.scenario, r.worst);
    if (!r.not_exercised.empty())
      fmt::print("note: {} on {}: not exercised by the data (a bug there would move the output by < 4 budgets): "
                 "{} [sensitivity {}]\n", r.backend, r.scenario, r.not_exercised, r.sensitivity);
  }
  // All outputs or none: a run that cannot write one of them leaves none (and no old file
  // replaced) rather than a set that looks complete but is not.
  std::vector<std::pair<std::string, std::string>> files;
  for (const std::string& out : a.outputs)
    files.emplace_back(out, ends_with(out, ".json") ? rows_to_json(rows) : rows_to_csv(rows));
  if (!a.junit.empty()) files.emplace_back(a.junit, rows_to_junit(rows));
  write_files_atomic(files);
  for (const auto& f : files) fmt::print("wrote {}\n", f.first);

  const auto count = [&](const char* st) {
    return std::count_if(rows.begin(), rows.end(), [&](const ResultRow& r) { return r.status == st; });
  };
  const long pass = count("pass"), fail = count("fail"), skipped = count("skipped"), errors = count("error");
  fmt::print("{} passed, {} failed, {} skipped, {} errors\n", pass, fail, skipped, errors);
  if (fail > 0) return kExitCheckFailed;
  if (errors > 0) return kExitRuntime;
  // A gate that checked nothing is not a pass: a CI runner whose GPU driver broke skips every GPU
  // row and would otherwise go green (pytest exits 5 when no test ran, for the same reason).
  if (pass == 0) {
    const auto first = std::find_if(rows.begin(), rows.end(), [](const ResultRow& r) { return r.status == "skipped"; });
    fmt::print(stderr, "attn-bench: nothing was checked: {}\n",
               first == rows.end()
                   ? std::string("no row was run")
                   : fmt::format("every row was skipped; the first reason: {} on {}: {}", first->backend,
                                 first->scenario, first->reason.empty() ? "(none given)" : first->reason));
    return kExitNothingChecked;
  }
  // The same for a backend named on the command line: `--backend flash_attn,cpu` on a machine
  // whose GPU is gone passes on the cpu rows alone, but what was asked for checked nothing.
  for (const std::string& name : opts.backends) {
    if (name == "all" || name == "auto") continue;
    bool any = false, checked = false;
    const ResultRow* first = nullptr;
    for (const ResultRow& r : rows) {
      if (!same_backend_name(r.backend, name)) continue;
      any = true;
      checked = checked || r.status != "skipped";
      if (!first) first = &r;
    }
    if (any && !checked) {
      fmt::print(stderr, "attn-bench: nothing was checked on {}, named in --backend: every row of it was skipped; "
                         "the first reason: {}: {}\n",
                 first->backend, first->scenario, first->reason.empty() ? "(none given)" : first->reason);
      return kExitNothingChecked;
    }
  }
  return kExitOk;
}

void add_common(CLI::App* cmd, RunArgs& a) {
  a.scenarios.add_to(*cmd);
  cmd->add_option_function<std::string>(
      "--backend", [&a](const std::string& v) { a.backend = v, a.backend_given = true; },
      "Backends: auto (the selector), all, or names (comma-separated)");
  cmd->add_option("--check-sample", a.check_sample,
                  "Check at most N (request, head) pairs against the reference (0 = all)")
      ->check(at_least(0));
  cmd->add_option("--cascade", a.cascade, "Cascade attention: auto (vLLM's rule), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_flag("--strict", a.strict,
                "Also bound each error by 2x a same-precision naive implementation (as [check] strict = true)");
  cmd->add_flag("--no-invariance", a.no_invariance, "Skip the batch-invariance check");
  cmd->add_flag("--no-nan-probe", a.no_nan_probe,
                "Skip the NaN probe (a cached key and a new token's key planted NaN must reach exactly the rows "
                "that attend them)");
  cmd->add_flag("-q,--quiet", a.quiet, "No progress lines");
}

}  // namespace

void add_run_and_validate(CLI::App& app, Commands& c) {
  auto ra = std::make_shared<RunArgs>();
  auto* run = app.add_subcommand(
      "run", "Check and time backends on scenarios; print a table and write results; exit 4 when every row was "
             "skipped, or every row of a backend named in --backend (nothing checked)");
  add_common(run, *ra);
  run->add_option("-o,--output", ra->outputs, "Results file(s): .csv or .json (written atomically)");
  run->add_option("--iterations", ra->iterations, "Timed samples (overrides [run] iterations)")->check(at_least(1));
  run->add_option("--warmup", ra->warmup, "Warm-up runs (overrides [run] warmup)")->check(at_least(0));
  run->add_option("--host-timeout", ra->host_timeout,
                  "Seconds of samples per host (cpu) row, as nvbench's --timeout: sampling stops after this much "
                  "time and at least 3 samples, warm-up after a fifth of it (overrides [run] host_timeout; default 5; "
                  "0: every iteration runs; "
                  "GPU rows always run every iteration)")
      ->check(CLI::Range(0.0, 1e6));
  run->add_flag("--cold-l2", ra->cold_l2, "Flush L2 before every sample (GPU)");
  run->add_flag("--no-cold-l2", ra->no_cold_l2, "Keep L2 warm between samples (GPU)")->excludes("--cold-l2");
  run->add_flag("--cuda-graph", ra->cuda_graph,
                "Time CUDA-graph replays of run() (GPU backends; cpu rows stay wall clock; refused when no selected "
                "backend is a GPU backend that can run here)");
  run->add_option("--timed", ra->timed,
                  "What each sample runs (overrides [run] timed): step (default: each layer's cache write, then "
                  "its attention) or attention (the attention alone over the caches a step wrote, as the torch "
                  "peers' kernels, which write no cache)")
      ->check(CLI::IsMember({"step", "attention"}));
  run->add_flag("--no-read-floor", ra->no_read_floor,
                "Skip the read floor (a bare streaming read of each GPU row's bytes, timed from the same cold L2)");
  run->add_option("--junit", ra->junit, "Also write a JUnit XML report");
  run->callback([&c, ra] { c.selected = [ra] { return run_verb(*ra); }; });

  auto va = std::make_shared<RunArgs>();
  va->validate_only = true;
  auto* val = app.add_subcommand(
      "validate", "CI gate: check backends against the float64 reference; exit 1 on failure, 4 when every row was "
                  "skipped, or every row of a backend named in --backend (nothing checked, e.g. GPU backends on a "
                  "machine with no usable GPU)");
  add_common(val, *va);
  val->add_option("--junit", va->junit, "Write a JUnit XML report for CI systems");
  val->add_option("-o,--output", va->outputs, "Results file(s): .csv or .json");
  val->callback([&c, va] { c.selected = [va] { return run_verb(*va); }; });
}

}  // namespace attn::cli
