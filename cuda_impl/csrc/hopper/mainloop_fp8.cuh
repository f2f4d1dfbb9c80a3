// The fp8 consumer mainloop (QGMMA for both products; V arrives as V^T, the K-major B operand of P V) and
// its KV loop, kv_tiles.
//
// Every tile's P V goes into a fresh accumulator and is added to O in fp32 registers. QGMMA adds its
// products with fewer bits than fp32, aligned to the accumulator's exponent: accumulated in O itself,
// each tile's products would be cut relative to O, which grows with the keys, and with V's mean not zero
// the error is one-signed and grows with Sk (docs/journal/2026-12-02_fp8-decode-and-fuzz.md). The fresh
// products live in S's registers, free once P is packed: an extra O-sized block beside S and O spilled.
#pragma once

#include <type_traits>

#include "fwd_common.cuh"
#include "hopper/epilogue.cuh"
#include "hopper/mask.cuh"
#include "hopper/ring.cuh"
#include "hopper/scheduler.cuh"
#include "hopper/sm90.cuh"
#include "hopper/softmax.cuh"

extern "C" {
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

}

#if FA_SM90A
namespace fa::hopper_fp8 {

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

// PV = P V of one tile for N of O's columns (the V^T rows from v_smem on), issued: k-step kk is keys
// 32kk.., 32 bytes into every V^T row; the first k-step overwrites PV.
template <typename C, int N = C::DIM>
__device__ __forceinline__ void issue_pv(float (&PV)[N / 2], const uint32_t (&P)[C::K_STEPS_PV][4],
                                         uint32_t v_smem) {
  const uint64_t v_desc = sm90::desc_kmajor<128>(v_smem);
  sm90::fence_regs(PV);
  sm90::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < C::K_STEPS_PV; kk++)
    sm90::qgmma_rs<N>(PV, P[kk], sm90::desc_advance(v_desc, kk * 32), kk > 0);
  sm90::wgmma_commit();
}

// KV tiles 0 .. n-1 of an item whose Q has arrived, one after the other: S(t), softmax(t), pack P(t); for
// each part of O's columns (d256: two halves), P V(t) into S's registers and O = O alpha(t) + P V (tile 0:
// alpha is 0 or 1 and O is 0); release the stage. Bound "+f" to S, every P V and S reuse the same registers
// (with a PV array of its own, ptxas gave each part fresh registers, to overlap its adds with the next part's
// wgmma, and spilled). Softmax does not overlap this consumer's own GEMMs; the other consumers' GEMMs fill the
// tensor cores meanwhile (the overlapped loop with an O-sized P V block spilled and lost 5-58%,
// docs/journal/2026-12-02_fp8-accumulation.md). The ring position of the item's tile t is ring_tiles + t:
// ring_tiles counts the KV tiles of the CTA's earlier items (persistent CTAs).
template <typename C, typename IssueQK, typename Softmax>
__device__ __forceinline__ void kv_tiles(int n_kv_tiles, int first_masked, int ring_tiles,
                                         const RingBarriers<C::STAGES>& bars, float (&S)[C::S_REGS],
                                         float (&O)[C::O_REGS], const float (&alpha)[2],
                                         uint32_t (&P)[C::K_STEPS_PV][4], uint32_t v_smem0, IssueQK&& issue_qk,
                                         Softmax&& softmax) {
  // O's columns per P V: as many accumulator registers as S has (at most O's)
  constexpr int PART = C::DIM < 2 * C::S_REGS ? C::DIM : 2 * C::S_REGS;
  static_assert(C::DIM % PART == 0, "O's columns in whole parts");
  float(&PV)[PART / 2] = *reinterpret_cast<float(*)[PART / 2]>(&S[0]);
  const auto stage = [&](int tile) { return (ring_tiles + tile) % C::STAGES; };
  const auto parity = [&](int tile) { return uint32_t((ring_tiles + tile) / C::STAGES) & 1; };
  const auto pv = [&](int tile) {  // S holds p(tile), alpha is alpha(tile)
    const int s = stage(tile);
    pack_p<C>(S, P);
    sm90::mbar_wait(bars.v_full(s), parity(tile));
#pragma unroll
    for (int h = 0; h < C::DIM / PART; h++) {
      issue_pv<C, PART>(PV, P, v_smem0 + s * C::STAGE_BYTES + h * PART * 128);  // 128-byte V^T rows
      sm90::wgmma_wait<0>();
      sm90::fence_regs(PV);
#pragma unroll
      for (int j = 0; j < PART / 8; j++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
          float& o = O[h * PART / 2 + 4 * j + c];
          o = o * alpha[c / 2] + PV[4 * j + c];
        }
    }
    sm90::fence_regs(P);
    sm90::mbar_arrive(bars.kv_empty(s));
  };
  const auto step = [&](int tile, auto may_mask) {
    sm90::mbar_wait(bars.k_full(stage(tile)), parity(tile));
    issue_qk(S, stage(tile));
    sm90::wgmma_wait<0>();
    sm90::fence_regs(S);
    softmax(S, tile, may_mask);
    pv(tile);
  };
  step(0, std::true_type{});
  int tile = 1;
  if constexpr (C::UNMASKED_LOOP)
    for (; tile < first_masked; tile++) step(tile, std::false_type{});
  for (; tile < n_kv_tiles; tile++) step(tile, std::true_type{});
}

// KV tiles kv_tile0 .. kv_tile0 + n_kv_tiles - 1 of one item; `finish(O, row_max, row_sum, store)` then takes
// the unnormalised rows (store(): the rows' stores; a split part hands them over instead, see scheduler.cuh).
template <typename C, typename Finish>
__device__ void consume_item(const Fp8FwdParams& fp, const CtaWork& w, uint32_t smem,
                             RingBarriers<C::STAGES> bars, int consumer, sm90::Progress& done, Finish&& finish) {
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
  // softmax(tile) runs once S(tile) = Q K^T is done: after the last one, Q's buffer is free
  auto masked_softmax = [&](float (&S)[C::S_REGS], int tile, auto may_mask) {
    if (tile == w.n_kv_tiles - 1) sm90::mbar_arrive(bars.q_empty());
    const int kv_start = (w.kv_tile0 + tile) * C::BLOCK_KV;
    if constexpr (decltype(may_mask)::value)
      if (tile_needs_mask<C::BLOCK_KV>(p, w, kv_start)) mask_scores<C::FLAT_K>(S, p, w, row0, kv_start);
    hopper::softmax_exp<C>(S, row_max, row_sum, alpha, scale_log2);
  };

  if (w.n_kv_tiles > 0) {
    float S[C::S_REGS];
    uint32_t P[C::K_STEPS_PV][4];
    const int first_masked = C::UNMASKED_LOOP ? first_masked_tile<C::BLOCK_KV>(p, w, w.n_kv_tiles) : w.n_kv_tiles;
    sm90::mbar_wait(bars.q_full(), done.q_loads & 1);
    kv_tiles<C>(w.n_kv_tiles, first_masked, done.kv_tiles, bars, S, O, alpha, P, k_smem(0) + C::K_BYTES,
                [&](float (&scores)[C::S_REGS], int s) { issue_qk<C>(scores, q_smem, k_smem(s)); }, masked_softmax);
    done.kv_tiles += w.n_kv_tiles;
    done.q_loads++;
  }
  // (persistent: the next item's loads are under way while these stores drain)
  // LSE = score_scale * m + ln l: the natural log of the descaled, scaled scores.
  finish(O, row_max, row_sum, scale_log2, [&] {
    store_wgmma_rows_via<C::STAGED_STORE, __nv_bfloat16, false>(
        p, w, row0, O, row_max, row_sum, fp.v_descale[w.batch * p.heads_kv + w.head_kv], smem + C::STORE_OFFSET,
        [score_scale](float m, float l) { return m * score_scale + logf(l); });
  });
}

}  // namespace fa::hopper_fp8
#endif  // FA_SM90A
