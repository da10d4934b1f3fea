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
#include "report/merge.hpp"
#include "report/results.hpp"
#include "sweep/sweep.hpp"

namespace attn::cli {

namespace {

struct SweepArgs {
  std::string file, output, shard, devices;
  bool devices_given = false;  // --devices "" is an error, not "no --devices"
  bool list = false, resume = false, quiet = false, validate_only = false;
  std::optional<int> iterations, warmup;
  std::optional<int64_t> check_sample;
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
      if (!built)
        throw InputError(InputSite{sw.file, sw.cases[i].backend_line, "axes.backend", "\"" + name + "\"",
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
  const Sweep sw = load_sweep(a.file);
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
    if (a.validate_only) args.push_back("--validate-only");
    if (a.check_sample) args.insert(args.end(), {"--check-sample", std::to_string(*a.check_sample)});
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

int run_sweep(const SweepArgs& a) {
  if (a.devices_given) return run_on_devices(a);
  const Sweep sw = load_sweep(a.file);
  std::vector<size_t> mine(sw.cases.size());
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = i;
  if (!a.shard.empty()) {
    const auto [index, count] = parse_shard(a.shard);
    mine = shard_cases(sw, index, count);
  }
  if (a.list) {
    for (size_t i : mine) fmt::print("{}\n", sw.cases[i].name);
    return kExitOk;
  }
  check_output(a.output, a.file);
  check_backends_built(sw, mine);

  // --resume keeps the rows already written and skips their cases; without it the file is new.
  std::vector<ResultRow> rows;
  std::set<std::string> done;
  if (a.resume && std::filesystem::exists(a.output)) {
    rows = read_csv(a.output);
    check_resumable(a.output, rows, sw, mine,
                    a.shard.empty() ? std::string("this sweep's cases") : "shard " + a.shard + " of this sweep");
    for (const ResultRow& r : rows) done.insert(r.scenario);
  } else if (std::filesystem::exists(a.output)) {
    throw InputError(fmt::format("--output {}: the file exists (pass --resume to continue that sweep, or remove it)",
                                 a.output));
  }

  PipelineOptions opts;
  opts.iterations = a.iterations;
  opts.warmup = a.warmup;
  opts.time = !a.validate_only;
  opts.check_sample = a.check_sample;
  const auto registry = make_registry();
  if (opts.time) apply_device_ceilings(opts);

  std::vector<size_t> todo;
  for (size_t i : mine)
    if (!done.count(sw.cases[i].name)) todo.push_back(i);
  const bool tty = isatty(fileno(stderr)) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  double done_cost = 0, todo_cost = 0;
  for (size_t i : todo) todo_cost += sw.cases[i].cost + 1;
  int failures = 0;
  if (!a.quiet && done.size() > 0)
    fmt::print(stderr, "sweep {}: {} of {} cases already in {}\n", sw.name, mine.size() - todo.size(), mine.size(),
               a.output);
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
      // One case that cannot run (out of memory, a backend error) is a row, never the end of the sweep.
      ResultRow r;
      r.scenario = c.name;
      r.backend = c.scenario.run.backends.empty() ? "auto" : c.scenario.run.backends.front();
      r.status = to_string(RowStatus::error);
      r.reason = e.what();
      r.build = build_info();
      r.timestamp = now_iso8601();
      got.push_back(std::move(r));
    }
    for (const ResultRow& r : got) failures += r.status == "fail" || r.status == "error";
    rows.insert(rows.end(), got.begin(), got.end());
    write_csv(a.output, rows);  // atomic: a killed sweep loses only the case in flight
    done_cost += c.cost + 1;
  }
  // A shard with no cases (more shards than cases) still leaves its file, so a merge finds them all.
  if (todo.empty() && !std::filesystem::exists(a.output)) write_csv(a.output, rows);
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
  cmd->add_flag("--resume", a->resume, "Keep the rows already in --output and skip their cases");
  cmd->add_option("--shard", a->shard, "Run shard I of N (0-based, balanced by estimated cost), e.g. 0/4");
  cmd->add_option_function<std::string>(
      "--devices", [a](const std::string& v) { a->devices = v, a->devices_given = true; },
      "GPUs of this node, e.g. 0,1,2,3: one shard process per GPU, then the shards merged into --output");
  cmd->add_option("--iterations", a->iterations, "Timed samples per case (overrides the sweep's [run])")
      ->check(at_least(1));
  cmd->add_option("--warmup", a->warmup, "Warm-up runs per case")->check(at_least(0));
  cmd->add_flag("--validate-only", a->validate_only, "Check every case, time none");
  cmd->add_option("--check-sample", a->check_sample,
                  "Check at most N (request, head) pairs per case against the reference (0 = all)")
      ->check(at_least(0));
  cmd->add_flag("-q,--quiet", a->quiet, "No progress bar");
  cmd->callback([&c, a] { c.selected = [a] { return run_sweep(*a); }; });
}

}  // namespace attn::cli
