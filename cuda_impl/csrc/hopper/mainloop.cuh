// The 16-bit consumer mainloop: per item, S(t) = Q K(t)^T and O += P(t-1) V(t-1) issued together (wgmma, P from
// registers), the online softmax of tile t while P V runs, the consumers taking turns on the tensor cores
// (PingPong). The barrier protocol it keeps is written out in fwd_hopper.cu.
#pragma once

#include <type_traits>

#include "fwd_common.cuh"
#include "hopper/epilogue.cuh"
#include "hopper/mask.cuh"
#include "hopper/ring.cuh"
#include "hopper/scheduler.cuh"
#include "hopper/sm90.cuh"
#include "hopper/softmax.cuh"
#include "hopper/trace.cuh"

#if FA_SM90A
namespace fa::hopper {

// The consumers' turns to issue GEMMs, round robin (see the protocol above); no-ops with
// C::PINGPONG false (the no_pingpong ablation). No branch may sit between a wgmma and its wait (ptxas would serialise the
// wgmmas, C7520), so pass_turn is unconditional and consumer 0 takes one extra turn at the end
// (finish) to absorb the last consumer's last hand-over.
template <typename C>
struct PingPong {
  int consumer;
  __device__ __forceinline__ void start() const {
    if (C::PINGPONG && consumer == 0)
      sm90::named_barrier_arrive(C::PINGPONG_BAR, C::PINGPONG_THREADS);
  }
  __device__ __forceinline__ void wait_turn() const {
    if (C::PINGPONG) sm90::named_barrier_sync(C::PINGPONG_BAR + consumer, C::PINGPONG_THREADS);
  }
  __device__ __forceinline__ void pass_turn() const {
    // (1 - consumer for two: the same machine code as before the round robin)
    const int next = C::CONSUMERS == 2 ? 1 - consumer : (consumer + 1) % C::CONSUMERS;
    if (C::PINGPONG) sm90::named_barrier_arrive(C::PINGPONG_BAR + next, C::PINGPONG_THREADS);
  }
  __device__ __forceinline__ void finish() const {
    if (consumer == 0) wait_turn();
  }
};

// What the softmax multiplies raw scores by: the softmax scale, or 1 where a local launch's cap already applied it.
template <typename C>
__device__ __forceinline__ float score_scale(const FwdParams& p) {
  return C::LOCAL && p.softcap > 0.f ? 1.f : p.scale;
}

// S = Q K^T: k-step kk reads 16 columns = 32 bytes inside panel kk / STEPS of both operands (STEPS = SWIZZLE / 32
// k-steps per panel: 4 in 128-byte rows, 2 in 64-byte, 1 in 32-byte).
template <typename T, typename C>
__device__ __forceinline__ void issue_s(float (&S)[C::S_REGS], uint32_t q_smem, uint32_t k_smem) {
  constexpr int STEPS = C::SWIZZLE / 32;
  const uint64_t q_desc = sm90::desc_kmajor<C::SWIZZLE>(q_smem), k_desc = sm90::desc_kmajor<C::SWIZZLE>(k_smem);
#pragma unroll
  for (int kk = 0; kk < C::PANELS * STEPS; kk++) {
    const uint32_t in_panel = (kk % STEPS) * 32;
    sm90::wgmma_ss<T, C::BLOCK_KV>(S, sm90::desc_advance(q_desc, (kk / STEPS) * C::Q_PANEL_BYTES + in_panel),
                                   sm90::desc_advance(k_desc, (kk / STEPS) * C::KV_PANEL_BYTES + in_panel), kk > 0);
  }
  sm90::wgmma_commit();
}

// O += P V: key step kk is rows 16kk.. of V = two 8-row atoms (16 rows of SWIZZLE bytes) further; V's head_dim (N,
// DIM_V columns) panels are KV_PANEL_BYTES apart (the MN-major descriptor's LBO).
template <typename T, typename C>
__device__ __forceinline__ void issue_pv(float (&O)[C::O_REGS], const uint32_t (&P)[C::BLOCK_KV / 16][4],
                                         uint32_t v_smem) {
  const uint64_t v_desc = sm90::desc_swizzled<C::SWIZZLE>(v_smem, C::KV_PANEL_BYTES, 8 * C::SWIZZLE);
#pragma unroll
  for (int kk = 0; kk < C::BLOCK_KV / 16; kk++)
    sm90::wgmma_rs<T, C::DIM_V>(O, P[kk], sm90::desc_advance(v_desc, kk * 16 * C::SWIZZLE));
  sm90::wgmma_commit();
}

// KV tiles kv_tile0 .. kv_tile0 + n_kv_tiles - 1 of one item; `finish(O, row_max, row_sum, row0)` then takes
// the unnormalised rows (the stores, or a split part's hand-over). `next()` runs once, under the last P V (or at
// the end of an item with no KV tile).
template <typename T, typename C, typename Finish, typename Next>
__device__ void consume_item(const FwdParams& p, const CtaWork& w, uint32_t smem,
                             Barriers<C::STAGES> bars, const PingPong<C>& turns, sm90::Progress& done,
                             uint32_t rank, Finish&& finish, Next&& next) {
  const int consumer = turns.consumer;
  const int warp_in_group = (threadIdx.x % 128) / 32;
  const int row0 = w.q_start + consumer * 64 + warp_in_group * 16 + (threadIdx.x % 32) / 4;
  float O[C::O_REGS];
#pragma unroll
  for (int i = 0; i < C::O_REGS; i++) O[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  const float scale_log2 = score_scale<C>(p) * LOG2E;
  const float cap_in = C::LOCAL ? p.scale / p.softcap : 0.f;  // (used only where softcap > 0)
  // This warpgroup's 64 rows start 64 rows into every Q panel (8 swizzle atoms: aligned).
  const uint32_t q_smem = smem + consumer * 64 * C::SWIZZLE;
  const auto k_smem = [&](int s) { return smem + C::K_OFFSET + s * C::STAGE_BYTES; };
  // Stage and phase parity of the item's KV tile `tile` in the ring.
  const auto stage = [&](int tile) { return (done.kv_tiles + tile) % C::STAGES; };
  const auto parity = [&](int tile) { return uint32_t((done.kv_tiles + tile) / C::STAGES) & 1; };
  // This CTA is done reading a K or V slot; in a cluster the other CTA's producer, which writes its
  // share of the slot here too, hears it from one thread per warp (the wgmma reads of the whole warp
  // retired at the wait before).
  const auto release = [&](uint32_t bar) {
    sm90::mbar_arrive(bar);
    if constexpr (C::CLUSTER > 1) sm90::mbar_arrive_cluster(bar, rank ^ 1, threadIdx.x % 32 == 0);
  };
  const int n = w.n_kv_tiles;
  float S[C::S_REGS];
  uint32_t P[C::BLOCK_KV / 16][4];  // P(t-1), read by the P V wgmma in flight during softmax(t)
  float alpha[2];

  // Masks keys past seqlen_k and after the diagonal (if the tile may need it), then the first half of the softmax.
  // Local launches cap the scores first (softcap > 0) and also mask the window's left side.
  const auto softmax = [&](int tile, auto may_mask) {
    const int kv_start = (w.kv_tile0 + tile) * C::BLOCK_KV;
    if constexpr (C::LOCAL) {
      if (p.softcap > 0.f) softcap_scores(S, cap_in, p.softcap);
      if constexpr (decltype(may_mask)::value)
        if (local_tile_needs_mask<C::BLOCK_KV>(p, w, kv_start)) mask_scores<false, true>(S, p, w, row0, kv_start);
    } else if constexpr (decltype(may_mask)::value) {
      if (tile_needs_mask<C::BLOCK_KV>(p, w, kv_start)) mask_scores(S, p, w, row0, kv_start);
    }
    softmax_exp<C>(S, row_max, row_sum, alpha, scale_log2);
  };
  const std::true_type may_mask;
  // P(tile) V(tile) is done (tile < 0: none was issued): free its V, O *= alpha, P = the next P.
  // It runs at the top of the next step, after that step's mbarrier waits: ptxas hoists a wgmma
  // wait to the start of its basic block, so written right after softmax(t) the wait ran before
  // the softmax, which then never overlapped its own warpgroup's P V.
  const auto retire = [&](int tile) {
    sm90::wgmma_wait<0>();
    sm90::fence_regs(O);
    sm90::fence_regs(P);  // P(t-1) stays untouched until its wgmma has retired
    if (tile >= 0) release(bars.v_empty(stage(tile)));
    rescale_and_pack<T, C>(S, O, alpha, P);
    sm90::fence_regs(O);  // keeps the rescale and the packing ahead of the next wgmma.fence
    sm90::fence_regs(P);
  };
  // Step t >= 1: S(t), and O += P(t-1) V(t-1). (A lambda: written inline in the loop, the 128-key
  // and d64 kernels compile with one compare's operands swapped, a schedule that was never measured.)
  const auto step = [&](int tile, auto tile_may_mask) {
    const uint32_t base = C::PIN_BASE ? sm90::shared_base_anew() : smem;
    const auto k_smem = [&](int s) { return base + C::K_OFFSET + s * C::STAGE_BYTES; };
    const uint32_t q_smem = base + consumer * 64 * C::SWIZZLE;
    const int s = stage(tile), prev = stage(tile - 1);
    sm90::mbar_wait(bars.k_full(s), parity(tile));
    // V(t-1) landed with K(t-1), long ago; waiting here keeps every branch out of the span
    // between wgmma.fence and the last wgmma (ptxas would inject a warpgroup.arrive, C7519).
    sm90::mbar_wait(bars.v_full(prev), parity(tile - 1));
    if (C::RETIRE_AT_TOP) retire(tile - 2);  // P(t-2) V(t-2) ran under softmax(t-1)
    turns.wait_turn();
    sm90::wgmma_fence();
    issue_s<T, C>(S, q_smem, k_smem(s));
    issue_pv<T, C>(O, P, k_smem(prev) + C::K_BYTES);  // O += P(t-1) V(t-1), queued behind S(t)
    turns.pass_turn();
    sm90::wgmma_wait<C::OVERLAP ? 1 : 0>();  // S(t) only: P V may still run (see retire)
    sm90::fence_regs(S);
    release(bars.k_empty(s));
    if (tile == n - 1) sm90::mbar_arrive(bars.q_empty());  // Q is free: the next item's loads under this one's end
    softmax(tile, tile_may_mask);
    if (!C::RETIRE_AT_TOP) retire(tile - 1);
  };
  // The last tile's P V; `next()` under it. (Also a lambda as measured: written out in place, ptxas compiled six of
  // the kernels differently.)
  const auto last_pv = [&] {
    const int s = stage(n - 1);
    sm90::mbar_wait(bars.v_full(s), parity(n - 1));
    if (C::RETIRE_AT_TOP) retire(n - 2);
    sm90::wgmma_fence();
    issue_pv<T, C>(O, P, k_smem(s) + C::K_BYTES);
    next();
    sm90::wgmma_wait<0>();
    sm90::fence_regs(O);
    trace::mark(turns.consumer + 1, done.q_loads, trace::LAST_PV_RETIRED);
    release(bars.v_empty(s));
  };

  // One block for tile 0, the loop and the last P V: with the loop outside it, ptxas saw a path
  // from the loop (a P V in flight) past a skipped last block and injected a wait (C7517).
  if (n > 0) {
    const int role = consumer + 1;
    trace::mark(role, done.q_loads, trace::BEGIN);
    // tile 0: S only (O is still zero)
    sm90::mbar_wait(bars.q_full(), done.q_loads & 1);
    trace::mark(role, done.q_loads, trace::Q_LANDED);
    sm90::mbar_wait(bars.k_full(stage(0)), parity(0));
    turns.wait_turn();
    trace::mark(role, done.q_loads, trace::S0_TURN);
    sm90::wgmma_fence();
    issue_s<T, C>(S, q_smem, k_smem(stage(0)));
    turns.pass_turn();
    sm90::wgmma_wait<0>();
    sm90::fence_regs(S);
    trace::mark(role, done.q_loads, trace::S0_RETIRED);
    release(bars.k_empty(stage(0)));
    if (n == 1) sm90::mbar_arrive(bars.q_empty());
    softmax(0, may_mask);
    if (!C::RETIRE_AT_TOP) retire(-1);  // P(0); then each retire right after its softmax
    trace::mark(role, done.q_loads, trace::LOOP_IN);
    int tile = 1;
    if constexpr (C::UNMASKED_LOOP && C::LOCAL) {
      // a window's left edge first (masked), then its interior, then the right edge and the tail
      const int clear = first_clear_tile<C::BLOCK_KV>(w, n);
      for (; tile < clear; tile++) step(tile, may_mask);
      for (const int first_masked = first_masked_tile<C::BLOCK_KV>(p, w, n, clear); tile < first_masked; tile++)
        step(tile, std::false_type{});
    } else if constexpr (C::UNMASKED_LOOP) {
      for (const int first_masked = first_masked_tile<C::BLOCK_KV>(p, w, n); tile < first_masked; tile++)
        step(tile, std::false_type{});
    }
    for (; tile < n; tile++) step(tile, may_mask);
    trace::mark(role, done.q_loads, trace::LOOP_OUT);
    last_pv();
    done.kv_tiles += n;
    done.q_loads++;
  } else {
    next();
  }
  // The next item's loads are already under way while these stores drain.
  finish(O, row_max, row_sum, row0);
}

template <typename T, typename C>
__device__ __forceinline__ void store_rows(const FwdParams& p, const CtaWork& w, int row0, float (&O)[C::O_REGS],
                                           const float (&row_max)[2], const float (&row_sum)[2], uint32_t smem) {
  store_wgmma_rows_via<C::STAGED_STORE, T, true>(p, w, row0, O, row_max, row_sum, 1.f, smem + C::STORE_OFFSET,
                                                 [&p](float m, float l) { return m * score_scale<C>(p) + logf(l); });
}

}  // namespace fa::hopper
#endif  // FA_SM90A
