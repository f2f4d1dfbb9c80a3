// The fp8 consumer mainloop (QGMMA for both products; V arrives as V^T, the K-major B operand of P V), and
// overlapped_tiles, its KV loop: S(t) and P(t-1) V(t-1) in flight together, softmax(t) while P V runs.
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

// KV tiles 1 .. n-1 and the last P V of a consumer whose tile 0 has had its softmax (S holds its p).
// Step t waits for K(t) and V(t-1), retires P(t-2) V(t-2) (wait, free its stage, O *= alpha,
// P = pack(S): P(t-1)), issues S(t) and P(t-1) V(t-1), waits for S(t) alone and runs softmax(t)
// while P V is on the tensor cores. The retire sits at the top of the next step, after its mbarrier
// waits, and not right after softmax(t): ptxas hoists a wgmma wait to the start of its basic block,
// so a wait written after the softmax ran before it and the softmax never overlapped its own P V
// One P buffer: it is rewritten only after its P V retired.
// Without C::RETIRE_AT_TOP (d128, d256): P(t) packed right after softmax(t) into the
// other of two P buffers, then the wait for P(t-1) V(t-1), which ptxas moves ahead of the softmax.
// issue_qk(S, stage) and issue_pv(P, stage) issue one GEMM each, between turn_begin() and turn_end()
// (ping-pong with the other consumer; no-ops without); softmax(S, tile) leaves p in S and sets
// alpha, O's rescale factors; pack(S, P) writes P's A fragments. The ring position of the item's
// tile t is ring_tiles + t: ring_tiles counts the KV tiles of the CTA's earlier items (persistent CTAs).
// With C::UNMASKED_LOOP, tiles 1 .. first_masked - 1 run a copy of the step whose softmax(S, tile, may_mask) is
// given std::false_type (no mask branch; see HopperTiles::UNMASKED_LOOP), the rest std::true_type.
template <typename C, int P_STEPS, typename IssueQK, typename IssuePV, typename Softmax, typename Pack,
          typename TurnBegin, typename TurnEnd>
__device__ __forceinline__ void overlapped_tiles(int n_kv_tiles, int first_masked, int ring_tiles,
                                                 const RingBarriers<C::STAGES>& bars,
                                                 float (&S)[C::S_REGS], float (&O)[C::O_REGS],
                                                 const float (&alpha)[2], uint32_t (&P)[P_STEPS][4],
                                                 IssueQK&& issue_qk, IssuePV&& issue_pv, Softmax&& softmax,
                                                 Pack&& pack, TurnBegin&& turn_begin, TurnEnd&& turn_end) {
  const auto stage = [&](int tile) { return (ring_tiles + tile) % C::STAGES; };
  const auto parity = [&](int tile) { return uint32_t((ring_tiles + tile) / C::STAGES) & 1; };
  const auto retire = [&](int tile) {  // P(tile) V(tile) is done (tile < 0: none was issued)
    sm90::wgmma_wait<0>();
    sm90::fence_regs(O);
    sm90::fence_regs(P);
    if (tile >= 0) sm90::mbar_arrive(bars.kv_empty(stage(tile)));
    rescale<C>(O, alpha);
    pack(S, P);
    sm90::fence_regs(O);  // keeps the rescale and the packing ahead of the next wgmma.fence
    sm90::fence_regs(P);
  };
  // Step `tile`: wait for K(tile) and V(tile - 1), run before_issue(), issue S(tile) and
  // P_prev V(tile - 1), wait for S(tile) alone, softmax(tile).
  const auto step = [&](int tile, const uint32_t (&P_prev)[P_STEPS][4], auto&& before_issue, auto may_mask) {
    const int s = stage(tile), prev = stage(tile - 1);
    sm90::mbar_wait(bars.k_full(s), parity(tile));
    sm90::mbar_wait(bars.v_full(prev), parity(tile - 1));
    before_issue();
    turn_begin();
    issue_qk(S, s);
    issue_pv(P_prev, prev);
    turn_end();
    sm90::wgmma_wait<1>();  // S(tile) is done, P(tile - 1) V(tile - 1) may still run
    sm90::fence_regs(S);
    softmax(S, tile, may_mask);
  };
  // The last tile's P V, issued alone after before_issue().
  const auto last_pv = [&](const uint32_t (&P_last)[P_STEPS][4], auto&& before_issue) {
    const int last = stage(n_kv_tiles - 1);
    sm90::mbar_wait(bars.v_full(last), parity(n_kv_tiles - 1));
    before_issue();
    turn_begin();
    issue_pv(P_last, last);
    turn_end();
    sm90::wgmma_wait<0>();
    sm90::fence_regs(O);
    sm90::mbar_arrive(bars.kv_empty(last));
  };
  const auto nothing = [] {};
  const std::true_type may_mask;
  const std::false_type no_mask;
  if constexpr (!C::RETIRE_AT_TOP) {
    uint32_t P1[P_STEPS][4];
    pack(S, P);
    const auto old_step = [&](int tile, const uint32_t (&P_prev)[P_STEPS][4], uint32_t (&P_next)[P_STEPS][4],
                              auto tile_may_mask) {
      step(tile, P_prev, nothing, tile_may_mask);
      pack(S, P_next);
      sm90::wgmma_wait<0>();
      sm90::fence_regs(O);
      sm90::mbar_arrive(bars.kv_empty(stage(tile - 1)));
      rescale<C>(O, alpha);
    };
    int tile = 1;
    if constexpr (C::UNMASKED_LOOP)
      for (; tile + 1 < first_masked; tile += 2) {
        old_step(tile, P, P1, no_mask);
        old_step(tile + 1, P1, P, no_mask);
      }
    for (; tile + 1 < n_kv_tiles; tile += 2) {
      old_step(tile, P, P1, may_mask);
      old_step(tile + 1, P1, P, may_mask);
    }
    if (tile < n_kv_tiles) {
      old_step(tile, P, P1, may_mask);
      last_pv(P1, nothing);
    } else {
      last_pv(P, nothing);
    }
  } else {
    int tile = 1;
    if constexpr (C::UNMASKED_LOOP)
      for (; tile < first_masked; tile++) step(tile, P, [&] { retire(tile - 2); }, no_mask);
    for (; tile < n_kv_tiles; tile++) step(tile, P, [&] { retire(tile - 2); }, may_mask);
    last_pv(P, [&] { retire(n_kv_tiles - 2); });
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
  // Ping-pong: consumer c issues its GEMMs after bar.sync on barrier 1 + c, which completes when
  // the other consumer has arrived there, i.e. has issued its own previous GEMMs. Both run the
  // same n + 1 issue phases; consumer 1 starts by letting consumer 0 go first and skips its
  // last arrival, so every barrier phase has exactly 256 arrivals.
  const int phases = w.n_kv_tiles + 1;
  int phase = 0;
  auto gemm_turn_begin = [&] {
    if (C::PINGPONG) sm90::named_barrier_sync(1 + consumer, C::CONSUMER_THREADS);
  };
  auto gemm_turn_end = [&] {
    phase++;
    if (C::PINGPONG && !(consumer == 1 && phase == phases))
      sm90::named_barrier_arrive(2 - consumer, C::CONSUMER_THREADS);
  };
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
    if (C::PINGPONG && consumer == 1) sm90::named_barrier_arrive(1, C::CONSUMER_THREADS);
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

}  // namespace fa::hopper_fp8
#endif  // FA_SM90A
