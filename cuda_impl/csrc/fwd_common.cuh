// What every forward kernel of the v1..v5 ladder shares: the C parameter block, the tile
// geometry, the async tile loader, masking, online softmax, the epilogue and the host launch.
// The versions differ only in how K/V reach shared memory and registers (see fwd_v*.cu).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common.cuh"

extern "C" {
// Mirrored field by field by cuda_impl/_lib.py (ctypes); strides are in elements.
struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;              // (batch, heads_q, seqlen_q) contiguous, or null
  int64_t q_stride[3];     // batch, head, seq; the head_dim stride is 1
  int64_t k_stride[3];
  int64_t v_stride[3];
  int64_t out_stride[3];
  int32_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  float scale;             // softmax scale, > 0
  int32_t causal;          // bottom-right aligned: query i sees keys j <= i + seqlen_k - seqlen_q
  int32_t dtype;           // FA_DTYPE_*
  int32_t* tile_counter;   // zeroed by the caller for each launch that takes one (hopper's dynamic causal
                           // scheduler, cuda_fa_hopper_dynamic_causal(head_dim)), else null and unused
  void* split_workspace;   // hopper's split last round: cuda_fa_hopper_split_workspace() bytes, the first
                           // `zeroed` of them zeroed by the caller for each launch; null when it asks for none
};
}

namespace fa {

constexpr int FA_DTYPE_BF16 = 0;
constexpr int FA_DTYPE_FP16 = 1;
constexpr float LOG2E = 1.4426950408889634f;

// A per-head_dim setting (the kernels' FA_*_D64 / D128 / D256 flags): v64 at 64, v128 at 128, v256 otherwise.
constexpr int by_head_dim(int head_dim, int v64, int v128, int v256) {
  return head_dim == 64 ? v64 : head_dim == 128 ? v128 : v256;
}

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
//   vs 247: its 4-stage ring leaves room for one 4-warp CTA per SM); docs/perf-notes-cuda.md.
// - d256 does not fit: Q 64 + O 128 registers per thread already spill (checked with
//   -Xptxas -v), so the Python side refuses it (cuda:hopper runs d256: Q stays in shared memory).
// FA_D128_WARPS is a build flag so that both d128 shapes can be timed from one source
// (scripts/dev_cuda_gpu.py builds the 4-warp library beside the default one).
#ifndef FA_D128_WARPS
#define FA_D128_WARPS 8
#endif
template <int DIM>
struct LadderTiles;
template <>
struct LadderTiles<64> : Tiles<64, 4, 2, 32> {};
template <>
struct LadderTiles<128> : Tiles<128, FA_D128_WARPS, 1, 64> {};

// Which query rows and KV tiles one CTA owns.
struct CtaWork {
  int batch, head_q, head_kv;
  int q_start;       // first query row of the CTA
  int n_kv_tiles;    // KV tiles holding at least one key some row of the CTA sees (from kv_tile0 on)
  int kv_tile0;      // first KV tile: 0, or where a part of a split item starts (hopper, non-causal)
  int diag;          // seqlen_k - seqlen_q: causal row i sees keys j <= i + diag
};

// The work of query tile `q_tile` of (batch, head_q).
template <int BLOCK_Q, int BLOCK_KV>
__device__ __forceinline__ CtaWork tile_work(const FwdParams& p, int batch, int head_q, int q_tile) {
  CtaWork w;
  w.batch = batch;
  w.head_q = head_q;
  w.head_kv = head_q / (p.heads_q / p.heads_kv);
  w.q_start = q_tile * BLOCK_Q;
  w.diag = p.seqlen_k - p.seqlen_q;
  int kv_end = p.seqlen_k;
  if (p.causal) {
    const int last_row = min(w.q_start + BLOCK_Q, p.seqlen_q) - 1;
    kv_end = max(0, min(kv_end, last_row + w.diag + 1));
  }
  w.n_kv_tiles = (kv_end + BLOCK_KV - 1) / BLOCK_KV;
  w.kv_tile0 = 0;
  return w;
}

template <int BLOCK_Q, int BLOCK_KV>
__device__ __forceinline__ CtaWork cta_work(const FwdParams& p) {
  // Causal CTAs at the bottom see the most keys; issue them first so the last wave is short.
  const int q_tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  return tile_work<BLOCK_Q, BLOCK_KV>(p, blockIdx.z, blockIdx.y, q_tile);
}

// Heads whose K/V fit in about half of L2 (24 MB): the default group of `work_item`.
__device__ __forceinline__ int l2_head_group(const FwdParams& p) {
  const int64_t head_kv_bytes = int64_t(p.seqlen_k) * p.head_dim * 2 * 2;
  return int(max(int64_t(1), min(int64_t(p.batch) * p.heads_q, (int64_t(24) << 20) / head_kv_bytes)));
}

// Work item `item` (0 .. batch * heads_q * q_tiles - 1) of a grid that walks the items in order.
// Heads are taken in groups of `group`; inside a group the head varies fastest and the query tile
// slowest, so the CTAs running at once share K/V through L2, and under causal masking the
// heaviest tiles (bottom rows: most keys) of the group go first, which keeps the last wave short.
template <int BLOCK_Q, int BLOCK_KV>
__device__ __forceinline__ CtaWork work_item(const FwdParams& p, int item, int group) {
  const int q_tiles = (p.seqlen_q + BLOCK_Q - 1) / BLOCK_Q;
  const int heads = p.batch * p.heads_q;
  const int group_start = item / (group * q_tiles) * group;
  const int in_group = item - group_start * q_tiles;
  const int group_size = min(group, heads - group_start);
  const int rank = in_group / group_size;
  const int head = group_start + in_group % group_size;  // batch * heads_q + head_q
  const int q_tile = p.causal ? q_tiles - 1 - rank : rank;
  return tile_work<BLOCK_Q, BLOCK_KV>(p, head / p.heads_q, head % p.heads_q, q_tile);
}

// Start of one (batch, head) slice of a strided (B, H, S, D) tensor.
template <typename T>
__device__ __forceinline__ const T* head_base(const void* ptr, const int64_t (&stride)[3],
                                              int batch, int head) {
  return static_cast<const T*>(ptr) + batch * stride[0] + head * stride[1];
}

// A tile needs per-element masking when it runs past seqlen_k or crosses the causal diagonal
// of the CTA's first (most restricted) row; interior tiles skip the compares entirely.
template <int BLOCK_KV>
__device__ __forceinline__ bool tile_needs_mask(const FwdParams& p, const CtaWork& w,
                                                int kv_start) {
  if (kv_start + BLOCK_KV > p.seqlen_k) return true;
  return p.causal && kv_start + BLOCK_KV - 1 > w.q_start + w.diag;
}

// The first of an item's KV tiles 1 .. n-1 from which on every tile may need a mask (n: none does). Needing one is
// monotonic in the tile (the tail past seqlen_k, the causal diagonal and after), so the Hopper kernels run tiles
// 1 .. first-1 in a copy of their step without the mask branch (HopperTiles / Fp8Tiles::UNMASKED_LOOP).
template <int BLOCK_KV>
__device__ __forceinline__ int first_masked_tile(const FwdParams& p, const CtaWork& w, int n) {
  int first = n;
  while (first > 1 && tile_needs_mask<BLOCK_KV>(p, w, (w.kv_tile0 + first - 1) * BLOCK_KV)) first--;
  return first;
}

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

// Key (from the tile's first) of wgmma accumulator register i of lane quad position t: column
// 8 * (i / 4) + 2 * t + i % 2 of S. With PERMUTED_KEYS the K tile's rows were loaded in the order
// of fwd_hopper_fp8.cu's permuted map, where column c = e + 2t + 8 g0 + 16 g (e = c % 2) holds key
// e + 2 g0 + 4t + 16 g: each lane's S values are then the keys its e4m3 A fragment needs.
template <bool PERMUTED_KEYS>
__device__ __forceinline__ int wgmma_key(int i, int t) {
  if constexpr (PERMUTED_KEYS) return i % 2 + 2 * (i / 4 % 2) + 4 * t + 16 * (i / 8);
  return 8 * (i / 4) + 2 * t + i % 2;
}

// The same for a wgmma accumulator (the Hopper kernels): S_REGS registers of one 64 x N tile, where
// register i holds row row0 + 8 * ((i / 2) % 2) (row0 is this thread's first row) and key
// wgmma_key<PERMUTED_KEYS>(i, lane % 4).
template <bool PERMUTED_KEYS = false, int S_REGS>
__device__ __forceinline__ void mask_scores(float (&S)[S_REGS], const FwdParams& p, const CtaWork& w,
                                            int row0, int kv_start) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int i = 0; i < S_REGS; i++) {
    const int row = row0 + ((i / 2) % 2) * 8;
    const int col = kv_start + wgmma_key<PERMUTED_KEYS>(i, t);
    if (col >= p.seqlen_k || (p.causal && col > row + w.diag)) S[i] = -INFINITY;
  }
}

// Row reductions over one thread's part of a wgmma accumulator row: half h (row row0 + 8h) is
// registers 4j + 2h + c, value v = 2j + c. Value v goes to chain v % CHAINS and the chains meet in a
// tree, so the dependent latency is S_REGS / (2 CHAINS) operations instead of S_REGS / 2: the row max
// and the row sum sit between "S is ready" and the next GEMM issue on every consumer's critical path.
// wgmma_row_max: fmaxf over the row half's values and init.
template <int CHAINS, int S_REGS>
__device__ __forceinline__ float wgmma_row_max(const float (&S)[S_REGS], int h, float init) {
  static_assert(CHAINS > 0 && (CHAINS & (CHAINS - 1)) == 0, "CHAINS: a power of 2");
  float m[CHAINS];
#pragma unroll
  for (int k = 0; k < CHAINS; k++) m[k] = init;
#pragma unroll
  for (int v = 0; v < S_REGS / 2; v++) m[v % CHAINS] = fmaxf(m[v % CHAINS], S[4 * (v / 2) + 2 * h + v % 2]);
#pragma unroll
  for (int width = CHAINS / 2; width > 0; width /= 2)
#pragma unroll
    for (int k = 0; k < width; k++) m[k] = fmaxf(m[k], m[k + width]);
  return m[0];
}

// S <- f(S) over row half h, returning the sum of the new values (chained as wgmma_row_max).
template <int CHAINS, int S_REGS, typename F>
__device__ __forceinline__ float wgmma_row_map_sum(float (&S)[S_REGS], int h, F&& f) {
  static_assert(CHAINS > 0 && (CHAINS & (CHAINS - 1)) == 0, "CHAINS: a power of 2");
  float sum[CHAINS];
#pragma unroll
  for (int k = 0; k < CHAINS; k++) sum[k] = 0.f;
#pragma unroll
  for (int v = 0; v < S_REGS / 2; v++) {
    float& x = S[4 * (v / 2) + 2 * h + v % 2];
    x = f(x);
    sum[v % CHAINS] += x;
  }
#pragma unroll
  for (int width = CHAINS / 2; width > 0; width /= 2)
#pragma unroll
    for (int k = 0; k < width; k++) sum[k] += sum[k + width];
  return sum[0];
}

// The sum of a wgmma row: the partial sums of its quad's four threads.
__device__ __forceinline__ float quad_row_sum(float l) {
  l += __shfl_xor_sync(0xffffffff, l, 1);
  l += __shfl_xor_sync(0xffffffff, l, 2);
  return l;
}

// A wgmma row's LSE, lse(m, l), stored by its quad's first thread; -inf for a row that saw no key.
template <typename Lse>
__device__ __forceinline__ void store_wgmma_lse(const FwdParams& p, const CtaWork& w, int row, float m, float l,
                                                Lse&& lse) {
  if (p.lse != nullptr && threadIdx.x % 4 == 0) {
    const int64_t head_row = (int64_t(w.batch) * p.heads_q + w.head_q) * p.seqlen_q;
    p.lse[head_row + row] = l > 0.f ? lse(m, l) : -INFINITY;
  }
}

// The epilogue for a wgmma O accumulator (the Hopper kernels): O * out_factor / l in T (out_factor:
// V's descale or tensor scale, 1 if none) and the LSE as lse(m, l) of the row max m (in the
// kernel's own units) and the row sum l; rows that saw no key get zeros and -inf. Rows row0 and
// row0 + 8 (row0: this thread's first row), register layout as mask_scores above.
template <typename T, int O_REGS, typename Lse>
__device__ __forceinline__ void store_wgmma_rows(const FwdParams& p, const CtaWork& w, int row0,
                                                 float (&O)[O_REGS], const float (&row_max)[2],
                                                 const float (&row_sum)[2], float out_factor, Lse&& lse) {
  T* out = static_cast<T*>(p.out) + w.batch * p.out_stride[0] + w.head_q * p.out_stride[1];
  const int quad_col = (threadIdx.x % 4) * 2;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const float l = quad_row_sum(row_sum[h]);
    const float inv = l > 0.f ? out_factor / l : 0.f;
    const int row = row0 + 8 * h;
    if (row >= p.seqlen_q) continue;  // tail rows of the last Q tile are never written
    T* dst = out + row * p.out_stride[2] + quad_col;
#pragma unroll
    for (int j = 0; j < O_REGS / 4; j++)
      *reinterpret_cast<uint32_t*>(dst + 8 * j) =
          pack2<T>(O[4 * j + 2 * h] * inv, O[4 * j + 2 * h + 1] * inv);
    store_wgmma_lse(p, w, row, row_max[h], l, lse);
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

// --- host side ---------------------------------------------------------------------------

inline int report(char* err, int err_len, const char* what, const char* detail) {
  if (err != nullptr && err_len > 0) snprintf(err, err_len, "%s: %s", what, detail);
  return 1;
}

// Before any launch: drop stale errors from earlier calls so they are not blamed on it, and raise
// the kernel's dynamic shared-memory limit (needed past 48 KB).
// FA_SMEM_CARVEOUT (a build flag for measurements; unset: the driver's choice): the percentage of the SM's
// unified L1 / shared memory to hold as shared memory, e.g. 100 to leave L1 its smallest size.
template <typename Kernel>
int prepare_launch(Kernel kernel, int smem_bytes, char* err, int err_len) {
  cudaGetLastError();
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
#ifdef FA_SMEM_CARVEOUT
  if (e == cudaSuccess) e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, FA_SMEM_CARVEOUT);
#endif
  return e == cudaSuccess ? 0 : report(err, err_len, "cudaFuncSetAttribute(shared memory)", cudaGetErrorString(e));
}

// Launch grid x threads on `stream` with `args` (prepare_launch first), and turn any CUDA error into
// a message.
template <typename Kernel, typename... Args>
int launch_kernel(Kernel kernel, dim3 grid, int threads, int smem_bytes, cudaStream_t stream, char* err,
                  int err_len, const Args&... args) {
  if (int rc = prepare_launch(kernel, smem_bytes, err, err_len)) return rc;
  kernel<<<grid, threads, smem_bytes, stream>>>(args...);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return report(err, err_len, "kernel launch", cudaGetErrorString(e));
  return 0;
}

// Work items of a launch: query tiles of block_q rows x heads x batch. (The persistent kernels take it
// in 32 bits: the host checks it with check_work_items first.)
__host__ __device__ inline int64_t work_items(const FwdParams& p, int block_q) {
  return int64_t(p.batch) * p.heads_q * ((p.seqlen_q + block_q - 1) / block_q);
}

// The persistent kernels number their items in 32 bits (one CTA's next item is item + gridDim.x).
inline int check_work_items(int64_t items, char* err, int err_len) {
  return items > INT32_MAX
             ? report(err, err_len, "grid", "batch * heads_q * ceil(seqlen_q / BLOCK_Q) must be < 2^31")
             : 0;
}

// CTAs of a persistent grid on the current device: one per SM, at most one per item.
inline int persistent_grid(int64_t items) {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return int(std::min<int64_t>(items, sms));
}

// One CTA per (query tile of block_q rows, head, batch).
inline dim3 q_tile_grid(const FwdParams& p, int block_q) {
  return dim3((p.seqlen_q + block_q - 1) / block_q, p.heads_q, p.batch);
}

template <typename Kernel>
int launch_fwd(Kernel kernel, int block_q, int threads, int smem_bytes, const FwdParams& p,
               cudaStream_t stream, char* err, int err_len) {
  return launch_kernel(kernel, q_tile_grid(p, block_q), threads, smem_bytes, stream, err, err_len, p);
}

// The Hopper kernels run on sm_90 only (wgmma, setmaxnreg and TMA as compiled for sm_90a);
// `message` names the variant.
inline int check_sm90(const char* message, char* err, int err_len) {
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0 ? 0 : report(err, err_len, "arch", message);
}

// Checks the C caller could get wrong even after Python validated (the library is usable alone).
inline int check_params(const FwdParams& p, char* err, int err_len) {
  if (p.batch < 1 || p.heads_q < 1 || p.heads_kv < 1 || p.seqlen_q < 1 || p.seqlen_k < 1)
    return report(err, err_len, "shape", "batch, heads and seqlens must be >= 1");
  if (p.heads_q % p.heads_kv != 0)
    return report(err, err_len, "heads", "heads_q must be a multiple of heads_kv");
  if (p.batch > 65535 || p.heads_q > 65535)
    return report(err, err_len, "grid", "batch and heads_q must be <= 65535");
  if (!(p.scale > 0.f) || std::isinf(p.scale))
    return report(err, err_len, "scale", "must be finite and > 0");
  return 0;
}

// The head dims a launcher is instantiated for (the ladder: 64 and 128; hopper adds 256).
template <int... DIMS>
struct HeadDims {};

template <typename T, typename Launcher, int... DIMS>
int dispatch_dim(const FwdParams& p, char* err, int err_len, Launcher& launcher, HeadDims<DIMS...>) {
  bool found = false;
  int rc = 0;
  ((!found && p.head_dim == DIMS ? (found = true, rc = launcher.template operator()<T, DIMS>()) : 0), ...);
  if (found) return rc;
  char supported[64] = "supported:";
  int used = 10;
  ((used += snprintf(supported + used, sizeof(supported) - used, used > 10 ? ", %d" : " %d", DIMS)), ...);
  return report(err, err_len, "head_dim", supported);
}

// Calls launcher.template operator()<T, DIM>() for the runtime dtype and head_dim (one of Dims).
template <typename Dims = HeadDims<64, 128>, typename Launcher>
int dispatch(const FwdParams& p, char* err, int err_len, Launcher&& launcher) {
  if (int rc = check_params(p, err, err_len)) return rc;
  if (p.dtype == FA_DTYPE_BF16) return dispatch_dim<__nv_bfloat16>(p, err, err_len, launcher, Dims{});
  if (p.dtype == FA_DTYPE_FP16) return dispatch_dim<__half>(p, err, err_len, launcher, Dims{});
  return report(err, err_len, "dtype", "supported: bfloat16, float16");
}

}  // namespace fa
