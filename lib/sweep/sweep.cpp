#include "sweep/sweep.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "core/error.hpp"

namespace attn {

namespace {

namespace fs = std::filesystem;

long line_of(const toml::node& n) { return static_cast<long>(n.source().begin.line); }

std::string text_of(const toml::node& n) {
  std::ostringstream os;
  n.visit([&](auto&& v) { os << v; });
  return os.str();
}

[[noreturn]] void fail(const std::string& file, const toml::node& n, const std::string& key, const std::string& what,
                       const std::string& hint = {}) {
  throw InputError(input_error_message(file, line_of(n), key, text_of(n), what, hint));
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

}  // namespace

Sweep parse_sweep(std::string_view toml_text, const std::string& source_name, const std::string& base_dir) {
  const std::string& file = source_name;
  toml::table root;
  try {
    root = toml::parse(toml_text, std::string_view(source_name));
  } catch (const toml::parse_error& e) {
    throw InputError(input_error_message(file, static_cast<long>(e.source().begin.line), {}, {},
                                         "TOML syntax error: " + std::string(e.description())));
  }
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
  std::string base_text, run_text;
  if (const toml::node* n = root.get("base")) {
    if (!n->is_table()) fail(file, *n, "base", "expected a table of [model] keys");
    for (auto&& [k, v] : *n->as_table()) {
      if (k.str() == "kv_cache_dtype" || k.str() == "block_size" || k.str() == "preset") continue;  // also axes
      base_text += fmt::format("{} = {}\n", k.str(), text_of(v));
    }
  }
  if (const toml::node* n = root.get("run")) {
    if (!n->is_table()) fail(file, *n, "run", "expected a table of [run] keys");
    check_keys(file, *n->as_table(), "run", {"warmup", "iterations", "cold_l2", "cuda_graph", "num_layers"});
    for (auto&& [k, v] : *n->as_table()) run_text += fmt::format("{} = {}\n", k.str(), text_of(v));
  }

  const toml::table* axes_tbl = root.get_as<toml::table>("axes");
  if (axes_tbl == nullptr) {
    throw InputError(input_error_message(file, 0, "axes", {}, "missing [axes]",
                                         "e.g. [axes] num_requests = [1, 8], context_len = [1024, 4096]"));
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
  // Each axis: its values, or the one default (from [base] where it has that key).
  const toml::table* base_tbl = root.get_as<toml::table>("base");
  std::vector<AxisValues> axes;
  for (const AxisRule& rule : kAxes) {
    AxisValues a{rule.key, {}, {}};
    const std::string key = std::string("axes.") + rule.key;
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
          a.values.push_back(text_of(e));
          a.labels.push_back(e.as_string()->get());
        }
      }
      for (size_t i = 0; i < a.labels.size(); ++i)
        for (size_t j = 0; j < i; ++j)
          if (a.labels[i] == a.labels[j]) fail(file, *n, key, "repeats the value " + a.labels[i]);
    } else if (const toml::node* b = base_tbl ? base_tbl->get(rule.key) : nullptr) {
      a.values.push_back(text_of(*b));
      a.labels.push_back(b->is_string() ? b->as_string()->get() : text_of(*b));
    } else {
      static const std::map<std::string, std::string> kDefault = {
          {"num_requests", "1"}, {"context_len", "0"}, {"query_len", "1"}, {"shared_prefix_len", "0"},
          {"cascade", "\"auto\""}, {"backend", "\"auto\""}};
      const auto it = kDefault.find(rule.key);
      if (it == kDefault.end()) {
        if (std::string(rule.key) == "preset")
          throw InputError(input_error_message(file, 0, "base.preset", {}, "no model",
                                               "set [base] preset = \"llama3-8b\" or an [axes] preset list"));
        continue;  // kv_cache_dtype, block_size: the preset's own
      }
      a.values.push_back(it->second);
      a.labels.push_back(it->second.front() == '"' ? it->second.substr(1, it->second.size() - 2) : it->second);
    }
    axes.push_back(std::move(a));
  }

  // The cross product, last axis fastest.
  std::vector<size_t> idx(axes.size(), 0);
  for (;;) {
    std::map<std::string, size_t> at;
    for (size_t i = 0; i < axes.size(); ++i) at[axes[i].key] = i;
    auto value = [&](const char* k) { return axes[at.at(k)].values[idx[at.at(k)]]; };
    auto label = [&](const char* k) { return axes[at.at(k)].labels[idx[at.at(k)]]; };
    auto has = [&](const char* k) { return at.count(k) > 0; };
    auto varies = [&](const char* k) { return has(k) && axes[at.at(k)].values.size() > 1; };

    std::string name = fmt::format("{}:{}x{}@{}", label("preset"), label("num_requests"), label("query_len"),
                                   label("context_len"));
    if (varies("shared_prefix_len") || label("shared_prefix_len") != "0") name += ":prefix=" + label("shared_prefix_len");
    if (varies("kv_cache_dtype")) name += ":kv=" + label("kv_cache_dtype");
    if (varies("block_size")) name += ":block=" + label("block_size");
    if (varies("cascade")) name += ":cascade=" + label("cascade");
    name += ":" + label("backend");

    std::string text = fmt::format("name = \"{}\"\nseed = {}\n[model]\npreset = {}\n{}", name, seed, value("preset"),
                                   base_text);
    if (has("kv_cache_dtype")) text += fmt::format("kv_cache_dtype = {}\n", value("kv_cache_dtype"));
    if (has("block_size")) text += fmt::format("block_size = {}\n", value("block_size"));
    text += fmt::format("[batch]\nshared_prefix_len = {}\n[[batch.requests]]\ncount = {}\ncontext_len = {}\nquery_len = {}\n",
                        value("shared_prefix_len"), value("num_requests"), value("context_len"), value("query_len"));
    text += fmt::format("[run]\nbackends = [{}]\ncascade = {}\n{}", value("backend"), value("cascade"), run_text);
    SweepCase c;
    c.name = name;
    try {
      c.scenario = parse_scenario(text, file + " (case " + name + ")", base_dir);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: the axes make an invalid case {}: {}", file, name, e.what()));
    }
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

Sweep load_sweep(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(input_error_message(path, 0, {}, {}, "cannot open the sweep file"));
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_sweep(ss.str(), path, fs::path(path).parent_path().string());
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
    throw InputError(input_error_message("<cli>", 0, "--shard", text, "expected I/N with 0 <= I < N", "e.g. 0/4"));
  return {i, n};
}

}  // namespace attn
