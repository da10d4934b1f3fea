#include "sweep/sweep.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "model/scenario_overrides.hpp"
#include "model/toml_value_text.hpp"

namespace attn {

namespace {

namespace fs = std::filesystem;

long line_of(const toml::node& n) { return static_cast<long>(n.source().begin.line); }

// A value as error messages show it: strings in double quotes, as the scenario parser's do. A
// table or array is abbreviated: written out whole (a scenario's batch of requests) it buries
// the message in one long line.
std::string shown(const toml::node& n) {
  if (const toml::table* t = n.as_table()) return t->empty() ? "{}" : "{ ... }";
  if (const toml::array* a = n.as_array()) return a->empty() ? "[]" : "[ ... ]";
  return n.is_string() ? fmt::format("\"{}\"", n.as_string()->get()) : toml_value_text(n);
}

[[noreturn]] void fail(const std::string& file, const toml::node& n, const std::string& key, const std::string& what,
                       const std::string& hint = {}) {
  throw InputError(InputSite{file, line_of(n), key, shown(n), what, hint});
}

// The axes, in the order of their nesting (the last varies fastest), with what each value must be.
struct AxisRule {
  const char* key;
  bool integer;
  int64_t min;
};
constexpr AxisRule kAxes[] = {
    {"preset", false, 0},         {"kv_cache_dtype", false, 0}, {"block_size", true, 1},
    {"num_requests", true, 1},    {"context_len", true, 0},     {"query_len", true, 1},
    {"shared_prefix_len", true, 0}, {"cascade", false, 0},      {"backend", false, 0},
};

struct AxisValues {
  std::string key;
  std::vector<std::string> values;  // TOML text of each value ("16", "\"fp8_e4m3\"")
  std::vector<std::string> labels;  // as shown in case names ("16", "fp8_e4m3")
  std::vector<long> lines;          // of each value in the sweep file (0: a built-in default)
  std::string source;               // "axes.KEY" or "base.KEY": where the values come from
};

void check_keys(const std::string& file, const toml::table& t, const std::string& section,
                std::initializer_list<const char*> allowed) {
  for (auto&& [k, v] : t) {
    const bool ok = std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return k.str() == a; });
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      fail(file, v, section.empty() ? std::string(k.str()) : section + "." + std::string(k.str()), "unknown key",
           "expected one of: " + list);
    }
  }
}

// Rough work of a case: 4 Hq D per visible (query, key) pair plus 4 Hkv D bytes per key read.
double estimate_cost(const Scenario& s) {
  double flops = 0, bytes = 0;
  const double hq = s.spec.num_q_heads, hkv = std::max(1, s.spec.num_kv_heads), d = s.spec.head_size_qk;
  for (const RequestGroup& g : s.batch.groups) {
    const double q = g.query_len, c = g.context_len;
    flops += g.count * 4.0 * hq * d * q * (c + (q + 1) / 2);
    bytes += g.count * 4.0 * hkv * d * (c + q);
  }
  return flops + bytes;
}

// An axes.backend value in the spelling the results use (canonical_backend_name: "CPU" and "cpu"
// are one value, so a repeat is caught as such). Any backend name loads, compiled in or not, so a
// GPU sweep is still listed and planned on a CPU-only machine; run_sweep refuses to run one this
// build lacks. "auto" and "all" as in the scenario's [run] backends.
std::string canonical_backend(const std::string& file, const toml::node& e) {
  if (const std::optional<std::string> b = backend_choice(e.as_string()->get())) return *b;
  fail(file, e, "axes.backend", "unknown backend", "known: " + backend_choices());
}

// One line of a case's generated scenario text and where it came from in the sweep file, so a
// scenario error is reported at the sweep's own line and key, not the generated text's.
struct Origin {
  long line = 0;    // 0: no line of the sweep file (a default, a section header)
  std::string key;  // e.g. "base.num_q_heads", "axes.context_len", "run.iterations"
};

struct CaseText {
  std::vector<std::string> lines;
  std::vector<Origin> origins;  // origins[i]: where lines[i] (line i + 1 of the text) came from
  void add(std::string line, Origin o = {}) {
    lines.push_back(std::move(line));
    origins.push_back(std::move(o));
  }
  void append(const CaseText& other) {
    lines.insert(lines.end(), other.lines.begin(), other.lines.end());
    origins.insert(origins.end(), other.origins.begin(), other.origins.end());
  }
  std::string text() const {
    std::string t;
    for (const std::string& l : lines) t += l + "\n";
    return t;
  }
};

// A [base] or [run] entry as "key = value" lines with their origins; a sub-table of [base]
// ([base.mla]) becomes a [model.NAME] section, which must follow every plain key.
void base_lines(const std::string& file, const toml::table& base, CaseText& plain, CaseText& tables) {
  for (auto&& [k, v] : base) {
    const std::string key(k.str());
    if (key == "kv_cache_dtype" || key == "block_size" || key == "preset") continue;  // written as axes
    if (const toml::table* sub = v.as_table()) {
      tables.add("[model." + key + "]", {line_of(v), "base." + key});
      for (auto&& [k2, v2] : *sub) {
        const std::string key2 = "base." + key + "." + std::string(k2.str());
        if (v2.is_table()) fail(file, v2, key2, "unexpected table", "[base." + key + "] holds plain values");
        tables.add(fmt::format("{} = {}", k2.str(), toml_value_text(v2)), {line_of(v2), key2});
      }
    } else {
      plain.add(fmt::format("{} = {}", key, toml_value_text(v)), {line_of(v), "base." + key});
    }
  }
}

// parse_scenario's error about line L of the generated text (its InputSite: this sweep's file,
// the line, the scenario's key), re-pointed at the sweep line and key that line came from, with
// the case named. An error about another file (a trace the case reads) stays as it is.
std::string at_sweep_origin(const InputError& e, const std::string& file, const CaseText& t,
                            const std::string& case_name) {
  const std::string tail = " (in the invalid case " + case_name + ")";
  if (!e.site() || e.site()->file != file) return e.what() + tail;
  InputSite s = *e.site();
  const Origin o = s.line >= 1 && static_cast<size_t>(s.line) <= t.origins.size() ? t.origins[s.line - 1] : Origin{};
  s.line = o.line;
  if (!o.key.empty() && !s.key.empty()) {
    s.key = o.key;
  } else if (s.key.compare(0, 6, "model.") == 0) {
    s.key = "base." + s.key.substr(6);
  }
  return input_error_message(s) + tail;
}

}  // namespace

Sweep parse_sweep(std::string_view toml_text, const std::string& source_name, const std::string& base_dir,
                  const std::vector<ScenarioOverride>& overrides) {
  const std::string& file = source_name;
  for (const ScenarioOverride& o : overrides)
    if (o.key == "name")
      throw InputError(InputSite{override_source(file), 0, o.key, o.value,
                                 "a sweep names each of its cases (the name column of their rows)",
                                 "the sweep file's own `name` sets the first part of them"});
  toml::table root = parse_toml_document(toml_text, file);
  // A scenario file given to sweep would fail on its first scenario key; say what it is instead.
  if ((root.get_as<toml::table>("model") || root.contains("batch")) && !root.contains("base") && !root.contains("axes"))
    throw InputError(InputSite{file, 0, {}, {},
                               fmt::format("a scenario file, not a sweep (run it with `attn-bench run {}`; a sweep "
                                           "has [base] and [axes] tables, see docs/SCENARIOS.md, \"Sweep files\")",
                                           file)});
  check_keys(file, root, "", {"name", "description", "seed", "base", "axes", "run"});
  Sweep sw;
  sw.file = file;
  sw.name = fs::path(file).stem().string();
  if (const toml::node* n = root.get("name")) {
    if (!n->is_string() || n->as_string()->get().empty()) fail(file, *n, "name", "expected a non-empty string");
    sw.name = n->as_string()->get();
  }
  if (const toml::node* n = root.get("description")) {
    if (!n->is_string()) fail(file, *n, "description", "expected a string");
    sw.description = n->as_string()->get();
  }
  int64_t seed = 0;
  if (const toml::node* n = root.get("seed")) {
    if (!n->is_integer() || n->as_integer()->get() < 0) fail(file, *n, "seed", "expected an integer >= 0");
    seed = n->as_integer()->get();
  }

  // [base] is a scenario's [model] section, verbatim; [run] likewise (backends/cascade come from axes).
  const toml::table* base_tbl = nullptr;
  CaseText base_plain, base_tables, run_lines;
  if (const toml::node* n = root.get("base")) {
    if (!n->is_table()) fail(file, *n, "base", "expected a table of [model] keys");
    base_tbl = n->as_table();
    base_lines(file, *base_tbl, base_plain, base_tables);
  }
  if (const toml::node* n = root.get("run")) {
    if (!n->is_table()) fail(file, *n, "run", "expected a table of [run] keys");
    check_keys(file, *n->as_table(), "run",
               {"warmup", "iterations", "host_timeout", "cold_l2", "cuda_graph", "timed", "num_layers"});
    for (auto&& [k, v] : *n->as_table())
      run_lines.add(fmt::format("{} = {}", k.str(), toml_value_text(v)), {line_of(v), "run." + std::string(k.str())});
  }

  const toml::table* axes_tbl = root.get_as<toml::table>("axes");
  if (axes_tbl == nullptr) {
    throw InputError(InputSite{file, 0, "axes", {}, "missing [axes]",
                                         "e.g. [axes] num_requests = [1, 8], context_len = [1024, 4096]"});
  }
  {
    std::vector<const char*> names;
    for (const AxisRule& r : kAxes) names.push_back(r.key);
    for (auto&& [k, v] : *axes_tbl) {
      if (std::none_of(names.begin(), names.end(), [&](const char* a) { return k.str() == a; }))
        fail(file, v, "axes." + std::string(k.str()), "unknown axis",
             "expected one of: preset, kv_cache_dtype, block_size, num_requests, context_len, query_len, "
             "shared_prefix_len, cascade, backend");
    }
  }
  // Each axis: its values, or the one default (from [base] for the [model] keys it has).
  std::vector<AxisValues> axes;
  for (const AxisRule& rule : kAxes) {
    const std::string key = std::string("axes.") + rule.key;
    const bool model_key = std::string_view(rule.key) == "preset" || std::string_view(rule.key) == "kv_cache_dtype" ||
                           std::string_view(rule.key) == "block_size";
    AxisValues a{rule.key, {}, {}, {}, key};
    if (const toml::node* n = axes_tbl->get(rule.key)) {
      const toml::array* arr = n->as_array();
      if (arr == nullptr || arr->empty()) fail(file, *n, key, "expected a non-empty array");
      for (const toml::node& e : *arr) {
        if (rule.integer) {
          if (!e.is_integer() || e.as_integer()->get() < rule.min)
            fail(file, e, key, fmt::format("expected integers >= {}", rule.min));
          a.values.push_back(std::to_string(e.as_integer()->get()));
          a.labels.push_back(a.values.back());
        } else {
          if (!e.is_string() || e.as_string()->get().empty()) fail(file, e, key, "expected non-empty strings");
          a.labels.push_back(key == "axes.backend" ? canonical_backend(file, e) : e.as_string()->get());
          a.values.push_back(toml_value_text(toml::value<std::string>(a.labels.back())));
        }
        a.lines.push_back(line_of(e));
      }
      for (size_t i = 0; i < a.labels.size(); ++i)
        for (size_t j = 0; j < i; ++j)
          if (a.labels[i] == a.labels[j])
            fail(file, *arr->get(i), key, "repeats the value " + a.labels[i],
                 key == "axes.backend" ? "backend names ignore case" : "");
    } else if (const toml::node* b = model_key && base_tbl ? base_tbl->get(rule.key) : nullptr) {
      a.source = std::string("base.") + rule.key;
      a.values.push_back(toml_value_text(*b));
      a.labels.push_back(b->is_string() ? b->as_string()->get() : toml_value_text(*b));
      a.lines.push_back(line_of(*b));
    } else {
      static const std::map<std::string, std::string> kDefault = {
          {"num_requests", "1"}, {"context_len", "0"}, {"query_len", "1"}, {"shared_prefix_len", "0"},
          {"cascade", "\"auto\""}, {"backend", "\"auto\""}};
      const auto it = kDefault.find(rule.key);
      if (it == kDefault.end()) {
        // No preset: the model is [base]'s explicit keys, as in a scenario; without [base] there is none.
        if (std::string(rule.key) == "preset" && base_tbl == nullptr)
          throw InputError(InputSite{
              file, 0, "base.preset", {}, "no model",
              "set [base] preset = \"llama3-8b\", [base] num_q_heads/num_kv_heads/head_size, or an [axes] preset list"});
        continue;  // preset, kv_cache_dtype, block_size: [base]'s own or the preset's
      }
      a.values.push_back(it->second);
      a.labels.push_back(it->second.front() == '"' ? it->second.substr(1, it->second.size() - 2) : it->second);
      a.lines.push_back(0);
    }
    axes.push_back(std::move(a));
  }
  const long seed_line = root.get("seed") ? line_of(*root.get("seed")) : 0;

  // The cross product, last axis fastest.
  std::vector<size_t> idx(axes.size(), 0);
  for (;;) {
    std::map<std::string, size_t> at;
    for (size_t i = 0; i < axes.size(); ++i) at[axes[i].key] = i;
    auto value = [&](const char* k) { return axes[at.at(k)].values[idx[at.at(k)]]; };
    auto label = [&](const char* k) { return axes[at.at(k)].labels[idx[at.at(k)]]; };
    auto origin = [&](const char* k) { return Origin{axes[at.at(k)].lines[idx[at.at(k)]], axes[at.at(k)].source}; };
    auto has = [&](const char* k) { return at.count(k) > 0; };
    auto varies = [&](const char* k) { return has(k) && axes[at.at(k)].values.size() > 1; };

    // Without a preset the model is [base]'s own, named after the sweep.
    std::string name = fmt::format("{}:{}x{}@{}", has("preset") ? label("preset") : sw.name, label("num_requests"),
                                   label("query_len"), label("context_len"));
    if (varies("shared_prefix_len") || label("shared_prefix_len") != "0") name += ":prefix=" + label("shared_prefix_len");
    if (varies("kv_cache_dtype")) name += ":kv=" + label("kv_cache_dtype");
    if (varies("block_size")) name += ":block=" + label("block_size");
    if (varies("cascade")) name += ":cascade=" + label("cascade");
    // --set's overrides before the backend, which ends every case name (rows of one case on two
    // backends pair on the name without it: report markdown, report plot).
    name += override_suffix(overrides) + ":" + label("backend");

    CaseText t;
    t.add("name = " + toml_value_text(toml::value<std::string>(name)));
    t.add(fmt::format("seed = {}", seed), {seed_line, "seed"});
    t.add("[model]", {base_tbl ? line_of(*base_tbl) : 0, "base"});
    if (has("preset")) t.add("preset = " + value("preset"), origin("preset"));
    t.append(base_plain);
    if (has("kv_cache_dtype")) t.add("kv_cache_dtype = " + value("kv_cache_dtype"), origin("kv_cache_dtype"));
    if (has("block_size")) t.add("block_size = " + value("block_size"), origin("block_size"));
    t.append(base_tables);
    t.add("[batch]");
    t.add("shared_prefix_len = " + value("shared_prefix_len"), origin("shared_prefix_len"));
    t.add("[[batch.requests]]", origin("num_requests"));
    t.add("count = " + value("num_requests"), origin("num_requests"));
    t.add("context_len = " + value("context_len"), origin("context_len"));
    t.add("query_len = " + value("query_len"), origin("query_len"));
    t.add("[run]", {0, "run"});
    t.add("backends = [" + value("backend") + "]", origin("backend"));
    t.add("cascade = " + value("cascade"), origin("cascade"));
    t.append(run_lines);

    SweepCase c;
    c.name = name;
    c.backend_line = origin("backend").line;
    try {
      c.scenario = parse_scenario(t.text(), file, base_dir, overrides);
    } catch (const InputError& e) {
      throw InputError(at_sweep_origin(e, file, t, name));
    }
    c.scenario.name = name;  // parse_scenario put the overrides after the backend
    c.cost = estimate_cost(c.scenario);
    sw.cases.push_back(std::move(c));

    size_t k = axes.size();
    while (k > 0) {
      --k;
      if (++idx[k] < axes[k].values.size()) break;
      idx[k] = 0;
      if (k == 0) return sw;
    }
    if (axes.empty()) return sw;
  }
}

Sweep load_sweep(const std::string& path, const std::vector<ScenarioOverride>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(InputSite{path, 0, {}, {}, "cannot open the sweep file"});
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_sweep(ss.str(), path, fs::path(path).parent_path().string(), overrides);
}

std::vector<size_t> shard_cases(const Sweep& s, int index, int count) {
  std::vector<size_t> order(s.cases.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s.cases[a].cost > s.cases[b].cost; });
  std::vector<double> load(static_cast<size_t>(count), 0.0);
  std::vector<size_t> mine;
  for (size_t c : order) {
    const size_t to = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[to] += s.cases[c].cost;
    if (static_cast<int>(to) == index) mine.push_back(c);
  }
  std::sort(mine.begin(), mine.end());  // run in the sweep's own order
  return mine;
}

std::pair<int, int> parse_shard(const std::string& text) {
  const size_t slash = text.find('/');
  int i = -1, n = 0;
  if (slash != std::string::npos) {
    const auto r1 = std::from_chars(text.data(), text.data() + slash, i);
    const auto r2 = std::from_chars(text.data() + slash + 1, text.data() + text.size(), n);
    if (r1.ec != std::errc() || r1.ptr != text.data() + slash || r2.ec != std::errc() ||
        r2.ptr != text.data() + text.size())
      i = -1;
  }
  if (i < 0 || n < 1 || i >= n)
    throw InputError(InputSite{"<cli>", 0, "--shard", text, "expected I/N with 0 <= I < N", "e.g. 0/4"});
  return {i, n};
}

std::string duration_text(double seconds) {
  constexpr double kMax = 999.0 * 3600;
  if (!(seconds >= 0) || !(seconds < kMax)) return "?";  // NaN fails both comparisons
  const int t = static_cast<int>(seconds + 0.5);
  return t >= 3600 ? fmt::format("{}h{:02}m", t / 3600, t / 60 % 60) : fmt::format("{}m{:02}s", t / 60, t % 60);
}

}  // namespace attn
