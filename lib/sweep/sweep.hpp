#pragma once
// Sweeps (docs/SCENARIOS.md, "Sweep files"): a base model plus axes whose cross product is a
// deterministic, named list of cases. Each case is an ordinary scenario (written as scenario
// TOML and read back through parse_scenario, so it obeys every scenario rule), run by the same
// pipeline as `attn-bench run`; a sweep can be cut into cost-balanced shards and resumed.
#include <string>
#include <vector>

#include "model/scenario.hpp"

namespace attn {

struct SweepCase {
  std::string name;      // unique in the sweep; the `scenario` column of its result rows
  Scenario scenario;
  double cost = 0;       // estimated work (FLOPs + bytes) for balancing shards
  long backend_line = 0; // line of its axes.backend value in the sweep file (0: the default "auto")
};

struct Sweep {
  std::string file, name, description;
  std::vector<SweepCase> cases;  // axis order: the last axis varies fastest
};

// InputError naming file, line, key and value for a malformed sweep or a case that breaks a
// scenario rule (at the sweep file's line and key that make the case, not the generated text's).
// `overrides` (sweep --set) apply to every case's scenario, whose name then ends in them.
Sweep load_sweep(const std::string& path, const std::vector<ScenarioOverride>& overrides = {});
Sweep parse_sweep(std::string_view toml_text, const std::string& source_name, const std::string& base_dir = ".",
                  const std::vector<ScenarioOverride>& overrides = {});

// The cases of shard `index` (0-based) of `count`: longest-processing-time-first over the
// estimated costs, so shards carry about equal work; deterministic, disjoint, complete.
std::vector<size_t> shard_cases(const Sweep& s, int index, int count);
// "I/N" with 0 <= I < N -> (I, N); InputError otherwise.
std::pair<int, int> parse_shard(const std::string& text);

// A duration for the progress line: "12m05s", or "2h03m" from an hour on; "?" when unknown (NaN,
// negative) or over 999 hours, which only a garbage estimate gives (and which would overflow the
// integer seconds it is printed from).
std::string duration_text(double seconds);

}  // namespace attn
