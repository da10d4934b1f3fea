// FLASHMLA on the GPU against the float64 reference: random values, ragged batches, shuffled
// blocks, NaN page tails (the device fill), poisoned outputs before every run. The reference
// up-projects K/V per head, so the larger cases check a sample of (request, head) pairs.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backends/flash_attn/flash_attn_plan.hpp"
#include "backends/flashmla/flashmla_backend.hpp"
#include "backends/flashmla/mla_metadata.hpp"
#include "core/error.hpp"
#include "attention_alone.hpp"
#include "gpu/gpu_test_util.hpp"
#include "nan_key.hpp"
#include "kernels/flashmla/flashmla_launch.hpp"
#include "metadata/common.hpp"
#include "reference/reference.hpp"
#include "validate/validate.hpp"

namespace attn {
namespace {

// The MLA prefill's attention on the sm_90a kernel runs qk 192 / v 128 unless ATTN_FA_SM90_V128=0
// (or ATTN_FA_SM90=0) pads V to 192.
bool v128_expected() {
  for (const char* name : {"ATTN_FA_SM90_V128", "ATTN_FA_SM90"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && std::strcmp(v, "0") == 0) return false;
  }
  return true;
}

AttentionSpec mla_spec(int heads, DType dtype = DType::bf16) {
  AttentionSpec s;
  s.use_mla = true;
  s.mla = MlaDims{};
  s.num_q_heads = heads;
  s.num_kv_heads = 1;
  s.head_size_qk = s.mla.qk_head_dim();
  s.head_size_v = s.mla.v_head_dim;
  s.dtype = s.kv_cache_dtype = dtype;
  s.block_size = 64;
  s.scale = 1.0f / std::sqrt(static_cast<float>(s.mla.qk_head_dim()));
  return s;
}

Batch make(const AttentionSpec& spec, std::vector<RequestShape> requests, uint64_t seed = 11) {
  BatchShape shape;
  shape.label = "test";
  shape.requests = std::move(requests);
  shape.block_allocation = BlockAllocation::shuffled;
  return make_batch(spec, shape, seed);
}

using testing::Outcome;

// Create, plan, poison, run, fetch; validated on max_pairs sampled (request, head) pairs (0 = all).
Outcome run_case(const Batch& b, int64_t max_pairs = 0, const FlashMlaOptions& options = {}) {
  return testing::run_and_validate(*make_flashmla_backend(options), b, RunOptions{}, max_pairs);
}

std::vector<RequestShape> repeat(int n, int context, int q_len) { return std::vector<RequestShape>(n, {context, q_len}); }

// Every decode kernel the device runs: mma.sync, and on sm_90 the seesaw (64 rows) and the narrow
// (keys as the MMA rows) wgmma kernels, the narrow one only for requests of at most 32 packed rows.
std::vector<FlashMlaKernel> decode_kernels(int rows = 16) {
  std::vector<FlashMlaKernel> k = {FlashMlaKernel::mma_sync};
  if (testing::sm90_device()) {
    k.push_back(FlashMlaKernel::wgmma);
    if (rows <= kFlashMlaNarrowMaxRows) k.push_back(FlashMlaKernel::wgmma_narrow);
  }
  return k;
}


TEST(FlashMlaGpu, DeepseekTp8DecodeMixedLengths) {
  ATTN_REQUIRE_CUDA_DEVICE();
  // mla_decode_deepseek's shape: 8 at 512 + 8 at 1088 (ends mid-block), 16 heads.
  auto reqs = repeat(8, 512, 1);
  for (const auto& r : repeat(8, 1088, 1)) reqs.push_back(r);
  for (const FlashMlaKernel k : decode_kernels()) {
    FlashMlaOptions o;
    o.decode_kernel = k;
    const Outcome r = run_case(make(mla_spec(16), reqs), 64, o);
    EXPECT_VALID(r);
  }
}

TEST(FlashMlaGpu, SplitAndUnsplitRequestsInOneLaunch) {
  ATTN_REQUIRE_CUDA_DEVICE();
  // One long request is cut into many pieces, the short ones stay whole; a request of one key.
  std::vector<RequestShape> reqs = {{20000, 1}, {5, 1}, {0, 1}, {700, 1}, {63, 1}, {64, 1}, {3000, 1}};
  const Batch b = make(mla_spec(16), reqs);
  for (const FlashMlaKernel k : decode_kernels()) {
    FlashMlaOptions o;
    o.decode_kernel = k;
    const Outcome r = run_case(b, 48, o);
    EXPECT_VALID(r);
    EXPECT_NE(r.plan.find("split_reqs="), std::string::npos);
    EXPECT_EQ(r.plan.find("split_reqs=0 "), std::string::npos) << r.plan;
  }
}

TEST(FlashMlaGpu, Decode128HeadsTwoMBlocks) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const Outcome r = run_case(make(mla_spec(128), {{1500, 1}, {4000, 1}, {33, 1}}), 24);
  EXPECT_VALID(r);
}

TEST(FlashMlaGpu, TwoTokenDecodeRaggedContexts) {
  ATTN_REQUIRE_CUDA_DEVICE();
  // q_len 2: the first token must not see the second (causal between them); 1-key-context and
  // block-boundary lengths.
  for (const FlashMlaKernel k : decode_kernels(32)) {
    FlashMlaOptions o;
    o.decode_kernel = k;
    const Outcome r = run_case(make(mla_spec(16), {{0, 2}, {1, 2}, {62, 2}, {126, 2}, {2049, 2}, {9000, 2}}), 48, o);
    EXPECT_VALID(r);
    // 8 heads x 2 tokens: 16 rows, the narrow kernel's N = 16 with two query tokens.
    const Outcome r8 = run_case(make(mla_spec(8), {{0, 2}, {63, 2}, {700, 2}, {5000, 2}}), 16, o);
    EXPECT_VALID(r8);
    if (k == FlashMlaKernel::wgmma_narrow) continue;  // 256 rows
    const Outcome r128 = run_case(make(mla_spec(128), {{300, 2}, {5000, 2}}), 16, o);
    EXPECT_VALID(r128);
  }
}

// The sm_90a kernel: key counts around its 64-key blocks (the NaN page tail inside the last
// one), an empty request, an odd and an even number of blocks per piece, a request split into
// pieces; q_len 2 with 32 heads fills 64 rows.
TEST(FlashMlaGpu, WgmmaKernelTileEdgesAndSplits) {
  ATTN_REQUIRE_CUDA_DEVICE();
  if (!testing::sm90_device()) GTEST_SKIP() << "the wgmma MLA kernel needs an sm_90 device";
  std::vector<RequestShape> reqs = {{0, 1}, {1, 1}, {31, 1}, {32, 1}, {33, 1}, {63, 1}, {64, 1}, {65, 1}, {97, 1}, {12000, 1}};
  const Outcome r = run_case(make(mla_spec(64), reqs), 40);
  EXPECT_VALID(r);
  EXPECT_NE(r.plan.find("decode_kernel=wgmma"), std::string::npos) << r.plan;
  EXPECT_EQ(r.plan.find("split_reqs=0 "), std::string::npos) << r.plan;
  const Outcome r2 = run_case(make(mla_spec(32), {{0, 2}, {30, 2}, {62, 2}, {200, 2}, {4097, 2}}), 40);
  EXPECT_VALID(r2);
  EXPECT_NE(r2.plan.find("decode_kernel=wgmma"), std::string::npos) << r2.plan;
  EXPECT_EQ(r.plan.find("decode_kernel=wgmma.narrow"), std::string::npos) << r.plan;
  // The automatic choice takes the narrow kernel for 16 rows and 32 (16 heads x q_len 2), unless
  // ATTN_FLASHMLA_NARROW=0 keeps the seesaw kernel (rows padded to 64).
  const char* narrow_env = std::getenv("ATTN_FLASHMLA_NARROW");
  const std::string small_kernel =
      narrow_env != nullptr && std::strcmp(narrow_env, "0") == 0 ? "decode_kernel=wgmma " : "decode_kernel=wgmma.narrow";
  const Outcome r16 = run_case(make(mla_spec(16), {{0, 1}, {33, 1}, {5000, 1}}), 32);
  EXPECT_VALID(r16);
  EXPECT_NE((r16.plan + " ").find(small_kernel), std::string::npos) << r16.plan;
  const Outcome r32 = run_case(make(mla_spec(16), {{100, 2}}), 16);
  EXPECT_NE((r32.plan + " ").find(small_kernel), std::string::npos) << r32.plan;
  // Asked for, the seesaw kernel serves 16 rows too, and the narrow one refuses 64.
  FlashMlaOptions seesaw;
  seesaw.decode_kernel = FlashMlaKernel::wgmma;
  const Outcome padded = run_case(make(mla_spec(16), {{0, 1}, {33, 1}, {5000, 1}}), 32, seesaw);
  EXPECT_VALID(padded);
  EXPECT_NE((padded.plan + " ").find("decode_kernel=wgmma "), std::string::npos) << padded.plan;
  FlashMlaOptions narrow;
  narrow.decode_kernel = FlashMlaKernel::wgmma_narrow;
  const Batch b64 = make(mla_spec(64), {{100, 1}});
  auto inst = make_flashmla_backend(narrow)->create(b64, build_common_metadata(b64), RunOptions{});
  inst->plan();
  EXPECT_THROW(inst->run(), RuntimeError);
  // Asked for, mma.sync serves them as on other devices.
  FlashMlaOptions o;
  o.decode_kernel = FlashMlaKernel::mma_sync;
  const Outcome forced = run_case(make(mla_spec(16), {{0, 1}, {33, 1}, {5000, 1}}), 32, o);
  EXPECT_VALID(forced);
  EXPECT_NE(forced.plan.find("decode_kernel=mma.sync"), std::string::npos) << forced.plan;
}

// Hundreds of short requests: each scheduler partition holds many pieces, so the kernels' per-piece
// state (the narrow kernel's two Q slots and their barrier phases, the K buffers' count across
// pieces, each piece's outputs) turns over many times in one CTA; ragged lengths, empty requests
// and some split ones.
TEST(FlashMlaGpu, ManyPiecesPerPartition) {
  ATTN_REQUIRE_CUDA_DEVICE();
  for (const int q_len : {1, 2}) {
    std::vector<RequestShape> reqs;
    for (int i = 0; i < 700; ++i) reqs.push_back({(i * 37) % 190 + (i % 50 == 0 ? 3000 : 0), q_len});
    reqs[5].context_len = 0;
    std::vector<int32_t> seq_lens;
    for (const RequestShape& r : reqs) seq_lens.push_back(static_cast<int32_t>(r.seq_len()));
    const flashmla::MlaMetadata md = flashmla::get_mla_metadata(seq_lens, 16 * q_len, 1, testing::device_sm_count());
    int most = 0;
    for (int i = 0; i < md.num_parts; ++i) {
      const flashmla::MlaPartition pt = md.partition(i);
      most = std::max(most, pt.end_req - pt.begin_req + 1);
    }
    EXPECT_GE(most, 5) << "the batch no longer gives partitions of many pieces";
    const Batch b = make(mla_spec(16), reqs);
    for (const FlashMlaKernel k : decode_kernels(16 * q_len)) {
      FlashMlaOptions o;
      o.decode_kernel = k;
      const Outcome r = run_case(b, 64, o);
      EXPECT_VALID(r);
      EXPECT_EQ(r.plan.find("split_reqs=0 "), std::string::npos) << r.plan;
    }
  }
}

// The seesaw kernel merges split requests of up to kFlashMlaMergeMaxPieces pieces itself (the CTA
// that counts a request's last piece reads every piece back), the combine kernel the longer ones.
// The merge takes merge_attn_states' steps in its order, so the output has the bits of the combine
// alone, whichever CTA came last; the counters reset themselves, so a captured graph replays to
// the same bits too. 64 and 128 heads (one and two m_blocks), q_len 1 and 2, requests of 1, 2, 3-4
// and more pieces, empty and one-key ones among them.
TEST(FlashMlaGpu, SeesawMergesSplitRequestsInKernel) {
  ATTN_REQUIRE_CUDA_DEVICE();
  if (!testing::sm90_device()) GTEST_SKIP() << "the seesaw MLA kernel needs an sm_90 device";
  for (const auto& [heads, q_len] : {std::pair{64, 1}, std::pair{128, 1}, std::pair{64, 2}}) {
    std::vector<RequestShape> reqs = {{0, q_len}, {1, q_len}, {20000, q_len}};
    for (int i = 0; i < 40; ++i) reqs.push_back({(i * 373) % 5900 + 60, q_len});
    std::vector<int32_t> seq_lens;
    for (const RequestShape& r : reqs) seq_lens.push_back(static_cast<int32_t>(r.seq_len()));
    const flashmla::MlaMetadata md = flashmla::get_mla_metadata(seq_lens, heads * q_len, 1, testing::device_sm_count());
    bool two = false, three_four = false, more = false;
    for (int r = 0; r < static_cast<int>(reqs.size()); ++r) {
      const int n = md.splits_of(r);
      two |= n == 2;
      three_four |= n > 2 && n <= kFlashMlaMergeMaxPieces;
      more |= n > kFlashMlaMergeMaxPieces;
    }
    EXPECT_TRUE(two && three_four && more) << "the batch no longer gives requests of 2, 3-4 and more pieces";
    const Batch b = make(mla_spec(heads), reqs);
    FlashMlaOptions fused;
    fused.decode_kernel = FlashMlaKernel::wgmma;
    FlashMlaOptions combine = fused;
    combine.fused_merge = false;
    const Outcome r = run_case(b, 24, fused);
    EXPECT_VALID(r);
    EXPECT_NE(r.plan.find("merge=kernel"), std::string::npos) << r.plan;
    const Outcome c = run_case(b, 24, combine);
    EXPECT_VALID(c);
    EXPECT_NE(c.plan.find("merge=combine"), std::string::npos) << c.plan;
    ASSERT_EQ(r.out.o.size(), c.out.o.size());
    ASSERT_EQ(r.out.lse.size(), c.out.lse.size());
    EXPECT_EQ(std::memcmp(r.out.o.data(), c.out.o.data(), r.out.o.size() * sizeof(float)), 0) << heads << " heads";
    EXPECT_EQ(std::memcmp(r.out.lse.data(), c.out.lse.data(), r.out.lse.size() * sizeof(float)), 0) << heads << " heads";

    auto inst = make_flashmla_backend(fused)->create(b, build_common_metadata(b), RunOptions{});
    inst->plan();
    inst->poison();
    inst->run();
    inst->run();  // the counters were reset by the first run's merges
    const AttentionOutput twice = inst->fetch();
    AttentionOutput replay;
    testing::replay_in_graph(*inst, &replay);
    if (HasFatalFailure()) return;
    EXPECT_EQ(std::memcmp(twice.o.data(), c.out.o.data(), twice.o.size() * sizeof(float)), 0) << heads << " heads";
    EXPECT_EQ(std::memcmp(replay.o.data(), c.out.o.data(), replay.o.size() * sizeof(float)), 0) << heads << " heads";
  }
}

TEST(FlashMlaGpu, Fp16) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const Outcome r = run_case(make(mla_spec(16, DType::f16), {{777, 1}, {4100, 1}}), 32);
  EXPECT_VALID(r);
}

// The same batch run with one partition per request (no request split) and with many splits
// agree to rounding, and a CUDA graph captured once replays to the same bits.
TEST(FlashMlaGpu, SplitMatchesUnsplitAndGraphReplay) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const Batch b = make(mla_spec(16), {{8000, 1}, {3000, 1}, {100, 1}});
  const CommonAttentionMetadata m = build_common_metadata(b);
  const auto backend = make_flashmla_backend();

  auto inst = backend->create(b, m, RunOptions{});
  inst->plan();
  inst->poison();
  inst->run();
  const AttentionOutput split = inst->fetch();
  EXPECT_EQ(inst->plan_summary().find("split_reqs=0 "), std::string::npos) << inst->plan_summary();

  // Graph: capture run() once, poison, replay.
  AttentionOutput replay;
  testing::replay_in_graph(*inst, &replay);
  if (HasFatalFailure()) return;
  ASSERT_EQ(split.o.size(), replay.o.size());
  EXPECT_EQ(std::memcmp(split.o.data(), replay.o.data(), split.o.size() * sizeof(float)), 0);

  // One SM's worth of partitions is not reachable through RunOptions on a device, so compare
  // against each request run alone with its own schedule: a lone short request is one piece.
  Batch alone = make(mla_spec(16), {{100, 1}});
  alone.request_ids = {2};  // the values of request 2 of the batch
  auto inst1 = backend->create(alone, build_common_metadata(alone), RunOptions{});
  inst1->plan();
  inst1->poison();
  inst1->run();
  const AttentionOutput one = inst1->fetch();
  ASSERT_EQ(one.o.size() * 3, split.o.size());
  // Request 2 (100 keys) in the batch vs alone: the schedules differ, values are the same.
  double max_diff = 0;
  const size_t off = 2 * one.o.size();
  for (size_t i = 0; i < one.o.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(one.o[i]) - split.o[off + i]));
  EXPECT_LT(max_diff, 4e-3);  // a few bf16 ulps of |o| <~ 0.5
}

// As many equal requests as partitions: each partition holds one whole request, no request is
// split, and run() leaves the combine out (nothing to merge). The same schedule captured into a
// graph keeps the combine (a replay must serve any later schedule) and replays to the same bits.
TEST(FlashMlaGpu, UnsplitScheduleWithAndWithoutGraph) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const int parts = flashmla::mla_num_parts(testing::device_sm_count(), 16);
  const Batch b = make(mla_spec(16), repeat(parts, 700, 1));
  for (const FlashMlaKernel k : decode_kernels()) {
    FlashMlaOptions o;
    o.decode_kernel = k;
    const Outcome r = run_case(b, 32, o);
    EXPECT_VALID(r);
    EXPECT_NE(r.plan.find("split_reqs=0 "), std::string::npos) << r.plan;

    auto inst = make_flashmla_backend(o)->create(b, build_common_metadata(b), RunOptions{});
    inst->plan();
    inst->poison();
    inst->run();
    const AttentionOutput direct = inst->fetch();
    AttentionOutput replay;
    testing::replay_in_graph(*inst, &replay);
    if (HasFatalFailure()) return;
    ASSERT_EQ(direct.o.size(), replay.o.size());
    EXPECT_EQ(std::memcmp(direct.o.data(), replay.o.data(), direct.o.size() * sizeof(float)), 0);
  }
}

TEST(FlashMlaGpu, PrefillDeepseekShape) {
  ATTN_REQUIRE_CUDA_DEVICE();
  // mla_prefill_deepseek: 2 decodes + a 64-token chunk after 192 cached + 48 after 64; the
  // prefills come first in batch order here, so the internal decode-first order is exercised.
  // The default budget: the backend's data-flow floor counts the bf16 up-projected K/V that
  // vLLM's MLA prefill feeds to the attention kernel (measured ~1.2 x that floor).
  const Outcome r = run_case(make(mla_spec(16), {{192, 64}, {128, 1}, {64, 48}, {128, 1}}), 0);
  EXPECT_VALID(r);
  EXPECT_NE(r.plan.find("prefills=2 context_chunks=1"), std::string::npos) << r.plan;
  // Both prefills are longer than a decode tile: the head-size-192 attention runs on sm_90a, as
  // qk 192 / v 128 (V and O 128 wide) unless ATTN_FA_SM90_V128=0 pads V to 192.
  if (testing::sm90_device()) {
    EXPECT_NE(r.plan.find("attn_kernel=wgmma"), std::string::npos) << r.plan;
    EXPECT_NE(r.plan.find(v128_expected() ? " v=128" : " v=192"), std::string::npos) << r.plan;
  } else {
    EXPECT_NE(r.plan.find(" v=192"), std::string::npos) << r.plan;
  }
}

// [run] num_layers: three layers over caches of their own on one schedule, each the whole data flow
// (the cache write, q absorbed, split decodes and their combine, o up-projected, the prefill's
// context chunks gathered from that layer's cache).
TEST(FlashMlaGpu, LayersEachOverTheirOwnCache) {
  ATTN_REQUIRE_CUDA_DEVICE();
  testing::expect_layers_like_one(*make_flashmla_backend(),
                                  make(mla_spec(16), {{3000, 1}, {192, 64}, {700, 1}, {64, 48}, {5, 1}}), 3);
}

// What `run --timed attention` times: the data flow without its cache writes (q absorbed, split
// decodes and their combine, o up-projected), two layers; with prefills (their new tokens' latents
// from the step's input, their context chunks from the cache) only the outputs are compared.
TEST(FlashMlaGpu, AttentionAloneIsTheStepsWithoutTheCacheWrite) {
  ATTN_REQUIRE_CUDA_DEVICE();
  RunOptions two;
  two.num_layers = 2;
  testing::expect_attention_alone_is_the_steps(*make_flashmla_backend(), make(mla_spec(16), {{3000, 1}, {700, 1}, {5, 1}}),
                                               two);
  testing::expect_attention_alone_is_the_steps(*make_flashmla_backend(),
                                               make(mla_spec(16), {{3000, 1}, {192, 64}, {700, 1}, {64, 48}}), two,
                                               /*its_own_key_is_cached=*/false);
}

// A NaN latent entry reaches every row that attends it through FLASHMLA's merges by LSE: a decode
// request cut into many pieces (the combine, or the seesaw kernel's own merge) on every decode
// kernel, and a prefill's context in workspace chunks (merge_attn_states). A new token's k_pe, NaN
// in the input that the cache write stores, reaches the rows at and after it and not those before
// it: the first of two query tokens must not see the second's key (the causal limit between them,
// on every decode kernel), and the prefill's new tokens attend it causally.
TEST(FlashMlaGpu, NanKeyReachesEveryRowThatAttendsIt) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const Batch decode = make(mla_spec(16), {{20000, 1}, {5, 1}, {700, 1}, {3000, 1}});
  const Batch two_tokens = make(mla_spec(16), {{3000, 2}, {700, 2}, {5, 2}});
  for (const FlashMlaKernel k : decode_kernels()) {
    FlashMlaOptions o;
    o.decode_kernel = k;
    const std::string plan = testing::expect_nan_key_reaches_its_rows(*make_flashmla_backend(o), decode, {0, 12345, 0});
    EXPECT_NE(plan.find("split_reqs="), std::string::npos) << plan;
    EXPECT_EQ(plan.find("split_reqs=0 "), std::string::npos) << plan;
    testing::expect_nan_key_reaches_its_rows(*make_flashmla_backend(o), two_tokens, {1, 701, 0});
  }
  FlashMlaOptions small;
  small.workspace_tokens = 128;
  const Batch prefill = make(mla_spec(16), {{200, 70}, {64, 33}, {5, 1}, {130, 3}});
  const std::string plan =
      testing::expect_nan_key_reaches_its_rows(*make_flashmla_backend(small), prefill, {0, 150, 0});
  EXPECT_NE(plan.find("context_chunks=4"), std::string::npos) << plan;
  testing::expect_nan_key_reaches_its_rows(*make_flashmla_backend(small), prefill, {0, 235, 0});
}

TEST(FlashMlaGpu, PrefillManyChunksWithEmptyOnes) {
  ATTN_REQUIRE_CUDA_DEVICE();
  // A 128-token workspace over 3 prefills with context: 64-token chunks, 4 passes over the
  // 200-token context; the 64- and 0-token contexts have empty chunks (bug class 11).
  FlashMlaOptions o;
  o.workspace_tokens = 128;
  const Outcome r = run_case(make(mla_spec(16), {{200, 70}, {64, 33}, {0, 17}, {5, 1}, {130, 3}}), 0, o);
  EXPECT_VALID(r);
  EXPECT_NE(r.plan.find("context_chunks=4 chunk=64"), std::string::npos) << r.plan;
  // The passes' 128-wide partials merged by LSE on the sm_90a kernel.
  if (testing::sm90_device()) EXPECT_NE(r.plan.find(v128_expected() ? " v=128" : " v=192"), std::string::npos) << r.plan;
}

TEST(FlashMlaGpu, PrefillBalancedRounds) {
  ATTN_REQUIRE_CUDA_DEVICE();
  // 24 tiles of 128 rows x 16 heads = 384 items per pass, more than the SMs: on sm_90a the causal
  // pass's items (1 to 9 key tiles) are dealt from a balanced list (balance_fixed_rounds) instead
  // of the kernel's snake. Every item must still run once: a missed one leaves poisoned rows.
  FlashMlaOptions o;
  o.workspace_tokens = 1024;  // 512 context tokens per chunk and prefill: two chunks
  const Outcome r = run_case(make(mla_spec(16), {{700, 1000}, {300, 900}, {0, 1100}}), 32, o);
  EXPECT_VALID(r);
  EXPECT_NE(r.plan.find("context_chunks=2 chunk=512"), std::string::npos) << r.plan;
  if (testing::sm90_device() && sm90_balance_enabled())
    EXPECT_NE(r.plan.find("rounds=balanced("), std::string::npos) << r.plan;
}

TEST(FlashMlaGpu, Prefill128HeadsNoContext) {
  ATTN_REQUIRE_CUDA_DEVICE();
  const Outcome r = run_case(make(mla_spec(128), {{0, 100}, {0, 7}}), 24);
  EXPECT_VALID(r);
}

TEST(FlashMlaGpu, UnsupportedFeaturesSaySo) {
  const auto backend = make_flashmla_backend();
  AttentionSpec s = mla_spec(16);
  const Batch b = make(s, {{100, 1}});
  AttentionSpec w = s;
  w.sliding_window = 128;
  EXPECT_NE(flashmla_unsupported_reason(w, b).find("FlashMLAImpl does not support"), std::string::npos);
  AttentionSpec e = s;
  e.attn_type = AttentionType::encoder_only;
  EXPECT_NE(flashmla_unsupported_reason(e, b).find("Encoder self-attention"), std::string::npos);
  AttentionSpec f = s;
  f.kv_cache_dtype = DType::fp8_e4m3;
  EXPECT_EQ(flashmla_unsupported_reason(f, b), "FlashMLA with FP8 KV cache not yet supported");
  AttentionSpec bs = s;
  bs.block_size = 16;
  EXPECT_NE(flashmla_unsupported_reason(bs, b).find("block size 16"), std::string::npos);
  const Batch prefill = make(s, {{100, 1}, {64, 48}});
  EXPECT_TRUE(flashmla_unsupported_reason(s, prefill).empty());
  EXPECT_TRUE(flashmla_unsupported_reason(s, b).empty());
}

}  // namespace
}  // namespace attn
