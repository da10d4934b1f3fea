// `attn-bench list`: model presets, backends with their features, and build facts.
#include <fmt/format.h>
#include <memory>

#include "backends/backend.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "pipeline/pipeline.hpp"

namespace attn::cli {

namespace {

std::string preset_features(const ModelPreset& p) {
  const AttentionSpec& s = p.spec;
  std::string f;
  auto add = [&](const std::string& x) { f += (f.empty() ? "" : ", ") + x; };
  if (s.use_mla) add(fmt::format("MLA {}+{} latent", s.mla.kv_lora_rank, s.mla.qk_rope_head_dim));
  if (s.sliding_window) add(fmt::format("window {}", s.sliding_window));
  if (s.logits_soft_cap > 0) add(fmt::format("soft cap {:g}", s.logits_soft_cap));
  if (s.sinks) add("sinks");
  if (s.alibi) add("ALiBi");
  if (p.local_attention_chunk) add(fmt::format("local chunk {}", p.local_attention_chunk));
  return f.empty() ? "-" : f;
}

int run_list(Format fmt_) {
  Table presets{{"preset", "q_heads", "kv_heads", "head_size", "dtype", "block", "features", "source"}, {}};
  for (const ModelPreset& p : model_presets())
    presets.rows.push_back({p.name, std::to_string(p.spec.num_q_heads), std::to_string(p.spec.num_kv_heads),
                            p.spec.head_size_qk == p.spec.head_size_v
                                ? std::to_string(p.spec.head_size_qk)
                                : fmt::format("{}/{}", p.spec.head_size_qk, p.spec.head_size_v),
                            std::string(to_string(p.spec.dtype)), std::to_string(p.spec.block_size),
                            preset_features(p), p.source});
  Table backends{{"backend", "available", "description", "features"}, {}};
  const auto registry = make_registry();
  for (const auto& be : registry) {
    const Support a = be->available();
    std::string feats;
    for (const std::string& line : be->features()) feats += (feats.empty() ? "" : "; ") + line;
    backends.rows.push_back({be->name(), a.ok ? "yes" : "no: " + a.reason, be->description(), feats});
  }
  if (fmt_ == Format::table) {
    // Features are listed one per line below the table, where they stay readable.
    backends.columns.pop_back();
    for (auto& row : backends.rows) row.pop_back();
    fmt::print("{}\n\nModel presets\n{}\nBackends (selector order: `auto` takes the first available one that "
               "supports the batch)\n{}",
               build_info(), presets.render(fmt_), backends.render(fmt_));
    for (const auto& be : registry) {
      fmt::print("\n{}: {}\n", be->name(), be->description());
      for (const std::string& line : be->features()) fmt::print("  - {}\n", line);
    }
  } else if (fmt_ == Format::csv) {
    fmt::print("{}\n{}", presets.render(fmt_), backends.render(fmt_));
  } else {
    fmt::print("{{\"build\": \"{}\",\n\"presets\": {},\n\"backends\": {}}}\n", build_info(), presets.render(fmt_),
               backends.render(fmt_));
  }
  return 0;
}

}  // namespace

void add_list(CLI::App& app, Commands& c) {
  auto* cmd = app.add_subcommand("list", "Model presets, backends and their features, build info");
  auto f = std::make_shared<Format>(Format::table);
  add_format_option(*cmd, *f);
  cmd->callback([&c, f] { c.selected = [f] { return run_list(*f); }; });
}

}  // namespace attn::cli
