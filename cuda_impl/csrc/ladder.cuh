// The mma.sync ladder's shared parts (fwd_v1..v5.cu, and the sm120 block-scaled kernel built on them): the
// per-head_dim tile table, the cp.async tile loader, Q's fragments, swizzled ldmatrix lanes, masking, the
// online softmax on mma.sync fragments and the epilogue. The versions differ only in how K/V reach shared
// memory and registers (see each fwd_v*.cu).
#pragma once

#include <cmath>

#include "common.cuh"
#include "fwd_common.cuh"

namespace fa {

// Tile shape. Each warp owns WARP_Q = 16 * M_TILES query rows for the whole KV sweep; the CTA
// streams BLOCK_KV keys at a time through shared memory.
template <int DIM_, int NUM_WARPS_, int M_TILES_, int BLOCK_KV_>
struct Tiles {
  static constexpr int DIM = DIM_;
  static constexpr int NUM_WARPS = NUM_WARPS_;
  static constexpr int M_TILES = M_TILES_;
  static constexpr int BLOCK_KV = BLOCK_KV_;
  static constexpr int THREADS = NUM_WARPS * 32;
  static constexpr int WARP_Q = 16 * M_TILES;
  static constexpr int BLOCK_Q = NUM_WARPS * WARP_Q;
  static constexpr int ROW_CHUNKS = DIM / 8;  // 16-byte chunks per row
  static constexpr int ROW_BYTES = DIM * 2;
  static constexpr int Q_BYTES = BLOCK_Q * ROW_BYTES;
  static constexpr int KV_BYTES = BLOCK_KV * ROW_BYTES;  // one K or one V tile
  static constexpr int D_STEPS = DIM / 16;                // k-steps of Q @ K^T
  static constexpr int D_TILES = DIM / 8;                 // n-tiles of P @ V
  static constexpr int KV_STEPS = BLOCK_KV / 16;          // k-steps of P @ V
  static constexpr int KV_TILES = BLOCK_KV / 8;           // n-tiles of Q @ K^T
};

// The head_dim -> tile shape table shared by the ladder. Registers decide it: O (fp32) and Q
// (16-bit) live in registers for the whole KV sweep, so WARP_Q shrinks as DIM grows.
// - d64: 32 rows per warp (two m-tiles share every K/V fragment, halving shared-memory reads
//   per MMA); BLOCK_KV 32 keeps S small enough for ~210 registers without spills.
// - d128: 16 rows per warp (Q 32 + O 64 + S 32 registers); 8 warps make BLOCK_Q 128, which
//   halves the L2 -> shared traffic per FLOP against BLOCK_Q 64. Measured on H200 at the
//   founding shape: v4 prefers 4 warps (316 vs 305 TFLOP/s: two CTAs per SM), v5 8 warps (303
//   vs 247: its 4-stage ring leaves room for one 4-warp CTA per SM); docs/design/ladder.md.
// - d256 does not fit: Q 64 + O 128 registers per thread already spill (checked with
//   -Xptxas -v), so the Python side refuses it (cuda:hopper runs d256: Q stays in shared memory).
template <int DIM>
struct LadderTiles;
template <>
struct LadderTiles<64> : Tiles<64, 4, 2, 32> {};
template <>
struct LadderTiles<128> : Tiles<128, 8, 1, 64> {};


// Copy ROWS x DIM elements (row stride `row_stride`) into shared memory with 16-byte cp.async.
// Rows at or past `valid_rows` are zero-filled. Consecutive threads take consecutive chunks of
// a row (coalesced reads; conflict-free shared writes, swizzled or not), and each pass moves
// ROWS_PER_PASS rows, a multiple of 8, so a thread's swizzle pattern is the same in every pass
// and all its shared addresses are one register plus immediates. Only tail tiles pay for the
// per-row bounds checks.
template <int ROWS, int DIM, int THREADS, bool SWIZZLE, typename T>
__device__ __forceinline__ void load_tile_async(uint32_t smem, const T* gmem, int64_t row_stride,
                                                int valid_rows) {
  constexpr int ROW_CHUNKS = DIM / 8;
  constexpr int ROWS_PER_PASS = THREADS / ROW_CHUNKS;
  constexpr int PASSES = ROWS / ROWS_PER_PASS;
  static_assert(ROWS % ROWS_PER_PASS == 0, "tile must split evenly over the CTA");
  static_assert(!SWIZZLE || ROWS_PER_PASS % 8 == 0, "passes must keep row % 8 fixed");
  const int row = threadIdx.x / ROW_CHUNKS;
  const int chunk = threadIdx.x % ROW_CHUNKS;
  const T* src = gmem + row * row_stride + chunk * 8;
  const uint32_t dst = smem + tile_offset<ROW_CHUNKS, SWIZZLE>(row, chunk);
  const int64_t pass_stride = ROWS_PER_PASS * row_stride;
  if (valid_rows >= ROWS) {
#pragma unroll
    for (int i = 0; i < PASSES; i++)
      cp_async_16(dst + i * ROWS_PER_PASS * ROW_CHUNKS * 16, src + i * pass_stride, 16);
  } else {
#pragma unroll
    for (int i = 0; i < PASSES; i++) {
      const bool valid = row + i * ROWS_PER_PASS < valid_rows;
      cp_async_16(dst + i * ROWS_PER_PASS * ROW_CHUNKS * 16, valid ? src + i * pass_stride : gmem,
                  valid ? 16 : 0);
    }
  }
}

// Q tile (shared, unswizzled: read once, so bank conflicts cost nothing) -> this warp's A
// fragments, one ldmatrix.x4 per 16x16 block: lanes 0-15 address rows 0-15 at the low 8
// columns, lanes 16-31 the same rows at the high 8 columns.
template <typename C>
__device__ __forceinline__ void load_q_fragments(uint32_t (&Q_rmem)[C::M_TILES][C::D_STEPS][4],
                                                 uint32_t Q_smem, int warp) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int mt = 0; mt < C::M_TILES; mt++)
#pragma unroll
    for (int kk = 0; kk < C::D_STEPS; kk++) {
      const int row = warp * C::WARP_Q + mt * 16 + lane % 16;
      ldmatrix_x4(Q_rmem[mt][kk], Q_smem + tile_offset<C::ROW_CHUNKS, false>(row, kk * 2 + lane / 16));
    }
}

// Per-lane byte offsets of swizzled ldmatrix.x4 reads, computed once before the KV loop.
// A lane reads row `row` at chunk c + dc, where c is a compile-time multiple of STEP and
// dc < STEP its own part; the swizzled chunk is then (c + dc) ^ (row % 8) = c ^ x with the lane
// constant x = dc ^ (row % 8) < 8. Only c % 8 meets x, so 8 / STEP precomputed offsets cover
// every fragment and the rest (c / 8 and the fragment's row) becomes an immediate.
//   K (two k-steps per x4): row = l % 8,  dc = l / 8  (STEP 4)
//   V (two n-tiles per x4): row = l % 16, dc = l / 16 (STEP 2); fragment rows are multiples of 8.
template <int ROW_BYTES, int STEP>
struct SwizzledLane {
  uint32_t offset[8 / STEP];

  __device__ __forceinline__ SwizzledLane(int row, int dc) {
    const int x = dc ^ (row % 8);
#pragma unroll
    for (int j = 0; j < 8 / STEP; j++) offset[j] = row * ROW_BYTES + ((j * STEP) ^ x) * 16;
  }
  // Byte offset of compile-time chunk `chunk` (a multiple of STEP) in the lane's row.
  __device__ __forceinline__ uint32_t at(int chunk) const {
    return offset[(chunk % 8) / STEP] + (chunk / 8) * 128;
  }
};

// Set masked scores to -inf: keys past seqlen_k, and keys after the causal diagonal.
// `warp_row0` is the warp's first query row; S holds rows g, g+8 of each 16-row m-tile.
template <int M_TILES, int KV_TILES>
__device__ __forceinline__ void mask_scores(float (&S)[M_TILES][KV_TILES][4], const FwdParams& p,
                                            const CtaWork& w, int warp_row0, int kv_start) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
    for (int nt = 0; nt < KV_TILES; nt++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int row = warp_row0 + mt * 16 + lane / 4 + (i / 2) * 8;
        const int col = kv_start + nt * 8 + (lane % 4) * 2 + i % 2;
        const bool hidden = col >= p.seqlen_k || (p.causal && col > row + w.diag);
        if (hidden) S[mt][nt][i] = -INFINITY;
      }
}

// One online-softmax step over a fresh S tile (raw scores), in place: S becomes the unnormalised
// P = exp(scale * (s - m_new)). row_max is kept in raw units, row_sum per thread (its own columns
// only; the quad reduction waits for the epilogue). Rescales O by exp(scale * (m_old - m_new)).
// Per m-tile, so that online_softmax keeps its rescale-then-pack order per tile (same SASS).
// EXACT_ROW_MAX: s * scale is rounded before m * scale is subtracted (no FMA), so the row's
// maximum gives exp2(0) = 1 exactly; block-scaled P needs it (an amax of 1 - 1 ulp halves the MX
// scale and saturates the block's largest element at 448 instead of 512, a 12.5% error).
template <bool EXACT_ROW_MAX = false, int M_TILES, int KV_TILES, int D_TILES>
__device__ __forceinline__ void softmax_update(float (&S)[M_TILES][KV_TILES][4],
                                               float (&row_max)[M_TILES][2],
                                               float (&row_sum)[M_TILES][2],
                                               float (&O)[M_TILES][D_TILES][4], float scale_log2,
                                               int mt) {
#pragma unroll
  for (int r = 0; r < 2; r++) {  // rows g and g + 8
    float m = row_max[mt][r];
#pragma unroll
    for (int nt = 0; nt < KV_TILES; nt++)
      m = fmaxf(m, fmaxf(S[mt][nt][2 * r], S[mt][nt][2 * r + 1]));
    // The 4 lanes of a quad hold one row between them.
    m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, 2));
    // A row that has seen no key yet keeps max -inf; subtracting 0 instead turns every
    // exp2 into exp2(-inf) = 0 (no NaN from -inf - -inf), and alpha into 0 for empty O.
    const float m_scaled =
        m == -INFINITY ? 0.f : (EXACT_ROW_MAX ? __fmul_rn(m, scale_log2) : m * scale_log2);
    const float alpha = rescale_factor(row_max[mt][r], m, m_scaled, scale_log2);
    row_max[mt][r] = m;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < KV_TILES; nt++)
#pragma unroll
      for (int c = 0; c < 2; c++) {
        const float x = EXACT_ROW_MAX ? __fmul_rn(S[mt][nt][2 * r + c], scale_log2) - m_scaled
                                      : fmaf(S[mt][nt][2 * r + c], scale_log2, -m_scaled);
        const float e = fast_exp2(x);
        S[mt][nt][2 * r + c] = e;
        sum += e;
      }
    row_sum[mt][r] = row_sum[mt][r] * alpha + sum;
#pragma unroll
    for (int nd = 0; nd < D_TILES; nd++) {
      O[mt][nd][2 * r] *= alpha;
      O[mt][nd][2 * r + 1] *= alpha;
    }
  }
}

// softmax_update, then P as 16-bit A fragments for P @ V.
template <typename T, int M_TILES, int KV_TILES, int D_TILES>
__device__ __forceinline__ void online_softmax(float (&S)[M_TILES][KV_TILES][4],
                                               float (&row_max)[M_TILES][2],
                                               float (&row_sum)[M_TILES][2],
                                               float (&O)[M_TILES][D_TILES][4],
                                               uint32_t (&P)[M_TILES][KV_TILES / 2][4],
                                               float scale_log2) {
#pragma unroll
  for (int mt = 0; mt < M_TILES; mt++) {
    softmax_update(S, row_max, row_sum, O, scale_log2, mt);
    // Two adjacent 16x8 accumulator tiles form one 16x16 A fragment (register reuse, no shuffle).
#pragma unroll
    for (int kk = 0; kk < KV_TILES / 2; kk++) {
      P[mt][kk][0] = pack2<T>(S[mt][2 * kk][0], S[mt][2 * kk][1]);
      P[mt][kk][1] = pack2<T>(S[mt][2 * kk][2], S[mt][2 * kk][3]);
      P[mt][kk][2] = pack2<T>(S[mt][2 * kk + 1][0], S[mt][2 * kk + 1][1]);
      P[mt][kk][3] = pack2<T>(S[mt][2 * kk + 1][2], S[mt][2 * kk + 1][3]);
    }
  }
}

// O / l to 16-bit, one store per element pair; LSE = scale * m + ln(l). Rows that saw no key
// (l == 0) get zeros and -inf, as FlashAttention does.
template <typename T, int M_TILES, int D_TILES>
__device__ __forceinline__ void store_output(const FwdParams& p, const CtaWork& w, int warp_row0,
                                             float (&O)[M_TILES][D_TILES][4],
                                             const float (&row_max)[M_TILES][2],
                                             const float (&row_sum)[M_TILES][2]) {
  const int lane = threadIdx.x % 32;
  T* out = static_cast<T*>(p.out) + w.batch * p.out_stride[0] + w.head_q * p.out_stride[1];
#pragma unroll
  for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
    for (int r = 0; r < 2; r++) {
      float l = row_sum[mt][r];
      l += __shfl_xor_sync(0xffffffff, l, 1);
      l += __shfl_xor_sync(0xffffffff, l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int row = warp_row0 + mt * 16 + r * 8 + lane / 4;
      if (row >= p.seqlen_q) continue;
      T* dst = out + row * p.out_stride[2] + (lane % 4) * 2;
#pragma unroll
      for (int nd = 0; nd < D_TILES; nd++)
        *reinterpret_cast<uint32_t*>(dst + nd * 8) =
            pack2<T>(O[mt][nd][2 * r] * inv, O[mt][nd][2 * r + 1] * inv);
      if (p.lse != nullptr && lane % 4 == 0) {
        const int64_t head_row = (int64_t(w.batch) * p.heads_q + w.head_q) * p.seqlen_q;
        p.lse[head_row + row] = l > 0.f ? row_max[mt][r] * p.scale + logf(l) : -INFINITY;
      }
    }
}
}  // namespace fa
