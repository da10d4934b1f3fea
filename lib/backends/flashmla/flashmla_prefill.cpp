// FLASHMLA's MLA prefill (see flashmla_prefill.hpp).
#include "backends/flashmla/flashmla_prefill.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "backends/flash_attn/flash_attn_plan.hpp"
#include "backends/flashmla/flashmla_util.hpp"
#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/common/merge_launch.hpp"
#include "kernels/flashmla/flashmla_launch.hpp"

namespace attn {
namespace {

using flashmla::cublas_check;
using flashmla::upload;

constexpr int kQk = 192, kNope = 128, kV = 128, kRank = 512, kLatent = 576;

FlashAttnConfig attention_config(const AttentionSpec& spec, int dv) {
  const int H = spec.num_q_heads;
  return FlashAttnConfig{H, H, kQk, dv, spec.dtype, spec.dtype, MlaPrefillPlan::kDenseBlock, KvLayout::NHD, false};
}

// V's width: 128 where the sm_90a kernel runs qk 192 / v 128 for these prefills, else 192 (the
// mma.sync kernel takes one head size; V zero-padded).
int attention_v_dim(const AttentionSpec& spec, const std::vector<int32_t>& q_lens) {
  const FlashAttnConfig c = attention_config(spec, kV);
  if (!flash_attn_unsupported_reason(c).empty()) return kQk;
  const FlashAttnTiling t = flash_attn_pass_tiling(q_lens, 1, kQk, flash_attn_sm90_passes(c));
  return flash_attn_uses_sm90(c, t) ? kV : kQk;
}


}  // namespace

MlaPrefill::MlaPrefill(const AttentionSpec& spec, const std::vector<int32_t>& q_lens,
                       const std::vector<int32_t>& context_lens, int workspace_tokens, cudaStream_t stream)
    : spec_(spec),
      dv_(attention_v_dim(spec, q_lens)),
      // The FLASH_ATTN planner's tiling of these prefills (one query head per kv head).
      tiling_(flash_attn_pass_tiling(q_lens, 1, kQk, flash_attn_sm90_passes(attention_config(spec, dv_)))),
      plan_(plan_mla_prefill(q_lens, context_lens, workspace_tokens, tiling_.block_m)) {
  const int H = spec.num_q_heads;
  const std::size_t es = dtype_size(spec.dtype);
  // Each pass's items (tile, head) dealt to the persistent kernel's CTAs as FLASH_ATTN deals a
  // prefill's: heaviest first to the least loaded CTA, a group of (head, prefill) pairs at a time
  // where the pass's K/V outgrow L2. Without a list the kernel's snake runs the tiles in sequence
  // order, each round over every head of a few tiles.
  const FlashAttnConfig config = attention_config(spec, dv_);
  const bool balance = sm90_balance_enabled() && flash_attn_uses_sm90(config, tiling_);
  const int num_sms = balance ? query_device_info().num_sms : 0;
  for (std::size_t pi = 0; pi < plan_.passes.size(); ++pi) {
    const MlaPrefillPlan::Pass& p = plan_.passes[pi];
    PassBuffers pb;
    pb.key_begin = upload(p.key_begin);
    pb.key_count = upload(p.key_count);
    pb.dense_begin = upload(p.dense_begin);
    pb.block_table = upload(p.block_table);
    if (balance && num_sms > 0) {
      FlashAttnPass fp;
      fp.tiling = tiling_;
      fp.tiles = plan_.tiles;
      fp.tile_keys = mla_pass_tile_keys(plan_, static_cast<int>(pi));
      balance_fixed_rounds(fp, H, kQk, num_sms, static_cast<int>(es));
      pb.work_order = upload(fp.work_order);
      pb.work_rounds = fp.work_rounds;
      pb.work_ctas = fp.work_ctas;
      pb.l2_groups = fp.l2_groups;
    }
    pass_bufs_.push_back(std::move(pb));
  }
  query_start_ = upload(plan_.query_start);
  tiles_ = upload(plan_.tiles);
  const int64_t rows = std::max(plan_.max_dense_rows, MlaPrefillPlan::kDenseBlock);
  latent_ = DeviceBuffer(rows * kLatent * es);
  k_ = DeviceBuffer(rows * H * kQk * es);
  v_ = DeviceBuffer(rows * H * kQk * es);
  // Dims 128..191 of V: the zero padding, never written again (unread by qk 192 / v 128, but a
  // defined value all the same).
  v_.memset_async(0, stream);
  const int64_t out_rows = std::max(plan_.num_tokens, 1) * int64_t{H};
  const int slots = std::min<int>(3, static_cast<int>(plan_.passes.size()));
  if (slots >= 2) {
    o_slots_ = DeviceBuffer(slots * out_rows * dv_ * sizeof(float));
    lse_slots_ = DeviceBuffer(slots * out_rows * sizeof(float));
  }
  if (dv_ != kV) o_full_ = DeviceBuffer(out_rows * kQk * es);
}

std::string MlaPrefill::summary() const {
  std::string s = fmt::format("prefills={} context_chunks={}", plan_.num_prefills, plan_.num_chunks);
  if (plan_.num_chunks > 0) s += fmt::format(" chunk={}", plan_.chunk);
  s += flash_attn_uses_sm90(attention_config(spec_, dv_), tiling_) ? " attn_kernel=wgmma" : " attn_kernel=mma.sync";
  int listed = 0, groups = 0;
  for (const PassBuffers& pb : pass_bufs_) {
    listed += pb.work_rounds > 0;
    groups = std::max(groups, pb.l2_groups);
  }
  if (listed > 0) s += fmt::format(" rounds=balanced({}/{} passes)", listed, pass_bufs_.size());
  if (groups > 0) s += fmt::format(" l2_groups<={}", groups);
  s += fmt::format(" v={}", dv_);
  return s;
}

void MlaPrefill::run(const MlaPrefillInputs& in, cublasHandle_t cublas, cudaStream_t stream) {
  if (plan_.num_tokens == 0) return;
  const int H = spec_.num_q_heads, T = plan_.num_tokens;
  const int64_t out_rows = int64_t{T} * H;
  const cudaDataType_t dt = spec_.dtype == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
  const FlashAttnConfig config = attention_config(spec_, dv_);
  void* o_attn = dv_ == kV ? in.o : o_full_.data();  // the output of the last pass or merge
  const int num_passes = static_cast<int>(plan_.passes.size());
  int acc = -1;  // slot of the running state (0 or 2); pass outputs go to slot 0 first, then 1

  for (int pi = 0; pi < num_passes; ++pi) {
    const MlaPrefillPlan::Pass& pass = plan_.passes[static_cast<std::size_t>(pi)];
    const PassBuffers& pb = pass_bufs_[static_cast<std::size_t>(pi)];
    const int rows = pass.dense_rows();
    if (rows > 0) {
      MlaGatherParams g{};
      g.kv_cache = in.kv_cache;
      g.block_table = in.block_table;
      g.dense_begin = pb.dense_begin.as<int32_t>();
      g.key_begin = pb.key_begin.as<int32_t>();
      g.key_count = pb.key_count.as<int32_t>();
      g.latent = latent_.data();
      g.k = k_.data();
      g.num_reqs = plan_.num_prefills;
      g.num_dense_rows = rows;
      g.num_heads = H;
      g.block_table_stride = in.block_table_stride;
      g.block_size = in.block_size;
      g.kv_block_stride = in.kv_block_stride;
      launch_mla_gather(g, spec_.dtype, stream);
      // k_nope[n, h] = kv_c[n] · W_UK[h], v[n, h] = kv_c[n] · W_UV[h]: per head, col-major
      // (128 x rows, ld H*192) = W (col-major 128 x 512) · kv_c^T (512 x rows, ld 576, shared).
      const float one = 1.f, zero = 0.f;
      cublas_check(cublasGemmStridedBatchedEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, kNope, rows, kRank, &one, in.w_uk, dt,
                                              kNope, int64_t{kRank} * kNope, latent_.data(), dt, kLatent, 0, &zero,
                                              k_.data(), dt, H * kQk, kQk, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "k_nope up-projection");
      cublas_check(cublasGemmStridedBatchedEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, kV, rows, kRank, &one, in.w_uv, dt, kV,
                                              int64_t{kRank} * kV, latent_.data(), dt, kLatent, 0, &zero, v_.data(), dt,
                                              H * kQk, kQk, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "v up-projection");
    }

    const bool single = num_passes == 1;  // no context anywhere: straight to the output
    const int out_slot = pi == 0 ? 0 : 1;
    FlashAttnParams p{};
    p.q = in.q;
    p.k_cache = k_.data();
    p.v_cache = v_.data();
    p.block_table = pb.block_table.as<int32_t>();
    p.seq_lens = pb.key_count.as<int32_t>();
    p.query_start_loc = query_start_.as<int32_t>();
    p.tiles = tiles_.as<int32_t>();
    p.o = o_attn;
    p.lse = single ? in.lse : nullptr;
    p.lse_token_stride = H;
    p.lse_head_stride = 1;
    p.o_partial = single ? nullptr : o_slots_.as<float>();
    p.lse_partial = single ? nullptr : lse_slots_.as<float>();
    p.partial_offset = out_slot;
    p.num_tokens = T;
    p.num_q_heads = H;
    p.num_kv_heads = H;
    p.head_size = kQk;
    p.block_size = MlaPrefillPlan::kDenseBlock;
    p.block_table_stride = plan_.max_dense_blocks;
    p.num_tiles = static_cast<int>(plan_.tiles.size() / 2);
    p.work_order = pb.work_rounds > 0 ? pb.work_order.as<int32_t>() : nullptr;
    p.work_rounds = pb.work_rounds;
    p.work_ctas = pb.work_ctas;
    p.num_splits = 1;
    p.kv_block_stride = int64_t{MlaPrefillPlan::kDenseBlock} * H * kQk;
    p.kv_token_stride = int64_t{H} * kQk;
    p.kv_head_stride = kQk;
    p.softmax_scale = spec_.scale;
    p.causal = pass.causal ? 1 : 0;
    launch_flash_attn_fwd(p, config, tiling_, stream);
    if (single) break;
    if (pi == 0) {
      acc = 0;
      continue;
    }
    // Merge the pass (slot 1) into the running state: pair (0, 1) or (1, 2), written to the
    // third slot, or to the output after the last pass.
    const bool last = pi == num_passes - 1;
    const int base = acc == 0 ? 0 : 1;
    MergeAttnParams mp{};
    mp.o_partial = o_slots_.as<float>() + base * out_rows * dv_;
    mp.lse_partial = lse_slots_.as<float>() + base * out_rows;
    const int next = acc == 0 ? 2 : 0;
    mp.o = last ? o_attn : static_cast<void*>(o_slots_.as<float>() + next * out_rows * dv_);
    mp.lse = last ? in.lse : lse_slots_.as<float>() + next * out_rows;
    mp.lse_token_stride = H;
    mp.lse_head_stride = 1;
    mp.num_partials = 2;
    mp.num_tokens = T;
    mp.num_heads = H;
    mp.head_size = dv_;
    launch_merge_attn_states(mp, last ? spec_.dtype : DType::f32, stream);
    acc = next;
  }
  if (dv_ == kV) return;
  // o = the first 128 of the 192 columns (the rest is the zero V padding).
  const std::size_t es = dtype_size(spec_.dtype);
  ATTN_CUDA_CHECK(cudaMemcpy2DAsync(in.o, kV * es, o_full_.data(), kQk * es, kV * es, static_cast<std::size_t>(out_rows),
                                    cudaMemcpyDeviceToDevice, stream));
}

}  // namespace attn
