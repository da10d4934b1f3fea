#pragma once
// `--set KEY=VALUE` on a scenario's TOML (ScenarioOverride, model/scenario.hpp): applied to the
// parsed document before any check, and the errors about an overridden key pointed at --set.
#include <toml++/toml.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "model/scenario.hpp"

namespace attn {

// The source name of the values an override inserts: a line of theirs is not a line of the file
// (the scenario parser reports line 0 for them).
inline constexpr std::string_view kOverrideSource = "--set";

// Sets each override's key in `root`, in order (a later override of the same key wins), creating
// the tables on its way that the file lacks. InputError (naming --set and `file`) when the value is
// not one TOML value, when the key goes through a value that is not a table, or indexes past the
// end of an array.
void apply_overrides(toml::table& root, const std::vector<ScenarioOverride>& overrides, const std::string& file);

// An error found in the scenario `file` after `overrides` were applied, re-pointed at --set when it
// is about an overridden key (that key, a key inside its value, or a table the override created);
// any other error gains a hint naming the overrides, which may have caused it.
InputSite override_error_site(const InputSite& site, const std::vector<ScenarioOverride>& overrides,
                              const std::string& file);

// Where a message about an override of the scenario `file` says it came from: "--set (FILE)".
inline std::string override_source(const std::string& file) { return "--set (" + file + ")"; }

// Whether an override set `key` or a key inside it, or set a value that holds `key` (run.backends
// for "run.backends"; "run" for "run.iterations"): checks made after parsing (the backends this
// build has) then name --set rather than the file.
bool overridden(const std::vector<ScenarioOverride>& overrides, std::string_view key);

// "[k=v,k=v]", the end of an overridden scenario's name ("" without overrides).
std::string override_suffix(const std::vector<ScenarioOverride>& overrides);

}  // namespace attn
