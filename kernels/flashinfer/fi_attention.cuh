#pragma once
// Device pieces every FLASHINFER kernel shares: the key range of a work item in the CSR page
// table, the address of a key, the score transform fixed at plan time, and the store of one
// output row (direct, or as a split partial for merge_attn_states).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/common/ptx.cuh"
#include "kernels/flashinfer/fi_params.hpp"

namespace attn::fi {

using namespace attn::kern;

// Keys of request r and the slice [begin, end) that kv chunk `chunk` covers.
struct FiKeyRange {
  int kv_len, begin, end;
};
__device__ __forceinline__ FiKeyRange chunk_keys(const FiAttentionParams& p, int r, int chunk) {
  const int pages = p.kv.indptr[r + 1] - p.kv.indptr[r];
  FiKeyRange k;
  k.kv_len = pages == 0 ? 0 : (pages - 1) * p.kv.page_size + p.kv.last_page_len[r];
  const int chunk_len = *p.kv_chunk_pages * p.kv.page_size;
  k.begin = min(k.kv_len, chunk * chunk_len);
  k.end = min(k.kv_len, k.begin + chunk_len);
  return k;
}

// Addresses of the K/V rows of the next key tiles, in shared memory (FlashInfer's kv-offset
// prefetch): thread i owns row i of every tile. It reads its row's page entry (fetch) one
// iteration before the tile's copies are issued and stores the address (store) at the end of
// that iteration, so neither the index load nor the page division sits between a tile landing
// and the next copies. Table n % kStages holds tile n; tile n's table is written while tile
// n - kStages's copies are done by every thread (a barrier separates them).
template <int kRows, int kStages>
struct RowAddressTable {
  int64_t* addr;  // [kStages][kRows] bytes from the K (or V) base: this kv head, dim 0
  int row;        // the row this thread fills; >= kRows: none

  // Page id of this thread's row in tile n (key key0 + n * kRows + row of the request whose
  // pages start at indices[page_first]) and its slot; -1 past key_end or past the tiles.
  __device__ __forceinline__ int fetch(const FiPagedKv& kv, int page_first, int key0, int key_end, int n,
                                       int num_tiles, uint32_t& slot) const {
    const int key = key0 + n * kRows + row;
    slot = 0;
    if (row >= kRows || n >= num_tiles || key >= key_end) return -1;
    uint32_t page;
    kv.page_size_div.divmod(static_cast<uint32_t>(key), page, slot);
    return kv.indices[page_first + static_cast<int>(page)];
  }
  // A row past the keys keeps address 0: its copy zero-fills without reading.
  __device__ __forceinline__ void store(const FiPagedKv& kv, int n, int page_id, uint32_t slot, int kvh,
                                        int elem_bytes) const {
    if (row >= kRows) return;
    addr[(n % kStages) * kRows + row] =
        page_id < 0 ? 0
                    : (static_cast<int64_t>(page_id) * kv.page_stride + kvh * kv.head_stride +
                       static_cast<int64_t>(slot) * kv.slot_stride) * elem_bytes;
  }
  __device__ __forceinline__ const int64_t* tile(int n) const { return addr + (n % kStages) * kRows; }
};

// Raw q.k -> score in log2 units. q (or the raw product) is multiplied by `q`; with a soft cap
// the result is cap * log2e * tanh(x), i.e. cap * tanh(logit / cap) in log2 units.
struct ScoreScale {
  float q;
  float cap2;
  float v;  // multiplies the normalized output (fp8 V scale)
  __device__ __forceinline__ float apply(float x) const { return cap2 > 0.f ? cap2 * tanhf(x) : x; }
};
__device__ __forceinline__ ScoreScale score_scale(const FiAttentionParams& p) {
  const bool cap = p.logits_soft_cap > 0.f;
  return {p.sm_scale * p.k_scale * (cap ? 1.f / p.logits_soft_cap : kLog2e), cap ? p.logits_soft_cap * kLog2e : 0.f,
          p.v_scale};
}

// Stores N consecutive dims [dim0, dim0 + N) of one normalized output row (query token qi of
// request r, head `head`) and, if write_lse, its base-2 LSE: into O when the request has a
// single kv chunk, else into its partial row.
template <class Element, int D, int N>
__device__ __forceinline__ void write_row(const FiAttentionParams& p, int r, int num_chunks, int chunk, int qi,
                                          int head, const float (&out)[N], float lse2, int dim0, bool write_lse) {
  static_assert(N % 2 == 0, "pairs");
  if (num_chunks == 1) {
    const int64_t row = (static_cast<int64_t>(p.qo_indptr[r]) + qi) * p.num_qo_heads + head;
    if (p.o_is_f32) {
      float* dst = static_cast<float*>(p.o) + row * D + dim0;
#pragma unroll
      for (int i = 0; i < N; i += 2) *reinterpret_cast<float2*>(dst + i) = make_float2(out[i], out[i + 1]);
    } else {
      Element* dst = static_cast<Element*>(p.o) + row * D + dim0;
#pragma unroll
      for (int i = 0; i < N; i += 2) *reinterpret_cast<uint32_t*>(dst + i) = pack2<Element>(out[i], out[i + 1]);
    }
    if (write_lse && p.lse) p.lse[row] = lse2;
  } else {
    const int64_t prow = (static_cast<int64_t>(p.o_indptr[r]) + static_cast<int64_t>(qi) * num_chunks + chunk) *
                             p.num_qo_heads + head;
    float* dst = p.tmp_o + prow * D + dim0;
#pragma unroll
    for (int i = 0; i < N; i += 2) *reinterpret_cast<float2*>(dst + i) = make_float2(out[i], out[i + 1]);
    if (write_lse) p.tmp_lse[prow] = lse2;
  }
}

}  // namespace attn::fi
