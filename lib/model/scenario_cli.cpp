// Scenarios without a file: `--model PRESET --batch 48x1@2048,2x512@1024`.
#include <algorithm>
#include <charconv>
#include <limits>

#include "core/error.hpp"
#include "model/scenario.hpp"
#include "model/scenario_overrides.hpp"

namespace attn {
namespace {

constexpr const char* kCli = "<cli>";
constexpr const char* kSpecHint = "expected COUNTxQUERY_LEN[@CONTEXT_LEN], e.g. 48x1@2048,2x512@1024";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

[[noreturn]] void bad_item(std::string_view item, const std::string& what) {
  throw InputError(InputSite{kCli, 0, "--batch", std::string(item), what, kSpecHint});
}

// A non-negative decimal integer that fits an int32, the whole of `text`.
int parse_count(std::string_view text, std::string_view item, const char* field) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != end)
    bad_item(item, std::string(field) + " \"" + std::string(text) + "\" is not a non-negative integer");
  if (ec == std::errc::result_out_of_range || v > std::numeric_limits<int32_t>::max())
    bad_item(item, std::string(field) + " is too large");
  if (v < 0) bad_item(item, std::string(field) + " must not be negative");
  return static_cast<int>(v);
}

}  // namespace

std::vector<RequestGroup> parse_batch_spec(std::string_view spec) {
  std::vector<RequestGroup> groups;
  if (trim(spec).empty()) bad_item(spec, "empty batch spec");
  std::size_t start = 0;
  while (start <= spec.size()) {
    const std::size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string_view item = trim(spec.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) bad_item(spec, "empty item between commas");

    const std::size_t x = item.find('x');
    if (x == std::string_view::npos) bad_item(item, "missing 'x' between count and query length");
    const std::size_t at = item.find('@', x);
    RequestGroup g;
    g.count = parse_count(item.substr(0, x), item, "count");
    const std::size_t qend = at == std::string_view::npos ? item.size() : at;
    g.query_len = parse_count(item.substr(x + 1, qend - x - 1), item, "query length");
    g.context_len = at == std::string_view::npos ? 0 : parse_count(item.substr(at + 1), item, "context length");
    if (g.count < 1) bad_item(item, "count must be >= 1");
    if (g.query_len < 1) bad_item(item, "query length must be >= 1 (1 = decode)");
    if (static_cast<int64_t>(g.context_len) + g.query_len > std::numeric_limits<int32_t>::max())
      bad_item(item, "context + query length does not fit a 32-bit sequence length");
    groups.push_back(g);
  }
  return groups;
}

namespace {

// The scenario file that `--model PRESET --batch SPEC` stands for, so that --set overrides apply
// to it as to a file (the seed stays out: the CLI's reaches 2^64, a file's 2^63).
std::string cli_scenario_text(const std::string& preset, const std::vector<RequestGroup>& groups) {
  std::string t = "[model]\npreset = \"" + preset + "\"\n";
  for (const RequestGroup& g : groups)
    t += "[[batch.requests]]\ncount = " + std::to_string(g.count) + "\ncontext_len = " + std::to_string(g.context_len) +
         "\nquery_len = " + std::to_string(g.query_len) + "\n";
  return t;
}

}  // namespace

Scenario scenario_from_cli(const std::string& preset, const std::string& batch_spec, uint64_t seed,
                           const std::vector<ScenarioOverride>& overrides) {
  const ModelPreset* p = find_preset(preset);
  if (p == nullptr) {
    std::string names;
    for (const ModelPreset& mp : model_presets()) names += (names.empty() ? "" : ", ") + mp.name;
    throw InputError(InputSite{kCli, 0, "--model", preset, "unknown model preset", "one of: " + names});
  }
  Scenario s;
  if (overrides.empty()) {
    s.spec = p->spec;  // presets carry a resolved scale
    s.batch.source = BatchSource::groups;
    s.batch.groups = parse_batch_spec(batch_spec);
    s.batch.local_attention_chunk = p->local_attention_chunk;
  } else {
    try {
      s = parse_scenario(cli_scenario_text(p->name, parse_batch_spec(batch_spec)), kCli, ".", overrides);
    } catch (const InputError& e) {
      // Lines of the text above mean nothing to the user, and its requests are the --batch spec.
      if (!e.site() || e.site()->file != kCli) throw;
      InputSite site = *e.site();
      site.line = 0;
      if (site.key.rfind("batch.requests", 0) == 0) site.key = "--batch", site.value = batch_spec;
      throw InputError(site);
    }
    s.batch.origin.lines.clear();  // lines of the text above
  }
  s.file = kCli;
  // Named after the spec, unless --set named it (parse_scenario then put the overrides after it).
  if (std::none_of(overrides.begin(), overrides.end(), [](const ScenarioOverride& o) { return o.key == "name"; }))
    s.name = preset + ":" + batch_spec + override_suffix(overrides);
  // The CLI's seed, unless an override set one (a later --seed wins over both: ScenarioArgs).
  if (std::none_of(overrides.begin(), overrides.end(), [](const ScenarioOverride& o) { return o.key == "seed"; }))
    s.seed = seed;
  s.preset = p->name;
  s.batch.origin.size_key = "--batch";  // errors about the batch's size name the spec
  s.batch.origin.size_value = batch_spec;
  return s;
}

}  // namespace attn
