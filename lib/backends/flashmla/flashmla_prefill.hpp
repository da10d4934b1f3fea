#pragma once
// The MLA prefill of the FLASHMLA backend (vLLM's MLA common prefill; docs/BACKGROUND.md):
// plain MHA with qk 192 / v 128 over up-projected keys. The cached context is processed in
// chunks of a fixed workspace: gather kv_c ‖ k_pe of every prefill's chunk from the paged cache,
// up-project (k_nope = kv_c · W_UK[h], v = kv_c · W_UV[h], two cuBLAS batched GEMMs), run the
// FLASH_ATTN kernel non-causally over the dense K/V (identity block table), and merge the chunk
// into the running state by LSE (merge_attn_states). The new tokens then attend causally to
// themselves the same way. On the sm_90a kernel the attention is qk 192 / v 128 and writes the
// 128-wide output itself; the mma.sync kernel (one head size for both) takes V zero-padded to 192
// and its merged 192-wide output is sliced to 128. V's rows are 192 wide either way (K's strides).
// CUDA builds only.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "backends/flashmla/mla_prefill_plan.hpp"
#include "kernels/flash_attn/flash_attn_launch.hpp"
#include "model/spec.hpp"

namespace attn {

struct MlaPrefillInputs {
  const void* q;               // [num_tokens, H, 192] model dtype (the prefill tokens)
  const void* kv_cache;        // [num_blocks, 64, 576]
  const int32_t* block_table;  // [num_prefills, block_table_stride] device, the prefills' rows
  int block_table_stride = 0;
  int64_t kv_block_stride = 0;
  int block_size = 64;
  const void* w_uk;            // [H, 512, 128] model dtype
  const void* w_uv;            // [H, 512, 128] model dtype
  void* o;                     // [num_tokens, H, 128] model dtype
  float* lse;                  // [num_tokens, H]
};

class MlaPrefill {
 public:
  // q_lens/context_lens: [num_prefills] (see plan_mla_prefill).
  MlaPrefill(const AttentionSpec& spec, const std::vector<int32_t>& q_lens, const std::vector<int32_t>& context_lens,
             int workspace_tokens, cudaStream_t stream);
  void run(const MlaPrefillInputs& in, cublasHandle_t cublas, cudaStream_t stream);
  const MlaPrefillPlan& plan() const { return plan_; }
  std::string summary() const;

 private:
  AttentionSpec spec_;
  int dv_;                  // V and O width of the attention: 128 (sm_90a kernel) or 192 (V padded)
  FlashAttnTiling tiling_;  // of the FA hd192 kernel for the longest prefill
  MlaPrefillPlan plan_;
  struct PassBuffers {
    DeviceBuffer key_begin, key_count, dense_begin, block_table;
    // The sm_90a kernel's fixed rounds, balanced as FLASH_ATTN's prefills (balance_fixed_rounds):
    // FlashAttnParams::work_order of work_ctas CTAs; empty: the kernel's snake.
    DeviceBuffer work_order;
    int work_rounds = 0, work_ctas = 0, l2_groups = 0;
  };
  std::vector<PassBuffers> pass_bufs_;
  DeviceBuffer query_start_, tiles_;
  DeviceBuffer latent_;    // [max_dense_rows, 576]
  DeviceBuffer k_, v_;     // [max_dense_rows, H, 192]; v's dims 128..191 stay zero
  DeviceBuffer o_slots_;   // [3, num_tokens, H, dv_] fp32: running state / pass output / next state
  DeviceBuffer lse_slots_; // [3, num_tokens, H]
  DeviceBuffer o_full_;    // [num_tokens, H, 192] model dtype (dv_ = 192 only)
};

}  // namespace attn
