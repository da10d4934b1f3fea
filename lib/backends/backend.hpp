#pragma once
// The Backend interface (CUTLASS-style can_implement / plan / run):
//   supports(spec, batch)   same selector the launch uses; a "no" carries its reason and the
//                           pair is reported as skipped, never run
//   create(batch, metadata) binds the backend to one batch: allocates and fills its buffers
//   plan()                  host-side scheduling (timed on its own)
//   run()                   cache write + attention; allocates nothing and does not synchronize
//   run_attention()         the attention alone, over the caches a run() wrote: timed as the
//                           peers' kernels are, which write no cache
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "metadata/common.hpp"
#include "model/backend_names.hpp"  // all_backend_names, same_backend_name, canonical_backend_name
#include "model/batch.hpp"
#include "model/kv_cache.hpp"  // TokenKey

namespace attn {

struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const { return ok; }
};

struct RunOptions {
  CascadeMode cascade = CascadeMode::auto_;  // auto = vLLM's use_cascade_attention rule
  int num_layers = 1;                        // distinct caches, planned once
  // Tests of the layers: every cache but the last layer's is NaN throughout once created, so the
  // output (the last layer's) is finite only if that layer reads its own cache alone.
  bool nan_all_but_last_layer = false;
  // Tests of NaN propagation: these tokens' K are NaN (a context token's in every layer's cache, a
  // new token's in the K input the cache write stores), so every row that attends one must come out
  // NaN (O and LSE), however its keys were split and merged, and no other row.
  std::vector<TokenKey> nan_keys;
  int threads = 0;                           // host backends (0 = default)
  int num_sms = 132;                         // for scheduling rules when no device is queried
  // CUDA graphs (vLLM's capture sizes): plan the decode for this many requests so that one
  // captured launch serves any smaller batch; the padded work items exit without reading the
  // schedule. 0 = plan for the batch as it is. Used by FLASHINFER's decode wrapper.
  int graph_capture_size = 0;
};

// A backend's output copied to the host as float.
struct AttentionOutput {
  int64_t num_tokens = 0;
  int num_heads = 0;
  int head_size_v = 0;
  std::vector<float> o;    // [num_tokens, num_heads, head_size_v]
  std::vector<float> lse;  // [num_tokens, num_heads], natural log; empty if not produced
  // The precision the backend computed and stored O in; it picks the default budget (DESIGN.md).
  // Unset = the model dtype (a bf16 kernel writing bf16 O). The cpu backend is fp32 throughout.
  std::optional<DType> precision;
  // vLLM's MLA data flow (FLASHMLA): the absorbed q_latent of a decode (the requests of this query
  // length) or the up-projected K/V of a prefill stored in the model dtype. The output is checked
  // against the reference of that flow (ReferenceOptions::mla_flow_decode_q_len, the rounding
  // included), so its budget covers its arithmetic alone: how much the rounding moves O depends on
  // the data (peaked scores amplify a rounded q_latent), which no fixed factor models.
  std::optional<int> mla_flow_decode_q_len;
  // Intermediates rounded once each to a dtype coarser than O's (FLASH_ATTN's fp8 tensor-core
  // path rounds the probabilities P to e4m3 before P V): each adds its own unit roundoff, relative
  // to O's, under the square root of the data-flow floor (DESIGN.md, "Accuracy budgets").
  std::vector<DType> coarse_roundings;
};

class BackendInstance {
 public:
  virtual ~BackendInstance() = default;
  virtual void plan() = 0;
  // The step as a serving engine runs it: each layer's cache write (the new tokens' K/V into its
  // paged cache), then its attention.
  virtual void run() = 0;
  // The step's attention alone, every layer's, over the caches as the last run() left them: after
  // a run() it writes the same output again, with the step's launches less the cache writes (what a
  // peer kernel that writes no cache is timed on).
  virtual void run_attention() = 0;
  // NaN into every output element and into the cache slots of the new tokens, so an
  // unwritten output or a skipped cache write is caught by the next check.
  virtual void poison() = 0;
  // NaN into every output element only (the caches keep what the last write put there).
  virtual void poison_outputs() = 0;
  virtual void synchronize() {}
  virtual AttentionOutput fetch() = 0;
  virtual bool on_device() const { return false; }
  virtual void* stream() const { return nullptr; }  // cudaStream_t of run()
  // Scheduling facts for the results row, e.g. "cascade=on prefix=4096 splits=4".
  virtual std::string plan_summary() const { return {}; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  virtual std::vector<std::string> features() const = 0;  // one line each, for `list`
  // Compiled in and runnable here (e.g. a CUDA device is present); else why not.
  virtual Support available() const = 0;
  virtual Support supports(const AttentionSpec& spec, const Batch& batch) const = 0;
  virtual std::unique_ptr<BackendInstance> create(const Batch& batch, const CommonAttentionMetadata& m,
                                                  const RunOptions& opts) const = 0;
};

// Every backend of this build, in the selector's preference order.
std::vector<std::unique_ptr<Backend>> make_registry();
// The backend's instances run on the CUDA device (timed by CUDA events or as a CUDA graph), not
// on the host (timed by wall clock): every backend but cpu.
bool runs_on_device(const Backend& backend);
// The `auto` choice (BACKGROUND.md, "Attention layer and selector"): the first available
// backend that supports the batch; nullptr with *why filled when none does. On success *why holds
// the backends passed over before it, "flash_attn: no CUDA device; ..." (empty: none).
const Backend* select_backend(const std::vector<std::unique_ptr<Backend>>& registry,
                              const AttentionSpec& spec, const Batch& batch, std::string* why);

}  // namespace attn
