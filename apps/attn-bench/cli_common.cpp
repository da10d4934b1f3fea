#include "cli_common.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.hpp"
#include "report/text.hpp"

namespace attn::cli {

void ScenarioArgs::add_to(CLI::App& cmd) {
  cmd.add_option("scenarios", files, "Scenario files (TOML, see docs/SCENARIOS.md)");
  cmd.add_option("--model", model, "Model preset for a quick batch without a file (see `attn-bench list`)");
  cmd.add_option("--batch", batch, "Compact batch spec COUNTxQUERY@CONTEXT,... e.g. 48x1@2048,2x512@1024");
  // Parsed here, not by CLI11's integer cast, which takes "-1" as 2^64 - 1 and saturates values
  // past 2^64: a seed in a scenario file must be in [0, 2^64) too.
  cmd.add_option_function<std::string>(
         "--seed",
         [this](const std::string& text) {
           const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seed);
           if (text.empty() || ec != std::errc() || end != text.data() + text.size())
             throw CLI::ValidationError("--seed", fmt::format("{}: not an integer in [0, 2^64)", text));
           seed_set = true;
         },
         "Override the scenario seed (an integer in [0, 2^64))");
  // One KEY=VALUE per --set: a vector option would also take the scenario files after it.
  cmd.add_option("--set", sets,
                 "Change a scenario key for this run, e.g. --set model.kv_cache_dtype=fp8_e4m3 --set "
                 "batch.requests[0].count=8 (repeatable; any key of docs/SCENARIOS.md, dotted; the value is TOML, a "
                 "bare word a string); the scenario's name then ends in [KEY=VALUE,...]")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

std::vector<Scenario> ScenarioArgs::load() const {
  std::vector<Scenario> out;
  std::vector<ScenarioOverride> overrides;
  for (const std::string& text : sets) overrides.push_back(parse_override(text));
  if (!model.empty() || !batch.empty()) {
    if (model.empty() || batch.empty()) throw InputError("--model and --batch go together (e.g. --model llama3-8b --batch 64x1@4096)");
    out.push_back(scenario_from_cli(model, batch, seed, overrides));
  }
  for (const std::string& f : files) out.push_back(load_scenario(f, overrides));
  if (out.empty()) throw InputError("no scenario given: pass scenario files or --model PRESET --batch SPEC");
  if (seed_set)
    for (Scenario& s : out) s.seed = seed;
  return out;
}

void ScenarioArgs::check_distinct(const std::vector<Scenario>& loaded) const {
  // loaded[i] came from --model/--batch (first, when given) or from files[i - offset].
  const size_t offset = loaded.size() - files.size();
  auto source = [&](size_t i) {
    return i < offset ? fmt::format("--model {} --batch {}", model, batch) : files[i - offset];
  };
  for (size_t i = 0; i < loaded.size(); ++i)
    for (size_t j = i + 1; j < loaded.size(); ++j)
      if (loaded[i].name == loaded[j].name)
        throw InputError(fmt::format("scenario '{}' is given twice: {} and {} (its result rows would repeat; give "
                                     "each scenario once)",
                                     loaded[i].name, source(i), source(j)));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

namespace {

// The nearest folder-or-file that exists on the way up from `p` (p itself when it exists).
std::filesystem::path nearest_existing(std::filesystem::path p) {
  std::error_code ec;
  while (!p.empty() && !std::filesystem::exists(p, ec) && p.has_parent_path() && p.parent_path() != p)
    p = p.parent_path();
  return p;
}

// Whether `dir` takes new files: the atomic writers create a temp file there and rename it.
void check_folder_writable(const std::string& what, const std::filesystem::path& dir) {
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw InputError(fmt::format("{}: the folder {} is not writable ({})", what, dir.string(), std::strerror(errno)));
}

bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);  // also hard links
  const fs::path ca = fs::weakly_canonical(fs::absolute(a), ec);
  const fs::path cb = fs::weakly_canonical(fs::absolute(b), ec);
  return ca.lexically_normal() == cb.lexically_normal();
}

}  // namespace

void check_output_path(const char* flag, const std::string& path, const std::vector<std::string>& extensions) {
  if (!extensions.empty() &&
      std::none_of(extensions.begin(), extensions.end(), [&](const std::string& e) { return ends_with(path, e); })) {
    std::string list;
    for (size_t i = 0; i < extensions.size(); ++i)
      list += (i == 0 ? "" : i + 1 == extensions.size() ? " or " : ", ") + extensions[i];
    throw InputError(fmt::format("{} {}: the file name must end in {}", flag, path, list));
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(fmt::format("{} {}: is a folder (give a file name inside it)", flag, path));
  const std::filesystem::path dir = std::filesystem::absolute(path).parent_path();
  if (!std::filesystem::is_directory(dir, ec)) {
    // A file on the way (results.csv/x.csv) is not a missing folder: creating it would not help.
    const std::filesystem::path found = nearest_existing(dir);
    if (!found.empty() && std::filesystem::exists(found, ec) && !std::filesystem::is_directory(found, ec))
      throw InputError(fmt::format("{} {}: {} is a file, not a folder", flag, path, found.string()));
    throw InputError(fmt::format("{} {}: the folder {} does not exist (create it first)", flag, path, dir.string()));
  }
  // Checked now rather than found when the outputs are written, after the whole run.
  check_folder_writable(fmt::format("{} {}", flag, path), dir);
  // The atomic rename would replace a read-only file (only the folder's permission counts):
  // read-only is taken as "keep this one".
  if (std::filesystem::exists(path, ec) && ::access(path.c_str(), W_OK) != 0)
    throw InputError(fmt::format("{} {}: the file exists and is not writable ({}; make it writable or remove it)",
                                 flag, path, std::strerror(errno)));
}

void check_output_folder(const char* flag, const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
    throw InputError(fmt::format("{} {}: exists and is not a folder", flag, dir));
  // A missing folder is created with its parents: the nearest one that exists must take them.
  const std::filesystem::path found = nearest_existing(std::filesystem::absolute(dir));
  if (!std::filesystem::is_directory(found, ec))
    throw InputError(fmt::format("{} {}: {} is a file, not a folder", flag, dir, found.string()));
  check_folder_writable(fmt::format("{} {}", flag, dir), found);
}

void check_distinct_paths(const std::vector<PathArg>& outputs, const std::vector<PathArg>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = i + 1; j < outputs.size(); ++j)
      if (same_file(outputs[i].path, outputs[j].path))
        throw InputError(fmt::format("{} {} and {} {}: the same file (give each output its own path)",
                                     outputs[i].flag, outputs[i].path, outputs[j].flag, outputs[j].path));
    for (const PathArg& in : inputs)
      if (same_file(outputs[i].path, in.path))
        throw InputError(fmt::format("{} {}: is also the input {} ({}), which it would replace (write it elsewhere)",
                                     outputs[i].flag, outputs[i].path, in.path, in.flag));
  }
}

std::vector<std::string> split_list(const std::string& flag, const std::string& text) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find(',', start), text.size());
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  // "a,,b" or "a," is a typo (a name lost), never a request to ignore it.
  if (std::any_of(out.begin(), out.end(), [](const std::string& e) { return e.empty(); }))
    throw InputError(fmt::format("{} '{}': an empty entry in the comma-separated list", flag, text));
  return out;
}

CLI::Validator at_least(long long min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        long long v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size())
          return fmt::format("{}: not an integer", text);
        return v < min ? fmt::format("{}: must be >= {}", text, min) : std::string();
      },
      fmt::format("INT >= {}", min));
}

void add_format_option(CLI::App& cmd, Format& f) {
  cmd.add_option_function<std::string>(
         "--format",
         [&f](const std::string& v) { f = v == "csv" ? Format::csv : v == "json" ? Format::json : Format::table; },
         "Output format: table (default), csv or json")
      ->check(CLI::IsMember({"table", "csv", "json"}));
}

}  // namespace attn::cli

namespace attn::cli {

namespace {

void append_json_cell(std::string& out, const Cell& c) {
  switch (c.kind) {
    case Cell::Kind::number: out += c.text; break;
    case Cell::Kind::boolean: out += c.text == "yes" ? "true" : "false"; break;
    case Cell::Kind::text: append_json_string(out, c.text); break;
  }
}

}  // namespace

std::string Table::render(Format f) const {
  std::string out;
  if (f == Format::csv) {
    for (size_t i = 0; i < columns.size(); ++i) out += (i ? "," : "") + escape_csv_cell(columns[i]);
    out += "\n";
    for (const auto& r : rows) {
      // Booleans as the results files write them (true/false), for tools that read both.
      for (size_t i = 0; i < r.size(); ++i)
        out += (i ? "," : "") + escape_csv_cell(r[i].kind == Cell::Kind::boolean ? (r[i].text == "yes" ? "true" : "false")
                                                                                  : r[i].text);
      out += "\n";
    }
    return out;
  }
  if (f == Format::json) {
    out = "[\n";
    for (size_t k = 0; k < rows.size(); ++k) {
      out += "  {";
      for (size_t i = 0; i < columns.size() && i < rows[k].size(); ++i) {
        if (i) out += ", ";
        append_json_string(out, columns[i]);
        out += ": ";
        append_json_cell(out, rows[k][i]);
      }
      out += k + 1 < rows.size() ? "},\n" : "}\n";
    }
    return out + "]\n";
  }
  std::vector<size_t> w(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) w[i] = columns[i].size();
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].text.size());
  auto line = [&](const std::vector<Cell>& cells) {
    std::string l;
    for (size_t i = 0; i < w.size(); ++i) {
      const std::string& c = i < cells.size() ? cells[i].text : std::string();
      l += c + std::string(w[i] - c.size() + (i + 1 < w.size() ? 2 : 0), ' ');
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    return l + "\n";
  };
  out += line({columns.begin(), columns.end()});
  std::vector<Cell> rule;
  for (size_t x : w) rule.push_back(std::string(x, '-'));
  out += line(rule);
  for (const auto& r : rows) out += line(r);
  return out;
}

}  // namespace attn::cli
