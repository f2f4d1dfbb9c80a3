// hopper-fp8: FlashAttention-2 forward for sm_90a on e4m3 inputs (compare.formats "fp8"):
// Q, K (B, H, S, D) and V^T (B, H, D, Sk) in e4m3 with one fp32 descale per (batch, head);
// output bf16, LSE of the descaled, scaled scores.
//
// Same skeleton as fwd_hopper.cu (read its header comment first): 1 producer warpgroup issuing
// TMA into a STAGES-deep K/V ring, 2 consumer warpgroups of 64 query rows. Differences:
// - both products are QGMMA (wgmma .e4m3, k32, fp32 accumulate); fp8 wgmma reads shared
//   operands K-major only, which is why V arrives transposed: a V^T tile (DIM rows x BLOCK_KV
//   keys) is the K-major B operand of P @ V, the same way a K tile is for Q @ K^T;
// - P = e4m3(p) with no scale (compare.formats.quantize_p). The fp32 accumulator of S gives each
//   lane other keys than the e4m3 A fragment of P V needs. When K's rows form one flat sequence over
//   (batch, head, key) and seqlen_k % 16 == 0 (what compare.formats produces, for most lengths), a
//   5-D tensor map loads each K tile's rows key-permuted (fwd_common.cuh wgmma_key) so that every
//   lane's scores are its own P keys and P is only packed (sm90::qgmma_a_fragment_permuted); else K
//   loads in order and sm90::qgmma_a_fragment moves the keys (byte permutes and 2 shuffles per row
//   and k-step). Ablations: FA_HOPPER_FP8_PERMUTED_K=0 always takes the second path, =2 loads flat K
//   through the 5-D map in key order (the map's own cost) and moves P's keys with shuffles;
// - head_dim 256: a 256-byte Q or K row is wider than the widest TMA swizzle, so both tiles load as two
//   128-byte panels (Fp8Tiles::QK_PANELS) and Q K^T's k-steps walk them; P V is m64n256k32; three K/V
//   stages fill shared memory, and O is stored from the registers;
// - descales: q_descale * k_descale * softmax scale is folded into the exponent, v_descale into
//   the final 1 / l;
// - S(t + 1) = Q K^T and P(t) V(t) are issued together; softmax(t + 1) runs under P(t) V(t)
//   where the wait for P V sits at the top of the next step (Fp8Tiles::RETIRE_AT_TOP, d64), not
//   where ptxas moves a wait written right after the softmax (d128: measured faster there;
//   hopper_fp8::overlapped_tiles, docs/perf-notes-hopper.md, session 6).
//
// Barrier protocol: as fwd_hopper.cu (q_full; k_full[s], v_full[s] count 1 with expect_tx; kv_empty[s]
// count CONSUMER_THREADS; in the persistent kernels q_empty, count CONSUMER_THREADS, which each
// consumer thread arrives on after an item's last S = Q K^T, so that the producer may load the next
// item's Q), except that a consumer releases stage s of tile t after P(t) V(t) has retired: in step
// t + 1, or at the top of step t + 2 with RETIRE_AT_TOP (after the loop for the last tiles). Each of the
// n tiles is still released exactly once by every consumer thread, so the argument of fwd_hopper.cu
// carries over. A consumer holds at most three stages (K of step t, V(t - 1) and, until its retire at
// the top of step t, V(t - 2)); step t waits for K(t), whose stage was freed at the top of step t - 1
// at the latest, so STAGES >= 3 cannot deadlock and 4 lets the producer run ahead. With
// the ping-pong (Fp8Tiles::PINGPONG, d128) the consumers also take turns on named barriers 1 and 2 (see
// consume_item: equal arrivals and syncs).
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled (fetched at run time: no -lcuda)

#include <type_traits>

#include "fwd_common.cuh"
#include "hopper_epilogue.cuh"
#include "hopper_fp8.cuh"
#include "hopper_split.cuh"

#ifndef FA_HOPPER_FP8_STAGES
#define FA_HOPPER_FP8_STAGES 4
#endif
// d256: K and V^T tiles of 128 keys are 32 KB each, so three stages (and Q's 32 KB) fill the 227 KB.
#ifndef FA_HOPPER_FP8_D256_STAGES
#define FA_HOPPER_FP8_D256_STAGES 3
#endif
// O leaves through shared memory, whole rows per store (hopper_epilogue.cuh); 0 stores it from the registers,
// 4 bytes per thread and row (store_wgmma_rows), the ablation.
#ifndef FA_HOPPER_FP8_STAGED_STORE
#define FA_HOPPER_FP8_STAGED_STORE 1
#endif
// Per head_dim, 1: the two consumers issue their GEMMs in turn (named barriers), so that one's softmax runs while the
// other's GEMMs do. Measured: session 2, no gain at d128 and -12% at d64 (which then needs two consumers instead of
// three) on top of the S(t+1) / softmax(t) overlap; session 19, 1.5-1.9% fewer cycles at d128 4k and 16k (both masks),
// so on at d128 (docs/perf-notes-hopper.md). FA_HOPPER_FP8_PINGPONG=1 turns it on at every head_dim (d64 then needs
// FA_HOPPER_FP8_D64_CONSUMERS=2), the ablation build `pingpong`.
#ifndef FA_HOPPER_FP8_PINGPONG
#define FA_HOPPER_FP8_PINGPONG 0
#endif
#ifndef FA_HOPPER_FP8_D128_PINGPONG
#define FA_HOPPER_FP8_D128_PINGPONG 1
#endif
// Independent chains of the row max and row sum per thread (fwd_common.cuh wgmma_row_max), per
// head_dim: two at d128 (one -> two measured +2-3% at 16k; four measured 2-4% slower at 4k-16k
// through the driver), four at d64 (+1-2% over two; docs/perf-notes-hopper.md, fp8 and session 5).
#ifndef FA_HOPPER_FP8_D128_SOFTMAX_CHAINS
#define FA_HOPPER_FP8_D128_SOFTMAX_CHAINS 2
#endif
#ifndef FA_HOPPER_FP8_D64_SOFTMAX_CHAINS
#define FA_HOPPER_FP8_D64_SOFTMAX_CHAINS 4
#endif
// d256: one chain. One, two and four measured level at 4k and 16k (within 0.4% in cycles, session 16), and with the
// e4m3 packs of sm90::pack_e4m3x4 two chains spilled 12 bytes in the causal, key-permuted kernel.
#ifndef FA_HOPPER_FP8_D256_SOFTMAX_CHAINS
#define FA_HOPPER_FP8_D256_SOFTMAX_CHAINS 1
#endif
// Consumer warpgroups at d64 (64 query rows each): 3, as in the bf16 kernel, where a third
// warpgroup's GEMMs measured +16-18% at d64 (docs/perf-notes-hopper.md); 2 is the ablation.
#ifndef FA_HOPPER_FP8_D64_CONSUMERS
#define FA_HOPPER_FP8_D64_CONSUMERS 3
#endif
// 1: non-causal launches one CTA per SM that walks the work items (query tile, head) in the order of
// one CTA per item, all query tiles of one head before the next; the next item's Q and K/V loads run
// under this item's last P V and output stores. (Causal: FA_HOPPER_FP8_D*_DYNAMIC_CAUSAL below.) 0: one
// CTA per item for non-causal (before session 9).
#ifndef FA_HOPPER_FP8_PERSISTENT
#define FA_HOPPER_FP8_PERSISTENT 1
#endif
// 1: persistent non-causal d64 launches split their last, partly filled round of items over all CTAs
// (hopper_split.cuh, as cuda:hopper does); 0: a plain last round (the ablation, before session 13).
#ifndef FA_HOPPER_FP8_SPLIT_TAIL
#define FA_HOPPER_FP8_SPLIT_TAIL 1
#endif
// Per head_dim, 1: causal launches persistent CTAs whose producer takes each next item from a counter
// in global memory (FwdParams::tile_counter, zeroed by cuda_impl._lib) and hands it to the consumers
// (sm90::publish_next_item / take_item), in the one-CTA-per-item order: the bf16 kernel's d128 scheduler.
// Measured for fp8 against one CTA per item (build item-grid-causal of scripts/dev_hopper_fp8_gpu.py;
// docs/perf-notes-hopper.md, session 10; 3 rounds): causal 512-1k +10-25%, 4k +2-5%, 16k level.
#ifndef FA_HOPPER_FP8_D64_DYNAMIC_CAUSAL
#define FA_HOPPER_FP8_D64_DYNAMIC_CAUSAL 1
#endif
#ifndef FA_HOPPER_FP8_D128_DYNAMIC_CAUSAL
#define FA_HOPPER_FP8_D128_DYNAMIC_CAUSAL 1
#endif
#ifndef FA_HOPPER_FP8_D256_DYNAMIC_CAUSAL
#define FA_HOPPER_FP8_D256_DYNAMIC_CAUSAL 1
#endif
// 1: flat K tiles load key-permuted, P packed in place; 0: 4-D map in key order always; 2: flat K
// through the 5-D map in key order (ablation).
#ifndef FA_HOPPER_FP8_PERMUTED_K
#define FA_HOPPER_FP8_PERMUTED_K 1
#endif
// Where P(t-1) V(t-1) is waited for, per head_dim (hopper_fp8::overlapped_tiles): 1, at the top of
// the next step, so that softmax(t) runs under it; 0, the loop before session 6. Measured
// (docs/perf-notes-hopper.md, session 6): d64 +5-7% at the top, d128 4-8% slower there.
#ifndef FA_HOPPER_FP8_D64_RETIRE_AT_TOP
#define FA_HOPPER_FP8_D64_RETIRE_AT_TOP 1
#endif
#ifndef FA_HOPPER_FP8_D128_RETIRE_AT_TOP
#define FA_HOPPER_FP8_D128_RETIRE_AT_TOP 0
#endif
// Per head_dim, 1: the tiles that need no mask run in a copy of the step without the mask branch (as
// FA_HOPPER_D128_UNMASKED_LOOP in fwd_hopper.cu). Measured (docs/perf-notes-hopper.md, session 19): d256 4-7% fewer
// cycles at 4k and 16k in both masks; d128 +2% non-causal (its consumers do not ping-pong), d64 level.
#ifndef FA_HOPPER_FP8_D64_UNMASKED_LOOP
#define FA_HOPPER_FP8_D64_UNMASKED_LOOP 0
#endif
#ifndef FA_HOPPER_FP8_D128_UNMASKED_LOOP
#define FA_HOPPER_FP8_D128_UNMASKED_LOOP 0
#endif
#ifndef FA_HOPPER_FP8_D256_UNMASKED_LOOP
#define FA_HOPPER_FP8_D256_UNMASKED_LOOP 1
#endif
// (d256 at the top spilled 24-84 bytes: O 128 + S 64 registers leave too little; session 16)
#ifndef FA_HOPPER_FP8_D256_RETIRE_AT_TOP
#define FA_HOPPER_FP8_D256_RETIRE_AT_TOP 0
#endif

extern "C" {
// Mirrored by cuda_impl/_lib.py (Fp8FwdParams). base.v is V^T with base.v_stride its (batch,
// head, head_dim-row) strides; all strides in bytes (= e4m3 elements). base.out is bf16.
struct Fp8FwdParams {
  FwdParams base;
  const float* q_descale;  // (batch, heads_q) contiguous
  const float* k_descale;  // (batch, heads_kv) contiguous
  const float* v_descale;  // (batch, heads_kv) contiguous
};
}

namespace fa {

constexpr int FA_DTYPE_E4M3 = 2;

// How a launch's CTAs get their work items: persistent CTAs walking a static order (non-causal,
// FA_HOPPER_FP8_PERSISTENT), persistent CTAs fed by a counter (causal, FA_HOPPER_FP8_D*_DYNAMIC_CAUSAL),
// one CTA per item (either with its flag at 0: the ablation builds). A template argument, so that each
// kind keeps its own machine code: the persistent walk's code cost the one-CTA-per-item causal launches
// 2-6% when they shared it (session 9).
enum Fp8Schedule : int { FP8_ITEM_GRID = 0, FP8_PERSISTENT = 1, FP8_DYNAMIC = 2 };

constexpr bool fp8_dynamic_causal(int head_dim) {
  return by_head_dim(head_dim, FA_HOPPER_FP8_D64_DYNAMIC_CAUSAL, FA_HOPPER_FP8_D128_DYNAMIC_CAUSAL,
                     FA_HOPPER_FP8_D256_DYNAMIC_CAUSAL);
}

template <int DIM_, bool FLAT_K_, int SCHEDULE>
struct Fp8Tiles {
  static constexpr int DIM = DIM_;
  static constexpr bool FLAT_K = FLAT_K_;  // K through the 5-D map (hopper_fp8_host::k_rows_flat)
  static constexpr bool PERSISTENT = SCHEDULE != FP8_ITEM_GRID;  // reloads Q per item: q_empty
  static constexpr bool DYNAMIC = SCHEDULE == FP8_DYNAMIC;       // items from the counter: the hand-over
  static constexpr bool PERMUTED_K = FLAT_K && FA_HOPPER_FP8_PERMUTED_K == 1;  // ... key-permuted: no shuffles
  static constexpr int CONSUMERS = DIM == 64 ? FA_HOPPER_FP8_D64_CONSUMERS : 2;
  static constexpr bool PINGPONG = FA_HOPPER_FP8_PINGPONG || (DIM == 128 && FA_HOPPER_FP8_D128_PINGPONG);
  static_assert(!PINGPONG || CONSUMERS == 2, "the fp8 ping-pong takes two consumers");
  static constexpr int THREADS = 128 * (1 + CONSUMERS);
  static constexpr int CONSUMER_THREADS = 128 * CONSUMERS;
  static constexpr int BLOCK_Q = 64 * CONSUMERS;
  static constexpr int BLOCK_KV = 128;  // one 128-byte swizzle row of V^T
  static constexpr int STAGES = DIM == 256 ? FA_HOPPER_FP8_D256_STAGES : FA_HOPPER_FP8_STAGES;
  static constexpr int SOFTMAX_CHAINS = by_head_dim(DIM, FA_HOPPER_FP8_D64_SOFTMAX_CHAINS,
                                                    FA_HOPPER_FP8_D128_SOFTMAX_CHAINS, FA_HOPPER_FP8_D256_SOFTMAX_CHAINS);
  static constexpr bool RETIRE_AT_TOP = by_head_dim(DIM, FA_HOPPER_FP8_D64_RETIRE_AT_TOP,
                                                    FA_HOPPER_FP8_D128_RETIRE_AT_TOP, FA_HOPPER_FP8_D256_RETIRE_AT_TOP);
  static constexpr bool UNMASKED_LOOP = by_head_dim(DIM, FA_HOPPER_FP8_D64_UNMASKED_LOOP,
                                                    FA_HOPPER_FP8_D128_UNMASKED_LOOP, FA_HOPPER_FP8_D256_UNMASKED_LOOP);
  static_assert(STAGES >= 3, "a consumer holds up to three stages at once (see the header)");
  // A Q/K row is DIM bytes: one 64- or 128-byte swizzled row at d64 / d128; at d256 two 128-byte panels, each a
  // whole tile of 128-byte rows (the widest TMA swizzle), the second after the first.
  static constexpr int QK_SWIZZLE = DIM < 128 ? DIM : 128;
  static constexpr int QK_PANELS = DIM / QK_SWIZZLE;
  static constexpr int Q_PANEL_BYTES = BLOCK_Q * QK_SWIZZLE;
  static constexpr int K_PANEL_BYTES = BLOCK_KV * QK_SWIZZLE;
  static constexpr int Q_BYTES = QK_PANELS * Q_PANEL_BYTES;
  static constexpr int K_BYTES = QK_PANELS * K_PANEL_BYTES;
  static constexpr int V_BYTES = DIM * BLOCK_KV;  // V^T tile: DIM rows of BLOCK_KV keys
  static constexpr int STAGE_BYTES = K_BYTES + V_BYTES;
  static constexpr int K_OFFSET = Q_BYTES;  // stage s: K at + s * STAGE_BYTES, V after it
  static constexpr int BARRIER_OFFSET = Q_BYTES + STAGES * STAGE_BYTES;
  static constexpr int BARRIERS = 1 + 3 * STAGES + (PERSISTENT ? 1 : 0) + (DYNAMIC ? 5 : 0);  // hopper_fp8::Barriers
  // the epilogue's staging slots (FA_HOPPER_FP8_STAGED_STORE), one per consumer warp, after the barriers
  // (d256: the three stages leave no room; O is stored from the registers)
  static constexpr bool STAGED_STORE = FA_HOPPER_FP8_STAGED_STORE && DIM <= 128;
  static constexpr int STAGE_OFFSET = staged_store_offset(BARRIER_OFFSET + 8 * BARRIERS);
  static constexpr int SMEM_BYTES =
      STAGE_OFFSET + (STAGED_STORE ? staged_store_bytes(CONSUMER_THREADS / 32, DIM) : 0) + 1024;  // +1024: alignment
  static_assert(SMEM_BYTES <= 227 * 1024, "more shared memory than one CTA may use on sm_90");
  // 128 x 24 + 256 x 240 (or 384 x 160: d64's S 64 + two P 16 + O 32) <= 65536 registers.
  static constexpr int PRODUCER_REGS = 24;
  static constexpr int CONSUMER_REGS = CONSUMERS == 3 ? 160 : 240;
  static constexpr int S_REGS = BLOCK_KV / 2;
  static constexpr int O_REGS = DIM / 2;
  static constexpr int K_STEPS_QK = DIM / 32;    // k32 steps of Q K^T
  static constexpr int K_STEPS_PER_PANEL = QK_SWIZZLE / 32;
  static constexpr int K_STEPS_PV = BLOCK_KV / 32;  // k32 steps of P V
  // (d64 only: at d128 the split walk measured 2% more cycles at 4k-16k than the plain last round it saves on,
  // its loop compiled differently; docs/perf-notes-hopper.md, session 13)
  static constexpr bool SPLIT_TAIL = FA_HOPPER_FP8_SPLIT_TAIL && SCHEDULE == FP8_PERSISTENT && DIM == 64;
  using Split = SplitSpace<1, CONSUMERS, O_REGS>;  // the split last round's workspace
};

#if FA_SM90A
namespace hopper_fp8 {

template <typename C>
__device__ void produce_item(const FwdParams& p, const CtaWork& w, uint32_t smem, Barriers<C::STAGES> bars,
                             sm90::Progress& done, const CUtensorMap* map_q, const CUtensorMap* map_k,
                             const CUtensorMap* map_vt) {
  if (w.n_kv_tiles == 0) return;
  if constexpr (C::PERSISTENT)  // the previous item's last S = Q K^T is done
    sm90::mbar_wait(bars.q_empty(), (done.q_loads & 1) ^ 1);
  sm90::mbar_arrive_expect_tx(bars.q_full(), C::Q_BYTES);
  for (int panel = 0; panel < C::QK_PANELS; panel++)
    sm90::tma_load_4d(smem + panel * C::Q_PANEL_BYTES, map_q, bars.q_full(), panel * C::QK_SWIZZLE, w.q_start,
                      w.head_q, w.batch);
  for (int tile = 0; tile < w.n_kv_tiles; tile++) {
    const int ring = done.kv_tiles + tile;
    const int s = ring % C::STAGES;
    sm90::mbar_wait(bars.kv_empty(s), ((ring / C::STAGES) & 1) ^ 1);
    const uint32_t k_smem = smem + C::K_OFFSET + s * C::STAGE_BYTES;
    const int kv_start = (w.kv_tile0 + tile) * C::BLOCK_KV;
    sm90::mbar_arrive_expect_tx(bars.k_full(s), C::K_BYTES);
    for (int panel = 0; panel < C::QK_PANELS; panel++) {
      const uint32_t k_panel = k_smem + panel * C::K_PANEL_BYTES;
      if constexpr (C::FLAT_K)  // the map's last axis: 16-key blocks of all (batch, head) rows
        sm90::tma_load_5d(k_panel, map_k, bars.k_full(s), panel * C::QK_SWIZZLE, 0, 0, 0,
                          ((w.batch * p.heads_kv + w.head_kv) * p.seqlen_k + kv_start) / 16);
      else
        sm90::tma_load_4d(k_panel, map_k, bars.k_full(s), panel * C::QK_SWIZZLE, kv_start, w.head_kv, w.batch);
    }
    sm90::mbar_arrive_expect_tx(bars.v_full(s), C::V_BYTES);
    sm90::tma_load_4d(k_smem + C::K_BYTES, map_vt, bars.v_full(s), kv_start, 0, w.head_kv, w.batch);
  }
  done.kv_tiles += w.n_kv_tiles;
  done.q_loads++;
}

// Online softmax of one raw S tile (scores in q/k-descaled units: scale_log2 carries both
// descales). Updates row_max / row_sum, returns each row's O rescale factor in alpha (applied
// by the caller once the P V wgmma that reads O has retired) and leaves p in S (pack_p makes the
// e4m3 A fragments). row_sum adds the unrounded p, as compare.oracle's plain reference does.
template <typename C>
__device__ __forceinline__ void softmax_step(float (&S)[C::S_REGS], float (&row_max)[2],
                                             float (&row_sum)[2], float (&alpha)[2], float scale_log2) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    float m = wgmma_row_max<C::SOFTMAX_CHAINS>(S, h, row_max[h]);
    m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, 2));
    // A row with no visible key so far keeps max -inf; subtracting 0 keeps exp2 at 0, not NaN.
    const float m_scaled = m == -INFINITY ? 0.f : m * scale_log2;
    alpha[h] = rescale_factor(row_max[h], m, m_scaled, scale_log2);
    row_max[h] = m;
    const float sum = wgmma_row_map_sum<C::SOFTMAX_CHAINS>(
        S, h, [&](float s) { return fast_exp2(fmaf(s, scale_log2, -m_scaled)); });
    row_sum[h] = row_sum[h] * alpha[h] + sum;
  }
}

// P = e4m3(p) as the A fragments of P V, from the p that softmax_step left in S.
template <typename C>
__device__ __forceinline__ void pack_p(const float (&S)[C::S_REGS], uint32_t (&P)[C::K_STEPS_PV][4]) {
#pragma unroll
  for (int kk = 0; kk < C::K_STEPS_PV; kk++) {
    if constexpr (C::PERMUTED_K)
      sm90::qgmma_a_fragment_permuted(S + 16 * kk, P[kk]);
    else
      sm90::qgmma_a_fragment(S + 16 * kk, P[kk]);
  }
}

// S = Q K^T of one tile, issued (not waited for): k-step kk is 32 bytes into every row of its panel.
template <typename C>
__device__ __forceinline__ void issue_qk(float (&S)[C::S_REGS], uint32_t q_smem, uint32_t k_smem) {
  const uint64_t q_desc = sm90::desc_kmajor<C::QK_SWIZZLE>(q_smem), k_desc = sm90::desc_kmajor<C::QK_SWIZZLE>(k_smem);
  sm90::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < C::K_STEPS_QK; kk++) {
    const int panel = kk / C::K_STEPS_PER_PANEL, in_panel = (kk % C::K_STEPS_PER_PANEL) * 32;
    sm90::qgmma_ss_n128(S, sm90::desc_advance(q_desc, panel * C::Q_PANEL_BYTES + in_panel),
                        sm90::desc_advance(k_desc, panel * C::K_PANEL_BYTES + in_panel), kk > 0);
  }
  sm90::wgmma_commit();
}

// O += P V of one tile, issued: k-step kk is keys 32kk.., 32 bytes into every V^T row.
template <typename C>
__device__ __forceinline__ void issue_pv(float (&O)[C::O_REGS], const uint32_t (&P)[C::K_STEPS_PV][4],
                                         uint32_t v_smem) {
  const uint64_t v_desc = sm90::desc_kmajor<128>(v_smem);
  sm90::fence_regs(O);
  sm90::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < C::K_STEPS_PV; kk++) sm90::qgmma_rs<C::DIM>(O, P[kk], sm90::desc_advance(v_desc, kk * 32));
  sm90::wgmma_commit();
}

// KV tiles kv_tile0 .. kv_tile0 + n_kv_tiles - 1 of one item; `finish(O, row_max, row_sum, store)` then takes
// the unnormalised rows (store(): the rows' stores; a split part hands them over instead, see hopper_split.cuh).
template <typename C, typename Finish>
__device__ void consume_item(const Fp8FwdParams& fp, const CtaWork& w, uint32_t smem,
                             Barriers<C::STAGES> bars, int consumer, sm90::Progress& done, Finish&& finish) {
  const FwdParams& p = fp.base;
  const int warp_in_group = (threadIdx.x % 128) / 32;
  const int row0 = w.q_start + consumer * 64 + warp_in_group * 16 + (threadIdx.x % 32) / 4;
  const float score_scale = p.scale * fp.q_descale[w.batch * p.heads_q + w.head_q] *
                            fp.k_descale[w.batch * p.heads_kv + w.head_kv];
  const float scale_log2 = score_scale * LOG2E;
  float O[C::O_REGS];
#pragma unroll
  for (int i = 0; i < C::O_REGS; i++) O[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f}, alpha[2];
  const uint32_t q_smem = smem + consumer * 64 * C::QK_SWIZZLE;  // 64 rows into every panel: whole swizzle atoms
  auto k_smem = [&](int s) { return smem + C::K_OFFSET + s * C::STAGE_BYTES; };
  // Ping-pong: consumer c issues its GEMMs after bar.sync on barrier 1 + c, which completes when
  // the other consumer has arrived there, i.e. has issued its own previous GEMMs. Both run the
  // same n + 1 issue phases; consumer 1 starts by letting consumer 0 go first and skips its
  // last arrival, so every barrier phase has exactly 256 arrivals.
  const int phases = w.n_kv_tiles + 1;
  int phase = 0;
  auto gemm_turn_begin = [&] {
    if (C::PINGPONG) sm90::named_bar_sync(1 + consumer, C::CONSUMER_THREADS);
  };
  auto gemm_turn_end = [&] {
    phase++;
    if (C::PINGPONG && !(consumer == 1 && phase == phases))
      sm90::named_bar_arrive(2 - consumer, C::CONSUMER_THREADS);
  };
  // softmax(tile) runs once S(tile) = Q K^T is done: after the last one, Q's buffer is free
  auto masked_softmax = [&](float (&S)[C::S_REGS], int tile, auto may_mask) {
    if constexpr (C::PERSISTENT)
      if (tile == w.n_kv_tiles - 1) sm90::mbar_arrive(bars.q_empty());
    const int kv_start = (w.kv_tile0 + tile) * C::BLOCK_KV;
    if constexpr (decltype(may_mask)::value)
      if (tile_needs_mask<C::BLOCK_KV>(p, w, kv_start)) mask_scores<C::PERMUTED_K>(S, p, w, row0, kv_start);
    softmax_step<C>(S, row_max, row_sum, alpha, scale_log2);
  };

  if (w.n_kv_tiles > 0) {
    float S[C::S_REGS];
    uint32_t P[C::K_STEPS_PV][4];
    if (C::PINGPONG && consumer == 1) sm90::named_bar_arrive(1, C::CONSUMER_THREADS);
    const int s0 = done.kv_tiles % C::STAGES;
    sm90::mbar_wait(bars.q_full(), done.q_loads & 1);
    sm90::mbar_wait(bars.k_full(s0), (done.kv_tiles / C::STAGES) & 1);
    gemm_turn_begin();
    issue_qk<C>(S, q_smem, k_smem(s0));
    gemm_turn_end();
    sm90::wgmma_wait<0>();
    sm90::fence_regs(S);
    masked_softmax(S, 0, std::true_type{});  // alpha is 0 or 1 here and O is 0: its rescale changes nothing
    overlapped_tiles<C>(
        w.n_kv_tiles, C::UNMASKED_LOOP ? first_masked_tile<C::BLOCK_KV>(p, w, w.n_kv_tiles) : w.n_kv_tiles,
        done.kv_tiles, bars, S, O, alpha, P,
        [&](float (&scores)[C::S_REGS], int s) { issue_qk<C>(scores, q_smem, k_smem(s)); },
        [&](const uint32_t (&P_in)[C::K_STEPS_PV][4], int s) { issue_pv<C>(O, P_in, k_smem(s) + C::K_BYTES); },
        masked_softmax, pack_p<C>, gemm_turn_begin, gemm_turn_end);
    done.kv_tiles += w.n_kv_tiles;
    done.q_loads++;
  }
  // (persistent: the next item's loads are under way while these stores drain)
  // LSE = score_scale * m + ln l: the natural log of the descaled, scaled scores.
  finish(O, row_max, row_sum, scale_log2, [&] {
    store_wgmma_rows_via<C::STAGED_STORE, __nv_bfloat16>(p, w, row0, O, row_max, row_sum,
                                                         fp.v_descale[w.batch * p.heads_kv + w.head_kv],
                                                         smem + C::STAGE_OFFSET,
                                                         [score_scale](float m, float l) { return m * score_scale + logf(l); });
  });
}

}  // namespace hopper_fp8
#endif  // FA_SM90A

template <int DIM, bool FLAT_K, int SCHEDULE>
__global__ void __launch_bounds__(Fp8Tiles<DIM, FLAT_K, SCHEDULE>::THREADS, 1)
    fwd_hopper_fp8_kernel(const Fp8FwdParams p, const __grid_constant__ CUtensorMap map_q,
                          const __grid_constant__ CUtensorMap map_k,
                          const __grid_constant__ CUtensorMap map_vt) {
#if FA_SM90A
  using C = Fp8Tiles<DIM, FLAT_K, SCHEDULE>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t smem = (smem_u32(smem_raw) + 1023) & ~1023u;
  const hopper_fp8::Barriers<C::STAGES> bars{smem + C::BARRIER_OFFSET};
  sm90::Progress done;  // stays zero for one item: the ring offsets fold to constants
  // Persistent: items in the order of the one-CTA-per-item grid (all query tiles of one head, then the
  // next; causal: heaviest first), below 2^31 (the host checks)
  const uint32_t items = work_items(p.base, C::BLOCK_Q);
  const auto item_work = [&](int item) { return work_item<C::BLOCK_Q, C::BLOCK_KV>(p.base, item, 1); };
  // (an item's rows as they are: every schedule but the split tail's parts)
  const auto store_all = [](float (&)[C::O_REGS], float (&)[2], float (&)[2], float, auto&& store) { store(); };
  if constexpr (SCHEDULE == FP8_DYNAMIC) {
    // the first item is blockIdx.x, the rest come from the counter; an item past the end stops the consumers
    hopper_fp8::run_roles<C>(
        bars,
        [&] {
          for (uint32_t round = 0;; round++) {
            const uint32_t item = sm90::publish_next_item(bars, round, p.base.tile_counter);
            if (item >= items) break;
            hopper_fp8::produce_item<C>(p.base, item_work(item), smem, bars, done, &map_q, &map_k, &map_vt);
          }
        },
        [&](int consumer) {
          for (uint32_t round = 0;; round++) {
            const uint32_t item = sm90::take_item(bars, round);
            if (item >= items) break;
            hopper_fp8::consume_item<C>(p, item_work(item), smem, bars, consumer, done, store_all);
          }
        });
  } else if constexpr (SCHEDULE == FP8_PERSISTENT && !C::SPLIT_TAIL) {
    // CTA b takes items b, b + gridDim.x, ... (< 2^32: both terms are below 2^31)
    hopper_fp8::run_roles<C>(
        bars,
        [&] {
          for (uint32_t item = blockIdx.x; item < items; item += gridDim.x)
            hopper_fp8::produce_item<C>(p.base, item_work(item), smem, bars, done, &map_q, &map_k, &map_vt);
        },
        [&](int consumer) {
          for (uint32_t item = blockIdx.x; item < items; item += gridDim.x)
            hopper_fp8::consume_item<C>(p, item_work(item), smem, bars, consumer, done, store_all);
        });
  } else if constexpr (SCHEDULE == FP8_PERSISTENT) {
    // The same order in the full rounds, then the parts of this CTA's range of the split tail (hopper_split.cuh)
    const auto plan = [&] { return split_plan(p.base, items, gridDim.x, C::BLOCK_KV, C::SPLIT_TAIL); };
    const TailRange tail(plan(), blockIdx.x);
    const auto round_work = [&](uint32_t round, uint32_t& item, SplitPart& part) {
      part = SplitPart{0, 0, 0};
      if (round >= tail.first_round) {
        if (!split_part(tail, round - tail.first_round, part)) return false;
        item = tail.first_round * gridDim.x + part.tail_unit;
        return true;
      }
      item = round * gridDim.x + blockIdx.x;
      return item < items;
    };
    const auto part_work = [&](uint32_t item, const SplitPart& part) {
      CtaWork w = item_work(item);
      if (part.t1 > 0) {
        w.kv_tile0 = part.t0;
        w.n_kv_tiles = part.t1 - part.t0;
      }
      return w;
    };
    hopper_fp8::run_roles<C>(
        bars,
        [&] {
          uint32_t item;
          SplitPart part;
          for (uint32_t round = 0; round_work(round, item, part); round++)
            hopper_fp8::produce_item<C>(p.base, part_work(item, part), smem, bars, done, &map_q, &map_k, &map_vt);
        },
        [&](int consumer) {
          uint32_t item;
          SplitPart part;
          for (uint32_t round = 0; round_work(round, item, part); round++) {
            const bool split = part.t1 > 0 && (part.t0 > 0 || part.t1 < int(tail.n));
            hopper_fp8::consume_item<C>(
                p, part_work(item, part), smem, bars, consumer, done,
                [&](float (&O)[C::O_REGS], float (&row_max)[2], float (&row_sum)[2], float scale_log2, auto&& store) {
                  if (split)
                    return finish_split_part<typename C::Split>(p.base.split_workspace, plan(), part.tail_unit, 0,
                                                                consumer, O, row_max, row_sum, scale_log2, store);
                  store();
                });
          }
        });
  } else {
    const CtaWork w = cta_work<C::BLOCK_Q, C::BLOCK_KV>(p.base);
    hopper_fp8::run_roles<C>(
        bars, [&] { hopper_fp8::produce_item<C>(p.base, w, smem, bars, done, &map_q, &map_k, &map_vt); },
        [&](int consumer) { hopper_fp8::consume_item<C>(p, w, smem, bars, consumer, done, store_all); });
  }
#endif
}

// --- host ------------------------------------------------------------------------------------

namespace hopper_host {
int encode_tiled_map(CUtensorMap* map, CUtensorMapDataType dtype, int rank, const void* ptr,
                     const cuuint64_t* sizes, const cuuint64_t* bytes, const cuuint32_t* box,
                     CUtensorMapSwizzle swizzle, char* err, int err_len);  // fwd_hopper.cu
}  // namespace hopper_host

namespace hopper_fp8_host {

// A byte map of `rank` dimensions whose innermost box row of `box[0]` bytes is also its swizzle
// span (64 or 128).
int encode_e4m3(CUtensorMap* map, const void* ptr, int rank, const cuuint64_t* sizes,
                const cuuint64_t* bytes, const cuuint32_t* box, char* err, int err_len) {
  return hopper_host::encode_tiled_map(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, rank, ptr, sizes, bytes, box,
                                       box[0] == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                                       err, err_len);
}

// 4-D e4m3 map (inner, rows, heads, batch) with byte strides (rows, heads, batch); one box is
// `box_inner` bytes (= the swizzle span) x box_rows rows. Out-of-range elements read as zeros.
// Strides of size-1 dimensions are never stepped over and are replaced by valid ones.
int encode_map(CUtensorMap* map, const void* ptr, const int64_t (&stride)[3], int batch,
               int heads, int rows, int inner, int box_inner, int box_rows, char* err,
               int err_len) {
  const cuuint64_t sizes[4] = {cuuint64_t(inner), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(batch)};
  cuuint64_t bytes[3];
  bytes[0] = rows > 1 ? stride[2] : (inner + 15) / 16 * 16;
  bytes[1] = heads > 1 ? stride[1] : bytes[0] * rows;
  bytes[2] = batch > 1 ? stride[0] : bytes[1] * heads;
  const cuuint32_t box[4] = {cuuint32_t(box_inner), cuuint32_t(box_rows), 1, 1};
  return encode_e4m3(map, ptr, 4, sizes, bytes, box, err, err_len);
}

// K's rows form one sequence r = (batch * heads_kv + head) * seqlen_k + key of stride k_stride[2]
// (size-1 axes impose nothing), cut into whole 16-key blocks: what the permuted map needs. The
// kernel computes r in 32 bits (a TMA coordinate is 32-bit anyway).
bool k_rows_flat(const FwdParams& p) {
  const int64_t row = p.k_stride[2], head = p.k_stride[1], batch = p.k_stride[0];
  const int64_t rows = int64_t(p.batch) * p.heads_kv * p.seqlen_k;
  return rows < (int64_t(1) << 31) && p.seqlen_k % 16 == 0 &&
         (p.heads_kv == 1 || head == p.seqlen_k * row) &&
         (p.batch == 1 || batch == int64_t(p.heads_kv) * p.seqlen_k * row);
}

// Flat K tiles with their rows permuted (fwd_common.cuh wgmma_key<true>): within each 16-key
// block, shared row e + 2t + 8 g0 (e, g0 in 0..1, t in 0..3) takes key e + 2 g0 + 4t. Axes
// innermost first: head_dim bytes, e (stride 1 row), t (4 rows), g0 (2 rows), 16-key block of all
// rows; TMA writes a box in that order (without C::PERMUTED_K: strides 1, 2, 8 rows, key order).
// Rows past the last read as zeros; rows past a head's seqlen_k are the next head's keys, masked
// like any key past seqlen_k.
template <typename C>
int encode_flat_k_map(CUtensorMap* map, const FwdParams& p, char* err, int err_len) {
  const cuuint64_t row = p.k_stride[2];
  const cuuint64_t blocks = cuuint64_t(p.batch) * p.heads_kv * p.seqlen_k / 16;
  const cuuint64_t sizes[5] = {C::DIM, 2, 4, 2, blocks};
  const cuuint64_t bytes[4] = {row, (C::PERMUTED_K ? 4 : 2) * row, (C::PERMUTED_K ? 2 : 8) * row,
                               16 * row};
  const cuuint32_t box[5] = {C::QK_SWIZZLE, 2, 4, 2, C::BLOCK_KV / 16};  // one panel
  return encode_e4m3(map, p.k, 5, sizes, bytes, box, err, err_len);
}

// The split last round of a persistent launch on persistent_grid(items) CTAs, as the kernel computes it.
template <typename C>
SplitPlan launch_split_plan(const FwdParams& p) {
  const int64_t items = work_items(p, C::BLOCK_Q);
  return split_plan(p, uint32_t(items), uint32_t(persistent_grid(items)), C::BLOCK_KV, C::SPLIT_TAIL);
}

template <int DIM, bool FLAT_K, int SCHEDULE>
int launch(const Fp8FwdParams& fp, cudaStream_t stream, char* err, int err_len) {
  using C = Fp8Tiles<DIM, FLAT_K, SCHEDULE>;
  const FwdParams& p = fp.base;
  CUtensorMap map_q, map_k, map_vt;
  if (int rc = encode_map(&map_q, p.q, p.q_stride, p.batch, p.heads_q, p.seqlen_q, DIM, C::QK_SWIZZLE,
                          C::BLOCK_Q, err, err_len))
    return rc;
  if (int rc = FLAT_K ? encode_flat_k_map<C>(&map_k, p, err, err_len)
                      : encode_map(&map_k, p.k, p.k_stride, p.batch, p.heads_kv, p.seqlen_k, DIM, C::QK_SWIZZLE,
                                   C::BLOCK_KV, err, err_len))
    return rc;
  // V^T: rows are head_dim, the inner (contiguous) axis is the key.
  if (int rc = encode_map(&map_vt, p.v, p.v_stride, p.batch, p.heads_kv, DIM, p.seqlen_k,
                          C::BLOCK_KV, DIM, err, err_len))
    return rc;
  if (C::DYNAMIC && p.tile_counter == nullptr)
    return report(err, err_len, "tile_counter", "the dynamic causal scheduler needs a zeroed counter");
  if (C::STAGED_STORE)
    if (int rc = check_staged_out(p, err, err_len)) return rc;
  dim3 grid = q_tile_grid(p, C::BLOCK_Q);
  if constexpr (C::PERSISTENT) {
    const int64_t items = work_items(p, C::BLOCK_Q);
    if (int rc = check_work_items(items, err, err_len)) return rc;
    grid = dim3(persistent_grid(items));
    if (launch_split_plan<C>(p).split() && p.split_workspace == nullptr)
      return report(err, err_len, "split_workspace",
                    "this launch splits its last round: pass cuda_fa_hopper_fp8_split_workspace() bytes, the first "
                    "`zeroed` of them zeroed");
  }
  return launch_kernel(fwd_hopper_fp8_kernel<DIM, FLAT_K, SCHEDULE>, grid, C::THREADS, C::SMEM_BYTES, stream,
                       err, err_len, fp, map_q, map_k, map_vt);
}

// The head dims the kernel is built for; any other is reported (before anything touches a device).
int check_head_dim(const FwdParams& p, char* err, int err_len) {
  if (p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256) return 0;
  return report(err, err_len, "head_dim", "supported: 64, 128, 256");
}

// f.template operator()<DIM>() for p.head_dim, one that check_head_dim passed.
template <typename F>
auto with_head_dim(const FwdParams& p, F&& f) {
  return p.head_dim == 64    ? f.template operator()<64>()
         : p.head_dim == 128 ? f.template operator()<128>()
                             : f.template operator()<256>();
}

}  // namespace hopper_fp8_host
}  // namespace fa

extern "C" int cuda_fa_fp8_params_size() { return static_cast<int>(sizeof(Fp8FwdParams)); }

// Whether causal launches at this head_dim need base.tile_counter (zeroed, one int32).
extern "C" int cuda_fa_hopper_fp8_dynamic_causal(int head_dim) { return fa::fp8_dynamic_causal(head_dim); }

extern "C" int cuda_fa_fwd_hopper_fp8(const Fp8FwdParams* fp, cudaStream_t stream, char* err,
                                      int err_len) {
  using namespace fa;
  const FwdParams& p = fp->base;
  if (int rc = check_params(p, err, err_len)) return rc;
  if (p.dtype != FA_DTYPE_E4M3) return report(err, err_len, "dtype", "hopper-fp8 takes e4m3 inputs");
  if (fp->q_descale == nullptr || fp->k_descale == nullptr || fp->v_descale == nullptr)
    return report(err, err_len, "descale", "q, k and v descales are required");
  if (int rc = hopper_fp8_host::check_head_dim(p, err, err_len)) return rc;
  if (int rc = check_sm90("variant hopper-fp8 runs on sm_90 (H100/H200) only", err, err_len)) return rc;
  const bool flat = FA_HOPPER_FP8_PERMUTED_K && hopper_fp8_host::k_rows_flat(p);
  const auto launch = [&]<int DIM>() {
    const auto with = [&]<int SCHEDULE>() {
      return flat ? hopper_fp8_host::launch<DIM, true, SCHEDULE>(*fp, stream, err, err_len)
                  : hopper_fp8_host::launch<DIM, false, SCHEDULE>(*fp, stream, err, err_len);
    };
    // (each schedule instantiated only where a flag sends launches to it)
    if (p.causal) {
      if constexpr (fp8_dynamic_causal(DIM)) return with.template operator()<FP8_DYNAMIC>();
      else return with.template operator()<FP8_ITEM_GRID>();
    }
    if constexpr (FA_HOPPER_FP8_PERSISTENT) return with.template operator()<FP8_PERSISTENT>();
    else return with.template operator()<FP8_ITEM_GRID>();
  };
  return hopper_fp8_host::with_head_dim(p, launch);
}

// Bytes of base.split_workspace a launch of cuda_fa_fwd_hopper_fp8 with these parameters needs (0: none; the
// pointer may stay null), and in *zeroed how many of its first bytes the caller zeroes before each launch.
// Negative: an error, described in err. (Only persistent non-causal launches split; FLAT_K does not change
// the plan.)
extern "C" int64_t cuda_fa_hopper_fp8_split_workspace(const Fp8FwdParams* fp, int64_t* zeroed, char* err,
                                                       int err_len) {
  using namespace fa;
  const FwdParams& p = fp->base;
  *zeroed = 0;
  if (check_params(p, err, err_len)) return -1;
  if (hopper_fp8_host::check_head_dim(p, err, err_len)) return -1;
  if (p.causal || !FA_HOPPER_FP8_PERSISTENT) return 0;
  const auto sized = [&]<int DIM>() -> int64_t {
    using C = Fp8Tiles<DIM, true, FP8_PERSISTENT>;
    if (check_work_items(work_items(p, C::BLOCK_Q), err, err_len)) return -1;
    const SplitPlan plan = hopper_fp8_host::launch_split_plan<C>(p);
    *zeroed = plan.split() ? C::Split::zeroed_bytes(plan) : 0;
    return C::Split::bytes(plan);
  };
  return hopper_fp8_host::with_head_dim(p, sized);
}
