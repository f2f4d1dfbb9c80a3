// The producer: one thread of warpgroup 0 issues every TMA load, Q once per item, then K and V of each tile into
// the ring, each after the consumers freed the slot (ring.cuh). One per family: the 16-bit kernel's (clusters:
// each producer loads half of a K/V tile, multicast into both CTAs), fp8's (flat K through the 5-D key-permuted
// map) and the block-scaled kernel's (V^T in two 64-key panels).
#pragma once

#include "fwd_common.cuh"
#include "hopper/ring.cuh"
#include "hopper/scheduler.cuh"
#include "hopper/sm90.cuh"
#include "hopper/trace.cuh"

#if FA_SM90A
namespace fa::hopper {

// One K or V tile into the ring: the whole tile, or (cluster) this CTA's share of its rows,
// multicast to the same place in every CTA of the cluster.
// PANELS: K's (C::PANELS) or V's (C::V_PANELS).
template <typename C, int PANELS>
__device__ __forceinline__ void load_kv_tile(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                             int kv_start, const CtaWork& w, uint32_t rank) {
#pragma unroll
  for (int panel = 0; panel < PANELS; panel++) {
    if constexpr (C::CLUSTER == 1)
      sm90::tma_load_4d(dst + panel * C::KV_PANEL_BYTES, map, bar, panel * C::PANEL_COLS, kv_start, w.head_kv,
                        w.batch);
    else
      sm90::tma_load_4d_multicast(dst + panel * C::KV_PANEL_BYTES + rank * C::KV_BOX_ROWS * C::SWIZZLE, map, bar,
                                  panel * C::PANEL_COLS, kv_start + rank * C::KV_BOX_ROWS, w.head_kv, w.batch,
                                  (1u << C::CLUSTER) - 1);
  }
}

template <typename C>
__device__ void produce_item(const CtaWork& w, uint32_t smem, Barriers<C::STAGES> bars,
                             sm90::Progress& done, const CUtensorMap* map_q, const CUtensorMap* map_k,
                             const CUtensorMap* map_v, uint32_t rank) {
  if (w.n_kv_tiles == 0) return;
  trace::mark(0, done.q_loads, trace::BEGIN);
  trace::mark(0, done.q_loads, trace::TILES, w.n_kv_tiles);
  sm90::mbar_wait(bars.q_empty(), (done.q_loads & 1) ^ 1);
  trace::mark(0, done.q_loads, trace::Q_ISSUED);
  sm90::mbar_arrive_expect_tx(bars.q_full(), C::Q_BYTES);
#pragma unroll
  for (int panel = 0; panel < C::PANELS; panel++)
    sm90::tma_load_4d(smem + panel * C::Q_PANEL_BYTES, map_q, bars.q_full(), panel * C::PANEL_COLS,
                      C::VARLEN ? w.q_row0 + w.q_start : w.q_start, w.head_q, w.batch);
  for (int tile = 0; tile < w.n_kv_tiles; tile++) {
    const int s = (done.kv_tiles + tile) % C::STAGES;
    const uint32_t round_parity = ((done.kv_tiles + tile) / C::STAGES) & 1;
    const uint32_t k_smem = smem + C::K_OFFSET + s * C::STAGE_BYTES;
    // (varlen: rows of the packed K / V; a tile's rows past the sequence are the next one's, masked as keys past
    // seqlen_k)
    const int kv_start = (w.kv_tile0 + tile) * C::BLOCK_KV + (C::VARLEN ? w.k_row0 : 0);
    // (cluster: the whole tile's bytes land here, this producer's share and the other's)
    sm90::mbar_wait(bars.k_empty(s), round_parity ^ 1);
    sm90::mbar_arrive_expect_tx(bars.k_full(s), C::K_BYTES);
    load_kv_tile<C, C::PANELS>(k_smem, map_k, bars.k_full(s), kv_start, w, rank);
    if (tile == 0) trace::mark(0, done.q_loads, trace::K0_ISSUED);
    sm90::mbar_wait(bars.v_empty(s), round_parity ^ 1);
    sm90::mbar_arrive_expect_tx(bars.v_full(s), C::V_BYTES);
    load_kv_tile<C, C::V_PANELS>(k_smem + C::K_BYTES, map_v, bars.v_full(s), kv_start, w, rank);
  }
  trace::mark(0, done.q_loads, trace::LAST_V_ISSUED);
  done.kv_tiles += w.n_kv_tiles;
  done.q_loads++;
}

// Cluster: the other CTA's consumers arrive on this CTA's empty barriers until they have read
// its last tiles, so the producer waits for the last round of every stage before the CTA may exit.
template <typename C>
__device__ void drain_ring(Barriers<C::STAGES> bars, const sm90::Progress& done) {
  for (int j = 0; j < C::STAGES; j++) {
    const int t = done.kv_tiles + j;
    sm90::mbar_wait(bars.k_empty(t % C::STAGES), ((t / C::STAGES) & 1) ^ 1);
    sm90::mbar_wait(bars.v_empty(t % C::STAGES), ((t / C::STAGES) & 1) ^ 1);
  }
}

}  // namespace fa::hopper

namespace fa::hopper_fp8 {

template <typename C>
__device__ void produce_item(const FwdParams& p, const CtaWork& w, uint32_t smem, RingBarriers<C::STAGES> bars,
                             sm90::Progress& done, const CUtensorMap* map_q, const CUtensorMap* map_k,
                             const CUtensorMap* map_vt) {
  if (w.n_kv_tiles == 0) return;
  sm90::mbar_wait(bars.q_empty(), (done.q_loads & 1) ^ 1);  // the previous item's last S = Q K^T is done
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

}  // namespace fa::hopper_fp8

namespace fa::hopper_mx {

template <typename C>
__device__ void produce(const CtaWork& w, uint32_t smem, hopper_fp8::RingBarriers<C::STAGES> bars,
                        const CUtensorMap* map_q, const CUtensorMap* map_k,
                        const CUtensorMap* map_vt) {
  if (w.n_kv_tiles == 0) return;
  sm90::mbar_arrive_expect_tx(bars.q_full(), C::Q_BYTES);
#pragma unroll
  for (int panel = 0; panel < C::DIM / 64; panel++)
    sm90::tma_load_4d(smem + panel * C::Q_PANEL_BYTES, map_q, bars.q_full(), panel * 128,
                      w.q_start, w.head_q, w.batch);
  for (int tile = 0; tile < w.n_kv_tiles; tile++) {
    const int s = tile % C::STAGES;
    sm90::mbar_wait(bars.kv_empty(s), ((tile / C::STAGES) & 1) ^ 1);
    const uint32_t k_smem = smem + C::K_OFFSET + s * C::STAGE_BYTES;
    const int kv_start = tile * C::BLOCK_KV;
    sm90::mbar_arrive_expect_tx(bars.k_full(s), C::K_BYTES);
#pragma unroll
    for (int panel = 0; panel < C::DIM / 64; panel++)
      sm90::tma_load_4d(k_smem + panel * C::K_PANEL_BYTES, map_k, bars.k_full(s), panel * 128,
                        kv_start, w.head_kv, w.batch);
    sm90::mbar_arrive_expect_tx(bars.v_full(s), C::V_BYTES);
#pragma unroll
    for (int panel = 0; panel < C::BLOCK_KV / 64; panel++)  // V^T: inner coordinate in bytes
      sm90::tma_load_4d(k_smem + C::K_BYTES + panel * C::V_PANEL_BYTES, map_vt, bars.v_full(s),
                        (kv_start + panel * 64) * 2, 0, w.head_kv, w.batch);
  }
}

}  // namespace fa::hopper_mx
#endif  // FA_SM90A
