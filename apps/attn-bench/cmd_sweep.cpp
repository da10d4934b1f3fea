// `attn-bench sweep FILE.toml --output results.csv [--resume] [--shard I/N] | --list`: every
// case of a sweep through the run pipeline, each case's rows saved atomically as it finishes.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
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
  bool list = false, resume = false, quiet = false, validate_only = false;
  std::optional<int> iterations, warmup;
  std::optional<int64_t> check_sample;
};

std::string clock_text(double s) {
  const int t = static_cast<int>(s + 0.5);
  return t >= 3600 ? fmt::format("{}h{:02}m", t / 3600, t / 60 % 60) : fmt::format("{}m{:02}s", t / 60, t % 60);
}

// --devices 0,1,...: one child process per GPU (CUDA_VISIBLE_DEVICES=that GPU) runs shard i of
// N into OUTPUT.shard<i>.csv, resumably; the parent waits for all and merges them into OUTPUT.
int run_on_devices(const SweepArgs& a) {
  std::vector<std::string> devices;
  for (size_t start = 0; start <= a.devices.size();) {
    const size_t end = std::min(a.devices.find(',', start), a.devices.size());
    const std::string d = a.devices.substr(start, end - start);
    if (d.empty() || d.find_first_not_of("0123456789") != std::string::npos)
      throw InputError(input_error_message("<cli>", 0, "--devices", a.devices, "expected GPU indices", "e.g. 0,1,2,3"));
    devices.push_back(d);
    start = end + 1;
  }
  if (!a.shard.empty()) throw InputError("sweep: --devices runs its own shards; do not combine it with --shard");
  if (a.output.empty()) throw InputError("sweep: --devices needs --output FILE.csv");
  const int n = static_cast<int>(devices.size());
  std::vector<std::string> parts;
  std::vector<pid_t> children;
  for (int i = 0; i < n; ++i) {
    parts.push_back(a.output.substr(0, a.output.size() - 4) + ".shard" + std::to_string(i) + ".csv");
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
    fmt::print(stderr, "sweep: a shard ended with exit code {}; its file keeps the finished cases (rerun to resume)\n", worst);
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
  if (!a.devices.empty()) return run_on_devices(a);
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
  if (a.output.empty()) throw InputError("sweep: --output FILE.csv is required (or --list)");
  if (a.output.size() < 4 || a.output.compare(a.output.size() - 4, 4, ".csv") != 0)
    throw InputError(fmt::format("--output {}: a sweep writes CSV (the file name must end in .csv)", a.output));
  const std::filesystem::path dir = std::filesystem::absolute(a.output).parent_path();
  if (!std::filesystem::is_directory(dir))
    throw InputError(fmt::format("--output {}: the folder {} does not exist (create it first)", a.output, dir.string()));

  // --resume keeps the rows already written and skips their cases; without it the file is new.
  std::vector<ResultRow> rows;
  std::set<std::string> done;
  if (a.resume && std::filesystem::exists(a.output)) {
    rows = read_csv(a.output);
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
      const std::string eta = done_cost > 0 ? clock_text(elapsed / done_cost * (todo_cost - done_cost)) : "?";
      constexpr int kBar = 20;
      const int fill = static_cast<int>(kBar * k / std::max<size_t>(todo.size(), 1));
      fmt::print(stderr, "{}[{}{}] {}/{}  elapsed {}  eta {}  {}{}", tty ? "\r\033[K" : "", std::string(fill, '#'),
                 std::string(kBar - fill, '.'), k + 1, todo.size(), clock_text(elapsed), eta, c.name, tty ? "" : "\n");
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
  if (!a.quiet)
    fmt::print(stderr, "{}sweep {}: {} cases run, {} rows in {} ({} failed or errored) in {}\n", tty ? "\r\033[K" : "",
               sw.name, todo.size(), rows.size(), a.output, failures,
               clock_text(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
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
  cmd->add_option("--devices", a->devices,
                  "GPUs of this node, e.g. 0,1,2,3: one shard process per GPU, then the shards merged into --output");
  cmd->add_option("--iterations", a->iterations, "Timed samples per case (overrides the sweep's [run])")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", a->warmup, "Warm-up runs per case")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--validate-only", a->validate_only, "Check every case, time none");
  cmd->add_option("--check-sample", a->check_sample,
                  "Check at most N (request, head) pairs per case against the reference (0 = all)");
  cmd->add_flag("-q,--quiet", a->quiet, "No progress bar");
  cmd->callback([&c, a] { c.selected = [a] { return run_sweep(*a); }; });
}

}  // namespace attn::cli
