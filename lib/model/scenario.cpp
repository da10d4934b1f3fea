// Scenario files (docs/SCENARIOS.md): TOML -> Scenario, with every check done here so that
// nothing downstream meets an impossible value. Each error names the file, the line (toml++
// source positions), the dotted key and its value, and says how to fix it.
#include "model/scenario.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "model/backend_names.hpp"
#include "model/scenario_overrides.hpp"
#include "model/toml_value_text.hpp"

namespace attn {
namespace {

namespace fs = std::filesystem;

// ---- error reporting ---------------------------------------------------------------------------

// Where a value came from: the dotted key, its line and its text as written.
struct Where {
  std::string key;
  long line = 0;
  std::string value;
};

[[noreturn]] void fail(const std::string& file, const Where& w, const std::string& what, const std::string& hint = {}) {
  throw InputError(InputSite{file, w.line, w.key, w.value, what, hint});
}

// A node's line in the file; 0 for a value that --set put there (its text is not the file's).
long line_of(const toml::source_region& r) {
  if (r.path != nullptr && *r.path == kOverrideSource) return 0;
  return static_cast<long>(r.begin.line);
}

// A value as it reads in the file; long values (big tables) are cut short.
std::string value_text(const toml::node& n) {
  if (const toml::table* t = n.as_table(); t != nullptr && !t->is_inline()) return "[table]";
  const toml::value<std::string>* str = n.as_string();
  // Strings as most files write them (toml++ prints 'literal' strings).
  std::string s = str != nullptr ? '"' + str->get() + '"' : toml_value_text(n);
  std::replace(s.begin(), s.end(), '\n', ' ');
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Edits (insert, delete, substitute, swap two neighbours) turning a into b: typos as people make them.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0u : 1u)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::string join(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) s += (s.empty() ? "" : ", ") + w;
  return s;
}

// "did you mean "x"?" for a near miss (a typo), else the list of valid choices.
std::string choice_hint(std::string_view word, const std::vector<std::string>& choices) {
  const std::size_t limit = std::clamp<std::size_t>(word.size() / 3, 1, 3);
  const std::string* best = nullptr;
  std::size_t best_d = limit + 1;
  for (const std::string& c : choices) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = &c;
  }
  if (best != nullptr) return "did you mean \"" + *best + "\"?";
  return "expected one of: " + join(choices);
}

// ---- typed access to one TOML table ------------------------------------------------------------

template <class T>
struct Field {
  T value;
  Where where;
};

// One table of the file. The constructor rejects keys the table does not define; the getters
// reject values of the wrong type. `path` is the dotted name used in messages ("model.mla").
class Section {
 public:
  Section(const std::string& file, const toml::table& t, std::string path, std::initializer_list<std::string_view> keys)
      : file_(file), table_(t), path_(std::move(path)) {
    std::vector<std::string> known(keys.begin(), keys.end());
    for (auto&& [k, v] : t) {
      if (std::find(known.begin(), known.end(), k.str()) != known.end()) continue;
      fail(file_, Where{dotted(k.str()), line_of(k.source()), value_text(v)}, "unknown key",
           choice_hint(k.str(), known));
    }
  }

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  std::string dotted(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  // The table itself, for errors about something missing from it.
  Where self() const { return Where{path_, line_of(table_.source()), {}}; }
  Where where(std::string_view key, const toml::node& n) const {
    return Where{dotted(key), line_of(n.source()), value_text(n)};
  }
  const toml::node* node(std::string_view key) const { return table_.get(key); }

  std::optional<Field<int64_t>> integer(std::string_view key) const {
    const toml::node* n = node(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_integer()) fail(file_, where(key, *n), "expected an integer, got " + type_name(*n));
    return Field<int64_t>{n->as_integer()->get(), where(key, *n)};
  }
  // Integers are accepted where a float is expected (`rtol = 1` means 1.0).
  std::optional<Field<double>> number(std::string_view key) const {
    const toml::node* n = node(key);
    if (n == nullptr) return std::nullopt;
    if (n->is_integer()) return Field<double>{static_cast<double>(n->as_integer()->get()), where(key, *n)};
    if (!n->is_floating_point()) fail(file_, where(key, *n), "expected a number, got " + type_name(*n));
    const double v = n->as_floating_point()->get();
    if (!std::isfinite(v)) fail(file_, where(key, *n), "must be a finite number");
    return Field<double>{v, where(key, *n)};
  }
  std::optional<Field<bool>> boolean(std::string_view key) const {
    const toml::node* n = node(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_boolean()) fail(file_, where(key, *n), "expected true or false, got " + type_name(*n));
    return Field<bool>{n->as_boolean()->get(), where(key, *n)};
  }
  std::optional<Field<std::string>> string(std::string_view key) const {
    const toml::node* n = node(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_string()) fail(file_, where(key, *n), "expected a string, got " + type_name(*n));
    return Field<std::string>{n->as_string()->get(), where(key, *n)};
  }
  const toml::table* table(std::string_view key) const {
    const toml::node* n = node(key);
    if (n == nullptr) return nullptr;
    if (!n->is_table()) fail(file_, where(key, *n), "expected a table, got " + type_name(*n));
    return n->as_table();
  }

  // An integer within [lo, hi] (int range by default), or nullopt when the key is absent.
  std::optional<Field<int64_t>> integer_in(std::string_view key, int64_t lo, const std::string& what,
                                           int64_t hi = std::numeric_limits<int32_t>::max()) const {
    std::optional<Field<int64_t>> f = integer(key);
    if (f && f->value < lo) fail(file_, f->where, what);
    if (f && f->value > hi) fail(file_, f->where, "too large (at most " + std::to_string(hi) + ")");
    return f;
  }
  // A string that must be one of `choices`.
  std::optional<Field<std::string>> choice(std::string_view key, const std::vector<std::string>& choices,
                                           const std::string& what) const {
    std::optional<Field<std::string>> f = string(key);
    if (f && std::find(choices.begin(), choices.end(), f->value) == choices.end())
      fail(file_, f->where, what, choice_hint(f->value, choices));
    return f;
  }

  static std::string type_name(const toml::node& n) {
    switch (n.type()) {
      case toml::node_type::table:
        return "a table";
      case toml::node_type::array:
        return "an array";
      case toml::node_type::string:
        return "a string";
      case toml::node_type::integer:
        return "an integer";
      case toml::node_type::floating_point:
        return "a float";
      case toml::node_type::boolean:
        return "a boolean";
      default:
        return "a date/time";
    }
  }

 private:
  const std::string& file_;
  const toml::table& table_;
  std::string path_;
};

template <class T>
void assign(std::optional<Field<T>> f, int& out, Where& where) {
  if (!f) return;
  out = static_cast<int>(f->value);
  where = f->where;
}

std::string fmt_int(int64_t v) { return std::to_string(v); }

// A number the spec keeps as a float. The double read from the file must survive the narrowing:
// 1e300 would become inf, and 1e-300 would become 0 ("auto" for scale, "off" for the soft cap,
// and an fp8 scale that divides by zero), so either is an error rather than a different setting.
// Denormals are refused too: they lose digits and flush to 0 on the GPU.
float as_float(const std::string& file, const Field<double>& f) {
  constexpr double kMax = std::numeric_limits<float>::max(), kMin = std::numeric_limits<float>::min();
  const double a = std::fabs(f.value);
  if (a > kMax || (a != 0.0 && std::fabs(static_cast<float>(f.value)) < kMin))
    fail(file, f.where, "does not fit a 32-bit float",
         "its magnitude must be 0 or within [1.2e-38, 3.4e38], as the spec holds it as a float");
  return static_cast<float>(f.value);
}

// Head sizes and MLA dimensions at most this (docs/SCENARIOS.md): real models use up to 256
// (gemma) and MLA's 512-wide latent, so the bound rejects none of them, while it keeps every
// size product of the batch (heads x head size x tokens) far from int overflow.
constexpr int64_t kMaxHeadSize = 1024;
// kv_lora_rank is wider than a head (DeepSeek's 512): room for 8x that.
constexpr int64_t kMaxLoraRank = 4096;

// ---- [model] -----------------------------------------------------------------------------------

// Where each model field was set (explicit key, else the preset, else the [model] table), so
// that errors about combinations point at a line the user wrote.
struct ModelOrigin {
  Where num_q_heads, num_kv_heads, head_size_qk, head_size_v, block_size;
  bool num_kv_heads_explicit = false, head_qk_explicit = false, head_v_explicit = false;
  bool block_size_explicit = false;
  Where preset;
  int local_attention_chunk = 0;  // from the preset
  std::optional<Where> causal, sliding_window;  // when written
};

// An fp8 scale: a positive number, or "calc" (resolved over the batch by make_batch). `over`
// names the values "calc" measures, `stored` what is quantized with the scale (for the hints).
float read_fp8_scale(const Section& m, std::string_view key, bool& calc, float current, const std::string& over,
                     const std::string& stored) {
  const toml::node* n = m.node(key);
  if (n == nullptr) return current;
  if (n->is_string()) {
    if (n->as_string()->get() != "calc")
      fail(m.file(), m.where(key, *n), "expected a number or \"calc\"",
           "\"calc\" sets the scale to max|x| / fp8 range over " + over);
    calc = true;
    return current;
  }
  const std::optional<Field<double>> f = m.number(key);
  if (f->value <= 0.0)
    fail(m.file(), f->where, "must be > 0", stored + " / scale, so the scale must be positive");
  calc = false;
  return as_float(m.file(), *f);
}

float read_kv_scale(const Section& m, std::string_view key, bool& calc, float current) {
  return read_fp8_scale(m, key, calc, current, "the batch's new tokens", "the cache stores value");
}

// [model] q_scale (vLLM's static per-tensor query quantization): only where vLLM does it, an
// fp8 e4m3 cache without MLA (the query is quantized for FlashAttention-3's fp8 path). Read after
// [model.mla], so that both conditions are known.
void read_q_scale(const Section& m, AttentionSpec& spec) {
  const toml::node* n = m.node("q_scale");
  if (n == nullptr) return;
  spec.q_scale = read_fp8_scale(m, "q_scale", spec.q_scale_calc, spec.q_scale, "the batch's queries",
                                "the query is quantized to q");
  if (spec.kv_cache_dtype != DType::fp8_e4m3)
    fail(m.file(), m.where("q_scale", *n),
         "needs kv_cache_dtype = \"fp8_e4m3\" (the cache is " + std::string(to_string(spec.kv_cache_dtype)) + ")",
         "vLLM quantizes the query only over an fp8_e4m3 cache; drop q_scale or set kv_cache_dtype = \"fp8_e4m3\"");
  if (spec.use_mla)
    fail(m.file(), m.where("q_scale", *n), "not supported with [model.mla]",
         "vLLM quantizes the query only for MHA/GQA attention over an fp8_e4m3 cache; drop q_scale");
}

ModelOrigin parse_model(const std::string& file, const toml::table* tbl, Scenario& s) {
  ModelOrigin o;
  AttentionSpec& spec = s.spec;
  spec.scale = 0.0f;  // resolved at the end unless a number is given
  if (tbl == nullptr) {
    o.num_q_heads = o.num_kv_heads = o.head_size_qk = o.head_size_v = o.block_size = Where{"model", 0, {}};
    spec.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(spec.head_size_qk)));
    return o;
  }
  const Section m(file, *tbl, "model",
                  {"preset", "num_q_heads", "num_kv_heads", "head_size", "head_size_qk", "head_size_v", "dtype",
                   "kv_cache_dtype", "k_scale", "v_scale", "q_scale", "block_size", "kv_layout", "scale",
                   "sliding_window", "logits_soft_cap", "alibi", "sinks", "causal", "mla"});
  const Where table_where = m.self();
  o.num_q_heads = o.num_kv_heads = o.head_size_qk = o.head_size_v = o.block_size = table_where;

  // Preset first, then every explicit key overrides it.
  if (const auto preset = m.string("preset")) {
    const ModelPreset* p = find_preset(preset->value);
    if (p == nullptr) {
      std::vector<std::string> names;
      for (const ModelPreset& mp : model_presets()) names.push_back(mp.name);
      fail(file, preset->where, "unknown model preset", choice_hint(preset->value, names));
    }
    spec = p->spec;
    spec.scale = 0.0f;
    s.preset = p->name;
    o.preset = preset->where;
    o.local_attention_chunk = p->local_attention_chunk;
    o.num_q_heads = o.num_kv_heads = o.head_size_qk = o.head_size_v = o.block_size = preset->where;
  }

  assign(m.integer_in("num_q_heads", 1, "must be a positive number of heads"), spec.num_q_heads, o.num_q_heads);
  if (const auto f = m.integer_in("num_kv_heads", 1, "must be a positive number of heads")) {
    spec.num_kv_heads = static_cast<int>(f->value), o.num_kv_heads = f->where, o.num_kv_heads_explicit = true;
  }
  const auto head_size = m.integer_in("head_size", 1, "must be a positive head size", kMaxHeadSize);
  const auto head_qk = m.integer_in("head_size_qk", 1, "must be a positive head size", kMaxHeadSize);
  const auto head_v = m.integer_in("head_size_v", 1, "must be a positive head size", kMaxHeadSize);
  if (head_size && (head_qk || head_v)) {
    fail(file, (head_qk ? head_qk : head_v)->where, "conflicts with head_size",
         "give head_size, or head_size_qk and head_size_v, not both");
  }
  if (head_size) {
    spec.head_size_qk = spec.head_size_v = static_cast<int>(head_size->value);
    o.head_size_qk = o.head_size_v = head_size->where;
    o.head_qk_explicit = o.head_v_explicit = true;
  }
  if (head_qk)
    spec.head_size_qk = static_cast<int>(head_qk->value), o.head_size_qk = head_qk->where, o.head_qk_explicit = true;
  if (head_v)
    spec.head_size_v = static_cast<int>(head_v->value), o.head_size_v = head_v->where, o.head_v_explicit = true;

  if (const auto f = m.string("dtype")) {
    const std::optional<DType> d = parse_dtype(f->value);
    if (!d || is_fp8(*d)) fail(file, f->where, "unknown model dtype", choice_hint(f->value, {"fp16", "bf16", "fp32"}));
    spec.dtype = *d;
  }
  spec.kv_cache_dtype = spec.kv_fp8() ? spec.kv_cache_dtype : spec.dtype;  // preset "auto" follows dtype
  if (const auto f = m.string("kv_cache_dtype")) {
    if (f->value == "auto") {
      spec.kv_cache_dtype = spec.dtype;
    } else {
      const std::optional<DType> d = parse_dtype(f->value);
      if (!d || (!is_fp8(*d) && *d != spec.dtype)) {
        fail(file, f->where, d ? "a cache dtype other than fp8 must equal the model dtype" : "unknown kv cache dtype",
             choice_hint(f->value, {"auto", "fp8_e4m3", "fp8_e5m2"}));
      }
      spec.kv_cache_dtype = *d;
    }
  }
  spec.k_scale = read_kv_scale(m, "k_scale", spec.k_scale_calc, spec.k_scale);
  spec.v_scale = read_kv_scale(m, "v_scale", spec.v_scale_calc, spec.v_scale);

  if (const auto f = m.integer_in("block_size", 1, "must be a positive number of tokens per block")) {
    spec.block_size = static_cast<int>(f->value), o.block_size = f->where, o.block_size_explicit = true;
  }
  if (const auto f = m.choice("kv_layout", {"NHD", "HND"}, "unknown kv cache layout")) {
    spec.kv_layout = f->value == "NHD" ? KvLayout::NHD : KvLayout::HND;
  }
  if (const toml::node* n = m.node("scale")) {
    if (n->is_string()) {
      if (n->as_string()->get() != "auto")
        fail(file, m.where("scale", *n), "expected a number or \"auto\"", "\"auto\" = 1/sqrt(head_size_qk)");
    } else {
      const auto f = m.number("scale");
      if (f->value <= 0.0) fail(file, f->where, "must be > 0", "or \"auto\" = 1/sqrt(head_size_qk)");
      spec.scale = as_float(file, *f);
    }
  }
  if (const auto f = m.integer_in("sliding_window", 0, "must be >= 0 (0 = off)"))
    spec.sliding_window = static_cast<int>(f->value), o.sliding_window = f->where;
  if (const auto f = m.number("logits_soft_cap")) {
    if (f->value < 0.0) fail(file, f->where, "must be >= 0 (0 = off)");
    spec.logits_soft_cap = as_float(file, *f);
  }
  if (const auto f = m.boolean("alibi")) spec.alibi = f->value;
  if (const auto f = m.boolean("sinks")) spec.sinks = f->value;
  if (const auto f = m.boolean("causal")) {
    spec.attn_type = f->value ? AttentionType::decoder : AttentionType::encoder_only;
    o.causal = f->where;
  }

  if (const toml::table* t = m.table("mla")) {
    const Section ml(file, *t, "model.mla", {"kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"});
    spec.use_mla = true;
    Where unused;
    assign(ml.integer_in("kv_lora_rank", 1, "must be positive", kMaxLoraRank), spec.mla.kv_lora_rank, unused);
    assign(ml.integer_in("qk_rope_head_dim", 1, "must be positive", kMaxHeadSize), spec.mla.qk_rope_head_dim, unused);
    assign(ml.integer_in("qk_nope_head_dim", 1, "must be positive", kMaxHeadSize), spec.mla.qk_nope_head_dim, unused);
    assign(ml.integer_in("v_head_dim", 1, "must be positive", kMaxHeadSize), spec.mla.v_head_dim, unused);
  }
  if (spec.use_mla) {
    // The latent cache is a single "kv head"; the head sizes follow from the MLA dimensions.
    if (o.num_kv_heads_explicit && spec.num_kv_heads != 1)
      fail(file, o.num_kv_heads, "MLA has one latent kv head", "drop num_kv_heads, or set it to 1");
    if (o.head_qk_explicit && spec.head_size_qk != spec.mla.qk_head_dim())
      fail(file, o.head_size_qk, "conflicts with [model.mla]",
           "MLA's head_size_qk is qk_nope_head_dim + qk_rope_head_dim = " + fmt_int(spec.mla.qk_head_dim()));
    if (o.head_v_explicit && spec.head_size_v != spec.mla.v_head_dim)
      fail(file, o.head_size_v, "conflicts with [model.mla]",
           "MLA's head_size_v is v_head_dim = " + fmt_int(spec.mla.v_head_dim));
    spec.num_kv_heads = 1;
    spec.head_size_qk = spec.mla.qk_head_dim();
    spec.head_size_v = spec.mla.v_head_dim;
  }
  read_q_scale(m, spec);

  if (spec.num_q_heads % spec.num_kv_heads != 0) {
    const Where& w = o.num_kv_heads_explicit ? o.num_kv_heads : o.num_q_heads;
    fail(
        file, w,
        "num_kv_heads (" + fmt_int(spec.num_kv_heads) + ") must divide num_q_heads (" + fmt_int(spec.num_q_heads) + ")",
        "each kv head serves num_q_heads / num_kv_heads query heads");
  }
  if (spec.scale == 0.0f) spec.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(spec.head_size_qk)));
  return o;
}

// ---- [batch] -----------------------------------------------------------------------------------

LengthDist parse_dist(const Section& parent, std::string_view key, int lo) {
  const toml::node* n = parent.node(key);
  const std::string file = parent.file();
  LengthDist d;
  if (n->is_integer()) {  // `query_len = 1` is shorthand for { dist = "fixed", value = 1 }
    const auto f = parent.integer_in(key, lo, "must be >= " + fmt_int(lo));
    d.kind = LengthDist::Kind::fixed;
    d.value = static_cast<int>(f->value);
    return d;
  }
  const toml::table* t = parent.table(key);
  const Section s(file, *t, parent.dotted(key), {"dist", "value", "min", "max", "mean", "sigma"});
  const auto dist = s.choice("dist", {"fixed", "uniform", "lognormal"}, "unknown length distribution");
  if (!dist) fail(file, s.self(), "missing key \"dist\"", "dist = \"fixed\" | \"uniform\" | \"lognormal\"");
  const std::string ge = "must be >= " + fmt_int(lo);
  auto require = [&](std::string_view k) {
    if (s.node(k) == nullptr)
      fail(file, dist->where, "needs the key \"" + std::string(k) + "\"", "see docs/SCENARIOS.md [batch.random]");
  };
  auto reject = [&](std::initializer_list<std::string_view> keys) {
    for (std::string_view k : keys)
      if (const toml::node* x = s.node(k)) fail(file, s.where(k, *x), "not used by dist = " + dist->value);
  };
  if (dist->value == "fixed") {
    require("value");
    reject({"min", "max", "mean", "sigma"});
    d.kind = LengthDist::Kind::fixed;
    d.value = static_cast<int>(s.integer_in("value", lo, ge)->value);
  } else if (dist->value == "uniform") {
    require("min");
    require("max");
    reject({"value", "mean", "sigma"});
    d.kind = LengthDist::Kind::uniform;
    d.min = static_cast<int>(s.integer_in("min", lo, ge)->value);
    const auto mx = s.integer_in("max", lo, ge);
    d.max = static_cast<int>(mx->value);
    if (d.max < d.min) fail(file, mx->where, "must be >= min (" + fmt_int(d.min) + ")");
  } else {
    require("mean");
    reject({"value"});
    d.kind = LengthDist::Kind::lognormal;
    const auto mean = s.number("mean");
    if (mean->value <= 0.0) fail(file, mean->where, "must be > 0", "the mean length of the distribution");
    d.mean = mean->value;
    if (const auto sigma = s.number("sigma")) {
      if (sigma->value < 0.0) fail(file, sigma->where, "must be >= 0");
      d.sigma = sigma->value;
    }
    d.min = lo;
    if (const auto mn = s.integer_in("min", lo, ge)) d.min = static_cast<int>(mn->value);
    if (const auto mx = s.integer_in("max", 0, "must be >= 0 (0 = no upper clamp)")) {
      d.max = static_cast<int>(mx->value);
      if (d.max != 0 && d.max < d.min) fail(file, mx->where, "must be >= min (" + fmt_int(d.min) + ")");
    }
  }
  return d;
}

// The shortest length a distribution can draw (the shared prefix must fit in it).
int min_length(const LengthDist& d) { return d.kind == LengthDist::Kind::fixed ? d.value : d.min; }

// The longest length a distribution can draw (context + query must fit an int32 sequence length).
int64_t max_length(const LengthDist& d) {
  switch (d.kind) {
    case LengthDist::Kind::fixed:
      return d.value;
    case LengthDist::Kind::uniform:
      return d.max;
    case LengthDist::Kind::lognormal:
      return d.max > 0 ? d.max : std::max<int64_t>(d.min, kLognormalUnboundedMax);
  }
  return d.value;
}

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// Where each batch key was written (for the checks that tie it to [model]).
struct BatchKeys {
  std::optional<Field<int64_t>> shared_prefix_len, local_attention_chunk, num_blocks;
  std::vector<Where> group_context, group_count;  // [num_groups]
  Where random_context, random_num_requests;
  Where source;  // the request source's table
};

BatchKeys parse_batch(const std::string& file, const Section& top, const std::string& base_dir, Scenario& s) {
  BatchKeys o;
  const toml::table* tbl = top.table("batch");
  if (tbl == nullptr)
    fail(file, Where{"batch", 0, {}}, "missing [batch]",
         "give [[batch.requests]], [batch.random] or [batch.trace] (docs/SCENARIOS.md)");
  const Section b(
      file, *tbl, "batch",
      {"shared_prefix_len", "local_attention_chunk", "block_allocation", "num_blocks", "requests", "random", "trace"});
  BatchConfig& bc = s.batch;
  auto note = [&bc](const Where& w) { bc.origin.lines[w.key] = w.line; };
  note(b.self());
  o.shared_prefix_len = b.integer_in("shared_prefix_len", 0, "must be >= 0 (0 = no shared prefix)");
  if (o.shared_prefix_len)
    bc.shared_prefix_len = static_cast<int>(o.shared_prefix_len->value), note(o.shared_prefix_len->where);
  o.local_attention_chunk = b.integer_in("local_attention_chunk", 0, "must be >= 0 (0 = off)");
  if (o.local_attention_chunk)
    bc.local_attention_chunk = static_cast<int>(o.local_attention_chunk->value), note(o.local_attention_chunk->where);
  if (const auto f = b.choice("block_allocation", {"shuffled", "contiguous"}, "unknown block allocation"))
    bc.block_allocation = f->value == "shuffled" ? BlockAllocation::shuffled : BlockAllocation::contiguous;
  o.num_blocks = b.integer_in("num_blocks", 0, "must be >= 0 (0 = just enough)", std::numeric_limits<int64_t>::max());
  if (o.num_blocks) {
    if (o.num_blocks->value > kInt32Max)
      fail(file, o.num_blocks->where, "does not fit the int32 block ids of the block table (at most 2147483647)",
           "use num_blocks = 0 for just enough");
    bc.num_blocks = o.num_blocks->value;
    note(o.num_blocks->where);
  }

  // Exactly one request source.
  std::vector<std::string> sources;
  for (const char* k : {"requests", "random", "trace"})
    if (b.node(k) != nullptr) sources.push_back(k);
  if (sources.empty()) fail(file, b.self(), "no requests", "give [[batch.requests]], [batch.random] or [batch.trace]");
  if (sources.size() > 1) {
    const toml::node* second = b.node(sources[1]);
    fail(file, b.where(sources[1], *second), "a batch takes exactly one of requests, random and trace",
         "this batch also has batch." + sources[0]);
  }

  if (const toml::node* n = b.node("requests")) {
    bc.source = BatchSource::groups;
    const toml::array* arr = n->as_array();
    if (arr == nullptr || !arr->is_array_of_tables() || arr->empty())
      fail(file, b.where("requests", *n), "expected [[batch.requests]] tables",
           "[[batch.requests]] with count, context_len, query_len");
    o.source = b.where("requests", *n);
    o.source.line = line_of(arr->get(0)->source());  // the first [[batch.requests]] header
    o.source.value.clear();
    note(o.source);
    for (std::size_t i = 0; i < arr->size(); ++i) {
      const toml::table& gt = *arr->get(i)->as_table();
      const Section g(file, gt, "batch.requests[" + std::to_string(i) + "]", {"count", "context_len", "query_len"});
      note(g.self());
      // Every group gives all three keys: a missing one is an error, never a silent default.
      // Values written are checked first, then the keys left out.
      const auto count_f = g.integer_in("count", 1, "must be >= 1");
      const auto ctx_f = g.integer_in("context_len", 0, "must be >= 0 (tokens already in the cache)");
      const auto q_f = g.integer_in("query_len", 1, "must be >= 1 (new tokens this step; 1 = decode)");
      auto required = [&](const std::optional<Field<int64_t>>& f, std::string_view key) {
        if (!f)
          fail(file, g.self(), "missing key \"" + std::string(key) + "\"",
               "each [[batch.requests]] gives count, context_len and query_len");
        note(f->where);
        return *f;
      };
      RequestGroup grp;
      const Field<int64_t> count = required(count_f, "count");
      const Field<int64_t> ctx = required(ctx_f, "context_len");
      const Field<int64_t> q = required(q_f, "query_len");
      grp.count = static_cast<int>(count.value);
      grp.context_len = static_cast<int>(ctx.value);
      grp.query_len = static_cast<int>(q.value);
      if (ctx.value + q.value > kInt32Max)
        fail(file, ctx.where, "context_len + query_len does not fit a 32-bit sequence length",
             "query_len = " + fmt_int(q.value) + "; their sum must be at most 2147483647");
      bc.groups.push_back(grp);
      o.group_context.push_back(ctx.where);
      o.group_count.push_back(count.where);
    }
  } else if (const toml::table* rt = b.table("random")) {
    bc.source = BatchSource::random;
    const Section r(file, *rt, "batch.random", {"num_requests", "context_len", "query_len"});
    o.source = r.self();
    note(o.source);
    const auto nr = r.integer_in("num_requests", 1, "must be >= 1");
    if (!nr) fail(file, r.self(), "missing key \"num_requests\"");
    bc.random.num_requests = static_cast<int>(nr->value);
    o.random_num_requests = nr->where;
    note(nr->where);
    if (r.node("context_len") == nullptr)
      fail(file, r.self(), "missing key \"context_len\"",
           "e.g. context_len = { dist = \"uniform\", min = 0, max = 8192 }");
    bc.random.context_len = parse_dist(r, "context_len", 0);
    o.random_context = r.where("context_len", *r.node("context_len"));
    note(o.random_context);
    bc.random.query_len.kind = LengthDist::Kind::fixed;
    bc.random.query_len.value = 1;
    if (const toml::node* qn = r.node("query_len")) {
      bc.random.query_len = parse_dist(r, "query_len", 1);
      note(r.where("query_len", *qn));
    }
    const int64_t max_ctx = max_length(bc.random.context_len), max_q = max_length(bc.random.query_len);
    if (max_ctx + max_q > kInt32Max)
      fail(file, max_q > max_ctx ? r.where("query_len", *r.node("query_len")) : o.random_context,
           "context_len (up to " + fmt_int(max_ctx) + ") + query_len (up to " + fmt_int(max_q) +
               ") does not fit a 32-bit sequence length",
           "their sum must be at most 2147483647");
  } else {
    bc.source = BatchSource::trace;
    const Section t(file, *b.table("trace"), "batch.trace",
                    {"file", "max_num_batched_tokens", "max_num_seqs", "step", "step_ms", "max_steps"});
    o.source = t.self();
    note(o.source);
    TraceConfig& tc = bc.trace;
    const auto f = t.string("file");
    if (!f) fail(file, t.self(), "missing key \"file\"", "file = \"traces/azure_llm_2023_conv.csv\"");
    note(f->where);
    fs::path p(f->value);
    if (p.is_relative()) p = fs::path(base_dir) / p;
    p = p.lexically_normal();
    std::error_code ec;
    if (fs::is_directory(p, ec))
      fail(file, f->where, "is a directory, not a trace file", p.string() + " is a folder; name a CSV file in it");
    if (!fs::is_regular_file(p, ec))
      fail(file, f->where, fs::exists(p, ec) ? "not a regular file" : "trace file not found",
           "looked for " + p.string() + "; a relative path is relative to the scenario's folder");
    tc.file = p.string();
    if (const auto x = t.integer_in("max_num_batched_tokens", 1, "must be >= 1 (the token budget of one step)"))
      tc.max_num_batched_tokens = static_cast<int>(x->value), note(x->where);
    if (const auto x = t.integer_in("max_num_seqs", 1, "must be >= 1 (running requests at most)"))
      tc.max_num_seqs = static_cast<int>(x->value), note(x->where);
    if (const auto x = t.number("step_ms")) {
      if (x->value <= 0.0) fail(file, x->where, "must be > 0 (milliseconds per scheduler step)");
      tc.step_ms = x->value;
      note(x->where);
    }
    if (const toml::node* n = t.node("step")) {
      note(t.where("step", *n));
      if (n->is_string()) {
        if (n->as_string()->get() != "all") fail(file, t.where("step", *n), "expected a step number or \"all\"");
        tc.all_steps = true;
      } else {
        tc.step =
            static_cast<long>(t.integer_in("step", 0, "must be >= 0", std::numeric_limits<int64_t>::max())->value);
      }
    }
    if (const auto x = t.integer_in("max_steps", 0, "must be >= 0 (0 = until the trace drains)",
                                    std::numeric_limits<int64_t>::max())) {
      if (!tc.all_steps)
        fail(file, x->where, "only applies with step = \"all\"",
             t.node("step") != nullptr ? "step = " + value_text(*t.node("step")) + " picks one step; drop max_steps"
                                       : "without step the batch is step 0; drop max_steps or set step = \"all\"");
      tc.max_steps = static_cast<long>(x->value);
      note(x->where);
    }
  }
  return o;
}

// Checks that tie [batch] to [model]: block multiples, the shared prefix, causality, and the
// batch's size against what its int32 arrays can index.
void check_batch(const std::string& file, const ModelOrigin& mo, const BatchKeys& bo, Scenario& s) {
  BatchConfig& bc = s.batch;
  const int bs = s.spec.block_size;
  if (bc.shared_prefix_len > 0) {
    const Where& w = bo.shared_prefix_len->where;
    if (bc.shared_prefix_len % bs != 0)
      fail(file, w, "must be a multiple of block_size (" + fmt_int(bs) + ")",
           "the shared prefix is made of whole shared blocks");
    if (bc.source == BatchSource::groups) {
      for (std::size_t i = 0; i < bc.groups.size(); ++i) {
        if (bc.groups[i].context_len < bc.shared_prefix_len)
          fail(file, w,
               "longer than the context_len (" + fmt_int(bc.groups[i].context_len) + ") of " +
                   bo.group_context[i].key.substr(0, bo.group_context[i].key.rfind('.')),
               "the shared prefix is part of every request's cached context");
      }
    } else if (bc.source == BatchSource::random) {
      const int lo = min_length(bc.random.context_len);
      if (lo < bc.shared_prefix_len)
        fail(file, w, "longer than the shortest context batch.random.context_len can draw (" + fmt_int(lo) + ")",
             "raise the distribution's minimum to at least shared_prefix_len");
    } else {
      fail(file, w, "a replayed trace has no shared prefix", "remove shared_prefix_len, or use explicit requests");
    }
  }
  if (!bo.local_attention_chunk) bc.local_attention_chunk = mo.local_attention_chunk;
  if (bc.local_attention_chunk > 0 && bc.local_attention_chunk % bs != 0) {
    const Where& w = bo.local_attention_chunk ? bo.local_attention_chunk->where : mo.block_size;
    fail(file, w,
         "local_attention_chunk (" + fmt_int(bc.local_attention_chunk) + ") must be a multiple of block_size (" +
             fmt_int(bs) + ")");
  }
  // Non-causal (encoder-only) attention lets every query see every key of its sequence: a window
  // or a local chunk, both limits on the keys before a query, have nothing to apply to.
  if (mo.causal && !s.spec.causal()) {
    if (s.spec.sliding_window > 0)
      fail(file, *mo.causal,
           "non-causal attention takes no sliding window (sliding_window = " + fmt_int(s.spec.sliding_window) +
               (mo.sliding_window ? ", line " + fmt_int(mo.sliding_window->line) : ", from the preset") + ")",
           "set sliding_window = 0, or drop causal = false");
    if (bc.local_attention_chunk > 0) {
      const std::string from =
          bo.local_attention_chunk ? ", line " + fmt_int(bo.local_attention_chunk->where.line) : ", from the preset";
      fail(file, *mo.causal,
           "non-causal attention takes no local attention chunk (local_attention_chunk = " +
               fmt_int(bc.local_attention_chunk) + from + ")",
           "set [batch] local_attention_chunk = 0, or drop causal = false");
    }
  }

  // Sizes the batch's arrays must hold: new tokens in int32 query_start_loc, cache blocks (null
  // block 0 included) in int32 block ids. Exact for explicit groups; random batches are checked
  // on their lower bounds here and exactly when drawn (expand_shapes), traces per step (make_batch).
  const int64_t shared = bc.shared_prefix_len / bs;
  auto blocks_of = [&](int64_t seq_len) { return (seq_len + bs - 1) / bs - shared; };
  if (bc.source == BatchSource::groups) {
    int64_t tokens = 0, blocks = shared + 1;
    for (std::size_t i = 0; i < bc.groups.size(); ++i) {
      const RequestGroup& g = bc.groups[i];
      const std::string over = i == 0 ? "" : " over batch.requests[0.." + fmt_int(static_cast<int64_t>(i)) + "]";
      tokens += static_cast<int64_t>(g.count) * g.query_len;
      blocks += static_cast<int64_t>(g.count) * blocks_of(static_cast<int64_t>(g.context_len) + g.query_len);
      if (tokens > kInt32Max)
        fail(file, bo.group_count[i],
             "the batch would have " + fmt_int(tokens) + " new tokens (count x query_len " + fmt_int(g.query_len) +
                 over + "), more than int32 query_start_loc holds (2147483647)",
             "fewer requests or shorter queries");
      if (blocks > kInt32Max)
        fail(file, bo.group_count[i],
             "the batch needs " + fmt_int(blocks) + " cache blocks of " + fmt_int(bs) + " tokens (count x " +
                 fmt_int(blocks_of(static_cast<int64_t>(g.context_len) + g.query_len)) + " blocks" + over +
                 ", null block 0 included), more than int32 block ids number (2147483647)",
             "fewer or shorter requests, or a larger block_size");
    }
    if (bo.num_blocks && bc.num_blocks != 0 && bc.num_blocks < blocks)
      fail(file, bo.num_blocks->where,
           "too small: the batch needs " + fmt_int(blocks) + " blocks (null block 0 included)",
           "use num_blocks = 0 for just enough");
  } else if (bc.source == BatchSource::random) {
    const int64_t n = bc.random.num_requests;
    const int64_t min_q = min_length(bc.random.query_len);
    const int64_t tokens = n * min_q;
    const int64_t blocks = n * blocks_of(min_length(bc.random.context_len) + min_q) + shared + 1;
    if (tokens > kInt32Max)
      fail(file, bo.random_num_requests,
           "the batch would have at least " + fmt_int(tokens) + " new tokens (num_requests x the shortest query " +
               fmt_int(min_q) + "), more than int32 query_start_loc holds (2147483647)",
           "fewer requests or shorter queries");
    if (blocks > kInt32Max)
      fail(file, bo.random_num_requests,
           "the batch needs at least " + fmt_int(blocks) + " cache blocks of " + fmt_int(bs) +
               " tokens (null block 0 included), more than int32 block ids number (2147483647)",
           "fewer or shorter requests, or a larger block_size");
  }
}

// ---- [run], [check] ----------------------------------------------------------------------------

void parse_run(const std::string& file, const toml::table* tbl, RunConfig& run) {
  if (tbl == nullptr) return;
  const Section r(file, *tbl, "run",
                  {"backends", "warmup", "iterations", "host_timeout", "cold_l2", "cuda_graph", "timed",
                   "num_layers", "cascade"});
  if (const toml::node* n = r.node("backends")) {
    const toml::array* a = n->as_array();
    if (a == nullptr || a->empty() || !a->is_homogeneous(toml::node_type::string))
      fail(file, r.where("backends", *n), "expected a non-empty array of backend names",
           "e.g. [\"auto\"], [\"all\"] or [\"cpu\", \"flash_attn\"]");
    // Checked here, against every backend attn-bench has (compiled into this build or not), so a
    // typo is an error at its line before anything runs; kept in the spelling the results use.
    run.backends.clear();
    run.backends_written.clear();
    std::vector<std::string> choices = all_backend_names();
    choices.insert(choices.end(), {"auto", "all"});
    for (const toml::node& e : *a) {
      const std::string name = e.as_string()->get();
      if (name.empty()) fail(file, r.where("backends", *n), "empty backend name");
      const std::optional<std::string> b = backend_choice(name);
      if (!b) fail(file, r.where("backends", e), "unknown backend", choice_hint(name, choices));
      run.backends.push_back(*b);
      const Where w = r.where("backends", e);
      run.backends_written.push_back({w.line != 0 ? w.line : line_of(n->source()), w.value});
    }
  }
  if (const auto f = r.integer_in("warmup", 0, "must be >= 0")) run.warmup = static_cast<int>(f->value);
  if (const auto f = r.integer_in("iterations", 1, "must be >= 1")) run.iterations = static_cast<int>(f->value);
  if (const auto f = r.number("host_timeout")) {
    // As run --host-timeout (which overrides it): 0 = no budget; at most the flag's 1e6 seconds.
    if (f->value < 0.0 || f->value > 1e6) fail(file, f->where, "must be seconds in [0, 1e6] (0: no budget)");
    run.host_timeout_s = f->value;
  }
  if (const auto f = r.boolean("cold_l2")) run.cold_l2 = f->value;
  if (const auto f = r.boolean("cuda_graph")) run.cuda_graph = f->value;
  if (const auto f = r.choice("timed", {"step", "attention"}, "unknown timed part"))
    run.timed = *timed_part_named(f->value);
  if (const auto f = r.integer_in("num_layers", 1, "must be >= 1")) run.num_layers = static_cast<int>(f->value);
  if (const auto f = r.choice("cascade", {"auto", "on", "off"}, "unknown cascade mode")) {
    run.cascade = f->value == "on" ? CascadeMode::on : f->value == "off" ? CascadeMode::off : CascadeMode::auto_;
  }
}

void parse_data(const std::string& file, const toml::table* tbl, const AttentionSpec& spec, DataConfig& d) {
  if (tbl == nullptr) return;
  const Section k(file, *tbl, "data",
                  {"logit_std", "sink_logit", "distribution", "k_outlier_channels", "k_outlier_scale"});
  if (const auto f = k.choice("distribution", {"uniform", "normal"}, "unknown distribution")) d.normal = f->value == "normal";
  if (const auto f = k.integer_in("k_outlier_channels", 0, "must be >= 0 (0 = none)")) {
    // The outliers are dims of a K head: at most head_size_qk of them, and MLA has no K head
    // (its latent cache would silently go without them).
    if (spec.use_mla && f->value > 0)
      fail(file, f->where, "not supported with [model.mla]",
           "outlier channels are K head dims; the MLA latent cache has none; drop k_outlier_channels");
    if (f->value > spec.head_size_qk)
      fail(file, f->where, "more outlier channels than the K head has dims (head_size_qk = " + fmt_int(spec.head_size_qk) + ")",
           "at most " + fmt_int(spec.head_size_qk));
    d.k_outlier_channels = static_cast<int>(f->value);
  }
  if (const auto f = k.number("k_outlier_scale")) {
    if (!(f->value >= 1.0 && f->value <= 1e4)) fail(file, f->where, "must be in [1, 10000]", "e.g. 8 or 20");
    d.k_outlier_scale = f->value;
  }
  if (const auto f = k.number("logit_std")) {
    if (!(f->value > 0.0 && f->value <= 1000.0)) fail(file, f->where, "must be in (0, 1000]", "e.g. 1.33 (the default) or 25");
    d.logit_std = f->value;
  }
  if (const auto f = k.number("sink_logit")) {
    if (!(std::abs(f->value) <= 1000.0)) fail(file, f->where, "must be in [-1000, 1000]");
    d.sink_logit = f->value;
  }
}

void parse_check(const std::string& file, const toml::table* tbl, CheckConfig& c) {
  if (tbl == nullptr) return;
  const Section k(file, *tbl, "check", {"atol", "rtol", "max_rel_l2", "min_cosine", "k_l2", "k_abs", "strict",
                                                  "require_sensitivity", "sample_pairs"});
  auto non_negative = [&](std::string_view key, std::optional<double>& out) {
    if (const auto f = k.number(key)) {
      if (f->value < 0.0) fail(file, f->where, "must be >= 0");
      out = f->value;
    }
  };
  non_negative("atol", c.atol);
  non_negative("rtol", c.rtol);
  non_negative("max_rel_l2", c.max_rel_l2);
  for (const char* key : {"k_l2", "k_abs"}) {
    if (const auto f = k.number(key)) {
      if (!(f->value >= 1.0)) fail(file, f->where, "must be >= 1 (a multiple of the precision floor)");
      (std::string_view(key) == "k_l2" ? c.k_l2 : c.k_abs) = f->value;
    }
  }
  if (const auto f = k.number("min_cosine")) {
    if (f->value < -1.0 || f->value > 1.0) fail(file, f->where, "must be within [-1, 1]");
    c.min_cosine = f->value;
  }
  if (const auto f = k.boolean("strict")) c.strict = f->value;
  if (const auto f = k.boolean("require_sensitivity")) c.require_sensitivity = f->value;
  if (const auto f = k.integer_in("sample_pairs", 0, "must be >= 0 (0 = check every (request, head) pair)",
                                  std::numeric_limits<int64_t>::max()))
    c.sample_pairs = f->value;
}

}  // namespace

namespace {

Scenario scenario_from_table(const toml::table& root, const std::string& source_name, const std::string& base_dir) {
  const std::string& file = source_name;
  Scenario s;
  s.file = source_name;
  const Section top(file, root, "", {"name", "description", "seed", "model", "batch", "run", "check", "data"});
  s.name = fs::path(source_name).stem().string();
  if (const auto f = top.string("name")) {
    if (f->value.empty()) fail(file, f->where, "must not be empty", "or leave it out: it defaults to the file name");
    s.name = f->value;
  }
  if (const auto f = top.string("description")) s.description = f->value;
  if (const auto f = top.integer_in("seed", 0, "must be >= 0", std::numeric_limits<int64_t>::max()))
    s.seed = static_cast<uint64_t>(f->value);

  const ModelOrigin mo = parse_model(file, top.table("model"), s);
  const BatchKeys bo = parse_batch(file, top, base_dir, s);
  check_batch(file, mo, bo, s);
  parse_run(file, top.table("run"), s.run);
  parse_check(file, top.table("check"), s.check);
  parse_data(file, top.table("data"), s.spec, s.data);
  return s;
}

}  // namespace

Scenario parse_scenario(std::string_view toml_text, const std::string& source_name, const std::string& base_dir,
                        const std::vector<ScenarioOverride>& overrides) {
  const std::string& file = source_name;
  toml::table root = parse_toml_document(toml_text, file);
  if (overrides.empty()) return scenario_from_table(root, source_name, base_dir);
  apply_overrides(root, overrides, file);
  Scenario s;
  try {
    s = scenario_from_table(root, source_name, base_dir);
  } catch (const InputError& e) {
    if (!e.site()) throw;
    throw InputError(override_error_site(*e.site(), overrides, file));
  }
  s.name += override_suffix(overrides);
  s.overrides = overrides;
  return s;
}

Scenario load_scenario(const std::string& path, const std::vector<ScenarioOverride>& overrides) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw InputError(InputSite{path, 0, {}, {}, "cannot read the scenario file",
                                         fs::exists(path, ec) ? "not a regular file" : "no such file"});
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) throw InputError(InputSite{path, 0, {}, {}, "cannot read the scenario file"});
  std::string base = fs::path(path).parent_path().string();
  if (base.empty()) base = ".";
  return parse_scenario(text.str(), path, base, overrides);
}

}  // namespace attn
