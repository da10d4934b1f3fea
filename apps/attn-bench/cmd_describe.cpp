// `attn-bench describe`: what a scenario's batch is, without running anything.
#include <fmt/format.h>
#include <memory>

#include "cli_common.hpp"
#include "commands.hpp"
#include "model/batch.hpp"
#include "pipeline/pipeline.hpp"

namespace attn::cli {

namespace {

// The spec's floats in their shortest round-trip text: a scenario's soft_cap = 30.1 reads back as 30.1.
std::string spec_line(const AttentionSpec& s) {
  std::string l = s.use_mla ? fmt::format("MLA q_heads={} latent={} qk={} v={}", s.num_q_heads, s.mla.latent_dim(),
                                          s.head_size_qk, s.head_size_v)
                            : fmt::format("q_heads={} kv_heads={} head_size={}", s.num_q_heads, s.num_kv_heads,
                                          s.head_size_qk == s.head_size_v ? std::to_string(s.head_size_qk)
                                                                          : fmt::format("{}/{}", s.head_size_qk, s.head_size_v));
  l += fmt::format(" dtype={} kv_cache={} block={} layout={} scale={}", to_string(s.dtype),
                   to_string(s.kv_cache_dtype), s.block_size, s.kv_layout == KvLayout::NHD ? "NHD" : "HND", s.scale);
  if (s.kv_fp8()) l += fmt::format(" k_scale={} v_scale={}", s.k_scale, s.v_scale);
  if (s.q_fp8()) l += fmt::format(" q_scale={} (query in e4m3)", s.q_scale);
  if (!s.causal()) l += " non-causal";
  if (s.sliding_window) l += fmt::format(" window={}", s.sliding_window);
  if (s.logits_soft_cap > 0) l += fmt::format(" soft_cap={}", s.logits_soft_cap);
  if (s.alibi) l += " alibi";
  if (s.sinks) l += " sinks";
  return l;
}

std::string human(double v, const char* unit) {
  const char* p[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000 && i < 5) v /= 1000, ++i;
  return fmt::format("{:.3g} {}{}", v, p[i], unit);
}

int run_describe(const ScenarioArgs& args, Format f) {
  // The counts carry the results files' column names (docs/RESULTS.md), so that a describe table
  // joins a results file on them.
  Table t{{"batch", "num_reqs", "num_tokens", "num_decodes", "num_prefills", "num_decode_tokens", "num_prefill_tokens",
           "max_query_len", "max_seq_len", "blocks_used", "num_blocks", "kv_cache_bytes", "host_bytes", "kv_tokens",
           "flops", "bytes", "shared_prefix_len", "common_prefix_len", "cascade", "cascade_reason", "num_layers",
           "spec"},
          {}};
  for (const Scenario& s : args.load()) {
    for (const BatchShape& shape : expand_shapes(s)) {
      const Batch b = make_batch(s.spec, shape, s.seed);
      const BatchSummary m = summarize_batch(b);
      if (f == Format::table) {
        fmt::print("{} ({})\n", m.label, s.file);
        if (!s.description.empty()) fmt::print("  {}\n", s.description);
        fmt::print("  spec        {}\n", spec_line(b.spec));
        fmt::print("  requests    {}  ({} decode{}, {} prefill{}{})\n", m.num_reqs, m.num_decodes,
                   m.num_decodes == 1 ? "" : "s", m.num_prefills, m.num_prefills == 1 ? "" : "s",
                   m.reordered ? "; decodes would be reordered to the front" : "");
        fmt::print("  tokens      {}  ({} decode, {} prefill; max query {}, max seq {})\n", m.num_tokens,
                   m.num_decode_tokens, m.num_prefill_tokens, m.max_query_len, m.max_seq_len);
        fmt::print("  blocks      {} used of {} (block 0 reserved){}\n", m.blocks_used, m.num_blocks,
                   b.shared_prefix_len ? fmt::format(", shared prefix {} tokens", b.shared_prefix_len) : "");
        fmt::print("  kv cache    {}B\n", human(m.kv_cache_bytes, ""));
        // The figure the run's memory check compares with the host's available memory.
        fmt::print("  host data   {}B for a run, estimated (batch, metadata, Q, K/V, references, outputs)\n",
                   human(m.host_bytes, ""));
        fmt::print("  attention   {}FLOP, {}B moved ({} cache tokens read); arithmetic intensity {:.1f} FLOP/B\n",
                   human(m.flops, ""), human(m.bytes, ""), m.kv_tokens_read, m.bytes > 0 ? m.flops / m.bytes : 0.0);
        fmt::print("  cascade     {} ({})\n", m.cascade ? "yes" : "no", m.cascade_reason);
        // [run] num_layers: a call runs every layer, each over its own cache (the figures above are one layer's).
        if (s.run.num_layers > 1)
          fmt::print("  layers      {0}: a call's work is {0} x the above, over {0} KV caches ({1}B in all)\n",
                     s.run.num_layers, human(m.kv_cache_bytes * s.run.num_layers, ""));
        fmt::print("\n");
      }
      t.rows.push_back({m.label, m.num_reqs, m.num_tokens, m.num_decodes, m.num_prefills, m.num_decode_tokens,
                        m.num_prefill_tokens, m.max_query_len, m.max_seq_len, m.blocks_used, m.num_blocks,
                        Cell::number(fmt::format("{:.0f}", m.kv_cache_bytes)),
                        Cell::number(fmt::format("{:.0f}", m.host_bytes)), m.kv_tokens_read,
                        // A call's work, as the results rows count it: every layer's.
                        Cell::number(fmt::format("{:.0f}", m.flops * s.run.num_layers)),
                        Cell::number(fmt::format("{:.0f}", m.bytes * s.run.num_layers)),
                        b.shared_prefix_len, m.common_prefix_len, Cell::yes_no(m.cascade), m.cascade_reason,
                        s.run.num_layers, spec_line(b.spec)});
    }
  }
  if (f != Format::table) fmt::print("{}", t.render(f));
  return 0;
}

}  // namespace

void add_describe(CLI::App& app, Commands& c) {
  auto* cmd = app.add_subcommand("describe", "Describe the batch a scenario produces (no run)");
  auto args = std::make_shared<ScenarioArgs>();
  auto f = std::make_shared<Format>(Format::table);
  args->add_to(*cmd);
  add_format_option(*cmd, *f);
  cmd->callback([&c, args, f] { c.selected = [args, f] { return run_describe(*args, *f); }; });
}

}  // namespace attn::cli
