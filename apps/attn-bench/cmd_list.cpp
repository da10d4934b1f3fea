// `attn-bench list`: model presets, backends with their features, and build facts.
#include <fmt/format.h>
#include <memory>

#include "backends/backend.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "pipeline/pipeline.hpp"
#include "report/text.hpp"

namespace attn::cli {

namespace {

std::string preset_features(const ModelPreset& p) {
  const AttentionSpec& s = p.spec;
  std::string f;
  auto add = [&](const std::string& x) { f += (f.empty() ? "" : ", ") + x; };
  if (s.use_mla) add(fmt::format("MLA {}+{} latent", s.mla.kv_lora_rank, s.mla.qk_rope_head_dim));
  if (s.sliding_window) add(fmt::format("window {}", s.sliding_window));
  if (s.logits_soft_cap > 0) add(fmt::format("soft cap {}", s.logits_soft_cap));
  if (s.sinks) add("sinks");
  if (s.alibi) add("ALiBi");
  if (p.local_attention_chunk) add(fmt::format("local chunk {}", p.local_attention_chunk));
  return f.empty() ? "-" : f;
}

// Columns i and i + 1 of `t` as one column `name`, each row's two cells joined by `join`.
template <class Join>
void join_columns(Table& t, size_t i, std::string name, Join join) {
  t.columns[i] = std::move(name);
  t.columns.erase(t.columns.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  for (auto& row : t.rows) {
    row[i] = join(row[i], row[i + 1]);
    row.erase(row.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  }
}

// What `list` prints: every table, or the one named (a CSV file holds one table, so CSV names it).
enum class ListWhat { all, presets, backends };

int run_list(Format fmt_, ListWhat what) {
  if (fmt_ == Format::csv && what == ListWhat::all)
    throw InputError("list --format csv: a CSV file holds one table; name it: `attn-bench list presets --format csv` "
                     "or `attn-bench list backends --format csv`");
  const bool show_presets = what != ListWhat::backends, show_backends = what != ListWhat::presets;
  // One typed column per fact, so that in JSON a head size is always a number and `available`
  // always a boolean; the console table joins some of them below.
  Table presets{{"preset", "q_heads", "kv_heads", "head_size_qk", "head_size_v", "dtype", "block", "features", "source"}, {}};
  for (const ModelPreset& p : model_presets())
    presets.rows.push_back({p.name, p.spec.num_q_heads, p.spec.num_kv_heads, p.spec.head_size_qk, p.spec.head_size_v,
                            std::string(to_string(p.spec.dtype)), p.spec.block_size, preset_features(p), p.source});
  Table backends{{"backend", "available", "reason", "description", "features"}, {}};
  const auto registry = make_registry();
  for (const auto& be : registry) {
    const Support a = be->available();
    std::string feats;
    for (const std::string& line : be->features()) feats += (feats.empty() ? "" : "; ") + line;
    backends.rows.push_back({be->name(), Cell::yes_no(a.ok), a.reason, be->description(), feats});
  }
  if (fmt_ == Format::table) {
    // Read by people: one head size where qk and v agree ("192/128" where not), an unavailable
    // backend's reason beside its "no", and the features one per line below the table.
    join_columns(presets, 3, "head_size", [](const Cell& qk, const Cell& v) {
      return qk.text == v.text ? qk : Cell(qk.text + "/" + v.text);
    });
    join_columns(backends, 1, "available", [](const Cell& ok, const Cell& why) {
      return why.text.empty() ? ok : Cell(ok.text + ": " + why.text);
    });
    backends.columns.pop_back();
    for (auto& row : backends.rows) row.pop_back();
    fmt::print("{}\n", build_info());
    if (show_presets) fmt::print("\nModel presets\n{}", presets.render(fmt_));
    if (!show_backends) return 0;
    fmt::print("\nBackends (selector order: `auto` takes the first available one that supports the batch)\n{}",
               backends.render(fmt_));
    for (const auto& be : registry) {
      fmt::print("\n{}: {}\n", be->name(), be->description());
      for (const std::string& line : be->features()) fmt::print("  - {}\n", line);
    }
  } else if (fmt_ == Format::csv) {
    fmt::print("{}", (show_presets ? presets : backends).render(fmt_));
  } else {
    std::string build;
    append_json_string(build, build_info());
    fmt::print("{{\"build\": {}", build);
    if (show_presets) fmt::print(",\n\"presets\": {}", presets.render(fmt_));
    if (show_backends) fmt::print(",\n\"backends\": {}", backends.render(fmt_));
    fmt::print("}}\n");
  }
  return 0;
}

}  // namespace

void add_list(CLI::App& app, Commands& c) {
  auto* cmd = app.add_subcommand("list", "Model presets, backends and their features, build info");
  auto f = std::make_shared<Format>(Format::table);
  auto what = std::make_shared<std::string>("all");
  cmd->add_option("what", *what, "which table: presets, backends or all (default; CSV takes one table)")
      ->check(CLI::IsMember({"all", "presets", "backends"}));
  add_format_option(*cmd, *f);
  cmd->callback([&c, f, what] {
    const ListWhat w = *what == "presets" ? ListWhat::presets : *what == "backends" ? ListWhat::backends : ListWhat::all;
    c.selected = [f, w] { return run_list(*f, w); };
  });
}

}  // namespace attn::cli
