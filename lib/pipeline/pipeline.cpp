#include "pipeline/pipeline.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <exception>
#include <new>
#include <optional>
#include <fmt/format.h>

#include "core/error.hpp"
#include "metadata/common.hpp"
#include "model/scenario_overrides.hpp"
#include "model/batch.hpp"
#include "reference/reference.hpp"
#include "timing/read_floor.hpp"
#include "timing/timing.hpp"
#include "validate/naive.hpp"
#include "validate/nan_probe.hpp"
#include "validate/validate.hpp"

namespace attn {

std::string build_info() {
#if defined(ATTN_WITH_CUDA)
  const char* cuda = "CUDA on";
#else
  const char* cuda = "CUDA off";
#endif
  return fmt::format("attn-bench {} (git {}, {}, archs {})", ATTN_VERSION, git_rev(), cuda,
                     ATTN_CUDA_ARCHS_STR);
}

std::string now_iso8601() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

BatchSummary summarize_batch(const Batch& b, int num_sms) {
  BatchSummary s;
  s.label = b.label;
  s.num_reqs = b.num_reqs();
  s.num_tokens = b.num_tokens();
  const CommonAttentionMetadata m = build_common_metadata(b);
  s.max_query_len = m.max_query_len;
  s.max_seq_len = m.max_seq_len;

  std::vector<int32_t> qlens(static_cast<size_t>(m.num_reqs));
  for (int r = 0; r < m.num_reqs; ++r) qlens[static_cast<size_t>(r)] = m.query_len(r);
  const std::vector<int> order = reorder_batch_to_split_decodes_and_prefills(qlens, 1);
  for (size_t i = 0; i < order.size(); ++i) s.reordered |= order[i] != static_cast<int>(i);
  const DecodePrefillSplit split = split_decodes_and_prefills(s.reordered ? permute_requests(m, order) : m, 1);
  s.num_decodes = split.num_decodes;
  s.num_prefills = split.num_prefills;
  s.num_decode_tokens = split.num_decode_tokens;
  s.num_prefill_tokens = split.num_prefill_tokens;

  // Distinct physical blocks in use (shared prefix blocks count once).
  std::vector<uint8_t> used(static_cast<size_t>(b.num_blocks), 0);
  for (int r = 0; r < b.num_reqs(); ++r) {
    const int nblk = (b.requests[static_cast<size_t>(r)].seq_len() + b.block_size - 1) / b.block_size;
    for (int j = 0; j < nblk; ++j) {
      uint8_t& u = used[static_cast<size_t>(b.block_table[static_cast<size_t>(r) * b.max_blocks_per_req + static_cast<size_t>(j)])];
      s.blocks_used += u == 0;
      u = 1;
    }
  }
  s.num_blocks = b.num_blocks;
  BatchShape shape;  // the sizes run_host_bytes reads (shuffled: the larger scratch)
  shape.shared_prefix_len = b.shared_prefix_len;
  shape.local_attention_chunk = b.local_attention_chunk;
  shape.num_blocks = b.num_blocks;
  s.host_bytes = run_host_bytes(b.spec, shape, batch_size_of(b.requests, b.block_size, b.shared_prefix_len)).total();
  const double entry = b.spec.use_mla ? b.spec.mla.latent_dim()
                                      : static_cast<double>(b.spec.num_kv_heads) * (b.spec.head_size_qk + b.spec.head_size_v);
  s.kv_cache_bytes = static_cast<double>(b.num_blocks) * b.block_size * entry *
                     static_cast<double>(dtype_size(b.spec.kv_cache_dtype));
  const WorkCounts w = count_work(b);
  s.flops = w.flops;
  s.bytes = w.bytes;
  s.cache_write_bytes = w.cache_write_bytes;
  s.kv_tokens_read = w.kv_tokens_read;
  s.common_prefix_len = common_prefix_len(b, m);
  const CascadeDecision c = use_cascade_attention(
      s.common_prefix_len, qlens, b.spec.num_q_heads, b.spec.num_kv_heads, b.spec.alibi,
      b.spec.sliding_window > 0, b.local_attention_chunk > 0, num_sms);
  s.cascade = c.use;
  s.cascade_reason = c.reason;
  return s;
}

namespace {

// The backend `name` names (case-insensitively, so vLLM's spelling FLASH_ATTN works too). A name
// that is no backend, or one this build does not have (the CUDA backends of a CPU-only build), is
// an InputError naming `source` and saying which of the two it is.
const Backend* named_backend(const std::string& name, const std::vector<std::unique_ptr<Backend>>& registry,
                             const std::string& source) {
  for (const auto& be : registry)
    if (same_backend_name(be->name(), name)) return be.get();
  std::string built;
  for (const auto& be : registry) built += (built.empty() ? "" : ", ") + be->name();
  if (const std::optional<std::string> b = canonical_backend_name(name))
    throw InputError(fmt::format("{} = {}: not in this build (it has {}; the CUDA backends need a build with "
                                 "ATTN_CUDA=ON)",
                                 source, *b, built));
  throw InputError(fmt::format("{} = {}: unknown backend (known: {})", source, name, backend_choices()));
}

// A scenario's own [run] backends that this build lacks, named at their line with the value as
// written, as the parser names every other key (the parser cannot tell: it checks the names
// against every backend attn-bench has, built or not). Names given by --backend are left to
// named_backend.
void check_file_backends_built(const Scenario& s, const std::vector<std::unique_ptr<Backend>>& registry,
                               const PipelineOptions& opts) {
  if (!opts.backends.empty()) return;
  const RunConfig& run = s.run;
  const bool sited = run.backends_written.size() == run.backends.size();
  for (size_t i = 0; i < run.backends.size(); ++i) {
    const std::string& name = run.backends[i];
    if (name == "all" || name == "auto") continue;
    if (std::any_of(registry.begin(), registry.end(), [&](const auto& be) { return same_backend_name(be->name(), name); }))
      continue;
    const std::optional<std::string> canonical = canonical_backend_name(name);
    if (!canonical) continue;  // named_backend says "unknown backend"
    std::string built;
    for (const auto& be : registry) built += (built.empty() ? "" : ", ") + be->name();
    // Names that --set gave name it, not the file's line.
    const bool set = overridden(s.overrides, "run.backends");
    throw InputError(InputSite{set ? override_source(s.file) : s.file, sited && !set ? run.backends_written[i].line : 0,
                               "run.backends", sited ? run.backends_written[i].text : '"' + *canonical + '"',
                               "not in this build", "it has " + built + "; the CUDA backends need a build with ATTN_CUDA=ON"});
  }
}

void add_once(std::vector<const Backend*>& out, const Backend* be) {
  if (std::find(out.begin(), out.end(), be) == out.end()) out.push_back(be);
}

// The backend names a scenario runs (--backend over its [run] backends) and where they came from.
struct BackendNames {
  const std::vector<std::string>& names;
  std::string source;
};
BackendNames backend_names(const Scenario& s, const PipelineOptions& opts) {
  if (opts.backends.empty())
    return {s.run.backends, (overridden(s.overrides, "run.backends") ? override_source(s.file) : s.file) + ": run.backends"};
  return {opts.backends, "--backend"};
}

}  // namespace

std::vector<const Backend*> resolve_backends(const std::vector<std::string>& names,
                                             const std::vector<std::unique_ptr<Backend>>& registry,
                                             const AttentionSpec& spec, const Batch& batch,
                                             std::string* auto_note, const std::string& source) {
  std::vector<const Backend*> out;
  for (const std::string& n : names) {
    if (n == "all") {
      for (const auto& be : registry) add_once(out, be.get());
    } else if (n == "auto") {
      std::string why;
      const Backend* be = select_backend(registry, spec, batch, &why);
      if (be == nullptr) throw InputError("no backend supports this batch: " + why);
      if (auto_note && !why.empty()) *auto_note = fmt::format("auto -> {} (passed over {})", be->name(), why);
      add_once(out, be);
    } else {
      add_once(out, named_backend(n, registry, source));
    }
  }
  return out;
}

void check_cuda_graph_request(const std::vector<Scenario>& scenarios,
                              const std::vector<std::unique_ptr<Backend>>& registry, const PipelineOptions& opts) {
  if (!opts.time || !opts.cuda_graph.value_or(false)) return;
  std::vector<const Backend*> selected;
  for (const Scenario& s : scenarios) {
    check_file_backends_built(s, registry, opts);
    const BackendNames b = backend_names(s, opts);
    for (const std::string& n : b.names) {
      if (n == "all" || n == "auto") {
        for (const auto& be : registry) add_once(selected, be.get());
      } else {
        add_once(selected, named_backend(n, registry, b.source));
      }
    }
  }
  // Backends that share a reason are named together: on a machine without a GPU every GPU
  // backend gives the same one, which would otherwise repeat once per backend.
  std::vector<std::pair<std::string, std::vector<std::string>>> reasons;  // (what, its backends)
  for (const Backend* be : selected) {
    std::string what = "timed by wall clock";  // "is" / "are" added below
    if (runs_on_device(*be)) {
      const Support here = be->available();
      if (here.ok) return;
      what = fmt::format("cannot run here ({})", here.reason);
    }
    auto it = std::find_if(reasons.begin(), reasons.end(), [&](const auto& r) { return r.first == what; });
    if (it == reasons.end()) it = reasons.insert(reasons.end(), {what, {}});
    it->second.push_back(be->name());
  }
  std::string why;
  for (const auto& [what, names] : reasons) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    const bool many = names.size() > 1;
    const char* verb = what.rfind("timed", 0) == 0 ? (many ? "are " : "is ") : "";
    why += fmt::format("{}{} {} {}{}", why.empty() ? "" : "; ", many ? "backends" : "backend", list, verb, what);
  }
  throw InputError(fmt::format("--cuda-graph: {}; CUDA graphs apply to GPU backends", why));
}

namespace {

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// A request cut out of the batch: same generator ids and resolved scales, fresh paging.
Batch single_request_batch(const Batch& b, int r) {
  AttentionSpec spec = b.spec;
  spec.k_scale_calc = spec.v_scale_calc = spec.q_scale_calc = false;  // keep the parent's resolved scales
  BatchShape shape;
  shape.label = b.label;
  shape.requests = {b.requests[static_cast<size_t>(r)]};
  shape.shared_prefix_len = std::min(b.shared_prefix_len, shape.requests[0].context_len);
  shape.local_attention_chunk = b.local_attention_chunk;
  shape.data = b.data;
  Batch sub = make_batch(spec, shape, b.seed);
  sub.request_ids = {b.request_ids.empty() ? static_cast<uint32_t>(r) : b.request_ids[static_cast<size_t>(r)]};
  return sub;
}

// The double a float of the spec stands for: the shortest decimal that reads back as that float
// (30.1 for the float nearest 30.1, whose exact value 30.100000381469727 a double column would
// otherwise echo), so the results show the scenario's values as written.
double decimal_of(float x) {
  const std::string text = fmt::format("{}", x);
  double d = 0;
  std::from_chars(text.data(), text.data() + text.size(), d);
  return d;
}

void fill_spec_columns(ResultRow& row, const Batch& b) {
  const AttentionSpec& sp = b.spec;
  row.num_q_heads = sp.num_q_heads;
  row.num_kv_heads = sp.num_kv_heads;
  row.head_size_qk = sp.head_size_qk;
  row.head_size_v = sp.head_size_v;
  row.dtype = std::string(to_string(sp.dtype));
  row.kv_cache_dtype = std::string(to_string(sp.kv_cache_dtype));
  row.kv_layout = sp.kv_layout == KvLayout::NHD ? "NHD" : "HND";
  row.block_size = sp.block_size;
  row.sliding_window = sp.sliding_window;
  row.logits_soft_cap = decimal_of(sp.logits_soft_cap);
  row.scale = decimal_of(sp.scale);
  row.k_scale = decimal_of(sp.k_scale);
  row.v_scale = decimal_of(sp.v_scale);
  row.q_scale = decimal_of(sp.q_scale);  // 0 = queries not quantized
  row.alibi = sp.alibi;
  row.sinks = sp.sinks;
  row.causal = sp.causal();
  row.mla = sp.use_mla;
}

// The timing settings of a run: the options' overrides over the scenario's [run].
TimingOptions timing_options(const Scenario& s, const PipelineOptions& opts) {
  TimingOptions topts;
  topts.warmup = opts.warmup.value_or(s.run.warmup);
  topts.iterations = opts.iterations.value_or(s.run.iterations);
  topts.host_timeout_s = opts.host_timeout_s.value_or(s.run.host_timeout_s);
  topts.cold_l2 = opts.cold_l2.value_or(s.run.cold_l2);
  topts.cuda_graph = opts.cuda_graph.value_or(s.run.cuda_graph);
  topts.part = opts.timed.value_or(s.run.timed);
  topts.replay_for_check = true;  // a timed graph's output is checked like the row's own
  return topts;
}

// The columns that the batch and the run's settings fix before any backend runs: what a rerun
// needs to make the same row (spec, requests, seed, warmup/iterations; host_timeout_s as for a
// host row: a device row clears it). run_scenario starts every row from it and `sweep --resume`
// compares stored rows with it (planned_rows).
ResultRow planned_row(const BatchShape& shape, const Batch& batch, int num_layers, const TimingOptions& topts,
                      bool timed) {
  ResultRow row;
  row.scenario = batch.label;
  fill_spec_columns(row, batch);
  row.shared_prefix_len = batch.shared_prefix_len;
  row.num_layers = num_layers;
  row.batch = batch_spec_text(shape.requests);
  row.seed = batch.seed;
  if (timed) {
    row.warmup = topts.warmup;
    row.iterations = topts.iterations;
    row.host_timeout_s = topts.host_timeout_s;
    row.timed = to_string(topts.part);
  }
  return row;
}

// The features a batch declares, each with the perturbation a typical bug of it amounts to
// (docs/DESIGN.md, "Sensitivity"). Causal counts only where some request has more than one
// query token: a decode's last key is its own, so a causal off-by-one cannot show there.
std::vector<Perturbation> declared_features(const Batch& b) {
  const AttentionSpec& s = b.spec;
  std::vector<Perturbation> f;
  const bool multi_token = std::any_of(b.requests.begin(), b.requests.end(),
                                       [](const RequestShape& r) { return r.query_len > 1; });
  if (s.causal() && multi_token) f.push_back(Perturbation::causal_plus_one);
  if (s.sliding_window > 0) f.push_back(Perturbation::window_plus_one);
  if (b.local_attention_chunk > 0) f.push_back(Perturbation::local_chunk_minus_one);
  if (s.logits_soft_cap > 0) f.push_back(Perturbation::softcap_no_tanh);
  if (s.sinks) f.push_back(Perturbation::sinks_dropped);
  if (s.alibi) f.push_back(Perturbation::alibi_dropped);
  const bool kv_scaled = s.kv_fp8() && (s.k_scale != 1.0f || s.v_scale != 1.0f);
  if (kv_scaled || (s.q_fp8() && s.q_scale != 1.0f)) f.push_back(Perturbation::fp8_scales_ignored);
  if (!s.use_mla && s.num_kv_heads > 1) f.push_back(Perturbation::gqa_shifted);
  if (b.shared_prefix_len > 0) f.push_back(Perturbation::cascade_block_dropped);
  if (s.use_mla) f.push_back(Perturbation::mla_rope_dropped);
  return f;
}

// Features whose perturbation moves the output by less than this many budgets are reported as
// not exercised by the batch's data.
constexpr double kMinSensitivity = 4.0;

}  // namespace

std::string batch_spec_text(const std::vector<RequestShape>& requests) {
  std::string text;
  for (size_t i = 0; i < requests.size();) {
    size_t j = i + 1;
    while (j < requests.size() && requests[j].query_len == requests[i].query_len &&
           requests[j].context_len == requests[i].context_len)
      ++j;
    text += fmt::format("{}{}x{}@{}", text.empty() ? "" : ",", j - i, requests[i].query_len, requests[i].context_len);
    i = j;
  }
  return text;
}

std::vector<ResultRow> planned_rows(const Scenario& s, const PipelineOptions& opts) {
  const TimingOptions topts = timing_options(s, opts);
  std::vector<ResultRow> rows;
  for (const BatchShape& shape : expand_shapes(s))
    rows.push_back(planned_row(shape, make_batch(s.spec, shape, s.seed), s.run.num_layers, topts, opts.time));
  return rows;
}

PipelineResult run_scenario(const Scenario& s, const std::vector<std::unique_ptr<Backend>>& registry,
                            const PipelineOptions& opts) {
  PipelineResult result;
  check_file_backends_built(s, registry, opts);
  const BackendNames selection = backend_names(s, opts);
  const TimingOptions topts = timing_options(s, opts);
  RunOptions ropts;
  ropts.cascade = opts.cascade.value_or(s.run.cascade);
  ropts.num_layers = s.run.num_layers;
  const std::string timestamp = now_iso8601();
  const std::string build = build_info();

  for (const BatchShape& shape : expand_shapes(s)) {
    const Batch batch = make_batch(s.spec, shape, s.seed);
    const CommonAttentionMetadata meta = build_common_metadata(batch);
    const BatchSummary summary = summarize_batch(batch, ropts.num_sms);
    std::string auto_note;
    const std::vector<const Backend*> backends =
        resolve_backends(selection.names, registry, s.spec, batch, &auto_note, selection.source);
    // `auto` taking a later backend than the first is said, never silent: on a GPU machine whose
    // device went missing, the gate would otherwise check the cpu backend and go green.
    if (!auto_note.empty() &&
        std::find(result.auto_notes.begin(), result.auto_notes.end(), auto_note) == result.auto_notes.end())
      result.auto_notes.push_back(auto_note);

    // Support is decided first, so a batch no selected backend can run costs no reference.
    std::vector<Support> support;
    for (const Backend* be : backends) {
      Support sup = be->available();
      if (sup.ok) {
        sup = be->supports(batch.spec, batch);
      } else {
        // A batch the backend cannot serve on any machine (FLASHMLA on a non-MLA layer) says so
        // rather than "no GPU here", which would hide it. Asked only for its reason: a backend
        // whose device is missing may fail to answer, and then the device's reason stands.
        try {
          if (Support why = be->supports(batch.spec, batch); !why.ok) sup = std::move(why);
        } catch (const std::exception&) {
        }
      }
      support.push_back(std::move(sup));
    }
    const bool any_runs = std::any_of(support.begin(), support.end(), [](const Support& x) { return x.ok; });

    ReferenceOptions refopts;
    refopts.max_pairs = opts.check_sample.value_or(s.check.sample_pairs);
    refopts.sample_seed = s.seed;
    ReferenceResult ref;
    double quant_err = -1.0;
    std::vector<std::pair<Perturbation, AttentionOutput>> effects;  // (feature, reference under its bug)
    if (any_runs) {
      if (opts.progress) opts.progress(fmt::format("{}: reference ({} tokens)", batch.label, batch.num_tokens()));
      ref = compute_reference(batch, refopts);
      // fp8 caches: the quantization error (fp8 reference vs unquantized K/V), reported, never gated.
      if (batch.spec.kv_fp8()) quant_err = quantization_rel_l2(batch, ref.checked);
      // Sensitivity: how far each declared feature's typical bug moves this batch's output.
      for (Perturbation f : declared_features(batch)) {
        if (opts.progress) opts.progress(fmt::format("{}: sensitivity to {}", batch.label, to_string(f)));
        ReferenceOptions po = refopts;
        po.perturbation = f;
        const ReferenceResult pr = compute_reference(batch, po);
        AttentionOutput as_output;
        as_output.num_tokens = pr.num_tokens;
        as_output.num_heads = pr.num_heads;
        as_output.head_size_v = pr.head_size_v;
        as_output.o.assign(pr.o.begin(), pr.o.end());
        effects.emplace_back(f, std::move(as_output));
      }
    }

    // The reference of a data flow an output declares (FLASHMLA's MLA flow), computed once.
    std::optional<ReferenceResult> flow_ref;
    std::optional<int> flow_ref_q_len;
    std::vector<std::pair<std::string, AttentionOutput>> outputs;
    for (size_t bi = 0; bi < backends.size(); ++bi) {
      const Backend* be = backends[bi];
      ResultRow row = planned_row(shape, batch, ropts.num_layers, topts, opts.time);
      row.backend = be->name();
      if (runs_on_device(*be)) row.host_timeout_s = -1;  // device rows take every iteration
      row.num_reqs = summary.num_reqs;
      row.num_tokens = summary.num_tokens;
      row.num_decodes = summary.num_decodes;
      row.num_prefills = summary.num_prefills;
      row.num_decode_tokens = summary.num_decode_tokens;
      row.num_prefill_tokens = summary.num_prefill_tokens;
      row.kv_tokens = summary.kv_tokens_read;
      // run() runs every layer: the work of all of them (each layer reads its own cache). A timed
      // attention alone writes no cache: its bytes are the rest.
      row.flops = summary.flops * row.num_layers;
      const bool attention_only = opts.time && topts.part == TimedPart::attention;
      row.bytes = (summary.bytes - (attention_only ? summary.cache_write_bytes : 0.0)) * row.num_layers;
      row.total_pairs = ref.pairs_total;
      row.checked_pairs = ref.pairs_checked;
      row.quant_rel_l2 = quant_err;
      row.build = build;
      row.git_rev = git_rev();
      row.timestamp = timestamp;
      row.device = runs_on_device(*be) ? opts.device_name : "host cpu";

      const Support& sup = support[bi];
      if (!sup.ok) {
        row.status = to_string(RowStatus::skipped);
        row.reason = sup.reason;
        result.rows.push_back(std::move(row));
        continue;
      }
      if (opts.progress) opts.progress(fmt::format("{}: {} check", batch.label, be->name()));
      try {
        std::unique_ptr<BackendInstance> inst = be->create(batch, meta, ropts);
        inst->plan();
        row.plan_summary = inst->plan_summary();
        row.cascade = row.plan_summary.find("cascade=on") != std::string::npos;
        inst->poison();
        inst->run();
        inst->synchronize();
        AttentionOutput out = inst->fetch();
        // The budget follows the precision the backend computed in (fp32 for cpu), then the
        // scenario's [check] overrides.
        Budget budget = apply_overrides(default_budget(out.precision.value_or(s.spec.dtype)), s.check);
        budget.strict = budget.strict || opts.strict;
        const ReferenceOptions flow_opts = reference_options_for(out, refopts);
        if (flow_opts.mla_flow_decode_q_len && (!flow_ref || flow_ref_q_len != flow_opts.mla_flow_decode_q_len)) {
          if (opts.progress) opts.progress(fmt::format("{}: reference of {}'s data flow", batch.label, be->name()));
          flow_ref = compute_reference(batch, flow_opts);
          flow_ref_q_len = flow_opts.mla_flow_decode_q_len;
        }
        const ReferenceResult& check_ref = flow_opts.mla_flow_decode_q_len ? *flow_ref : ref;
        const ValidationResult v = validate_output(batch, out, check_ref, budget);
        row.max_abs_err = v.max_abs_err;
        row.max_rel_err = v.max_rel_err;
        row.rel_l2 = v.rel_l2;
        row.floor_rel_l2 = v.floor_rel_l2;
        row.err_over_floor = v.err_over_floor;
        row.naive_rel_l2 = v.naive_rel_l2;
        row.cosine = v.cosine;
        row.nmse = v.nmse;
        row.nan_mismatches = v.nan_mismatches;
        row.unwritten = v.unwritten;
        if (v.worst.request >= 0)
          row.worst = fmt::format("req={} tok={} pos={} head={} dim={} got={:.6g} want={:.6g}", v.worst.request,
                                  v.worst.token, v.worst.position, v.worst.head, v.worst.dim, v.worst.got,
                                  v.worst.want);
        row.status = to_string(v.pass ? RowStatus::pass : RowStatus::fail);
        row.reason = v.failure;
        // Each feature's bug, checked like an output under this row's budget: the larger of its
        // rel_l2 over the rel_l2 budget and its worst element over that element's budget. A row
        // computed finer than the model dtype (the cpu backend's fp32) is judged at the model
        // dtype's budget instead, the one a kernel computing in it gets: the data must be strong
        // enough for those backends, and against fp32's budget (~150 x tighter) every feature
        // reads as exercised, so a CPU-only CI would never see data too weak for a GPU backend.
        Budget judge = budget;
        const Budget model = apply_overrides(default_budget(s.spec.dtype), s.check);
        const bool finer = unit_roundoff(budget.precision) < unit_roundoff(model.precision);
        if (finer) judge = model;
        judge.strict = false;
        std::string weak;
        for (auto& [f, bugged] : effects) {
          // The bug is judged under this row's own budget, coarse intermediates included (an
          // e4m3 P raises the element bounds as it raises the floor): without them the effect
          // would read up to 16 x larger than what this row's check can see.
          bugged.coarse_roundings = out.coarse_roundings;
          const ValidationResult e = validate_output(batch, bugged, ref, judge);
          const double l2_budget = judge.max_rel_l2.value_or(judge.k_l2 * (finer ? e.floor_rel_l2 : v.floor_rel_l2));
          const double sens = std::max(l2_budget > 0 ? e.rel_l2 / l2_budget : HUGE_VAL, e.max_abs_over_budget);
          if (!row.sensitivity.empty()) row.sensitivity += ' ';
          row.sensitivity += fmt::format("{}={:.3g}", to_string(f), sens);
          if (sens < kMinSensitivity) {
            if (!row.not_exercised.empty()) row.not_exercised += ' ';
            row.not_exercised += to_string(f);
            if (weak.empty()) weak = fmt::format("{} ({:.2g} x the {} budget)", to_string(f), sens, to_string(judge.precision));
          }
        }
        if (v.pass && !weak.empty() && (budget.strict || s.check.require_sensitivity)) {
          row.status = to_string(RowStatus::fail);
          row.reason = fmt::format("features not exercised by this batch's data: {}; first: {}, below {:g}",
                                   row.not_exercised, weak, kMinSensitivity);
        }

        // Determinism: a second poisoned run must match bit for bit (reported). It must also pass
        // the same check: state a run leaves behind (a counter, a flag, a workspace) that the next
        // run of the same instance trips over fails the row, as a serving loop would hit it.
        {  // `again` is released before the NaN probe fetches a third output
          inst->poison();
          inst->run();
          inst->synchronize();
          const AttentionOutput again = inst->fetch();
          row.deterministic = bitwise_equal(out.o, again.o);
          if (!row.deterministic && row.status == to_string(RowStatus::pass)) {
            const ValidationResult v2 = validate_output(batch, again, check_ref, budget);
            if (!v2.pass) {
              row.status = to_string(RowStatus::fail);
              row.reason = "the second run of the same instance: " + v2.failure;
            }
          }
        }

        // The caches the step wrote, read back: the attention alone over them (run_attention) must
        // give the step's output. A backend that writes its new keys inside its attention kernel
        // (FLASH_ATTN's decode tiling, its sm_90a prefill from scratch) reads them from the step's
        // input, so a store it skipped or misplaced shows only here. Judged as the second run is:
        // bitwise equal, or else valid.
        if (row.status == to_string(RowStatus::pass)) {
          inst->poison_outputs();
          inst->run_attention();
          inst->synchronize();
          const AttentionOutput alone = inst->fetch();
          if (!bitwise_equal(out.o, alone.o)) {
            const ValidationResult va = validate_output(batch, alone, check_ref, budget);
            if (!va.pass) {
              row.status = to_string(RowStatus::fail);
              row.reason = "the attention alone over the caches the step wrote: " + va.failure;
            }
          }
        }

        // Batch invariance: the first decode and the first prefill request, each run alone.
        if (opts.batch_invariance && batch.num_reqs() > 1) {
          std::vector<int> probe;
          for (int r = 0; r < batch.num_reqs() && probe.size() < 2; ++r) {
            const bool is_decode = batch.requests[static_cast<size_t>(r)].query_len == 1;
            const bool have = std::any_of(probe.begin(), probe.end(), [&](int p) {
              return (batch.requests[static_cast<size_t>(p)].query_len == 1) == is_decode;
            });
            if (!have) probe.push_back(r);
          }
          for (int r : probe) {
            const Batch sub = single_request_batch(batch, r);
            if (!be->supports(sub.spec, sub).ok) continue;
            const CommonAttentionMetadata sm = build_common_metadata(sub);
            std::unique_ptr<BackendInstance> si = be->create(sub, sm, ropts);
            si->plan();
            si->poison();
            si->run();
            si->synchronize();
            const AttentionOutput so = si->fetch();
            const size_t row_elems = static_cast<size_t>(out.num_heads) * static_cast<size_t>(out.head_size_v);
            const size_t begin = static_cast<size_t>(batch.query_start_loc[static_cast<size_t>(r)]) * row_elems;
            row.batch_invariance_checked = true;
            row.batch_invariant &= so.o.size() <= out.o.size() - begin &&
                                   std::memcmp(so.o.data(), out.o.data() + begin, so.o.size() * sizeof(float)) == 0;
          }
        }

        if (opts.time) {
          if (opts.progress) opts.progress(fmt::format("{}: {} timing", batch.label, be->name()));
          const Timing t = time_instance(*inst, topts);
          if (t.graph_output && row.status == to_string(RowStatus::pass)) {
            const ValidationResult vg = validate_output(batch, *t.graph_output, check_ref, budget);
            if (!vg.pass) {
              row.status = to_string(RowStatus::fail);
              row.reason = "the CUDA-graph replay that was timed: " + vg.failure;
            }
          }
          row.plan_us = t.plan_us;
          row.median_time_us = t.median_us;
          row.min_time_us = t.min_us;
          row.max_time_us = t.max_us;
          row.stdev_time_us = t.stdev_us;
          row.samples = t.samples;
          row.timing_method = t.method;
          row.cold_l2 = t.cold_l2;
          if (t.median_us > 0) {
            row.tflops = row.flops / (t.median_us * 1e-6) / 1e12;
            row.tb_per_sec = row.bytes / (t.median_us * 1e-6) / 1e12;
            if (inst->on_device() && opts.peak_bandwidth_gbs > 0)
              row.pct_peak_bw = 100.0 * row.tb_per_sec * 1e3 / opts.peak_bandwidth_gbs;
            if (inst->on_device() && opts.peak_tflops > 0) row.pct_peak_flops = 100.0 * row.tflops / opts.peak_tflops;
            // The floor is timed from a cold L2 only: a warm-L2 row would be compared with a
            // different state.
            // Layers run one after another, each reading its own cold pages: L floors of one
            // layer's bytes (one read of all L layers' bytes would pay one launch and tail for L).
            const double layer_bytes = row.bytes / row.num_layers;
            if (inst->on_device() && t.cold_l2 && opts.read_floor && layer_bytes > 0) {
              const ReadFloor f = measure_read_floor(layer_bytes);
              if (f.us > 0) {
                row.read_floor_us = f.us * row.num_layers;
                row.pct_read_floor = 100.0 * row.read_floor_us / t.median_us;
              }
            }
          }
        }
        // The NaN probe (validate/nan_probe.hpp): a context key's and a new token's K planted NaN
        // must reach exactly the rows that attend them, however the backend split, merged and masked
        // their keys. A fresh instance, once this one is released: never two sets of caches at once.
        if (opts.nan_probe && row.status == to_string(RowStatus::pass)) {
          if (const std::vector<TokenKey> keys = nan_probe_keys(batch); !keys.empty()) {
            if (opts.progress) opts.progress(fmt::format("{}: {} NaN probe", batch.label, be->name()));
            inst.reset();
            RunOptions probe_opts = ropts;
            probe_opts.nan_keys = keys;
            std::unique_ptr<BackendInstance> pi = be->create(batch, meta, probe_opts);
            pi->plan();
            pi->poison();
            pi->run();
            pi->synchronize();
            const NanProbeResult np = check_nan_probe(batch, keys, out, pi->fetch(), row.deterministic);
            if (!np.pass) {
              row.status = to_string(RowStatus::fail);
              row.reason = np.failure;
            }
          }
        }
        outputs.emplace_back(be->name(), std::move(out));
      } catch (const InputError&) {
        throw;
      } catch (const std::bad_alloc&) {
        row.status = to_string(RowStatus::error);
        row.reason = "out of host memory";
      } catch (const std::exception& e) {
        row.status = to_string(RowStatus::error);
        row.reason = e.what();
      }
      result.rows.push_back(std::move(row));
    }
    for (size_t i = 0; i < outputs.size(); ++i)
      for (size_t j = i + 1; j < outputs.size(); ++j) {
        const OutputDiff d = diff_outputs(outputs[i].second, outputs[j].second);
        result.diffs.push_back({batch.label, outputs[i].first, outputs[j].first, d.max_abs, d.rel_l2});
      }
  }
  return result;
}

}  // namespace attn
