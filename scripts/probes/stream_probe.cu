// How fast can one CTA stream from DRAM on sm_90a, by which copy mechanism, with how many bytes in
// flight, and with how many CTAs streaming at once? Each CTA (one per SM: its shared memory takes
// the SM) reads its own region once, after a read of 256 MB that leaves L2 cold and clean; a CTA's
// rate is its bytes over its own span (globaltimer), the total all bytes over the first start to
// the last end, the best of three runs. Modes: 1-D bulk copies (one thread, `slots` chunks in
// flight), 16-byte loads by 256 or 1024 threads, FLASHMLA's cache blocks (9 boxes of 64 x 64, 128-byte
// swizzle) and FLASH_ATTN's 16-token pages (boxes of 64 dims x 16 tokens of one head, shuffled
// pages). docs/PERF_NOTES.md, Version 47, has the H100's figures.
// With --l2, the same copies from L2 instead: every CTA reads a window that one untimed pass left
// in L2 (8 MB for the 1-D copies, 16 MB of K and V pages for FLASH_ATTN's boxes), each CTA from its
// own offset, so the rows say what the CTAs and the whole chip take from L2 (Version 54).
//
// With --fa, FLASH_ATTN's pages alone: the 2 KB boxes of mode 3 beside 4 KB boxes of a whole page
// of K or V in two layouts (modes 4, 5).
//
// With --spread, one CTA per SM only, twice: 16-byte loads, 1-D bulk copies with 64-192 KB in flight
// and FLASHMLA's cache blocks, with the slowest and the fastest CTA's rate (how evenly each
// mechanism shares the memory among the SMs; PERF_NOTES, FLASHMLA, fifty-fourth session).
//
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Ilib -I. \
//        scripts/probes/stream_probe.cu -o stream_probe -lcuda && ./stream_probe [--l2 | --fa | --spread] > probe.csv
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/mbarrier.cuh"
#include "kernels/common/tma.cuh"
#include "scripts/probes/probe_check.hpp"

using namespace attn::kern;

__device__ __forceinline__ uint64_t gtimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bulk_1d(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

extern __shared__ __align__(1024) uint8_t smem[];

// The one-thread ring of the copy modes: `n` units, `slots` in flight, unit i into slot i % slots
// and reissued into that slot as soon as its barrier completes. issue(s, i, bar) arrives on bar
// with the unit's bytes and issues its copies. Stamps times[2 * cta] = start, [2 * cta + 1] = end
// (ns).
template <class Issue>
__device__ void stream_ring(int n, int slots, uint64_t* times, Issue issue) {
  __shared__ __align__(8) uint64_t bars[32];
  for (int s = 0; s < slots; ++s) mbar_init(smem_addr(&bars[s]), 1);
  fence_barrier_init();
  const uint64_t t0 = gtimer();
  for (int i = 0; i < std::min(n, slots); ++i) issue(i, i, smem_addr(&bars[i]));
  for (int i = 0; i < n; ++i) {
    const int s = i % slots;
    mbar_wait(smem_addr(&bars[s]), (i / slots) & 1);
    if (i + slots < n) issue(s, i + slots, smem_addr(&bars[s]));
  }
  times[2 * blockIdx.x] = t0;
  times[2 * blockIdx.x + 1] = gtimer();
}

// Mode 0: 1-D bulk copies of `chunk` bytes, `slots` in flight, one thread.
__global__ void k_bulk1d(const uint8_t* src, size_t per_cta, int chunk, int slots, uint64_t* times) {
  if (threadIdx.x != 0) return;
  const uint8_t* base = src + per_cta * blockIdx.x;
  stream_ring(static_cast<int>(per_cta / chunk), slots, times, [&](int s, int i, uint32_t bar) {
    mbar_arrive_expect_tx(bar, chunk);
    bulk_1d(smem_addr(smem + size_t(s) * chunk), base + size_t(i) * chunk, chunk, bar);
  });
}

// Mode 0 from L2 (--l2): unit i of CTA c reads the window's bytes at (c * 64 KB + i * chunk) mod window
// (a power of two: a 64-bit remainder by a run-time value took the issuing thread ~290 ns per copy).
__global__ void k_bulk1d_l2(const uint8_t* src, uint32_t window, size_t per_cta, int chunk, int slots, uint64_t* times) {
  if (threadIdx.x != 0) return;
  stream_ring(static_cast<int>(per_cta / chunk), slots, times, [&](int s, int i, uint32_t bar) {
    mbar_arrive_expect_tx(bar, chunk);
    const uint32_t off = (blockIdx.x * 65536u + static_cast<uint32_t>(i) * chunk) & (window - 1);
    bulk_1d(smem_addr(smem + size_t(s) * chunk), src + off, chunk, bar);
  });
}

// Mode 1: 16-byte loads, `unroll` in flight per thread, blockDim threads.
template <int U>
__global__ void k_ldg(const uint8_t* src, size_t per_cta, uint64_t* times, uint32_t* sink) {
  const uint4* base = reinterpret_cast<const uint4*>(src + per_cta * blockIdx.x);
  const size_t n = per_cta / 16;
  __syncthreads();
  const uint64_t t0 = gtimer();
  uint32_t acc = 0;
  for (size_t i = threadIdx.x; i < n; i += size_t(blockDim.x) * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t k = i + size_t(u) * blockDim.x;
      if (k < n) asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(base + k));
      else v[u] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    times[2 * blockIdx.x] = t0;
    times[2 * blockIdx.x + 1] = gtimer();
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

// Mode 2: the MLA latent cache: [rows][576] bf16, blocks of 64 rows = 9 boxes of 64 x 64 (128-byte
// swizzle), `slots` blocks in flight; CTA c streams blocks c * per_blocks ...
// A block as one copy of a 4-D map (64 columns, 64 rows or 9 column blocks, the other, blocks).
__global__ void k_mla_one(const __grid_constant__ CUtensorMap map, int per_blocks, int slots, uint64_t* times) {
  if (threadIdx.x != 0) return;
  constexpr uint32_t kBlock = 64 * 576 * 2;
  stream_ring(per_blocks, slots, times, [&](int s, int blk, uint32_t bar) {
    mbar_arrive_expect_tx(bar, kBlock);
    tma_load_4d(smem_addr(smem + size_t(s) * kBlock), &map, 0, 0, 0, blockIdx.x * per_blocks + blk, bar);
  });
}

__global__ void k_mla(const __grid_constant__ CUtensorMap map, int per_blocks, int slots, uint64_t* times) {
  if (threadIdx.x != 0) return;
  constexpr uint32_t kBlock = 64 * 576 * 2;
  stream_ring(per_blocks, slots, times, [&](int s, int blk, uint32_t bar) {
    mbar_arrive_expect_tx(bar, kBlock);
    const int row = (blockIdx.x * per_blocks + blk) * 64;
    for (int c = 0; c < 9; ++c) tma_load_2d(smem_addr(smem + size_t(s) * kBlock + c * 8192), &map, c * 64, row, bar);
  });
}

// Modes 3-5: the FLASH_ATTN paged cache, [pages][16 tokens][8 heads][128] bf16 for K and for V; CTA
// c streams head c % 8 over its list of (shuffled) pages, stages of 64 keys (4 pages of K and V),
// `slots` stages in flight. Each stage's four page indices are loaded from global memory as it is
// issued (a real producer loads them a stage ahead). How a page of K or V arrives:
// - kBoxes2K (mode 3, FLASH_ATTN's tiles): 2 boxes of 64 dims x 16 tokens (2 KB), 16 per stage;
// - kSwizzled4K (mode 4): one 4 KB box of both 64-dim halves of the page's 16 rows, 128-byte swizzle,
//   landing [half][16 rows][128 B] (a page-major tile: the layout P V's N-major V operand can read
//   with LBO = 2 KB);
// - kCoreMatrices4K (mode 5): one 4 KB box of the 8 x 16-byte core matrices of the no-swizzle K-major
//   layout, landing [row group of 8][16 chunks][8 rows][16 B] (LBO 128, SBO 2 KB: a whole tile of
//   such pages is one descriptor's operand for Q K^T), 16-byte rows, so the engine walks 256 per box.
enum PageCopy { kBoxes2K, kSwizzled4K, kCoreMatrices4K };
template <PageCopy kCopy>
__global__ void k_fa(const __grid_constant__ CUtensorMap kmap, const __grid_constant__ CUtensorMap vmap,
                     const int* pages, int per_pages, int slots, uint64_t* times) {
  if (threadIdx.x != 0) return;
  constexpr uint32_t kStage = 64 * 128 * 2 * 2;
  const int head = blockIdx.x % 8;
  const int* list = pages + size_t(blockIdx.x) * per_pages;
  stream_ring(per_pages / 4, slots, times, [&](int s, int st, uint32_t bar) {
    mbar_arrive_expect_tx(bar, kStage);
    uint8_t* dst = smem + size_t(s) * kStage;
    for (int p = 0; p < 4; ++p) {
      const int page = list[st * 4 + p];
      for (int t = 0; t < 2; ++t) {  // K, then V 16 KB further
        const CUtensorMap* map = t ? &vmap : &kmap;
        uint8_t* at = dst + t * 16384 + p * 4096;
        if (kCopy == kBoxes2K) {
          for (int h = 0; h < 2; ++h) tma_load_4d(smem_addr(at + h * 2048), map, h * 64, head, 0, page, bar);
        } else if (kCopy == kSwizzled4K) {
          tma_load_5d(smem_addr(at), map, 0, 0, 0, head, page, bar);
        } else {
          tma_load_5d(smem_addr(at), map, 0, 0, head * 16, 0, page, bar);
        }
      }
    }
  });
}

// Where modes 4 and 5 land a page: page 0, head 3, copied into shared memory and out to `out` (4 KB).
template <PageCopy kCopy>
__global__ void k_fa_layout(const __grid_constant__ CUtensorMap map, uint16_t* out) {
  __shared__ __align__(8) uint64_t bar;
  if (threadIdx.x == 0) {
    mbar_init(smem_addr(&bar), 1);
    fence_barrier_init();
    mbar_arrive_expect_tx(smem_addr(&bar), 4096);
    if (kCopy == kCoreMatrices4K) tma_load_5d(smem_addr(smem), &map, 0, 0, 3 * 16, 0, 0, smem_addr(&bar));
    else tma_load_5d(smem_addr(smem), &map, 0, 0, 0, 3, 0, smem_addr(&bar));
  }
  __syncthreads();
  mbar_wait(smem_addr(&bar), 0);
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) out[i] = reinterpret_cast<const uint16_t*>(smem)[i];
}

__global__ void k_flush(const uint4* buf, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint4 v = buf[i];
    acc ^= v.x ^ v.w;
  }
  if (acc == 0x12345678u) sink[1] = acc;
}

static PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult q{};
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
}
static CUtensorMap make_map(const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                            const cuuint32_t* box, CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B,
                            CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  CUtensorMap m{};
  cuuint32_t e[5] = {1, 1, 1, 1, 1};
  const CUresult r = encoder()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(base), dims, strides, box, e,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::printf("encode failed %d\n", int(r));
    std::exit(1);
  }
  return m;
}

struct Result {
  double per_cta_gbs;  // mean over CTAs of bytes / own span
  double total_gbs;    // all bytes / (last end - first start)
  double min_cta_gbs = 0, max_cta_gbs = 0;  // the slowest and the fastest CTA of that run
};

int main(int argc, char** argv) {
  const bool l2 = argc > 1 && std::string(argv[1]) == "--l2";
  const bool fa_only = argc > 1 && std::string(argv[1]) == "--fa";  // the page modes (3-5) alone
  // --spread: one CTA per SM only, 16-byte loads beside the copy engine's 1-D chunks and FLASHMLA's
  // cache blocks: how evenly each mechanism shares the memory among the SMs (the min and max columns).
  const bool spread = argc > 1 && std::string(argv[1]) == "--spread";
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("device %s, %d SMs\n", prop.name, sms);
  const size_t per_cta = size_t(16) << 20;  // 16 MB per CTA
  const size_t total = per_cta * sms;
  uint8_t* src = nullptr;
  CK(cudaMalloc(&src, total));
  CK(cudaMemset(src, 0x3c, total));
  const size_t flush_bytes = size_t(256) << 20;
  uint4* flush = nullptr;
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMemset(flush, 1, flush_bytes));
  uint64_t* times = nullptr;
  CK(cudaMalloc(&times, 2 * sizeof(uint64_t) * sms));
  uint32_t* sink = nullptr;
  CK(cudaMalloc(&sink, 64));
  CK(cudaFuncSetAttribute(k_bulk1d, cudaFuncAttributeMaxDynamicSharedMemorySize, 226 * 1024));
  CK(cudaFuncSetAttribute(k_bulk1d_l2, cudaFuncAttributeMaxDynamicSharedMemorySize, 226 * 1024));
  CK(cudaFuncSetAttribute(k_mla, cudaFuncAttributeMaxDynamicSharedMemorySize, 226 * 1024));
  CK(cudaFuncSetAttribute(k_mla_one, cudaFuncAttributeMaxDynamicSharedMemorySize, 226 * 1024));
  CK(cudaFuncSetAttribute(k_fa<kBoxes2K>, cudaFuncAttributeMaxDynamicSharedMemorySize, 226 * 1024));
  CK(cudaFuncSetAttribute(k_fa<kSwizzled4K>, cudaFuncAttributeMaxDynamicSharedMemorySize, 226 * 1024));
  CK(cudaFuncSetAttribute(k_fa<kCoreMatrices4K>, cudaFuncAttributeMaxDynamicSharedMemorySize, 226 * 1024));
  CK(cudaFuncSetAttribute(k_ldg<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  CK(cudaFuncSetAttribute(k_ldg<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));

  // MLA map over the whole buffer: rows of 576 bf16.
  const cuuint64_t mla_rows = total / 1152;
  const cuuint64_t mdims[2] = {576, mla_rows}, mstr[1] = {1152};
  const cuuint32_t mbox[2] = {64, 64};
  const CUtensorMap mla_map = make_map(src, 2, mdims, mstr, mbox);
  const int mla_per_blocks = static_cast<int>(per_cta / 73728);
  // FA maps: K in the first half of the buffer, V in the second; pages of 32 KB.
  const size_t page_bytes = 16 * 8 * 128 * 2;
  const int pool = static_cast<int>(total / 2 / page_bytes);
  const cuuint64_t fdims[4] = {128, 8, 16, cuuint64_t(pool)}, fstr[3] = {256, 2048, page_bytes};
  const cuuint32_t fbox[4] = {64, 1, 16, 1};
  const CUtensorMap kmap = make_map(src, 4, fdims, fstr, fbox);
  const CUtensorMap vmap = make_map(src + total / 2, 4, fdims, fstr, fbox);
  // 4 KB boxes (modes 4, 5): dims (64 dims, 16 slots, 2 halves, 8 heads, pages) with the 128-byte
  // swizzle, and (8 dims, 8 slots, 128 chunks of 8 dims over the 8 heads, 2 groups of 8 slots, pages)
  // without it. Strides in bytes, not in increasing order.
  const cuuint64_t sdims[5] = {64, 16, 2, 8, cuuint64_t(pool)}, sstr[4] = {2048, 128, 256, page_bytes};
  const cuuint32_t sbox[5] = {64, 16, 2, 1, 1};
  const CUtensorMap kmap_swz = make_map(src, 5, sdims, sstr, sbox);
  const CUtensorMap vmap_swz = make_map(src + total / 2, 5, sdims, sstr, sbox);
  const cuuint64_t cdims[5] = {8, 8, 128, 2, cuuint64_t(pool)}, cstr[4] = {2048, 16, 16384, page_bytes};
  const cuuint32_t cbox[5] = {8, 8, 16, 2, 1};
  const CUtensorMap kmap_cm = make_map(src, 5, cdims, cstr, cbox, CU_TENSOR_MAP_SWIZZLE_NONE);
  const CUtensorMap vmap_cm = make_map(src + total / 2, 5, cdims, cstr, cbox, CU_TENSOR_MAP_SWIZZLE_NONE);
  // Each group of 8 CTAs (one per head) shares a list of pages, shuffled over the pool; a CTA
  // streams 1024 pages of its head (4 KB of K and 4 KB of V each: 8 MB).
  const int fa_per_pages = 1024;
  std::vector<int> perm(pool);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int> lists(size_t(sms) * fa_per_pages);
  for (int c = 0; c < sms; ++c)
    for (int p = 0; p < fa_per_pages; ++p) lists[size_t(c) * fa_per_pages + p] = perm[(size_t(c / 8) * fa_per_pages + p) % pool];
  int* dlists = nullptr;
  CK(cudaMalloc(&dlists, lists.size() * sizeof(int)));
  CK(cudaMemcpy(dlists, lists.data(), lists.size() * sizeof(int), cudaMemcpyHostToDevice));

  auto measure = [&](int ctas, size_t bytes_per_cta, auto launch) {
    Result best{0, 0};
    if (l2) launch();  // the window into L2 (untimed)
    for (int rep = 0; rep < 3; ++rep) {
      if (!l2) k_flush<<<sms * 4, 512>>>(flush, flush_bytes / 16, sink);
      launch();
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      std::vector<uint64_t> t(2 * ctas);
      CK(cudaMemcpy(t.data(), times, t.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
      double sum = 0, slowest = 1e30, fastest = 0;
      uint64_t lo = UINT64_MAX, hi = 0;
      for (int c = 0; c < ctas; ++c) {
        const double gbs = double(bytes_per_cta) / double(t[2 * c + 1] - t[2 * c]);
        sum += gbs;
        slowest = std::min(slowest, gbs);
        fastest = std::max(fastest, gbs);
        lo = std::min(lo, t[2 * c]);
        hi = std::max(hi, t[2 * c + 1]);
      }
      Result r{sum / ctas, double(bytes_per_cta) * ctas / double(hi - lo), slowest, fastest};
      if (r.total_gbs > best.total_gbs) best = r;
    }
    return best;
  };
  const int counts[] = {1, 8, 32, 66, 100, sms};
  std::printf("mode,detail,in_flight_kb,ctas,per_cta_gbs,total_gbs,min_cta_gbs,max_cta_gbs\n");
  auto row = [&](const char* mode, const char* detail, int kb, int ctas, Result r) {
    std::printf("%s,%s,%d,%d,%.1f,%.1f,%.1f,%.1f\n", mode, detail, kb, ctas, r.per_cta_gbs, r.total_gbs, r.min_cta_gbs,
                r.max_cta_gbs);
    std::fflush(stdout);
  };
  if (spread) {
    for (int rep = 0; rep < 2; ++rep) {
      row("ldg", "u4x1024", 64, sms, measure(sms, per_cta, [&] {
            k_ldg<4><<<sms, 1024, 200 * 1024>>>(src, per_cta, times, sink);
          }));
      for (int kb : {64, 128, 192}) {
        row("bulk1d", "chunk16k", kb, sms, measure(sms, per_cta, [&] {
              k_bulk1d<<<sms, 32, size_t(kb / 16) * 16384>>>(src, per_cta, 16384, kb / 16, times);
            }));
      }
      for (int slots : {2, 3}) {
        row("mla_boxes", "9x8KB", slots * 72, sms, measure(sms, size_t(mla_per_blocks) * 73728, [&] {
              k_mla<<<sms, 32, size_t(slots) * 73728>>>(mla_map, mla_per_blocks, slots, times);
            }));
      }
      // The same blocks: other L2 promotions; one 4-D copy per block in the products' layout
      // ([9 column blocks][64 rows][128 B], the 9 boxes' order); one in row order ([64 rows][9][128 B],
      // the order of the bytes in memory).
      const cuuint64_t nblk = total / 73728;
      const CUtensorMap mla_p0 = make_map(src, 2, mdims, mstr, mbox, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_NONE);
      const CUtensorMap mla_p128 = make_map(src, 2, mdims, mstr, mbox, CU_TENSOR_MAP_SWIZZLE_128B,
                                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
      const cuuint64_t odims[4] = {64, 64, 9, nblk}, ostr[3] = {1152, 128, 73728};
      const cuuint32_t obox[4] = {64, 64, 9, 1};
      const CUtensorMap mla_one = make_map(src, 4, odims, ostr, obox);
      const cuuint64_t rdims[4] = {64, 9, 64, nblk}, rstr[3] = {128, 1152, 73728};
      const cuuint32_t rbox[4] = {64, 9, 64, 1};
      const CUtensorMap mla_rows = make_map(src, 4, rdims, rstr, rbox);
      const size_t mla_bytes = size_t(mla_per_blocks) * 73728;
      row("mla_boxes", "9x8KB_promo_none", 144, sms, measure(sms, mla_bytes, [&] {
            k_mla<<<sms, 32, 2 * 73728>>>(mla_p0, mla_per_blocks, 2, times);
          }));
      row("mla_boxes", "9x8KB_promo_128", 144, sms, measure(sms, mla_bytes, [&] {
            k_mla<<<sms, 32, 2 * 73728>>>(mla_p128, mla_per_blocks, 2, times);
          }));
      row("mla_one", "72KB_cb_major", 144, sms, measure(sms, mla_bytes, [&] {
            k_mla_one<<<sms, 32, 2 * 73728>>>(mla_one, mla_per_blocks, 2, times);
          }));
      row("mla_one", "72KB_row_major", 144, sms, measure(sms, mla_bytes, [&] {
            k_mla_one<<<sms, 32, 2 * 73728>>>(mla_rows, mla_per_blocks, 2, times);
          }));
    }
    return 0;
  }
  if (l2) {
    // K and V pages of an L2-resident pool: 256 pages (8 MB of K, 8 MB of V), each CTA's 1024 a
    // walk over them from its own start.
    const int l2_pages = 256;
    for (int c = 0; c < sms; ++c)
      for (int p = 0; p < fa_per_pages; ++p) lists[size_t(c) * fa_per_pages + p] = perm[(size_t(c) * 37 + p) % l2_pages];
    CK(cudaMemcpy(dlists, lists.data(), lists.size() * sizeof(int), cudaMemcpyHostToDevice));
    const uint32_t window = 8u << 20;  // a power of two
    const size_t l2_per_cta = size_t(8) << 20;
    for (int ctas : {1, 32, 66, 100, sms}) {
      for (int chunk : {2048, 4096, 16384}) {
        for (int kb : {64, 128, 192}) {
          const int slots = kb * 1024 / chunk;
          if (slots < 1 || slots > 32) continue;
          char d[32];
          std::snprintf(d, sizeof d, "l2_chunk%dk", chunk / 1024);
          row("bulk1d", d, kb, ctas, measure(ctas, l2_per_cta, [&] {
                k_bulk1d_l2<<<ctas, 32, size_t(slots) * chunk>>>(src, window, l2_per_cta, chunk, slots, times);
              }));
        }
      }
      for (int slots : {2, 4, 6}) {
        row("fa_pages", "l2_16x2KB", slots * 32, ctas, measure(ctas, size_t(fa_per_pages) * 8192, [&] {
              k_fa<kBoxes2K><<<ctas, 32, size_t(slots) * 32768>>>(kmap, vmap, dlists, fa_per_pages, slots, times);
            }));
      }
    }
    return 0;
  }
  if (fa_only) {
    // Page 0 of K holds each element's index in the page ([16 slots][8 heads][128 dims]); the two
    // maps must land head 3 where the layouts above say.
    std::vector<uint16_t> pat(16 * 8 * 128);
    std::iota(pat.begin(), pat.end(), uint16_t{0});
    CK(cudaMemcpy(src, pat.data(), pat.size() * 2, cudaMemcpyHostToDevice));
    uint16_t* dout = nullptr;
    CK(cudaMalloc(&dout, 4096));
    CK(cudaFuncSetAttribute(k_fa_layout<kSwizzled4K>, cudaFuncAttributeMaxDynamicSharedMemorySize, 8192));
    CK(cudaFuncSetAttribute(k_fa_layout<kCoreMatrices4K>, cudaFuncAttributeMaxDynamicSharedMemorySize, 8192));
    for (int cm = 0; cm < 2; ++cm) {
      if (cm) k_fa_layout<kCoreMatrices4K><<<1, 128, 8192>>>(kmap_cm, dout);
      else k_fa_layout<kSwizzled4K><<<1, 128, 8192>>>(kmap_swz, dout);
      CK(cudaDeviceSynchronize());
      std::vector<uint16_t> got(2048);
      CK(cudaMemcpy(got.data(), dout, 4096, cudaMemcpyDeviceToHost));
      int bad = 0;
      for (int slot = 0; slot < 16; ++slot)
        for (int dim = 0; dim < 128; ++dim) {
          const int c = dim / 8, e = dim % 8;
          const int byte = cm ? (slot / 8) * 2048 + c * 128 + (slot % 8) * 16 + e * 2
                              : (c / 8) * 2048 + slot * 128 + (((c % 8) ^ (slot % 8)) << 4) + e * 2;
          bad += got[byte / 2] != uint16_t(slot * 1024 + 3 * 128 + dim);
        }
      std::printf("layout,%s,%s\n", cm ? "8x4KB_cm" : "8x4KB_swz", bad ? "WRONG" : "as described");
    }
    for (int ctas : {1, 32, 66, 80, 100, sms}) {
      for (int slots : {2, 3, 4, 6}) {
        const size_t bytes = size_t(fa_per_pages) * 8192;
        row("fa_pages", "16x2KB", slots * 32, ctas, measure(ctas, bytes, [&] {
              k_fa<kBoxes2K><<<ctas, 32, size_t(slots) * 32768>>>(kmap, vmap, dlists, fa_per_pages, slots, times);
            }));
        row("fa_pages", "8x4KB_swz", slots * 32, ctas, measure(ctas, bytes, [&] {
              k_fa<kSwizzled4K><<<ctas, 32, size_t(slots) * 32768>>>(kmap_swz, vmap_swz, dlists, fa_per_pages, slots, times);
            }));
        row("fa_pages", "8x4KB_cm", slots * 32, ctas, measure(ctas, bytes, [&] {
              k_fa<kCoreMatrices4K><<<ctas, 32, size_t(slots) * 32768>>>(kmap_cm, vmap_cm, dlists, fa_per_pages, slots, times);
            }));
      }
    }
    return 0;
  }
  for (int ctas : counts) {
    for (int chunk : {4096, 16384, 65536}) {
      for (int kb : {32, 64, 128, 192}) {
        const int slots = kb * 1024 / chunk;
        if (slots < 1 || slots > 32) continue;
        char d[32];
        std::snprintf(d, sizeof d, "chunk%dk", chunk / 1024);
        row("bulk1d", d, kb, ctas, measure(ctas, per_cta, [&] {
              k_bulk1d<<<ctas, 32, size_t(slots) * chunk>>>(src, per_cta, chunk, slots, times);
            }));
      }
    }
    for (int threads : {256, 1024}) {
      char d[32];
      std::snprintf(d, sizeof d, "u4x%d", threads);
      row("ldg", d, threads * 4 * 16 / 1024, ctas, measure(ctas, per_cta, [&] {
            k_ldg<4><<<ctas, threads, 200 * 1024>>>(src, per_cta, times, sink);
          }));
      std::snprintf(d, sizeof d, "u8x%d", threads);
      row("ldg", d, threads * 8 * 16 / 1024, ctas, measure(ctas, per_cta, [&] {
            k_ldg<8><<<ctas, threads, 200 * 1024>>>(src, per_cta, times, sink);
          }));
    }
    for (int slots : {1, 2, 3}) {
      row("mla_boxes", "9x8KB", slots * 72, ctas, measure(ctas, size_t(mla_per_blocks) * 73728, [&] {
            k_mla<<<ctas, 32, size_t(slots) * 73728>>>(mla_map, mla_per_blocks, slots, times);
          }));
    }
    for (int slots : {2, 3, 4, 6}) {
      row("fa_pages", "16x2KB", slots * 32, ctas, measure(ctas, size_t(fa_per_pages) * 8192, [&] {
            k_fa<kBoxes2K><<<ctas, 32, size_t(slots) * 32768>>>(kmap, vmap, dlists, fa_per_pages, slots, times);
          }));
    }
  }
  return 0;
}
