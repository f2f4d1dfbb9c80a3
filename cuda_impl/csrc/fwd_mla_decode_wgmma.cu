// MLA decode on Hopper's wgmma (sm_90a), for 33 or more packed query rows (64 or 128 heads, or 16-32 heads with
// speculative tokens): the compute-bound half of FlashMLA's shapes, where the mma.sync kernel (fwd_mla_decode.cu)
// tops out at a sixth of the tensor cores. Same contract, same work split over the grid (a CTA = 64 packed rows of
// one sequence, one chunk of keys), the same poison checks, causal masking and merge.
// - Two warpgroups, one m64 tile of rows. O (64 x 512 fp32) does not fit one warpgroup's registers, so group g owns
//   O's columns 256 g .. + 255 (128 registers a thread), and both need every key's P.
// - Keys in pairs of 64-key blocks (A, B): group 0 computes S_A = Q K_A^T, group 1 S_B, each over all 576 columns
//   (m64n64k16, Q and K from shared memory; at N = 64 the operand reads are within shared memory's bandwidth, at
//   N = 32 they were not). The groups work in turn ("seesaw"): group 0 takes the running maximum to S_A's and
//   hands it over (shared memory, named barrier), group 1 takes it on to S_B's and hands back S_B's P and its
//   factor; each multiplies its own P by its half of its block's V, then the other's P (passed through shared
//   memory as A fragments) by its half of the other block's V. While one group runs its softmax the tensor cores
//   run the other's products, instead of both groups meeting every 32 keys with the cores idle.
// - The running maximum is kept while it grows by at most 2^MLA_LAZY_RESCALE, so most blocks skip O's rescale.
// - Shared memory: Q (72 KB) and two 72-KB key blocks, written by cp.async in wgmma's 128-byte swizzle (nine
//   64-column panels), each row at its own page address (any page size); the P hand-over (8 KB) and the row
//   statistics. 226 KB: one CTA per SM, no room for a third block. Group g copies the panels it multiplies as V
//   (4 g .. 4 g + 3) of both blocks and the rope panel (8) of its own block, as soon as its products with them are
//   done; every panel has an mbarrier that the copies arrive on (cp.async.mbarrier.arrive), so the S product waits
//   per panel, its own group's panels first.
#include <type_traits>

#include "decode/merge.cuh"
#include "decode/mla.cuh"
#include "decode/params.cuh"
#include "hopper/host.cuh"
#include "hopper/sm90.cuh"

namespace fa {

struct MlaWgmmaTiles {
  static constexpr int ROWS = MLA_WGMMA_ROWS;
  static constexpr int GROUPS = 2;  // warpgroups: one S tile each, O's columns split between them
  static constexpr int THREADS = GROUPS * 128;
  static constexpr int BLOCK_N = MLA_WGMMA_BLOCK_N;       // keys of a block: a group's S tile (wgmma N)
  static constexpr int PANELS = MLA_DQK / 64;             // 64-column panels of Q and K rows (the swizzle's 128 bytes)
  static constexpr int V_PANELS = MLA_DV / GROUPS / 64;   // a group's half of V
  static constexpr int ROPE = PANELS - 1;                 // the panel past V's columns
  static constexpr int PANEL_BYTES = 64 * 128;            // 64 rows (queries or keys) of a panel
  static constexpr int BLOCK_BYTES = PANELS * PANEL_BYTES;  // Q, and each key block
  static constexpr int S_REGS = BLOCK_N / 2, O_REGS = MLA_DV / GROUPS / 2, P_STEPS = BLOCK_N / 16;
  static constexpr int P_BYTES = 128 * P_STEPS * 16;      // a group's P as A fragments: a uint4 a thread and k-step
  static constexpr int STATS_BYTES = 2 * 2 * ROWS * 4;    // row maxima and factors of both blocks
  static constexpr int BARRIERS = 2 * PANELS;             // [block][panel]
  static constexpr int COPY_ROWS = BLOCK_N / 16;          // key rows a thread copies per panel (8 threads a row)
  static constexpr int SMEM_BYTES = 1024 + 3 * BLOCK_BYTES + P_BYTES + STATS_BYTES + BARRIERS * 8;  // + alignment
  static_assert(ROWS == 64 && SMEM_BYTES <= 227 * 1024 && V_PANELS * GROUPS + 1 == PANELS, "tile shape");
};

// Byte offset of 16-byte chunk `chunk` (of a 576-column row) of row `row` in a Q or key block: 64-column panels of
// 64 rows, 128 bytes a row, chunks swizzled as wgmma's 128-byte mode reads them.
__device__ __forceinline__ uint32_t panel_offset(int row, int chunk) {
  return (chunk / 8) * MlaWgmmaTiles::PANEL_BYTES + row * 128 + ((chunk % 8) ^ (row % 8)) * 16;
}

// Named barriers between the groups (0 is __syncthreads). Both groups bar.sync at every hand-over: with bar.arrive
// on the handing side (the same order of events, the same bits, 0.97-1.01x as fast) compute-sanitizer's racecheck
// reported every hand-over as a race, so the tool could not check this kernel.
enum MlaHandOver : uint32_t { MAX_A = 1, MAX_B = 2 };

template <typename T>
__global__ void __launch_bounds__(MlaWgmmaTiles::THREADS, 1)
    fwd_mla_decode_wgmma_kernel(const DecodeParams p, const FastDiv page_div, const __grid_constant__ CUtensorMap k_map,
                                const bool tma) {
#if FA_SM90A
  using C = MlaWgmmaTiles;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t Q_smem = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t K_smem = Q_smem + C::BLOCK_BYTES;  // block A, then block B
  uint8_t* const tail = smem_raw + (Q_smem - smem_u32(smem_raw)) + 3 * C::BLOCK_BYTES;
  uint4* const P_shared = reinterpret_cast<uint4*>(tail);                // [k-step][thread of a group]
  float* const row_stats = reinterpret_cast<float*>(tail + C::P_BYTES);  // max [block][row], then factor
  const uint32_t bars = Q_smem + 3 * C::BLOCK_BYTES + C::P_BYTES + C::STATS_BYTES;  // [block][panel], 8 bytes each
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gtid = tid % 128;
  // shfl: warp-uniform to ptxas (the group's descriptors in uniform registers)
  const int group = __shfl_sync(0xffffffffu, tid / 128, 0);
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
  const int n_blocks = w.cta_end > w.chunk0 ? (w.cta_end - w.chunk0 + C::BLOCK_N - 1) / C::BLOCK_N : 0;

  if (tid == 0) {
    for (int i = 0; i < C::BARRIERS; i++) sm90::mbar_init(bars + 8 * i, 128);  // the copying group's threads
    sm90::mbar_init_fence();
  }
  // Q tile (rows past the packed rows are zeros).
  {
    const T* Q = static_cast<const T*>(p.q) + w.batch * p.q_stride[0];
    for (int c = tid; c < C::ROWS * (MLA_DQK / 8); c += C::THREADS) {
      const int r = c / (MLA_DQK / 8), chunk = c % (MLA_DQK / 8), row = w.row0 + r;
      const bool valid = row < w.rows;
      const T* src = Q + query_of(w, row) * p.q_stride[1] + head_of(w, row) * p.q_stride[2] + chunk * 8;
      cp_async_16(Q_smem + panel_offset(r, chunk), valid ? src : Q, valid ? 16 : 0);
    }
    cp_async_commit();
  }
  __syncthreads();  // the barriers are initialised

  // This group's panels of key block `blk` into buffer `buf` (0: A, 1: B): V's columns 256 g .. + 255, and the rope
  // panel where `rope`. Thread t copies chunk t % 8 of rows t / 8 + 16 i (one base address plus immediates); rows
  // past the CTA's last key are zero-filled. After each panel the thread arrives on its barrier.
  const T* K_head = static_cast<const T*>(p.k) + w.head_kv * p.k_stride[2] + (gtid % 8) * 8;
  // Whether block `blk` comes by TMA: every key of it is the CTA's (rows past the length would bring whatever the
  // page holds there, and a NaN times P's zero is NaN; cp.async zero-fills them) and lies in one page.
  const auto by_tma = [&](int blk) { return tma && w.chunk0 + (blk + 1) * C::BLOCK_N <= w.cta_end; };
  const auto load_block = [&](int blk, int buf, bool rope) {
    if (by_tma(blk)) {
      // One thread a group issues the group's panels (64 keys x 64 columns each, swizzled as wgmma reads them);
      // the other 127 arrive, so that a panel's barrier counts 128 arrivals whichever way its block came.
      const int pos = w.chunk0 + blk * C::BLOCK_N;
      int page = w.batch, row = pos;
      if (gtid == 0 && table != nullptr) {
        const int index = page_div(pos);
        page = table[index];
        row = pos - index * p.page_size;
      }
      const auto tma_panel = [&](int panel) {
        const uint32_t bar = bars + 8 * (buf * C::PANELS + panel);
        if (gtid == 0) {
          sm90::mbar_arrive_expect_tx(bar, C::PANEL_BYTES);
          sm90::tma_load_4d(K_smem + buf * C::BLOCK_BYTES + panel * C::PANEL_BYTES, &k_map, bar, panel * 64, row,
                            w.head_kv, page);
        } else {
          sm90::mbar_arrive(bar);
        }
      };
#pragma unroll
      for (int v = 0; v < C::V_PANELS; v++) tma_panel(group * C::V_PANELS + v);
      if (rope) tma_panel(C::ROPE);
      return;
    }
    const int pos0 = w.chunk0 + blk * C::BLOCK_N + gtid / 8;
    RowPages<C::COPY_ROWS> rows;
    rows.lookup(p, w, table, page_div, pos0, 16, w.cta_end);
    const T* src[C::COPY_ROWS];
    int bytes[C::COPY_ROWS];
#pragma unroll
    for (int i = 0; i < C::COPY_ROWS; i++) {
      const bool valid = rows.valid(p, i, pos0 + 16 * i, w.cta_end);
      src[i] = K_head + (valid ? rows.offset(i, p.k_stride) : 0);
      bytes[i] = valid ? 16 : 0;
    }
    const uint32_t dst = K_smem + buf * C::BLOCK_BYTES + panel_offset(gtid / 8, gtid % 8);
    const auto copy_panel = [&](int panel) {
#pragma unroll
      for (int i = 0; i < C::COPY_ROWS; i++)
        cp_async_16(dst + panel * C::PANEL_BYTES + i * 16 * 128, src[i] + panel * 64, bytes[i]);
      sm90::mbar_arrive_cp_async(bars + 8 * (buf * C::PANELS + panel));
    };
#pragma unroll
    for (int v = 0; v < C::V_PANELS; v++) copy_panel(group * C::V_PANELS + v);
    if (rope) copy_panel(C::ROPE);
  };
  if (n_blocks > 0) load_block(0, 0, group == 0);
  if (n_blocks > 1) load_block(1, 1, group == 1);
  cp_async_wait<0>();  // Q (the key copies are tracked by the barriers)
  sm90::fence_proxy_async();
  __syncthreads();

  // Accumulator layout (both products): register 4 j + 2 h + c holds row 16 (warp % 4) + g + 8 h, column
  // 8 j + c2 + c of the group's tile (g = lane / 4, c2 = 2 (lane % 4)). Both groups hold the same rows.
  const int g = lane / 4, c2 = (lane % 4) * 2, warp_row = (warp % 4) * 16;
  int row_end[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = min(w.row0 + warp_row + g + 8 * h, w.rows - 1);
    row_end[h] = p.causal ? min(w.kv_end, query_of(w, row) + diag + 1) : w.kv_end;
  }
  const float scale_log2 = p.scale * LOG2E;
  float O[C::O_REGS];
#pragma unroll
  for (int i = 0; i < C::O_REGS; i++) O[i] = 0.f;
  // row_max: the running maximum, the same in both groups after every pair; row_sum: this lane's columns of this
  // group's P, at row_max.
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  float S[C::S_REGS];
  uint32_t P[C::P_STEPS][4], P_other[C::P_STEPS][4];
  const float ONE[2] = {1.f, 1.f};

  // Waits for the phase `parity` of panel `panel` of buffer `buf` (every copier's rows landed), then, for a block
  // copied by cp.async, the proxy fence: cp.async writes through the generic proxy, wgmma reads through the async
  // one, as TMA writes (the fence costs 2-5%).
  const auto wait_panel = [&](int buf, int panel, uint32_t parity, bool fence) {
    sm90::mbar_wait(bars + 8 * (buf * C::PANELS + panel), parity);
    if (fence) sm90::fence_proxy_async();
  };
  const auto mask = [&](int blk) {
    const int start = w.chunk0 + blk * C::BLOCK_N;
    if (start + C::BLOCK_N > w.min_end) {  // keys past a row's end (chunk tail, length, causal)
#pragma unroll
      for (int i = 0; i < C::S_REGS; i++)
        if (start + 8 * (i / 4) + c2 + i % 2 >= row_end[(i / 2) % 2]) S[i] = -INFINITY;
    }
  };
  const auto pack_p = [&](uint32_t (&dst)[C::P_STEPS][4], const float (&factor)[2]) {
#pragma unroll
    for (int kk = 0; kk < C::P_STEPS; kk++)
#pragma unroll
      for (int r = 0; r < 4; r++)
        dst[kk][r] = pack2<T>(S[8 * kk + 2 * r] * factor[r % 2], S[8 * kk + 2 * r + 1] * factor[r % 2]);
  };
  const auto rescale_o = [&](const float (&factor)[2]) {  // skipped by a warp none of whose rows moved
    if (__any_sync(0xffffffffu, factor[0] != 1.f || factor[1] != 1.f)) {
#pragma unroll
      for (int j = 0; j < C::O_REGS / 4; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) O[4 * j + i] *= factor[i / 2];
    }
  };
  const auto put_p = [&](const uint32_t (&src)[C::P_STEPS][4]) {
#pragma unroll
    for (int kk = 0; kk < C::P_STEPS; kk++)
      P_shared[kk * 128 + gtid] = make_uint4(src[kk][0], src[kk][1], src[kk][2], src[kk][3]);
  };
  const auto get_p = [&]() {
#pragma unroll
    for (int kk = 0; kk < C::P_STEPS; kk++) {
      const uint4 v = P_shared[kk * 128 + gtid];
      P_other[kk][0] = v.x, P_other[kk][1] = v.y, P_other[kk][2] = v.z, P_other[kk][3] = v.w;
    }
  };
  const auto write_stats = [&](int blk, const float (&factor)[2]) {
    if (lane % 4 == 0) {
#pragma unroll
      for (int h = 0; h < 2; h++) {
        row_stats[blk * C::ROWS + warp_row + g + 8 * h] = row_max[h];
        row_stats[(2 + blk) * C::ROWS + warp_row + g + 8 * h] = factor[h];
      }
    }
  };
  const auto read_stats = [&](int blk, float (&factor)[2]) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      row_max[h] = row_stats[blk * C::ROWS + warp_row + g + 8 * h];
      factor[h] = row_stats[(2 + blk) * C::ROWS + warp_row + g + 8 * h];
    }
  };

  // One group's part of a pair of blocks (G = 0: block A, O's left half; G = 1: block B, the right half), as
  // compile-time code per group, so that every panel index and descriptor offset is an immediate.
  const auto run = [&]<int G>(std::integral_constant<int, G>) {
    const uint64_t q_desc = sm90::desc_sw128(Q_smem, 16, 1024);
    const uint64_t k_desc = sm90::desc_sw128(K_smem + G * C::BLOCK_BYTES, 16, 1024);
    const uint64_t v_desc[2] = {
        sm90::desc_sw128(K_smem + G * C::V_PANELS * C::PANEL_BYTES, C::PANEL_BYTES, 1024),
        sm90::desc_sw128(K_smem + C::BLOCK_BYTES + G * C::V_PANELS * C::PANEL_BYTES, C::PANEL_BYTES, 1024)};
    // S of this group's block: its own panels first (copied earlier), the other group's V half last. pv_pending
    // (group 0): the last pair's P_B V_B is still in flight; it is waited for once this group's own panels and the
    // rope panel are issued, and block `deferred` (if any) then takes over block B's left half.
    const auto s_product = [&](uint32_t parity, bool fence, bool pv_pending, int deferred) {
      sm90::wgmma_fence();
#pragma unroll
      for (int i = 0; i < C::PANELS; i++) {
        constexpr int OWN = G * C::V_PANELS, OTHER = (1 - G) * C::V_PANELS;
        const int panel = i < C::V_PANELS ? OWN + i : i == C::V_PANELS ? C::ROPE : OTHER + i - C::V_PANELS - 1;
        wait_panel(G, panel, parity, fence);
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
          sm90::wgmma_ss<T, C::BLOCK_N>(S, sm90::desc_advance(q_desc, panel * C::PANEL_BYTES + 32 * kk),
                                        sm90::desc_advance(k_desc, panel * C::PANEL_BYTES + 32 * kk), i + kk > 0);
        if (i == C::V_PANELS && pv_pending) {
          sm90::wgmma_commit();
          sm90::wgmma_wait<1>();
          sm90::fence_regs(O);
          if (deferred >= 0) load_block(deferred, 1, false);
        }
      }
      sm90::wgmma_commit();
      sm90::wgmma_wait<0>();
      sm90::fence_regs(S);
    };
    // O += P (64 x 64 keys) V (block `buf`'s keys x this group's 256 columns; 16 keys = 2048 bytes a k-step).
    const auto pv_product = [&](const uint32_t (&a)[C::P_STEPS][4], int buf) {
      sm90::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < C::P_STEPS; kk++)
        sm90::wgmma_rs<T, MLA_DV / C::GROUPS>(O, a[kk], sm90::desc_advance(v_desc[buf], kk * 2048));
      sm90::wgmma_commit();
    };
    const auto softmax = [&](float (&alpha)[2]) {
#pragma unroll
      for (int h = 0; h < 2; h++)
        alpha[h] = mla_softmax_row<C::S_REGS / 4, true>(row_max[h], row_sum[h], scale_log2,
                                                       [&](int j, int c) -> float& { return S[4 * j + 2 * h + c]; });
    };
    const int n_pairs = (n_blocks + 1) / 2;
    bool pv_pending = false;  // (group 0) the last pair's P_B V_B not yet waited for
    int deferred = -1;        // (group 0) the block whose copy into buffer 1 waits for it
    for (int pair = 0; pair < n_pairs; pair++) {
      const uint32_t parity = pair & 1;
      const int blk_a = 2 * pair, blk_b = blk_a + 1;
      const bool has_b = blk_b < n_blocks, next = pair + 1 < n_pairs;
      float alpha[2], beta[2];
      if constexpr (G == 0) {
        s_product(parity, !by_tma(blk_a), pv_pending, deferred);
        pv_pending = false;
        mask(blk_a);
        softmax(alpha);  // to S_A's maximum: P_A in S; alpha, O's factor from the last pair's maximum
        rescale_o(alpha);
        pack_p(P, ONE);
        put_p(P);
        write_stats(0, alpha);
        sm90::named_barrier_sync(MAX_A, C::THREADS);  // group 1: P_A, the maximum and alpha
        pv_product(P, 0);
        sm90::wgmma_wait<0>();  // O += P_A V_A (the left half), while group 1 runs S_B's softmax
        sm90::fence_regs(O);
        if (next) load_block(blk_a + 2, 0, true);  // block A's left half and rope panel are free
        sm90::named_barrier_sync(MAX_B, C::THREADS);  // group 1: the maximum taken on to S_B's, its factor, P_B
        read_stats(1, beta);
        if (has_b) get_p();
#pragma unroll
        for (int h = 0; h < 2; h++) row_sum[h] *= beta[h];
        rescale_o(beta);
        if (has_b) {
#pragma unroll
          for (int v = 0; v < C::V_PANELS; v++) wait_panel(1, v, parity, !by_tma(blk_b));  // (this group's copies; group 1 saw them)
          pv_product(P_other, 1);
          if (next) {  // FlashMLA's order: the next pair's S is issued before P_B V_B is waited for
            pv_pending = true;
            deferred = blk_b + 2 < n_blocks ? blk_b + 2 : -1;
            continue;
          }
          sm90::wgmma_wait<0>();
          sm90::fence_regs(O);
          if (blk_b + 2 < n_blocks) load_block(blk_b + 2, 1, false);
        }
      } else {
        if (has_b) {
          s_product(parity, !by_tma(blk_b), false, -1);
          mask(blk_b);
        }
        sm90::named_barrier_sync(MAX_A, C::THREADS);  // group 0: S_A's maximum, its factor and P_A
        read_stats(0, alpha);
        get_p();
#pragma unroll
        for (int h = 0; h < 2; h++) row_sum[h] *= alpha[h];
        rescale_o(alpha);
#pragma unroll
        for (int v = 0; v < C::V_PANELS; v++) wait_panel(0, C::V_PANELS + v, parity, !by_tma(blk_a));  // (as above)
        pv_product(P_other, 0);  // O += P_A V_A (the right half), under S_B's softmax
        if (has_b) {
          softmax(beta);  // on from S_A's maximum to S_B's: P_B in S
          pack_p(P, ONE);
          put_p(P);
        } else {
          beta[0] = beta[1] = 1.f;
        }
        write_stats(1, beta);
        sm90::named_barrier_sync(MAX_B, C::THREADS);
        sm90::wgmma_wait<0>();
        sm90::fence_regs(O);
        if (next) load_block(blk_a + 2, 0, false);  // block A's right half is free
        rescale_o(beta);
        if (has_b) {
          pv_product(P, 1);
          sm90::wgmma_wait<0>();  // O += P_B V_B (the right half)
          sm90::fence_regs(O);
          if (blk_b + 2 < n_blocks) load_block(blk_b + 2, 1, true);
        }
      }
    }
  };
  if (group == 0)
    run(std::integral_constant<int, 0>());
  else
    run(std::integral_constant<int, 1>());

  // The groups' sums of a row meet (thread t of each group holds the same rows and columns), then each writes its
  // half of O; group 0 the LSE.
  __syncthreads();
  float* sums = reinterpret_cast<float*>(P_shared);  // [group][h][thread of the group]
#pragma unroll
  for (int h = 0; h < 2; h++) sums[(group * 2 + h) * 128 + gtid] = row_sum[h];
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; h++) row_sum[h] += sums[((1 - group) * 2 + h) * 128 + gtid];
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
    // Whole key blocks come by TMA where a 64-key block lies in one page (a contiguous cache is one page per
    // sequence); other page sizes take cp.async (any page size). The checks have made the strides 16-byte multiples.
    const bool tma = p.page_size % C::BLOCK_N == 0;
    CUtensorMap k_map{};
    if (tma) {
      const int64_t stride[3] = {p.k_stride[0], p.k_stride[2], p.k_stride[1]};  // (page, head, row), as (B, H, S)
      if (int rc = hopper_host::encode_map(&k_map, p.k, stride, p.num_pages, p.heads_kv, p.page_size, MLA_DQK,
                                           C::BLOCK_N, p.dtype, err, err_len))
        return rc;
    }
    if (int rc = launch_kernel(fwd_mla_decode_wgmma_kernel<T>, grid, C::THREADS, C::SMEM_BYTES, stream, err, err_len,
                               p, page_div, k_map, tma))
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
