#include "backends/cpu/cpu_mla.hpp"

#include <algorithm>
#include <limits>

#include "backends/cpu/cpu_cache_ops.hpp"
#include "backends/cpu/merge_attn_states.hpp"
#include "backends/cpu/online_softmax.hpp"
#include "core/parallel.hpp"

namespace attn::cpu {

MlaPlan plan_mla(const int32_t* query_start_loc, const int32_t* seq_lens, const int32_t* block_table, int num_reqs,
                 int max_blocks_per_req, int num_heads, const MlaDims& dims, int block_size, int workspace_tokens) {
  MlaPlan plan;
  plan.decode_query_start.push_back(0);
  plan.prefill_rows.push_back(0);
  int num_with_context = 0, max_context = 0;
  for (int r = 0; r < num_reqs; ++r) {
    const int32_t q_len = query_start_loc[r + 1] - query_start_loc[r];
    if (q_len == 0) continue;  // nothing to compute (and no output rows)
    if (q_len == 1) {
      plan.decode_reqs.push_back(r);
      plan.decode_query_start.push_back(plan.decode_query_start.back() + q_len);
      plan.decode_seq_lens.push_back(seq_lens[r]);
      plan.decode_block_table.insert(plan.decode_block_table.end(), block_table + int64_t{r} * max_blocks_per_req,
                                     block_table + int64_t{r + 1} * max_blocks_per_req);
    } else {
      const int32_t context = seq_lens[r] - q_len;
      plan.prefill_reqs.push_back(r);
      plan.prefill_rows.push_back(plan.prefill_rows.back() + q_len);
      num_with_context += context > 0;
      max_context = std::max(max_context, context);
    }
  }
  if (num_with_context > 0) {
    plan.context_chunk = std::max(block_size, workspace_tokens / num_with_context / block_size * block_size);
    plan.num_context_chunks = (max_context + plan.context_chunk - 1) / plan.context_chunk;
  }
  // Decode: one 576-wide MQA; all q heads share the single latent "kv head".
  plan.decode_work = plan_paged_attention(plan.decode_query_start.data(), static_cast<int>(plan.decode_reqs.size()),
                                          num_heads, 1);
  const int64_t decode_rows = int64_t{plan.decode_query_start.back()} * num_heads;
  plan.q_absorbed.resize(static_cast<size_t>(decode_rows * dims.latent_dim()));
  plan.o_latent.resize(static_cast<size_t>(decode_rows * dims.kv_lora_rank));
  plan.lse_decode.resize(static_cast<size_t>(decode_rows));
  const int64_t prefill_rows = int64_t{plan.prefill_rows.back()} * num_heads;
  if (plan.num_context_chunks > 0) {
    plan.o_ctx.resize(static_cast<size_t>(prefill_rows * dims.v_head_dim));
    plan.lse_ctx.resize(static_cast<size_t>(prefill_rows));
    plan.o_chunk.resize(static_cast<size_t>(prefill_rows * dims.v_head_dim));
    plan.lse_chunk.resize(static_cast<size_t>(prefill_rows));
  }
  return plan;
}

namespace {

// Latents of keys [key0, key1) of one request, through its block-table row.
void gather_latents(const MlaParams& p, int req, int32_t key0, int32_t key1, float* out /*[key1 - key0, 576]*/) {
  const KvCacheLayout& l = *p.layout;
  const int width = p.dims.latent_dim();
  const int32_t* table = p.block_table + int64_t{req} * p.max_blocks_per_req;
  for (int32_t key = key0; key < key1; ++key) {
    const int64_t index = l.k_index(table[key / l.block_size], key % l.block_size, 0, 0);
    load_cache_row(p.cache, l.dtype, index, width, p.kv_scale, out + int64_t{key - key0} * width);
  }
}

// Head h's keys [k_nope (kv_c · W_UK[h]) ‖ k_pe] and values kv_c · W_UV[h] of n latents.
void up_project(const MlaParams& p, int head, const float* latents /*[n, 576]*/, int n, float* k /*[n, 192]*/,
                float* v /*[n, v_head_dim]*/) {
  const MlaDims& md = p.dims;
  const float* w_uk = p.w_uk + int64_t{head} * md.kv_lora_rank * md.qk_nope_head_dim;
  const float* w_uv = p.w_uv + int64_t{head} * md.kv_lora_rank * md.v_head_dim;
  for (int j = 0; j < n; ++j) {
    const float* kv_c = latents + int64_t{j} * md.latent_dim();
    float* kj = k + int64_t{j} * md.qk_head_dim();
    float* vj = v + int64_t{j} * md.v_head_dim;
    std::fill(kj, kj + md.qk_nope_head_dim, 0.0f);
    std::fill(vj, vj + md.v_head_dim, 0.0f);
    for (int c = 0; c < md.kv_lora_rank; ++c) {
      axpy(kj, w_uk + int64_t{c} * md.qk_nope_head_dim, kv_c[c], md.qk_nope_head_dim);
      axpy(vj, w_uv + int64_t{c} * md.v_head_dim, kv_c[c], md.v_head_dim);
    }
    std::copy(kv_c + md.kv_lora_rank, kv_c + md.latent_dim(), kj + md.qk_nope_head_dim);
  }
}

struct PrefillScratch {
  std::vector<float> latents, k, v, q;
  std::vector<RowMask> masks;
  OnlineSoftmax softmax;
};

// One (prefill, head) pass: the request's new tokens against keys [key0, key1) of the request.
// self_pass: the keys are the new tokens themselves, causal; else a context chunk, non-causal.
// Writes o/lse rows at out_token0 + i (o: [*, num_heads, v_head_dim], lse: [*, num_heads]).
void prefill_pass(const MlaParams& p, int req, int head, int32_t key0, int32_t key1, bool self_pass, float* o,
                  float* lse, int64_t out_token0, PrefillScratch& s) {
  const MlaDims& md = p.dims;
  const int dqk = md.qk_head_dim(), dv = md.v_head_dim;
  const int32_t q0 = p.query_start_loc[req], q_len = p.query_start_loc[req + 1] - q0;
  const int n = key1 - key0;
  s.latents.resize(static_cast<size_t>(std::max(n, 1)) * md.latent_dim());
  s.k.resize(static_cast<size_t>(std::max(n, 1)) * dqk);
  s.v.resize(static_cast<size_t>(std::max(n, 1)) * dv);
  gather_latents(p, req, key0, key1, s.latents.data());
  up_project(p, head, s.latents.data(), n, s.k.data(), s.v.data());

  s.q.resize(static_cast<size_t>(q_len) * dqk);
  s.masks.resize(static_cast<size_t>(q_len));
  for (int i = 0; i < q_len; ++i) {
    float* qi = s.q.data() + int64_t{i} * dqk;
    load_row(p.q, p.dtype, (int64_t{q0 + i} * p.num_heads + head) * dqk, dqk, qi);
    for (int d = 0; d < dqk; ++d) qi[d] *= p.scale;
    s.masks[i] = make_row_mask(i, n, /*causal=*/self_pass, 0, 0.0f);
  }
  s.softmax.reset(q_len, dv);
  s.softmax.update(s.q.data(), dqk, s.masks.data(), s.k.data(), s.v.data(), 0, n, p.soft_cap);
  // The sink joins the denominator once: in the self pass, which every token has.
  const float sink = self_pass && p.sinks ? p.sinks[head] : kNegInf;
  for (int i = 0; i < q_len; ++i) {
    const int64_t row = (out_token0 + i) * p.num_heads + head;
    s.softmax.finalize_row(i, sink, o + row * dv, lse + row);
  }
}

void run_decodes(const MlaParams& p, MlaPlan& plan) {
  const MlaDims& md = p.dims;
  const int num_decodes = static_cast<int>(plan.decode_reqs.size());
  if (num_decodes == 0) return;
  const int width = md.latent_dim(), rank = md.kv_lora_rank, dqk = md.qk_head_dim();
  const int64_t rows = int64_t{plan.decode_query_start.back()} * p.num_heads;  // (decode token, head)
  auto original_token = [&](int64_t compact) {
    // decode_query_start is 0,1,2,...: compact token i is the only token of decode i.
    return int64_t{p.query_start_loc[plan.decode_reqs[static_cast<size_t>(compact)]]};
  };

  // 1. Absorb W_UK: q'[c] = sum_d q_nope[d] * W_UK[h][c][d]; q' = [that ‖ q_pe].
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        std::vector<float> q(static_cast<size_t>(dqk));
        for (int64_t row = begin; row < end; ++row) {
          const int64_t t = row / p.num_heads;
          const int h = static_cast<int>(row % p.num_heads);
          load_row(p.q, p.dtype, (original_token(t) * p.num_heads + h) * dqk, dqk, q.data());
          float* qa = plan.q_absorbed.data() + row * width;
          const float* w_uk = p.w_uk + int64_t{h} * rank * md.qk_nope_head_dim;
          for (int c = 0; c < rank; ++c) qa[c] = dot(q.data(), w_uk + int64_t{c} * md.qk_nope_head_dim, md.qk_nope_head_dim);
          std::copy(q.begin() + md.qk_nope_head_dim, q.end(), qa + rank);
        }
      },
      p.threads);

  // 2. MQA over the latent cache: keys 576 wide, values the first 512 of the same entry.
  PagedAttentionParams a;
  a.q = plan.q_absorbed.data();
  a.q_dtype = DType::f32;
  a.cache = p.cache;
  a.layout = p.layout;
  a.k_scale = a.v_scale = p.kv_scale;
  a.query_start_loc = plan.decode_query_start.data();
  a.seq_lens = plan.decode_seq_lens.data();
  a.block_table = plan.decode_block_table.data();
  a.num_reqs = num_decodes;
  a.max_blocks_per_req = p.max_blocks_per_req;
  a.num_q_heads = p.num_heads;
  a.num_kv_heads = 1;
  a.head_size_qk = width;
  a.head_size_v = rank;
  a.scale = p.scale;
  a.causal = true;
  a.soft_cap = p.soft_cap;
  a.sinks = p.sinks;
  a.o = plan.o_latent.data();
  a.lse = plan.lse_decode.data();
  a.work = plan.decode_work.data();
  a.num_work = static_cast<int64_t>(plan.decode_work.size());
  a.threads = p.threads;
  paged_attention(a);

  // 3. o[h] = o_latent[h] · W_UV[h].
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          const int64_t t = row / p.num_heads;
          const int h = static_cast<int>(row % p.num_heads);
          const int64_t out_row = original_token(t) * p.num_heads + h;
          float* o = p.o + out_row * md.v_head_dim;
          std::fill(o, o + md.v_head_dim, 0.0f);
          const float* ol = plan.o_latent.data() + row * rank;
          const float* w_uv = p.w_uv + int64_t{h} * rank * md.v_head_dim;
          for (int c = 0; c < rank; ++c) axpy(o, w_uv + int64_t{c} * md.v_head_dim, ol[c], md.v_head_dim);
          p.lse[out_row] = plan.lse_decode[static_cast<size_t>(row)];
        }
      },
      p.threads);
}

void run_prefills(const MlaParams& p, MlaPlan& plan) {
  const int num_prefills = static_cast<int>(plan.prefill_reqs.size());
  if (num_prefills == 0) return;
  const int dv = p.dims.v_head_dim;
  const int64_t items = int64_t{num_prefills} * p.num_heads;  // (prefill, head)
  auto for_each_item = [&](auto&& fn) {
    parallel_for(
        items,
        [&](int64_t begin, int64_t end) {
          PrefillScratch s;
          for (int64_t i = begin; i < end; ++i) fn(static_cast<int>(i / p.num_heads), static_cast<int>(i % p.num_heads), s);
        },
        p.threads);
  };

  // Context, chunk by chunk over the whole batch; a request whose context ends before chunk c
  // has an empty chunk there (o = 0, lse = -inf), which the merge weighs with 0.
  if (plan.num_context_chunks > 0) {
    std::fill(plan.o_ctx.begin(), plan.o_ctx.end(), 0.0f);
    std::fill(plan.lse_ctx.begin(), plan.lse_ctx.end(), kNegInf);
  }
  for (int c = 0; c < plan.num_context_chunks; ++c) {
    for_each_item([&](int i, int h, PrefillScratch& s) {
      const int req = plan.prefill_reqs[static_cast<size_t>(i)];
      const int32_t context = p.seq_lens[req] - (p.query_start_loc[req + 1] - p.query_start_loc[req]);
      const int32_t key0 = std::min(context, c * plan.context_chunk);
      const int32_t key1 = std::min(context, (c + 1) * plan.context_chunk);
      prefill_pass(p, req, h, key0, key1, /*self_pass=*/false, plan.o_chunk.data(), plan.lse_chunk.data(),
                   plan.prefill_rows[static_cast<size_t>(i)], s);
    });
    MergeAttnStatesParams m;
    m.out = plan.o_ctx.data();
    m.out_lse = plan.lse_ctx.data();
    m.prefix_o = plan.o_ctx.data();
    m.prefix_lse = plan.lse_ctx.data();
    m.suffix_o = plan.o_chunk.data();
    m.suffix_lse = plan.lse_chunk.data();
    m.num_tokens = plan.prefill_rows.back();
    m.num_heads = p.num_heads;
    m.head_size = dv;
    m.threads = p.threads;
    merge_attn_states(m);
  }

  // New tokens against themselves (read back from the cache, so they are exactly the values
  // the reshape wrote), causal, straight into the output rows.
  for_each_item([&](int i, int h, PrefillScratch& s) {
    const int req = plan.prefill_reqs[static_cast<size_t>(i)];
    const int32_t q_len = p.query_start_loc[req + 1] - p.query_start_loc[req];
    const int32_t context = p.seq_lens[req] - q_len;
    prefill_pass(p, req, h, context, p.seq_lens[req], /*self_pass=*/true, p.o, p.lse, p.query_start_loc[req], s);
  });

  if (plan.num_context_chunks == 0) return;
  // o = merge(context, new tokens), per request: the compacted and the output rows differ.
  parallel_for(
      num_prefills,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const int req = plan.prefill_reqs[static_cast<size_t>(i)];
          const int64_t out0 = int64_t{p.query_start_loc[req]} * p.num_heads;
          const int64_t ctx0 = int64_t{plan.prefill_rows[static_cast<size_t>(i)]} * p.num_heads;
          MergeAttnStatesParams m;
          m.out = p.o + out0 * dv;
          m.out_lse = p.lse + out0;
          m.prefix_o = plan.o_ctx.data() + ctx0 * dv;
          m.prefix_lse = plan.lse_ctx.data() + ctx0;
          m.suffix_o = p.o + out0 * dv;
          m.suffix_lse = p.lse + out0;
          m.num_tokens = p.query_start_loc[req + 1] - p.query_start_loc[req];
          m.num_heads = p.num_heads;
          m.head_size = dv;
          m.threads = 1;
          merge_attn_states(m);
        }
      },
      p.threads);
}

}  // namespace

void mla_attention(const MlaParams& p, MlaPlan& plan) {
  run_decodes(p, plan);
  run_prefills(p, plan);
}

}  // namespace attn::cpu
