// MLA decode on Hopper's wgmma (sm_90a), for 33 or more packed query rows (64 or 128 heads, or 16-32 heads with
// speculative tokens): the compute-bound half of FlashMLA's shapes, where the mma.sync kernel (fwd_mla_decode.cu)
// tops out at a sixth of the tensor cores. Same contract, same work split over the grid (a CTA = 64 packed rows of
// one sequence, one chunk of keys), the same poison checks, causal masking and merge.
// - Two warpgroups, one m64 tile of rows. O (64 x 512 fp32) does not fit one warpgroup's registers, so warpgroup
//   g owns O's columns 256 g .. + 255 (128 registers a thread) and both need all of P.
// - S = Q K^T over 576 columns is split between them by k-steps (group g: steps 2 i + g), each wgmma m64n32k16
//   reading Q and K from shared memory; the two partial 64 x 32 tiles meet in shared memory, where each warpgroup
//   reads the other's and adds it to its own (a + b == b + a: both hold the same scores bit for bit), so both run
//   the same online softmax and hold the same P in registers, the A operand of their O += P V (m64n256k16, V the
//   first 512 columns of the same K rows, MN-major). Splitting by keys instead would have each warpgroup read all
//   of Q per tile (twice the shared-memory traffic of the S product) and trade P tiles besides.
// - Software-pipelined: S(t + 1) is issued before the softmax of tile t and P V(t) before the exchange of
//   S(t + 1), so the tensor cores have work queued through both; the loop runs in threes, one step per ring stage,
//   so that every wgmma descriptor is a loop invariant in uniform registers. The running maximum is kept while it
//   grows by at most 2^8 (the d256 prefill kernel's lazy rescale), so most tiles skip O's rescale.
// - K tiles of 32 keys (36 KB) in a three-stage cp.async ring, each key row at its own page address (pages of any
//   size, the block table read a tile ahead), written in wgmma's 128-byte swizzle (nine 64-column panels per
//   tile); Q (72 KB) the same way once. Shared memory: Q + 3 stages + the partial tiles = 197 KB, one CTA per SM;
//   tiles t and t + 1 are in use while t + 2 loads, so a fourth stage (for a deeper lead) would not fit beside Q.
#include <type_traits>

#include "decode/merge.cuh"
#include "decode/mla.cuh"
#include "decode/params.cuh"
#include "hopper/sm90.cuh"

namespace fa {

struct MlaWgmmaTiles {
  static constexpr int ROWS = MLA_WGMMA_ROWS;
  static constexpr int GROUPS = 2;  // warpgroups: S's k-steps and O's columns split between them
  static constexpr int THREADS = GROUPS * 128;
  static constexpr int WARPS = THREADS / 32;
  static constexpr int BLOCK_N = 32;                      // keys of a ring stage, wgmma N of S
  static constexpr int PANELS = MLA_DQK / 64;             // 64-column panels of Q and K (the swizzle's 128 bytes)
  static constexpr int GROUP_STEPS = MLA_DQK / 16 / GROUPS;  // S k-steps per warpgroup
  static constexpr int V_PANEL0 = MLA_DV / GROUPS / 64;    // group g's O columns start at panel g * V_PANEL0
  static constexpr int STAGES = 3;
  static constexpr int ROW_CHUNKS = MLA_DQK / 8;          // 16-byte chunks of a row
  static constexpr int Q_PANEL = ROWS * 128, K_PANEL = BLOCK_N * 128;
  static constexpr int Q_BYTES = PANELS * Q_PANEL, STAGE_BYTES = PANELS * K_PANEL;
  static constexpr int S_REGS = BLOCK_N / 2, O_REGS = MLA_DV / GROUPS / 2;
  static constexpr int PARTIAL_BYTES = THREADS * S_REGS * 4;  // each thread's partial S
  static constexpr int SMEM_BYTES = Q_BYTES + STAGES * STAGE_BYTES + PARTIAL_BYTES + 1024;  // + 1024-alignment
  static_assert(GROUP_STEPS % 2 == 0 && BLOCK_N % WARPS == 0 && SMEM_BYTES <= 227 * 1024 && STAGES == 3, "tile shape");
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of 64-column panels of PANEL bytes: rows of 128 bytes,
// chunk ^ row % 8 inside them (the 128-byte swizzle; panels 1024-byte aligned).
template <int PANEL>
__device__ __forceinline__ uint32_t panel_offset(int row, int chunk) {
  return uint32_t((chunk / 8) * PANEL + row * 128 + ((chunk % 8) ^ (row % 8)) * 16);
}

template <typename T>
__global__ void __launch_bounds__(MlaWgmmaTiles::THREADS, 1)
    fwd_mla_decode_wgmma_kernel(const DecodeParams p, const FastDiv page_div) {
#if FA_SM90A
  using C = MlaWgmmaTiles;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t Q_smem = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t KV_smem = Q_smem + C::Q_BYTES;
  float4* partial = reinterpret_cast<float4*>(smem_raw + (Q_smem - smem_u32(smem_raw)) + C::Q_BYTES +
                                              C::STAGES * C::STAGE_BYTES);  // [group][4][thread of the group]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // shfl: warp-uniform to ptxas, so that the group's descriptors live in uniform registers (not rebuilt and moved
  // by R2UR in front of every wgmma)
  const int group = __shfl_sync(0xffffffffu, tid / 128, 0), group_tid = tid % 128;
  launch_dependents();  // the merge (more than one split) may get resident now

  DecodeWork w = decode_work(p, C::ROWS, C::BLOCK_N);  // (no window: chunk0 = split * split_keys)
  const int capacity = p.max_pages * p.page_size;
  const int* table = p.block_table != nullptr ? p.block_table + w.batch * p.block_table_stride : nullptr;
  if (chunk_poisoned<C::THREADS>(p, w, table, page_div, capacity)) {
    write_poison<T, MLA_DV, C::THREADS>(p, w, C::ROWS);
    return;
  }
  const int diag = w.length - p.seqlen_q;  // causal: query i sees keys j <= i + diag
  const int last_row = min(w.rows, w.row0 + C::ROWS) - 1;
  w.cta_end = p.causal ? min(w.kv_end, query_of(w, last_row) + diag + 1) : w.kv_end;
  w.min_end = p.causal ? min(w.kv_end, query_of(w, w.row0) + diag + 1) : w.kv_end;
  const int n_tiles = w.cta_end > w.chunk0 ? (w.cta_end - w.chunk0 + C::BLOCK_N - 1) / C::BLOCK_N : 0;

  // Q tile (rows past the packed rows are zeros): its own commit group, ahead of the key tiles'.
  {
    const T* Q = static_cast<const T*>(p.q) + w.batch * p.q_stride[0];
    for (int c = tid; c < C::ROWS * C::ROW_CHUNKS; c += C::THREADS) {
      const int r = c / C::ROW_CHUNKS, chunk = c % C::ROW_CHUNKS, row = w.row0 + r;
      const bool valid = row < w.rows;
      const T* src = Q + query_of(w, row) * p.q_stride[1] + head_of(w, row) * p.q_stride[2] + chunk * 8;
      cp_async_16(Q_smem + panel_offset<C::Q_PANEL>(r, chunk), valid ? src : Q, valid ? 16 : 0);
    }
    cp_async_commit();
  }
  // Key tile `tile` into `stage`: warp w's rows are w, w + WARPS, ..; a row's 72 chunks go over the lanes, so a
  // thread's destinations are one base (row % 8 = warp, chunk % 8 = lane % 8) plus compile-time steps; rows past the
  // CTA's last key are zero-filled. The rows' pages are looked up a tile ahead (lookup_pages), so that the
  // block-table read is not waited for in front of every tile's copies.
  constexpr int ROWS_PER_WARP = C::BLOCK_N / C::WARPS, ROW_PASSES = (C::ROW_CHUNKS + 31) / 32;
  static_assert(C::WARPS == 8, "row % 8 == warp");
  const uint32_t lane_dst = (lane / 8) * C::K_PANEL + warp * 128 + ((lane % 8) ^ warp) * 16;
  const T* K_lane = static_cast<const T*>(p.k) + w.head_kv * p.k_stride[2] + lane * 8;
  RowPages<ROWS_PER_WARP> pages;
  auto lookup_pages = [&](int tile) {
    pages.lookup(p, w, table, page_div, w.chunk0 + tile * C::BLOCK_N + warp, C::WARPS, w.cta_end);
  };
  auto load_k = [&](int tile, uint32_t stage) {
    const int tile_start = w.chunk0 + tile * C::BLOCK_N;
#pragma unroll
    for (int i = 0; i < ROWS_PER_WARP; i++) {
      const int pos = tile_start + warp + i * C::WARPS;
      const bool valid = pages.valid(p, i, pos, w.cta_end);
      const T* src = K_lane + (valid ? pages.offset(i, p.k_stride) : 0);
#pragma unroll
      for (int j = 0; j < ROW_PASSES; j++)
        if (lane + 32 * j < C::ROW_CHUNKS)
          cp_async_16(stage + lane_dst + i * C::WARPS * 128 + j * 4 * C::K_PANEL, src + 256 * j, valid ? 16 : 0);
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

  // Accumulator layout (both products): register 4 j + 2 h + c holds row 16 (warp % 4) + g + 8 h, column
  // 8 j + c2 + c of the group's tile (g = lane / 4, c2 = 2 (lane % 4)). Both groups hold the same rows.
  const int g = lane / 4, c2 = (lane % 4) * 2, warp_row = (warp % 4) * 16;
  int row_end[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = min(w.row0 + warp_row + g + 8 * h, w.rows - 1);
    row_end[h] = p.causal ? min(w.kv_end, query_of(w, row) + diag + 1) : w.kv_end;
  }
  // The group's S k-steps 2 i + group sit in panel i / 2 at byte 32 (2 (i % 2) + group): the group's 32 bytes
  // are folded into the base descriptors, the rest is a compile-time advance per step.
  const uint64_t q_desc = sm90::desc_sw128(Q_smem + 32 * group, 16, 1024);
  const float scale_log2 = p.scale * LOG2E;
  float O[C::O_REGS];
#pragma unroll
  for (int i = 0; i < C::O_REGS; i++) O[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};  // row_sum: this lane's columns

  // Each stage's K and V descriptors, built once; a tile's wgmmas advance its stage's by compile-time steps, in
  // uniform registers (a descriptor built per tile from the slot address was rebuilt in vector registers and moved
  // by R2UR in front of every wgmma).
  uint64_t k_descs[C::STAGES], v_descs[C::STAGES];
#pragma unroll
  for (int s = 0; s < C::STAGES; s++) {
    k_descs[s] = sm90::desc_sw128(KV_smem + s * C::STAGE_BYTES + 32 * group, 16, 1024);
    v_descs[s] = sm90::desc_sw128(KV_smem + s * C::STAGE_BYTES + group * C::V_PANEL0 * C::K_PANEL, C::K_PANEL, 1024);
  }
  // S of the tile in ring stage STAGE: the group's half of the k-steps, issued and committed (the caller waits).
  const auto issue_s = [&]<int STAGE>(float (&S)[C::S_REGS], std::integral_constant<int, STAGE>) {
    const uint64_t k_desc = k_descs[STAGE];
    sm90::wgmma_fence();
#pragma unroll
    for (int i = 0; i < C::GROUP_STEPS; i++)
      sm90::wgmma_ss<T, C::BLOCK_N>(S, sm90::desc_advance(q_desc, (i / 2) * C::Q_PANEL + (i % 2) * 64),
                                    sm90::desc_advance(k_desc, (i / 2) * C::K_PANEL + (i % 2) * 64), i > 0);
    sm90::wgmma_commit();
  };
  // The partial tiles meet: each group adds the other's to its own (both then hold the same scores).
  const auto exchange = [&](float (&S)[C::S_REGS]) {
    float4* mine = partial + group * 4 * 128 + group_tid;
#pragma unroll
    for (int j = 0; j < 4; j++) mine[j * 128] = make_float4(S[4 * j], S[4 * j + 1], S[4 * j + 2], S[4 * j + 3]);
    sm90::named_barrier_sync(1, C::THREADS);  // both partial tiles written
    const float4* other = partial + (1 - group) * 4 * 128 + group_tid;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const float4 o = other[j * 128];
      S[4 * j] += o.x, S[4 * j + 1] += o.y, S[4 * j + 2] += o.z, S[4 * j + 3] += o.w;
    }
  };

  // Software pipeline: S(t + 1) runs on the tensor cores while the softmax of tile t runs, and P V(t) while the
  // partial tiles of S(t + 1) meet. Tiles t and t + 1 are in use during iteration t, tile t + 2 is loading into
  // the slot of t - 1 (free once every thread has waited for P V(t - 1), at the iteration's first barrier).
  float S[C::S_REGS];
  if (n_tiles > 0) {
    cp_async_wait<C::STAGES - 2>();  // Q and tile 0 (tile 1 may still fly)
    sm90::fence_proxy_async();       // this thread's copies, visible to the wgmmas after the barrier
    __syncthreads();
    issue_s(S, std::integral_constant<int, 0>());
    sm90::wgmma_wait<0>();
    sm90::fence_regs(S);
    exchange(S);
  }
  // One iteration, tile in ring stage STAGE (= tile % STAGES: the loop below runs them in threes, so that every
  // descriptor is a loop invariant of its own and stays in uniform registers).
  const auto step = [&]<int STAGE>(int tile, std::integral_constant<int, STAGE>) {
    constexpr int NEXT = (STAGE + 1) % C::STAGES, REFILL = (STAGE + C::STAGES - 1) % C::STAGES;
    cp_async_wait<0>();  // tile + 1
    sm90::fence_proxy_async();
    __syncthreads();  // tile + 1 lands; every thread is done with P V(tile - 1) and the partial tiles
    if (tile + C::STAGES - 1 < n_tiles) {
      load_k(tile + C::STAGES - 1, KV_smem + REFILL * C::STAGE_BYTES);
      lookup_pages(tile + C::STAGES);  // read during this tile's products
    }
    cp_async_commit();
    // S(tile + 1), also past the last tile (then over a stale slot, never used: no branch between a wgmma and its
    // wait, which would serialise them)
    float S_next[C::S_REGS];
    issue_s(S_next, std::integral_constant<int, NEXT>());

    const int tile_start = w.chunk0 + tile * C::BLOCK_N;
    if (tile_start + C::BLOCK_N > w.min_end) {  // keys past a row's end (chunk tail, length, causal)
#pragma unroll
      for (int i = 0; i < C::S_REGS; i++)
        if (tile_start + 8 * (i / 4) + c2 + i % 2 >= row_end[(i / 2) % 2]) S[i] = -INFINITY;
    }
    // Online softmax over the tile's 32 keys (decode/mla.cuh).
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; h++)
      alpha[h] = mla_softmax_row<C::S_REGS / 4, true>(row_max[h], row_sum[h], scale_log2,
                                                     [&](int j, int c) -> float& { return S[4 * j + 2 * h + c]; });
    // O *= alpha (P V(tile - 1) has retired): 128 multiplies a thread, skipped by a warp none of whose rows moved
    // its maximum.
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
      for (int j = 0; j < C::O_REGS / 4; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) O[4 * j + i] *= alpha[i / 2];
    }

    // O += P (64 x 32 keys: the scores' accumulator layout is the A fragment's) V (32 keys x the group's 256
    // columns: panels group * 4 .., 16 keys = 2048 bytes a k-step).
    uint32_t P[C::BLOCK_N / 16][4];
#pragma unroll
    for (int kk = 0; kk < C::BLOCK_N / 16; kk++)
#pragma unroll
      for (int r = 0; r < 4; r++) P[kk][r] = pack2<T>(S[8 * kk + 2 * r], S[8 * kk + 2 * r + 1]);
    const uint64_t v_desc = v_descs[STAGE];
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < C::BLOCK_N / 16; kk++)
      sm90::wgmma_rs<T, MLA_DV / C::GROUPS>(O, P[kk], sm90::desc_advance(v_desc, kk * 2048));
    sm90::wgmma_commit();
    sm90::wgmma_wait<1>();  // S(tile + 1); P V(tile) may still run
    sm90::fence_regs(S_next);
    exchange(S_next);
#pragma unroll
    for (int i = 0; i < C::S_REGS; i++) S[i] = S_next[i];
    sm90::wgmma_wait<0>();
    sm90::fence_regs(O);
  };
  for (int tile = 0; tile < n_tiles; tile += C::STAGES) {
    step(tile, std::integral_constant<int, 0>());
    if (tile + 1 < n_tiles) step(tile + 1, std::integral_constant<int, 1>());
    if (tile + 2 < n_tiles) step(tile + 2, std::integral_constant<int, 2>());
  }
  cp_async_wait<0>();

#pragma unroll
  for (int h = 0; h < 2; h++)
    mla_finish_row<T, C::O_REGS / 4>(p, w, w.row0 + warp_row + g + 8 * h, group * (MLA_DV / C::GROUPS) + c2,
                                     row_sum[h], row_max[h], group == 0 && lane % 4 == 0,
                                     [&](int j, int c) { return O[4 * j + 2 * h + c]; });
#endif
}

// Calls launcher.template operator()<T>() for q's dtype.
template <typename Launcher>
int mla_wgmma_dispatch(int dtype, char* err, int err_len, Launcher&& launcher) {
  if (dtype == FA_DTYPE_BF16) return launcher.template operator()<__nv_bfloat16>();
  if (dtype == FA_DTYPE_FP16) return launcher.template operator()<__half>();
  return report(err, err_len, "dtype", "q and the latent cache: bfloat16, float16");
}

int mla_decode_wgmma(const DecodeParams& p, const FastDiv& page_div, cudaStream_t stream, char* err, int err_len) {
  using C = MlaWgmmaTiles;
  return mla_wgmma_dispatch(p.dtype, err, err_len, [&]<typename T>() {
    if (int rc = check_decode_params(p, C::BLOCK_N, C::ROWS, err, err_len)) return rc;
    const int rows = p.seqlen_q * (p.heads_q / p.heads_kv);
    const dim3 grid((rows + C::ROWS - 1) / C::ROWS, p.heads_kv * p.num_splits, p.batch);
    if (int rc = launch_kernel(fwd_mla_decode_wgmma_kernel<T>, grid, C::THREADS, C::SMEM_BYTES, stream, err, err_len,
                               p, page_div))
      return rc;
    return p.num_splits == 1 ? 0 : launch_merge<T, MLA_DV>(p, stream, err, err_len);
  });
}

int mla_decode_wgmma_ctas_per_sm(int dtype) {
  using C = MlaWgmmaTiles;
  return mla_wgmma_dispatch(dtype, nullptr, 0, []<typename T>() {
    return resident_ctas(fwd_mla_decode_wgmma_kernel<T>, C::THREADS, C::SMEM_BYTES);
  });
}

}  // namespace fa
