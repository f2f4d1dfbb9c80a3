// v5 (deep pipeline): v4 with a ring of STAGES >= 3 K/V buffers and the four stages of the
// founding pipeline overlapped: prefetch K/V, S = Q K^T, softmax, O += P V.
// - Loads: tiles t+1 .. t+STAGES-1 are in flight while tile t is computed; the newest one is
//   issued right after the iteration's single barrier (on sm_90a right after S's MMAs).
// - Math: S is computed in place and the registers go to longer tiles (48 keys at d128, 64 at d64);
//   issuing S of tile t+1 before the softmax of tile t (a second S buffer) measured slower in both
//   shapes (docs/design/ladder.md).
// One barrier per tile: the one that publishes tile t+1's K also proves that every warp is
// done with tile t-1 (its V was the last read of that stage), whose stage is refilled next.
// Each warp owns 32 query rows (two m-tiles per K/V fragment: a quarter less shared-memory traffic
// per MMA); at d128 it re-reads Q from shared memory (V5Tiles).
#include "ladder.cuh"

namespace fa {

// Per head_dim (docs/design/ladder.md has the measurements):
// - d64: 64-key tiles with S computed in place (13-14% fewer cycles than 32-key tiles with S computed a tile
//   ahead, whose second S buffer spills at 64 keys); a 4-deep ring.
// - d128: 32 query rows per warp (two m-tiles share every K/V fragment), 4 warps, 48-key tiles and a 3-deep
//   ring (two CTAs per SM: 32 KB of Q + 3 x 24 KB of K/V each); Q no longer fits beside O in registers, so it
//   is re-read from swizzled shared memory every tile. 48 keys beat 32 although 80 bytes of row state spill to
//   (L1-resident) local memory; 64 fit one CTA per SM only.
template <int DIM>
struct V5Tiles;
template <>
struct V5Tiles<64> : Tiles<64, 4, 2, 64> {
  static constexpr bool Q_FROM_SMEM = false;
  static constexpr int STAGES = 4;
};
template <>
struct V5Tiles<128> : Tiles<128, 4, 2, 48> {
  static constexpr bool Q_FROM_SMEM = true;
  static constexpr int STAGES = 3;
};

template <typename T, int DIM>
__global__ void __launch_bounds__(V5Tiles<DIM>::THREADS, 1) fwd_v5_kernel(const FwdParams p) {
  using C = V5Tiles<DIM>;
  constexpr int STAGES = C::STAGES;
  static_assert(STAGES >= 2, "a step reads the tile it waits for while the next one loads");
  constexpr int STAGE_BYTES = 2 * C::KV_BYTES;  // K then V of one tile
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t Q_smem = smem_u32(smem);
  const uint32_t KV_smem = Q_smem + C::Q_BYTES;

  const CtaWork w = cta_work<C::BLOCK_Q, C::BLOCK_KV>(p);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warp_row0 = w.q_start + warp * C::WARP_Q;
  const T* Q = head_base<T>(p.q, p.q_stride, w.batch, w.head_q) + w.q_start * p.q_stride[2];
  const T* K = head_base<T>(p.k, p.k_stride, w.batch, w.head_kv);
  const T* V = head_base<T>(p.v, p.v_stride, w.batch, w.head_kv);

  // The ring slot of a tile is a shared address advanced one slot per tile. Computed as tile % STAGES
  // (a multiply-high for three stages) it was a dependent chain ahead of every shared-memory address
  // of the step: 1.1-1.3% of the cycles at d128 (docs/design/ladder.md).
  const uint32_t ring_end = KV_smem + STAGES * STAGE_BYTES;
  const auto next_slot = [&](uint32_t slot) { return slot + STAGE_BYTES == ring_end ? KV_smem : slot + STAGE_BYTES; };
  auto load_kv = [&](int tile, uint32_t stage) {
    const int kv_start = tile * C::BLOCK_KV;
    load_tile_async<C::BLOCK_KV, DIM, C::THREADS, true>(stage, K + kv_start * p.k_stride[2],
                                                        p.k_stride[2], p.seqlen_k - kv_start);
    load_tile_async<C::BLOCK_KV, DIM, C::THREADS, true>(stage + C::KV_BYTES,
                                                        V + kv_start * p.v_stride[2],
                                                        p.v_stride[2], p.seqlen_k - kv_start);
  };

  // Q read once needs no swizzle; Q re-read every tile does (256-byte rows: 8-way conflicts).
  load_tile_async<C::BLOCK_Q, DIM, C::THREADS, C::Q_FROM_SMEM>(Q_smem, Q, p.q_stride[2],
                                                               p.seqlen_q - w.q_start);
  cp_async_commit();
  // One commit group per tile, committed even when empty, so the group count stays fixed.
#pragma unroll
  for (int tile = 0; tile < STAGES - 1; tile++) {
    if (tile < w.n_kv_tiles) load_kv(tile, KV_smem + tile * STAGE_BYTES);
    cp_async_commit();
  }
  cp_async_wait<STAGES - 2>();  // Q and tile 0 have landed
  __syncthreads();
  uint32_t Q_rmem[C::Q_FROM_SMEM ? 1 : C::M_TILES][C::D_STEPS][4];
  if constexpr (!C::Q_FROM_SMEM) load_q_fragments<C>(Q_rmem, Q_smem, warp);
  const SwizzledLane<C::ROW_BYTES, 4> K_lane(lane % 8, lane / 8);
  // V (two n-tiles per x4) and Q (one 16x16 A fragment per x4) share the lane pattern.
  const SwizzledLane<C::ROW_BYTES, 2> V_lane(lane % 16, lane / 16);
  const uint32_t Q_warp_smem = Q_smem + warp * C::WARP_Q * C::ROW_BYTES;
  // K, one k-step of two n-tiles per x4: lanes 0-15 key rows 0-7 (low, high 8 columns),
  // lanes 16-31 key rows 8-15.
  const SwizzledLane<C::ROW_BYTES, 2> K_pair_lane(lane % 8 + (lane / 16) * 8, (lane / 8) % 2);

  // S = Q K^T for one tile, masked when the tile needs it.
  auto scores = [&](float (&S)[C::M_TILES][C::KV_TILES][4], uint32_t K_smem) {
#pragma unroll
    for (int mt = 0; mt < C::M_TILES; mt++)
#pragma unroll
      for (int nt = 0; nt < C::KV_TILES; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) S[mt][nt][i] = 0.f;
    if constexpr (C::Q_FROM_SMEM) {
      // k-steps outermost so that only one k-step of Q per m-tile (8 registers) is live; each K
      // x4 then covers two n-tiles of that k-step (K_pair_lane).
#pragma unroll
      for (int kk = 0; kk < C::D_STEPS; kk++) {
        uint32_t Q_frag[C::M_TILES][4];
#pragma unroll
        for (int mt = 0; mt < C::M_TILES; mt++)
          ldmatrix_x4(Q_frag[mt], Q_warp_smem + V_lane.at(kk * 2) + mt * 16 * C::ROW_BYTES);
#pragma unroll
        for (int nt = 0; nt < C::KV_TILES; nt += 2) {
          uint32_t K_frag[4];
          ldmatrix_x4(K_frag, K_smem + K_pair_lane.at(kk * 2) + nt * 8 * C::ROW_BYTES);
#pragma unroll
          for (int mt = 0; mt < C::M_TILES; mt++) {
            mma_m16n8k16<T>(S[mt][nt], Q_frag[mt], K_frag[0], K_frag[1]);
            mma_m16n8k16<T>(S[mt][nt + 1], Q_frag[mt], K_frag[2], K_frag[3]);
          }
        }
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < C::KV_TILES; nt++)
#pragma unroll
        for (int kk = 0; kk < C::D_STEPS; kk += 2) {
          uint32_t K_frag[4];
          ldmatrix_x4(K_frag, K_smem + K_lane.at(kk * 2) + nt * 8 * C::ROW_BYTES);
#pragma unroll
          for (int mt = 0; mt < C::M_TILES; mt++) {
            mma_m16n8k16<T>(S[mt][nt], Q_rmem[mt][kk], K_frag[0], K_frag[1]);
            mma_m16n8k16<T>(S[mt][nt], Q_rmem[mt][kk + 1], K_frag[2], K_frag[3]);
          }
        }
    }
  };
  auto mask_if_needed = [&](float (&S)[C::M_TILES][C::KV_TILES][4], int tile) {
    const int kv_start = tile * C::BLOCK_KV;
    if (tile_needs_mask<C::BLOCK_KV>(p, w, kv_start)) mask_scores(S, p, w, warp_row0, kv_start);
  };

  float O_rmem[C::M_TILES][C::D_TILES][4] = {};
  float row_max[C::M_TILES][2], row_sum[C::M_TILES][2];
#pragma unroll
  for (int mt = 0; mt < C::M_TILES; mt++)
#pragma unroll
    for (int r = 0; r < 2; r++) row_max[mt][r] = -INFINITY, row_sum[mt][r] = 0.f;
  const float scale_log2 = p.scale * LOG2E;
  uint32_t slot = KV_smem;                               // tile t's ring slot
  uint32_t prev = KV_smem + (STAGES - 1) * STAGE_BYTES;  // tile t-1's (for t = 0 the last, still empty)

  // One pipelined step on tile t, its scores in S_cur.
  auto step = [&](float (&S_cur)[C::M_TILES][C::KV_TILES][4], int tile) {
    // Tile t has landed; the tiles after it may still be in flight.
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // that tile visible to all; all warps are done with tile t-1
    const int load_tile = tile + STAGES - 1;  // into tile t-1's stage
    // The loads go after S's MMAs: the reloads of the spilled address constants they
    // need then wait under the tensor work, not ahead of it (-0.9% cycles at 4k, -1.2% at 16k on sm_90a).
    // Not on sm_80, where that order spills 16 bytes more and was never measured.
#if __CUDA_ARCH__ >= 900
    constexpr bool LOADS_AFTER_S = true;
#else
    constexpr bool LOADS_AFTER_S = false;
#endif
    // (The two-line load is written out at both places: as one lambda, ptxas compiled both shapes' loops
    // differently from the measured ones.)
    if constexpr (!LOADS_AFTER_S) {
      if (load_tile < w.n_kv_tiles) load_kv(load_tile, prev);
      cp_async_commit();
    }
    scores(S_cur, slot);
    if constexpr (LOADS_AFTER_S) {
      if (load_tile < w.n_kv_tiles) load_kv(load_tile, prev);
      cp_async_commit();
    }
    mask_if_needed(S_cur, tile);

    uint32_t P_rmem[C::M_TILES][C::KV_STEPS][4];
    online_softmax<T>(S_cur, row_max, row_sum, O_rmem, P_rmem, scale_log2);

    const uint32_t V_smem = slot + C::KV_BYTES;
#pragma unroll
    for (int kk = 0; kk < C::KV_STEPS; kk++)
#pragma unroll
      for (int nd = 0; nd < C::D_TILES; nd += 2) {
        uint32_t V_frag[4];
        ldmatrix_x4_trans(V_frag, V_smem + V_lane.at(nd) + kk * 16 * C::ROW_BYTES);
#pragma unroll
        for (int mt = 0; mt < C::M_TILES; mt++) {
          mma_m16n8k16<T>(O_rmem[mt][nd], P_rmem[mt][kk], V_frag[0], V_frag[1]);
          mma_m16n8k16<T>(O_rmem[mt][nd + 1], P_rmem[mt][kk], V_frag[2], V_frag[3]);
        }
      }
    prev = slot;
    slot = next_slot(slot);
  };

  // Unrolled by two, each step on its own score buffer: the form whose machine code was measured.
  float S_a[C::M_TILES][C::KV_TILES][4], S_b[C::M_TILES][C::KV_TILES][4];
  for (int tile = 0; tile < w.n_kv_tiles; tile += 2) {
    step(S_a, tile);
    if (tile + 1 < w.n_kv_tiles) step(S_b, tile + 1);
  }
  store_output<T>(p, w, warp_row0, O_rmem, row_max, row_sum);
}

}  // namespace fa

extern "C" int cuda_fa_fwd_v5(const FwdParams* p, cudaStream_t stream, char* err, int err_len) {
  return fa::dispatch(*p, err, err_len, [&]<typename T, int DIM>() {
    using C = fa::V5Tiles<DIM>;
    return fa::launch_fwd(fa::fwd_v5_kernel<T, DIM>, C::BLOCK_Q, C::THREADS,
                          C::Q_BYTES + C::STAGES * 2 * C::KV_BYTES, *p, stream, err, err_len);
  });
}
