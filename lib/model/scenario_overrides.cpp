// `--set KEY=VALUE` (model/scenario_overrides.hpp): what a user types to try a scenario with one
// thing changed (an fp8 cache, another block size, more samples) without writing a file for it.
#include "model/scenario_overrides.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <utility>

namespace attn {
namespace {

constexpr const char* kSetHint = "e.g. --set model.kv_cache_dtype=fp8_e4m3 or --set batch.requests[0].count=8";

// One step of a key's path: a table key, or an array index (name empty).
struct Step {
  std::string name;
  long index = -1;
};

[[noreturn]] void bad_set(std::string_view text, const std::string& what, const std::string& hint = kSetHint) {
  throw InputError(InputSite{"--set", 0, std::string(text), {}, what, hint});
}

bool bare_key_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-';
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

long index_of(std::string_view digits, std::string_view text) {
  long v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size() || v > 1000000)
    bad_set(text, "array index " + std::string(digits) + " is out of range");
  return v;
}

// "batch.requests[0].count" or "batch.requests.0.count" -> its steps. A number between dots is an
// index (no scenario key is a number). Keys are TOML bare keys: letters, digits, '_' and '-'.
std::vector<Step> parse_key(std::string_view key, std::string_view text) {
  std::vector<Step> steps;
  std::size_t i = 0;
  if (key.empty()) bad_set(text, "an empty key");
  while (i <= key.size()) {
    const std::size_t end = std::min(key.find_first_of(".[", i), key.size());
    const std::string_view part = key.substr(i, end - i);
    if (part.empty()) bad_set(text, "an empty part in the key \"" + std::string(key) + "\"");
    if (all_digits(part)) {
      if (steps.empty()) bad_set(text, "the key \"" + std::string(key) + "\" starts with an index");
      steps.push_back(Step{{}, index_of(part, text)});
    } else {
      if (!std::all_of(part.begin(), part.end(), bare_key_char))
        bad_set(text, "\"" + std::string(part) + "\" is not a key (letters, digits, '_' and '-')");
      steps.push_back(Step{std::string(part), -1});
    }
    i = end;
    while (i < key.size() && key[i] == '[') {  // [N] after a name or another index
      const std::size_t close = key.find(']', i);
      if (close == std::string_view::npos) bad_set(text, "a '[' without its ']' in the key");
      const std::string_view digits = key.substr(i + 1, close - i - 1);
      if (!all_digits(digits)) bad_set(text, "\"[" + std::string(digits) + "]\" is not an array index");
      steps.push_back(Step{{}, index_of(digits, text)});
      i = close + 1;
    }
    if (i == key.size()) break;
    if (key[i] != '.') bad_set(text, "expected '.' or '[' after \"" + std::string(key.substr(0, i)) + "\"");
    ++i;  // past the '.'
    if (i == key.size()) bad_set(text, "the key \"" + std::string(key) + "\" ends in '.'");
  }
  return steps;
}

std::string key_text(const std::vector<Step>& steps, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n && i < steps.size(); ++i) {
    if (steps[i].name.empty()) {
      s.append("[").append(std::to_string(steps[i].index)).append("]");
    } else {
      if (!s.empty()) s.push_back('.');
      s.append(steps[i].name);
    }
  }
  return s;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return s;
}

// The override's value as a TOML node: TOML text (8, 1.5, true, "text", [1, 2], { dist = "fixed",
// value = 1 }), or else a bare word as a string (fp8_e4m3, NHD, auto). Text that starts like a
// TOML value but does not read as one is refused rather than taken as a string.
toml::table value_table(const ScenarioOverride& o, const std::string& file) {
  if (o.value.empty())
    throw InputError(InputSite{override_source(file), 0, o.key, o.value, "no value", "an empty string is written \"\""});
  const std::string src = "v = " + o.value;
  try {
    toml::table t = toml::parse(src, kOverrideSource);
    if (t.size() != 1 || t.get("v") == nullptr)
      throw InputError(InputSite{override_source(file), 0, o.key, o.value, "not one TOML value", kSetHint});
    return t;
  } catch (const toml::parse_error& e) {
    const char c = o.value.front();
    const bool word = std::all_of(o.value.begin(), o.value.end(), [](char ch) { return bare_key_char(ch) || ch == '.'; }) &&
                      !(c >= '0' && c <= '9') && c != '-' && c != '+' && c != '.';
    if (!word)
      throw InputError(InputSite{override_source(file), 0, o.key, o.value,
                                 "not a TOML value: " + std::string(e.description()),
                                 "a string with spaces or symbols goes in quotes: --set 'name=\"my run\"'"});
    toml::table t;
    t.insert("v", o.value);
    return t;
  }
}

// Whether `inner` is `outer` or a key inside it ("a.b" in "a", "a[0].c" in "a[0]").
bool within(std::string_view inner, std::string_view outer) {
  return inner.size() >= outer.size() && inner.compare(0, outer.size(), outer) == 0 &&
         (inner.size() == outer.size() || inner[outer.size()] == '.' || inner[outer.size()] == '[');
}

}  // namespace

ScenarioOverride parse_override(std::string_view text) {
  const std::size_t eq = text.find('=');
  if (eq == std::string_view::npos) bad_set(text, "expected KEY=VALUE");
  const std::string_view key = trim(text.substr(0, eq));
  const std::string_view value = trim(text.substr(eq + 1));
  if (value.empty()) bad_set(text, "no value after '='", "an empty string is written \"\": --set 'description=\"\"'");
  const std::vector<Step> steps = parse_key(key, text);
  return ScenarioOverride{key_text(steps, steps.size()), std::string(value)};
}

void apply_overrides(toml::table& root, const std::vector<ScenarioOverride>& overrides, const std::string& file) {
  const std::string where = override_source(file);
  for (const ScenarioOverride& o : overrides) {
    const std::vector<Step> steps = parse_key(o.key, o.text());
    toml::table value = value_table(o, file);
    toml::node* cur = &root;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const Step& st = steps[i];
      const bool last = i + 1 == steps.size();
      const std::string at = key_text(steps, i);  // the value this step goes into
      toml::node& v = *value.get("v");
      if (st.name.empty()) {
        toml::array* arr = cur->as_array();
        if (arr == nullptr)
          throw InputError(InputSite{where, 0, o.key, o.value, at + " is not an array, so [" + std::to_string(st.index) + "] indexes nothing"});
        if (st.index >= static_cast<long>(arr->size()))
          throw InputError(InputSite{where, 0, o.key, o.value,
                                     at + " has " + std::to_string(arr->size()) + " element(s) (indices from 0)",
                                     "--set changes an element; it does not add one"});
        if (last)
          v.visit([&](auto&& x) { arr->replace(arr->cbegin() + st.index, std::move(x)); });
        else
          cur = arr->get(static_cast<std::size_t>(st.index));
      } else {
        toml::table* tbl = cur->as_table();
        if (tbl == nullptr)
          throw InputError(InputSite{where, 0, o.key, o.value, at + " is not a table, so it has no key " + st.name});
        if (last) {
          v.visit([&](auto&& x) { tbl->insert_or_assign(st.name, std::move(x)); });
        } else {
          toml::node* next = tbl->get(st.name);
          if (next == nullptr) {
            if (steps[i + 1].name.empty())
              throw InputError(InputSite{where, 0, o.key, o.value, key_text(steps, i + 1) + " is not in the scenario",
                                         "--set changes an element of an array; it does not add one"});
            next = &tbl->insert_or_assign(st.name, toml::table{}).first->second;  // a table the file lacks
          }
          cur = next;
        }
      }
    }
  }
}

bool overridden(const std::vector<ScenarioOverride>& overrides, std::string_view key) {
  return std::any_of(overrides.begin(), overrides.end(),
                     [&](const ScenarioOverride& o) { return within(o.key, key) || within(key, o.key); });
}

InputSite override_error_site(const InputSite& site, const std::vector<ScenarioOverride>& overrides,
                              const std::string& file) {
  // An element the override replaced, by its index: the error is about the array that holds it.
  auto element_of = [&](const std::string& k) {
    return k.size() > site.key.size() + 2 && k.compare(0, site.key.size() + 1, site.key + "[") == 0 &&
           k.back() == ']' && k.find_first_of(".[", site.key.size() + 1) == std::string::npos;
  };
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
    // The overridden key or a key inside its value; a table the override created (no line); or
    // the array an overridden element belongs to.
    if (!site.key.empty() &&
        (within(site.key, it->key) || (site.line == 0 && within(it->key, site.key)) || element_of(it->key))) {
      InputSite s = site;
      s.file = override_source(file);
      s.line = 0;
      return s;
    }
  }
  InputSite s = site;
  std::string sets;
  for (const ScenarioOverride& o : overrides) sets += " --set " + o.text();
  s.hint += (s.hint.empty() ? "" : "; ") + std::string("the scenario was read with") + sets;
  return s;
}

std::string override_suffix(const std::vector<ScenarioOverride>& overrides) {
  if (overrides.empty()) return {};
  std::string s = "[";
  for (std::size_t i = 0; i < overrides.size(); ++i) {
    if (i > 0) s.push_back(',');
    s.append(overrides[i].text());
  }
  s.push_back(']');
  return s;
}

}  // namespace attn
