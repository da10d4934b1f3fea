// `attn-bench sweep FILE.toml --output results.csv [--resume] [--shard I/N] | --list`: every
// case of a sweep through the run pipeline, each case's rows saved atomically as it finishes.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "backends/backend.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "pipeline/pipeline.hpp"
#include "report/columns.hpp"
#include "report/merge.hpp"
#include "report/results.hpp"
#include "model/scenario_overrides.hpp"
#include "sweep/sweep.hpp"

namespace attn::cli {

namespace {

struct SweepArgs {
  std::string file, output, shard, devices;
  bool devices_given = false;  // --devices "" is an error, not "no --devices"
  bool list = false, resume = false, quiet = false, validate_only = false;
  std::optional<int> iterations, warmup;
  std::optional<double> host_timeout;
  std::string timed;  // step | attention; empty: the sweep's [run] timed
  std::optional<int64_t> check_sample;
  std::vector<std::string> sets;  // --set KEY=VALUE on every case's scenario
  std::vector<ScenarioOverride> overrides() const {
    std::vector<ScenarioOverride> out;
    for (const std::string& s : sets) out.push_back(parse_override(s));
    return out;
  }
};

// --output must name a .csv in an existing folder, other than the sweep file (checked before any
// case runs). With --resume the output is also read, on purpose: that is not a clash.
void check_output(const std::string& output, const std::string& sweep_file) {
  if (output.empty()) throw InputError("sweep: --output FILE.csv is required (or --list)");
  check_output_path("--output", output, {".csv"});
  check_distinct_paths({{"--output", output}}, {{"sweep file", sweep_file}});
}

// A backend the sweep names but this build lacks (a GPU sweep on a CPU-only build) would make
// each of its cases an error row: refuse up front instead, at the sweep's own line.
void check_backends_built(const Sweep& sw, const std::vector<size_t>& cases) {
  const auto registry = make_registry();
  std::string here;
  for (const auto& be : registry) here += be->name() + ", ";
  for (size_t i : cases) {
    for (const std::string& name : sw.cases[i].scenario.run.backends) {
      const bool built = name == "auto" || name == "all" ||
                         std::any_of(registry.begin(), registry.end(), [&](const auto& be) { return be->name() == name; });
      if (built) continue;
      // Named where it came from: the override that set the case's backends, or the axes line.
      const bool set = overridden(sw.cases[i].scenario.overrides, "run.backends");
      throw InputError(InputSite{set ? override_source(sw.file) : sw.file, set ? 0 : sw.cases[i].backend_line,
                                 set ? "run.backends" : "axes.backend", "\"" + name + "\"",
                                 "not compiled into this build (it has: " + here + "auto, all)",
                                 "run it on a build with CUDA; --list still plans the sweep"});
    }
  }
}

// A resumed file may hold only rows of the cases it is resumed for: rows of another sweep, or of
// another shard split, would be kept (and merged) as if this run had made them.
void check_resumable(const std::string& path, const std::vector<ResultRow>& rows, const Sweep& sw,
                     const std::vector<size_t>& mine, const std::string& what) {
  std::set<std::string> names;
  for (size_t i : mine) names.insert(sw.cases[i].name);
  for (const ResultRow& r : rows)
    if (!names.count(r.scenario))
      throw InputError(fmt::format("--resume {}: it holds case {}, which is not one of {} (written by another "
                                   "sweep or split; delete the file to start over)",
                                   path, r.scenario, what));
}

// The columns a stored row must share with the row its case would make now for --resume to keep
// it: the case's spec, batch, data seed and timing settings, and the sweep and shard that ran it.
// Measured columns (errors, times) differ from run to run and are not compared.
constexpr const char* kResumeColumns[] = {
    // spec
    "num_q_heads", "num_kv_heads", "head_size_qk", "head_size_v", "dtype", "kv_cache_dtype", "kv_layout",
    "block_size", "sliding_window", "logits_soft_cap", "scale", "k_scale", "v_scale", "q_scale", "alibi", "sinks",
    "causal", "mla",
    // batch and data
    "shared_prefix_len", "num_layers", "batch", "seed",
    // timing settings
    "warmup", "iterations", "host_timeout_s", "timed",
    // which sweep and split
    "sweep", "shard"};

const ResultColumn& column_named(std::string_view name) {
  for (const ResultColumn& c : kResultColumns)
    if (name == c.name) return c;
  throw RuntimeError("sweep: no results column " + std::string(name));
}

// A cell's value for a message: quoted, so that an empty string shows as ""; "empty" where the
// column does not apply to the row (an empty cell).
std::string cell_shown(const ResultRow& r, const ResultColumn& c) {
  return field_applies(r, c) ? "\"" + field_text(r, c) + "\"" : "empty";
}

// --resume keeps a stored row only if its case, as the sweep file and options define it now,
// would make a row with the same settings: after an edit of the sweep (a [base] key, the seed,
// [run] iterations) or other options, the kept rows would sit under the same case names as rows
// of another experiment. Error rows are run again anyway and are not compared. InputError at the
// row's line naming the case, the column, both values and the fix.
void check_unchanged(const std::string& path, const std::vector<ResultRow>& stored, const Sweep& sw,
                     const std::map<std::string, size_t>& case_of, const PipelineOptions& opts,
                     const std::string& shard) {
  std::map<size_t, std::map<std::string, ResultRow>> planned;  // case -> batch label -> planned row
  for (size_t k = 0; k < stored.size(); ++k) {
    const ResultRow& r = stored[k];
    if (r.status == to_string(RowStatus::error)) continue;
    const size_t ci = case_of.at(r.scenario);  // a sweep case is one batch, labelled with the case's name
    if (!planned.count(ci)) {
      std::map<std::string, ResultRow>& by_label = planned[ci];
      for (ResultRow& p : planned_rows(sw.cases[ci].scenario, opts)) {
        p.sweep = sw.name;
        p.shard = shard;
        p.case_index = static_cast<int>(ci);
        by_label.emplace(p.scenario, std::move(p));
      }
    }
    const long line = static_cast<long>(k) + 2;  // a header line, then one line per row
    const std::string fix = "the sweep file or the options changed since it was written; delete the file or the "
                            "rows, or run without --resume";
    const auto it = planned.at(ci).find(r.scenario);
    if (it == planned.at(ci).end())
      throw InputError(InputSite{path, line, "scenario", r.scenario, "a batch its case no longer makes", fix});
    ResultRow now = it->second;
    if (r.device != "host cpu") now.host_timeout_s = -1;  // device rows take every iteration
    for (const char* name : kResumeColumns) {
      const ResultColumn& c = column_named(name);
      const bool same = field_applies(r, c) == field_applies(now, c) &&
                        (!field_applies(r, c) || field_text(r, c) == field_text(now, c));
      if (!same)
        throw InputError(InputSite{path, line, name, cell_shown(r, c),
                                   fmt::format("case {} (backend {}) ran with this, but runs with {} now",
                                               r.scenario, r.backend, cell_shown(now, c)),
                                   fix});
    }
  }
}

std::string shard_file(const std::string& output, int i) {
  return output.substr(0, output.size() - 4) + ".shard" + std::to_string(i) + ".csv";
}

// The OUTPUT.shard<i>.csv files beside OUTPUT, by index: left by an earlier --devices run
// (finished or interrupted), whatever its device count.
std::map<int, std::string> existing_shard_files(const std::string& output) {
  namespace fs = std::filesystem;
  const fs::path out(output);
  const std::string name = out.filename().string();
  const std::string prefix = name.substr(0, name.size() - 4) + ".shard";
  std::map<int, std::string> found;
  for (const fs::directory_entry& e : fs::directory_iterator(out.has_parent_path() ? out.parent_path() : ".")) {
    const std::string f = e.path().filename().string();
    if (f.size() <= prefix.size() + 4 || f.compare(0, prefix.size(), prefix) != 0 ||
        f.compare(f.size() - 4, 4, ".csv") != 0)
      continue;
    const std::string digits = f.substr(prefix.size(), f.size() - 4 - prefix.size());
    if (digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    found[std::stoi(digits)] = out.has_parent_path() ? (out.parent_path() / f).string() : f;
  }
  return found;
}

// "0,1,2,3" -> the GPU indices, each once (two shards on one GPU would only slow each other).
std::vector<std::string> parse_devices(const std::string& text) {
  std::vector<std::string> devices;
  std::set<long> seen;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string d = text.substr(start, end - start);
    if (d.empty() || d.size() > 6 || d.find_first_not_of("0123456789") != std::string::npos)
      throw InputError(InputSite{"<cli>", 0, "--devices", text, "expected GPU indices", "e.g. 0,1,2,3"});
    if (!seen.insert(std::stol(d)).second)
      throw InputError(InputSite{"<cli>", 0, "--devices", text, "names GPU " + d + " twice",
                                           "one shard per GPU, each GPU once; e.g. 0,1,2,3"});
    devices.push_back(d);
    start = end + 1;
  }
  return devices;
}

// Refuses the shard files this run must not read: without --resume, any left by an earlier run
// (they stay after a merge, see run_on_devices); with it, those of another device count or
// holding cases outside their shard.
void check_shard_files(const SweepArgs& a, const Sweep& sw, int n) {
  for (const auto& [i, path] : existing_shard_files(a.output)) {
    if (!a.resume)
      throw InputError(fmt::format("--output {}: {} is left from an earlier --devices run (pass --resume to "
                                   "continue that sweep, or delete it)",
                                   a.output, path));
    if (i >= n)
      throw InputError(fmt::format("--resume {}: {} is from a run on more than {} devices (resume with the same "
                                   "number of --devices, or delete the shard files)",
                                   a.output, path, n));
    check_resumable(path, read_csv(path), sw, shard_cases(sw, i, n), fmt::format("shard {}/{} of this sweep", i, n));
  }
}

// --devices 0,1,...: one child process per GPU (CUDA_VISIBLE_DEVICES=that GPU) runs shard i of
// N into OUTPUT.shard<i>.csv, resumably; the parent waits for all and merges them into OUTPUT.
// The shard files stay after the merge (each GPU's own record, and what a --resume continues
// from when a shard failed); a later run into the same OUTPUT refuses them unless it resumes.
int run_on_devices(const SweepArgs& a) {
  const std::vector<std::string> devices = parse_devices(a.devices);
  if (!a.shard.empty()) throw InputError("sweep: --devices runs its own shards; do not combine it with --shard");
  if (a.list) throw InputError("sweep: --list does not run anything; use --shard I/N --list instead of --devices");
  if (a.output.empty()) throw InputError("sweep: --devices needs --output FILE.csv");
  check_output(a.output, a.file);
  const int n = static_cast<int>(devices.size());
  // Input errors once, here, rather than once per child.
  const Sweep sw = load_sweep(a.file, a.overrides());
  std::vector<size_t> every(sw.cases.size());
  std::iota(every.begin(), every.end(), size_t{0});
  check_backends_built(sw, every);
  if (!a.resume && std::filesystem::exists(a.output))
    throw InputError(fmt::format("--output {}: the file exists (pass --resume to continue that sweep, or remove it)",
                                 a.output));
  check_shard_files(a, sw, n);

  std::vector<std::string> parts;
  std::vector<pid_t> children;
  for (int i = 0; i < n; ++i) {
    parts.push_back(shard_file(a.output, i));
    // Always --resume: the children continue the shard files checked above (or start them).
    std::vector<std::string> args = {"attn-bench", "sweep", a.file, "-o", parts.back(), "--shard",
                                     std::to_string(i) + "/" + std::to_string(n), "--resume", "-q"};
    if (a.iterations) args.insert(args.end(), {"--iterations", std::to_string(*a.iterations)});
    if (a.warmup) args.insert(args.end(), {"--warmup", std::to_string(*a.warmup)});
    if (a.host_timeout) args.insert(args.end(), {"--host-timeout", format_double(*a.host_timeout)});
    if (!a.timed.empty()) args.insert(args.end(), {"--timed", a.timed});
    if (a.validate_only) args.push_back("--validate-only");
    if (a.check_sample) args.insert(args.end(), {"--check-sample", std::to_string(*a.check_sample)});
    for (const std::string& s : a.sets) args.insert(args.end(), {"--set", s});
    const pid_t pid = fork();
    if (pid < 0) throw RuntimeError("sweep --devices: fork failed");
    if (pid == 0) {
      setenv("CUDA_VISIBLE_DEVICES", devices[static_cast<size_t>(i)].c_str(), 1);
      std::vector<char*> cargs;
      for (std::string& s : args) cargs.push_back(s.data());
      cargs.push_back(nullptr);
      execv("/proc/self/exe", cargs.data());  // this very binary
      std::perror("sweep --devices: exec");
      _exit(3);
    }
    children.push_back(pid);
    if (!a.quiet) fmt::print(stderr, "sweep: shard {}/{} on GPU {} -> {}\n", i, n, devices[static_cast<size_t>(i)], parts.back());
  }
  int worst = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    worst = std::max(worst, WIFEXITED(status) ? WEXITSTATUS(status) : kExitRuntime);
  }
  if (worst >= kExitInput) {
    fmt::print(stderr, "sweep: a shard ended with exit code {}; its file keeps the finished cases (rerun with --resume to continue)\n",
               worst);
    return worst;
  }
  std::vector<MergeInput> inputs;
  for (const std::string& p : parts) inputs.push_back({p, read_csv(p)});
  const std::vector<ResultRow> rows = merge_results(inputs);
  write_csv(a.output, rows);
  if (!a.quiet) fmt::print(stderr, "sweep: merged {} rows from {} shards into {}\n", rows.size(), n, a.output);
  return worst;
}

// A row for a case that could not run at all (out of memory, a backend error while planning):
// an error row, never the end of the sweep; the columns that say what it was are filled where
// the case still yields them.
ResultRow case_error_row(const SweepCase& c, const PipelineOptions& opts, const std::string& what) {
  ResultRow r;
  try {
    const std::vector<ResultRow> planned = planned_rows(c.scenario, opts);
    if (!planned.empty()) r = planned.front();
  } catch (const std::exception&) {  // the same failure, most likely: the message below says it
  }
  r.scenario = c.name;
  r.backend = c.scenario.run.backends.empty() ? "auto" : c.scenario.run.backends.front();
  r.status = to_string(RowStatus::error);
  r.reason = what;
  r.seed = c.scenario.seed;
  r.build = build_info();
  r.git_rev = git_rev();
  r.timestamp = now_iso8601();
  return r;
}

// The sweep's rows in its own case order: the file is rewritten from this after every case.
std::vector<ResultRow> rows_in_case_order(const std::map<size_t, std::vector<ResultRow>>& by_case) {
  std::vector<ResultRow> rows;
  for (const auto& [i, case_rows] : by_case) rows.insert(rows.end(), case_rows.begin(), case_rows.end());
  return rows;
}

bool has_error(const std::vector<ResultRow>& rows) {
  return std::any_of(rows.begin(), rows.end(),
                     [](const ResultRow& r) { return r.status == to_string(RowStatus::error); });
}

int run_sweep(const SweepArgs& a) {
  if (a.devices_given) return run_on_devices(a);
  const Sweep sw = load_sweep(a.file, a.overrides());
  std::vector<size_t> mine(sw.cases.size());
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = i;
  std::string shard;  // "I/N" as the rows carry it
  if (!a.shard.empty()) {
    const auto [index, count] = parse_shard(a.shard);
    mine = shard_cases(sw, index, count);
    shard = fmt::format("{}/{}", index, count);
  }
  if (a.list) {
    for (size_t i : mine) fmt::print("{}\n", sw.cases[i].name);
    return kExitOk;
  }
  check_output(a.output, a.file);
  check_backends_built(sw, mine);

  PipelineOptions opts;
  opts.iterations = a.iterations;
  opts.warmup = a.warmup;
  opts.host_timeout_s = a.host_timeout;
  opts.timed = timed_part_named(a.timed);  // empty: the sweep's [run] timed
  opts.time = !a.validate_only;
  opts.check_sample = a.check_sample;

  // --resume keeps the rows already written, if their cases would still make them, and skips
  // those cases; a case with an error row (out of memory, a transient device error) runs again,
  // its rows replaced in place. Without --resume the file is new.
  std::map<std::string, size_t> case_of;
  for (size_t i : mine) case_of.emplace(sw.cases[i].name, i);
  std::map<size_t, std::vector<ResultRow>> by_case;  // case index -> its rows, in the sweep's order
  if (a.resume && std::filesystem::exists(a.output)) {
    const std::vector<ResultRow> stored = read_csv(a.output);
    check_resumable(a.output, stored, sw, mine,
                    a.shard.empty() ? std::string("this sweep's cases") : "shard " + a.shard + " of this sweep");
    check_unchanged(a.output, stored, sw, case_of, opts, shard);
    for (const ResultRow& r : stored) by_case[case_of.at(r.scenario)].push_back(r);
  } else if (std::filesystem::exists(a.output)) {
    throw InputError(fmt::format("--output {}: the file exists (pass --resume to continue that sweep, or remove it)",
                                 a.output));
  }

  const auto registry = make_registry();
  if (opts.time) apply_device_ceilings(opts);

  std::vector<size_t> todo;
  size_t rerun = 0;
  for (size_t i : mine) {
    const auto it = by_case.find(i);
    if (it == by_case.end()) {
      todo.push_back(i);
    } else if (has_error(it->second)) {
      todo.push_back(i);
      ++rerun;
    }
  }
  const bool tty = isatty(fileno(stderr)) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  double done_cost = 0, todo_cost = 0;
  for (size_t i : todo) todo_cost += sw.cases[i].cost + 1;
  if (!a.quiet && !by_case.empty())
    fmt::print(stderr, "sweep {}: {} of {} cases already in {}{}\n", sw.name, by_case.size() - rerun, mine.size(),
               a.output, rerun ? fmt::format(" ({} with an error row run again)", rerun) : "");
  for (size_t k = 0; k < todo.size(); ++k) {
    const SweepCase& c = sw.cases[todo[k]];
    if (!a.quiet) {
      // ETA from the estimated cost still ahead, at the rate measured so far.
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // Rounding can leave todo_cost - done_cost a hair below 0; a garbage estimate prints "?".
      const std::string eta =
          done_cost > 0 ? duration_text(elapsed / done_cost * std::max(0.0, todo_cost - done_cost)) : "?";
      constexpr int kBar = 20;
      const int fill = static_cast<int>(kBar * k / std::max<size_t>(todo.size(), 1));
      fmt::print(stderr, "{}[{}{}] {}/{}  elapsed {}  eta {}  {}{}", tty ? "\r\033[K" : "", std::string(fill, '#'),
                 std::string(kBar - fill, '.'), k + 1, todo.size(), duration_text(elapsed), eta, c.name, tty ? "" : "\n");
      std::fflush(stderr);
    }
    std::vector<ResultRow> got;
    try {
      got = run_scenario(c.scenario, registry, opts).rows;
    } catch (const std::exception& e) {
      got.push_back(case_error_row(c, opts, e.what()));
    }
    for (ResultRow& r : got) {
      r.sweep = sw.name;
      r.shard = shard;
      r.case_index = static_cast<int>(todo[k]);
    }
    by_case[todo[k]] = std::move(got);
    write_csv(a.output, rows_in_case_order(by_case));  // atomic: a killed sweep loses only the case in flight
    done_cost += c.cost + 1;
  }
  const std::vector<ResultRow> rows = rows_in_case_order(by_case);
  // A shard with no cases (more shards than cases) still leaves its file, so a merge finds them all.
  if (todo.empty() && !std::filesystem::exists(a.output)) write_csv(a.output, rows);
  // The verdict is the file's: rows kept from an earlier run count as much as this run's.
  const auto failures = std::count_if(rows.begin(), rows.end(), [](const ResultRow& r) {
    return r.status == to_string(RowStatus::fail) || r.status == to_string(RowStatus::error);
  });
  if (!a.quiet)
    fmt::print(stderr, "{}sweep {}: {} cases run, {} rows in {} ({} failed or errored) in {}\n", tty ? "\r\033[K" : "",
               sw.name, todo.size(), rows.size(), a.output, failures,
               duration_text(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  return failures ? kExitCheckFailed : kExitOk;
}

}  // namespace

void add_sweep(CLI::App& app, Commands& c) {
  auto* cmd = app.add_subcommand("sweep", "Run every case of a sweep file (axes over a base model), resumable and shardable");
  auto a = std::make_shared<SweepArgs>();
  cmd->add_option("file", a->file, "Sweep file (TOML, see docs/SCENARIOS.md)")->required()->check(CLI::ExistingFile);
  cmd->add_flag("--list", a->list, "Print the case names (of this shard) and exit");
  cmd->add_option("-o,--output", a->output, "Results CSV, rewritten atomically after every case");
  cmd->add_flag("--resume", a->resume,
                "Keep the rows already in --output and skip their cases (refused when the sweep changed since; "
                "cases with an error row run again)");
  cmd->add_option("--shard", a->shard, "Run shard I of N (0-based, balanced by estimated cost), e.g. 0/4");
  cmd->add_option_function<std::string>(
      "--devices", [a](const std::string& v) { a->devices = v, a->devices_given = true; },
      "GPUs of this node, e.g. 0,1,2,3: one shard process per GPU, then the shards merged into --output");
  cmd->add_option("--iterations", a->iterations, "Timed samples per case (overrides the sweep's [run])")
      ->check(at_least(1));
  cmd->add_option("--warmup", a->warmup, "Warm-up runs per case")->check(at_least(0));
  cmd->add_option("--host-timeout", a->host_timeout,
                  "Seconds of samples per host (cpu) row, as run --host-timeout (overrides the sweep's [run] "
                  "host_timeout; default 5; 0: every iteration runs)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--timed", a->timed,
                  "What each sample runs, as run --timed (overrides the sweep's [run] timed): step or attention")
      ->check(CLI::IsMember({"step", "attention"}));
  cmd->add_flag("--validate-only", a->validate_only, "Check every case, time none");
  cmd->add_option("--check-sample", a->check_sample,
                  "Check at most N (request, head) pairs per case against the reference (0 = all)")
      ->check(at_least(0));
  cmd->add_option("--set", a->sets,
                  "Change a scenario key of every case, as run --set (e.g. --set run.cuda_graph=true; repeatable); "
                  "the case names gain [KEY=VALUE,...] before their backend")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_flag("-q,--quiet", a->quiet, "No progress bar");
  cmd->callback([&c, a] { c.selected = [a] { return run_sweep(*a); }; });
}

}  // namespace attn::cli
