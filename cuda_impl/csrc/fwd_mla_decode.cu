// MLA decode (DeepSeek's multi-head latent attention, FlashMLA's shapes): 16-128 query heads against one latent KV
// head whose rows hold Q/K's 576 columns (512 latent + 64 rotary) and whose first 512 columns are V. The contract is
// the decode one (cuda_impl/decode.py, compare.oracle.check_kvcache) with head_dim 576, head_dim_v 512 and V the
// same rows as K (the host checks v == k's first columns): each key row is loaded once, for both products.
// - One CTA = ROWS packed query rows (heads x query positions, as GQA rows: decode/params.cuh) of one sequence,
//   one chunk of keys. ROWS / 16 row groups of four warps each. Per key tile (BLOCK_N = 32 keys):
//   S phase: warp (row group, slice) scores its 16 rows against all 32 keys over its quarter of the 576 columns
//   (k-steps slice, slice + 4, ..: nine of them), Q's fragments for them in registers (36 a thread, loaded once;
//   all 576 columns would be 144); the four partial scores meet in shared memory and every warp of the row group
//   sums them in slice order, so each holds the same full 16 x 32 scores, the same maxima and the same P;
//   O phase: warp (row group, slice) accumulates O's columns 128 * slice .. + 127 for its 16 rows from all 32 keys,
//   P straight from its registers, V's fragments read from the same ring rows (ldmatrix.trans of K's first 512
//   columns). Two barriers a tile: the tile's arrival and the partial scores.
//   So each warp holds 64 O registers whatever ROWS is, and the 16-row tile (16 heads, the memory-bound case)
//   still keeps four warps of loads and MMAs going.
// - K: a STAGES-deep cp.async ring of 36 KB stages (three in flight while one is computed), rows swizzled for
//   ldmatrix, each key row at its own page address; chunks, the merge (decode/merge.cuh over V's 512 columns),
//   poison checks and causal masking as the GQA decode kernel (fwd_decode.cu).
#include "decode/merge.cuh"
#include "decode/mla.cuh"
#include "decode/params.cuh"
#include "ladder.cuh"

extern "C" {
// The MLA kernels' shape table for the host (cuda_impl/_lib.py): keys per tile and query rows per CTA for `rows`
// packed rows, resident CTAs per SM; and the launch.
int cuda_fa_mla_decode_block_n(int rows);
int cuda_fa_mla_decode_tile_rows(int rows);
int cuda_fa_mla_decode_ctas_per_sm(int dtype, int rows);
int cuda_fa_mla_decode(const DecodeParams* params, cudaStream_t stream, char* err, int err_len);
}

namespace fa {

template <int ROWS_>
struct MlaTiles {
  static constexpr int ROWS = ROWS_;
  static constexpr int ROW_GROUPS = ROWS / 16;
  static constexpr int SLICES = 4;  // warps per row group
  static constexpr int WARPS = ROW_GROUPS * SLICES;
  static constexpr int THREADS = WARPS * 32;
  static constexpr int BLOCK_N = 32;                      // keys of a ring stage
  static constexpr int N_TILES = BLOCK_N / 8;            // S: n-tiles of 8 keys, every warp all of them
  static constexpr int COLS_PER_WARP = MLA_DV / SLICES;   // O phase
  static constexpr int O_TILES = COLS_PER_WARP / 8;
  static constexpr int D_STEPS = MLA_DQK / 16;             // k-steps of Q K^T
  static constexpr int SLICE_STEPS = D_STEPS / SLICES;     // a warp's share of them
  static constexpr int KV_STEPS = BLOCK_N / 16;            // k-steps of P V
  static constexpr int STAGES = 4;
  static constexpr int ROW_BYTES = MLA_DQK * 2, ROW_CHUNKS = MLA_DQK / 8;
  static constexpr int Q_BYTES = ROWS * ROW_BYTES;
  static constexpr int STAGE_BYTES = BLOCK_N * ROW_BYTES;
  // The partial scores (a float4 per lane and n-tile of every warp) reuse Q's tile once Q is in registers.
  static constexpr int PARTIAL_BYTES = WARPS * N_TILES * 32 * 16;
  static constexpr int SMEM_BYTES = Q_BYTES + STAGES * STAGE_BYTES;
  static_assert(D_STEPS % SLICES == 0 && SLICES * 2 <= 8 && O_TILES % 2 == 0 && N_TILES % 2 == 0, "tile shape");
  static_assert(PARTIAL_BYTES <= Q_BYTES && SMEM_BYTES <= 227 * 1024, "shared memory");
};

// Whether the current device runs the sm_90a build (the wgmma kernel).
inline bool device_is_sm90() {
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
}

// 16 rows (up to 16 heads at one query: memory-bound), 32 (each CTA re-reads the chunk's keys from L2, one CTA per
// 32 rows), and from 33 rows on sm_90 the wgmma kernel's 64 (at 16 heads its tile, three quarters padding, was
// slower than this kernel's 16 in every case of the mla sweep: docs/design/decode.md).
inline int mla_tile_rows(int rows) {
  if (rows > 32 && device_is_sm90()) return MLA_WGMMA_ROWS;
  return rows <= 16 ? 16 : 32;
}

template <typename T, int ROWS>
__global__ void __launch_bounds__(MlaTiles<ROWS>::THREADS, 1)
    fwd_mla_decode_kernel(const DecodeParams p, const FastDiv page_div) {
  using C = MlaTiles<ROWS>;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t Q_smem = smem_u32(smem);
  const uint32_t KV_smem = Q_smem + C::Q_BYTES;
  float4* partial = reinterpret_cast<float4*>(smem);  // [warp][n-tile][lane], over Q's tile
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int group = warp % C::ROW_GROUPS, slice = warp / C::ROW_GROUPS;
  launch_dependents();  // the merge (more than one split) may get resident now

  DecodeWork w = decode_work(p, ROWS, C::BLOCK_N);  // (no window: chunk0 = split * split_keys)
  const int capacity = p.max_pages * p.page_size;
  const int* table = p.block_table != nullptr ? p.block_table + w.batch * p.block_table_stride : nullptr;
  if (chunk_poisoned<C::THREADS>(p, w, table, page_div, capacity)) {
    write_poison<T, MLA_DV, C::THREADS>(p, w, ROWS);
    return;
  }
  const int diag = w.length - p.seqlen_q;  // causal: query i sees keys j <= i + diag
  const int last_row = min(w.rows, w.row0 + ROWS) - 1;
  w.cta_end = p.causal ? min(w.kv_end, query_of(w, last_row) + diag + 1) : w.kv_end;
  w.min_end = p.causal ? min(w.kv_end, query_of(w, w.row0) + diag + 1) : w.kv_end;
  const int n_tiles = w.cta_end > w.chunk0 ? (w.cta_end - w.chunk0 + C::BLOCK_N - 1) / C::BLOCK_N : 0;

  // Q tile (rows past the packed rows are zeros): its own commit group, ahead of the key tiles'.
  {
    const T* Q = static_cast<const T*>(p.q) + w.batch * p.q_stride[0];
    for (int c = tid; c < ROWS * C::ROW_CHUNKS; c += C::THREADS) {
      const int r = c / C::ROW_CHUNKS, chunk = c % C::ROW_CHUNKS, row = w.row0 + r;
      const bool valid = row < w.rows;
      const T* src = Q + query_of(w, row) * p.q_stride[1] + head_of(w, row) * p.q_stride[2] + chunk * 8;
      cp_async_16(Q_smem + tile_offset<C::ROW_CHUNKS, true>(r, chunk), valid ? src : Q, valid ? 16 : 0);
    }
    cp_async_commit();
  }
  // Key tile `tile` into `stage`: warp w's rows are w, w + WARPS, ..; a row's 72 chunks go over the lanes; rows past
  // the CTA's last key are zero-filled. The rows' pages are looked up a tile ahead (RowPages).
  const T* K_head = static_cast<const T*>(p.k) + w.head_kv * p.k_stride[2];
  RowPages<C::BLOCK_N / C::WARPS> pages;
  auto lookup_pages = [&](int tile) {
    pages.lookup(p, w, table, page_div, w.chunk0 + tile * C::BLOCK_N + warp, C::WARPS, w.cta_end);
  };
  auto load_k = [&](int tile, uint32_t stage) {
    const int tile_start = w.chunk0 + tile * C::BLOCK_N;
#pragma unroll
    for (int i = 0; i < C::BLOCK_N / C::WARPS; i++) {
      const int r = warp + i * C::WARPS;
      const bool valid = pages.valid(p, i, tile_start + r, w.cta_end);
      const int64_t off = valid ? pages.offset(i, p.k_stride) : 0;
#pragma unroll
      for (int j = 0; j < (C::ROW_CHUNKS + 31) / 32; j++) {
        const int chunk = lane + 32 * j;
        if (chunk < C::ROW_CHUNKS)
          cp_async_16(stage + tile_offset<C::ROW_CHUNKS, true>(r, chunk), K_head + off + chunk * 8, valid ? 16 : 0);
      }
    }
  };
#pragma unroll
  for (int tile = 0; tile < C::STAGES - 1; tile++) {
    if (tile < n_tiles) {
      lookup_pages(tile);
      load_k(tile, KV_smem + tile * C::STAGE_BYTES);
    }
    cp_async_commit();
  }
  lookup_pages(C::STAGES - 1);

  // ldmatrix lanes. Q (A) and K (B of Q K^T: 16 keys = two n-tiles per x4) at the warp's k-steps slice + 4 i:
  // chunks 8 i + 2 slice + (0, 1), so the lane's swizzled chunk is one runtime constant and i an immediate.
  // V (B of P V, ldmatrix.trans: 16 keys x two n-tiles of its 128 columns) at compile-time chunks.
  const SwizzledLane<C::ROW_BYTES, 8> S_lane(lane % 16, 2 * slice + lane / 16);
  const SwizzledLane<C::ROW_BYTES, 2> V_lane(lane % 16, lane / 16);
  const int g = lane / 4, c2 = (lane % 4) * 2;  // accumulator rows g, g + 8 of the warp's 16; columns c2, c2 + 1
  int row_end[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = min(w.row0 + group * 16 + g + 8 * h, w.rows - 1);
    row_end[h] = p.causal ? min(w.kv_end, query_of(w, row) + diag + 1) : w.kv_end;
  }
  cp_async_wait<C::STAGES - 1>();  // the Q group
  __syncthreads();
  uint32_t Q_rmem[C::SLICE_STEPS][4];
#pragma unroll
  for (int i = 0; i < C::SLICE_STEPS; i++)
    ldmatrix_x4(Q_rmem[i], Q_smem + group * 16 * C::ROW_BYTES + S_lane.at(8 * i));
  // (Q's tile is overwritten by the partial scores only after the first tile's barrier: every warp is past here.)

  const float scale_log2 = p.scale * LOG2E;
  float O_rmem[C::O_TILES][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};  // row_sum: this lane's columns

  const uint32_t ring_end = KV_smem + C::STAGES * C::STAGE_BYTES;
  uint32_t slot = KV_smem, prev = KV_smem + (C::STAGES - 1) * C::STAGE_BYTES;
  for (int tile = 0; tile < n_tiles; tile++) {
    cp_async_wait<C::STAGES - 2>();
    __syncthreads();  // tile lands; every warp is done with tile - 1 (its slot and the partial scores)
    if (tile + C::STAGES - 1 < n_tiles) {
      load_k(tile + C::STAGES - 1, prev);
      lookup_pages(tile + C::STAGES);  // read during this tile's products
    }
    cp_async_commit();

    // S phase: the warp's partial scores, 16 rows x 32 keys over its nine k-steps (four accumulator chains).
    float S[C::N_TILES][4] = {};
#pragma unroll
    for (int i = 0; i < C::SLICE_STEPS; i++) {
#pragma unroll
      for (int jp = 0; jp < C::N_TILES / 2; jp++) {
        uint32_t K_frag[4];
        ldmatrix_x4(K_frag, slot + jp * 16 * C::ROW_BYTES + S_lane.at(8 * i));
        mma_m16n8k16<T>(S[2 * jp], Q_rmem[i], K_frag[0], K_frag[2]);
        mma_m16n8k16<T>(S[2 * jp + 1], Q_rmem[i], K_frag[1], K_frag[3]);
      }
    }
    float4* mine = partial + (warp * C::N_TILES) * 32 + lane;
#pragma unroll
    for (int j = 0; j < C::N_TILES; j++) mine[j * 32] = make_float4(S[j][0], S[j][1], S[j][2], S[j][3]);
    __syncthreads();  // the partial scores of every slice
#pragma unroll
    for (int j = 0; j < C::N_TILES; j++) {
      float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int s = 0; s < C::SLICES; s++) {  // slice order: the same sums, bit for bit, in every warp
        const float4 part = partial[((s * C::ROW_GROUPS + group) * C::N_TILES + j) * 32 + lane];
        sum.x += part.x, sum.y += part.y, sum.z += part.z, sum.w += part.w;
      }
      S[j][0] = sum.x, S[j][1] = sum.y, S[j][2] = sum.z, S[j][3] = sum.w;
    }
    const int tile_start = w.chunk0 + tile * C::BLOCK_N;
    if (tile_start + C::BLOCK_N > w.min_end) {  // keys past a row's end (chunk tail, length, causal)
#pragma unroll
      for (int j = 0; j < C::N_TILES; j++)
#pragma unroll
        for (int i = 0; i < 4; i++)
          if (tile_start + 8 * j + c2 + i % 2 >= row_end[i / 2]) S[j][i] = -INFINITY;
    }
    // Online softmax over the tile's 32 keys (decode/mla.cuh), O rescaled on every new maximum.
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const float alpha = mla_softmax_row<C::N_TILES, false>(row_max[h], row_sum[h], scale_log2,
                                                             [&](int j, int c) -> float& { return S[j][2 * h + c]; });
#pragma unroll
      for (int nd = 0; nd < C::O_TILES; nd++) O_rmem[nd][2 * h] *= alpha, O_rmem[nd][2 * h + 1] *= alpha;
    }

    // O phase: the warp's 16 rows x its 128 columns += P (16 x 32 keys, the scores' accumulator layout is the A
    // fragment's) V (32 keys x 128 columns).
    const uint32_t V_warp = slot + slice * (C::COLS_PER_WARP / 8) * 16;  // chunk 16 * slice: its own 128 columns
#pragma unroll
    for (int kk = 0; kk < C::KV_STEPS; kk++) {
      const uint32_t P_frag[4] = {pack2<T>(S[2 * kk][0], S[2 * kk][1]), pack2<T>(S[2 * kk][2], S[2 * kk][3]),
                                  pack2<T>(S[2 * kk + 1][0], S[2 * kk + 1][1]),
                                  pack2<T>(S[2 * kk + 1][2], S[2 * kk + 1][3])};
#pragma unroll
      for (int nd = 0; nd < C::O_TILES; nd += 2) {
        uint32_t V_frag[4];
        ldmatrix_x4_trans(V_frag, V_warp + V_lane.at(nd) + kk * 16 * C::ROW_BYTES);
        mma_m16n8k16<T>(O_rmem[nd], P_frag, V_frag[0], V_frag[1]);
        mma_m16n8k16<T>(O_rmem[nd + 1], P_frag, V_frag[2], V_frag[3]);
      }
    }
    prev = slot;
    slot = slot + C::STAGE_BYTES == ring_end ? KV_smem : slot + C::STAGE_BYTES;
  }
  cp_async_wait<0>();

#pragma unroll
  for (int h = 0; h < 2; h++)
    mla_finish_row<T, C::O_TILES>(p, w, w.row0 + group * 16 + g + 8 * h, slice * C::COLS_PER_WARP + c2, row_sum[h],
                                  row_max[h], slice == 0 && lane % 4 == 0,
                                  [&](int j, int c) { return O_rmem[j][2 * h + c]; });
}

// Calls launcher.template operator()<T, ROWS>() for q's dtype and the tile rows of `rows` packed rows.
template <typename Launcher>
int mla_dispatch(int dtype, int rows, char* err, int err_len, Launcher&& launcher) {
  auto by_rows = [&]<typename T>() {
    return mla_tile_rows(rows) == 16 ? launcher.template operator()<T, 16>() : launcher.template operator()<T, 32>();
  };
  if (dtype == FA_DTYPE_BF16) return by_rows.template operator()<__nv_bfloat16>();
  if (dtype == FA_DTYPE_FP16) return by_rows.template operator()<__half>();
  return report(err, err_len, "dtype", "q and the latent cache: bfloat16, float16");
}

}  // namespace fa

int cuda_fa_mla_decode_block_n(int rows) {
  return fa::mla_tile_rows(rows) == fa::MLA_WGMMA_ROWS ? fa::MLA_WGMMA_BLOCK_N : fa::MlaTiles<16>::BLOCK_N;
}

int cuda_fa_mla_decode_tile_rows(int rows) { return fa::mla_tile_rows(rows); }

int cuda_fa_mla_decode_ctas_per_sm(int dtype, int rows) {
  if (fa::mla_tile_rows(rows) == fa::MLA_WGMMA_ROWS) return fa::mla_decode_wgmma_ctas_per_sm(dtype);
  return fa::mla_dispatch(dtype, rows, nullptr, 0, []<typename T, int ROWS>() {
    using C = fa::MlaTiles<ROWS>;
    return fa::resident_ctas(fa::fwd_mla_decode_kernel<T, ROWS>, C::THREADS, C::SMEM_BYTES);
  });
}

int cuda_fa_mla_decode(const DecodeParams* params, cudaStream_t stream, char* err, int err_len) {
  const DecodeParams& p = *params;
  if (p.head_dim != fa::MLA_DQK || p.head_dim_v != fa::MLA_DV)
    return fa::report(err, err_len, "head_dim", "the MLA kernel takes Q/K 576 and V 512");
  if (p.kv_dtype != p.dtype) return fa::report(err, err_len, "dtype", "the MLA kernel takes a cache in q's dtype");
  if (p.v != p.k || p.v_stride[0] != p.k_stride[0] || p.v_stride[1] != p.k_stride[1] || p.v_stride[2] != p.k_stride[2])
    return fa::report(err, err_len, "v_cache", "the MLA kernel reads V from K's rows: v must be k's first 512 columns");
  if (p.window_left != -1 || p.window_right != -1)
    return fa::report(err, err_len, "window", "the MLA kernel takes no local window");
  const int rows = p.seqlen_q * (p.heads_q / max(1, p.heads_kv));
  if (fa::mla_tile_rows(rows) == fa::MLA_WGMMA_ROWS)
    return fa::mla_decode_wgmma(p, fa::FastDiv(uint32_t(max(1, p.page_size))), stream, err, err_len);
  return fa::mla_dispatch(p.dtype, rows, err, err_len, [&]<typename T, int ROWS>() {
    using C = fa::MlaTiles<ROWS>;
    if (int rc = fa::check_decode_params(p, C::BLOCK_N, ROWS, err, err_len)) return rc;
    const dim3 grid((rows + ROWS - 1) / ROWS, p.heads_kv * p.num_splits, p.batch);
    const fa::FastDiv page_div(uint32_t(p.page_size));
    if (int rc = fa::launch_kernel(fa::fwd_mla_decode_kernel<T, ROWS>, grid, C::THREADS, C::SMEM_BYTES, stream, err,
                                   err_len, p, page_div))
      return rc;
    return p.num_splits == 1 ? 0 : fa::launch_merge<T, fa::MLA_DV>(p, stream, err, err_len);
  });
}
