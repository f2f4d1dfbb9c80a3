// Decode (flash-decoding): a few query rows against a long, paged or contiguous KV cache, split over the keys.
// The contract (cuda_impl/decode.py) and the oracle (compare.oracle.check_kvcache) fix what it computes.
// - One CTA = one KV head of one sequence, one 16-row query tile, one chunk of the keys (a split). GQA rows are
//   packed: tile row r is query head hk * g + r % g at query position r / g, so K/V are read once per step for
//   all the query heads that share them (padded rows are computed, never stored).
// - 16 rows are one mma.sync m16n8k16 tile, which one warp could do alone; the CTA's four warps instead split
//   each key tile (warp w: keys w * KEYS_PER_WARP ..), every warp keeping its own online softmax, so that the CTA
//   keeps four warps' worth of cp.async bytes in flight. The warps' (m, l, O) merge in shared memory at the end.
// - K/V: a STAGES-deep cp.async ring (ladder v5's one-barrier-per-tile protocol); each key row gets its own
//   address (page = block_table[b, pos / page_size]), so pages of any size and order cost the same.
// - More than one split: each CTA writes its fp32 partial (O / l, LSE) and fwd_decode_merge_kernel combines the
//   splits through their LSE in a fixed order (bitwise deterministic), several warps per row reading the splits
//   in parallel; on sm_90+ it is launched as a programmatic dependent, so no launch gap sits between the two
//   kernels. One split writes out directly.
// - e4m3 K/V: the ring holds the bytes (half the traffic) and the MMAs run in fp16 whatever q's type. ldmatrix
//   reads the e4m3 rows as if they were 16-bit, and each register's four bytes become two fp16 pairs in registers
//   (cvt e4m3x2 -> f16x2, exact): no widened copy in shared memory. The fragments this gives hold a fixed
//   permutation of head_dim (K: a lane's four consecutive columns; V: even and odd columns in separate n-tiles),
//   which Q's fragments and O's store order follow. Q is scaled by a power of two into fp16's range (a bf16 q
//   may exceed it) and converted once per CTA; that factor and the per-(b, kv head) K descale fold into the
//   softmax scale, the V descale into the output.
// - A local window (window_left / window_right keys around each row's bottom-right diagonal, -1 unbounded): with a
//   left bound the chunks start at the window's first key (decode_chunk0), so the grid covers the window's span,
//   not the capacity; a CTA reads the key tiles from its first row's first key to its last row's last and masks
//   both sides per row on the edge tiles. A chunk that sees no key still writes its empty partial (weight 0).
// - Safety: a length outside [0, capacity] or a used block-table entry outside [0, num_pages) makes the
//   sequence's rows NaN before any K/V byte is read; entries past the pages the length needs are never read.
#include <cuda_fp8.h>

#include <climits>

#include "decode/merge.cuh"
#include "decode/params.cuh"
#include "ladder.cuh"

namespace fa {

constexpr int DECODE_WARPS = 4;
constexpr int TILE_ROWS = 16;  // query rows of a CTA: one m16 MMA tile

// Keys per warp: a ring stage of K+V holds 32 KB at d64 / d128 (two CTAs per SM, 2 x 2 stages = 128 KB in flight
// per SM), e4m3 as well (twice the keys: at 16 KB per stage the per-tile work, not the bytes, set the pace);
// d256 takes one CTA per SM (O alone is 128 registers a thread), 64 keys a stage.
template <int DIM, typename KV>
constexpr int decode_keys_per_warp() {
  const int keys = DIM == 64 ? 32 : 16;
  return sizeof(KV) == 1 && DIM != 256 ? 2 * keys : keys;
}

template <int DIM, typename KV>
struct DecodeTiles : Tiles<DIM, DECODE_WARPS, 1, decode_keys_per_warp<DIM, KV>()> {
  using Base = Tiles<DIM, DECODE_WARPS, 1, decode_keys_per_warp<DIM, KV>()>;
  static constexpr bool FP8 = sizeof(KV) == 1;
  static constexpr int KEYS_PER_WARP = Base::BLOCK_KV;
  static constexpr int BLOCK_N = DECODE_WARPS * KEYS_PER_WARP;  // keys of one ring stage
  static constexpr int STAGES = 3;
  static constexpr int CTAS_PER_SM = DIM == 256 ? 1 : 2;
  // Tiles within at most two pages copied from per-tile page bases (load_kv), but at e4m3 d256, whose 255 registers
  // spilled 20 bytes with it.
  static constexpr bool TILE_PAGES = !(FP8 && DIM == 256);
  // d256: Q (64 registers) beside O (128) spills, so its fragments are re-read from shared memory every tile.
  static constexpr bool Q_FROM_SMEM = DIM == 256;
  // The ring (16-bit or e4m3 rows, swizzled for ldmatrix: ring_offset).
  static constexpr int KV_ROW_BYTES = DIM * int(sizeof(KV));
  static constexpr int KV_ROW_CHUNKS = KV_ROW_BYTES / 16;
  static constexpr int KV_TILE_BYTES = BLOCK_N * KV_ROW_BYTES;  // one K or one V stage
  static constexpr int STAGE_BYTES = 2 * KV_TILE_BYTES;
  static constexpr int Q_TILE_BYTES = TILE_ROWS * Base::ROW_BYTES;
  // The in-CTA merge reuses the ring: each warp's O rows (fp32, padded by 8 floats: conflict-free float2
  // stores), then its row maxima and sums.
  static constexpr int O_ROW_FLOATS = DIM + 8;
  static constexpr int MERGE_BYTES = DECODE_WARPS * TILE_ROWS * (O_ROW_FLOATS + 2) * 4;
  static constexpr int PIPE_BYTES = Q_TILE_BYTES + STAGES * STAGE_BYTES;
  static constexpr int SMEM_BYTES = PIPE_BYTES > MERGE_BYTES ? PIPE_BYTES : MERGE_BYTES;
  static_assert(Base::THREADS % KV_ROW_CHUNKS == 0 && BLOCK_N % (Base::THREADS / KV_ROW_CHUNKS) == 0,
                "a stage must split evenly over the CTA");
};

// Byte offset of 16-byte chunk `chunk` of ring row `row`, swizzled so that the eight rows of an ldmatrix read at one
// chunk fall in all 32 banks: rows of 128 bytes or more as the ladder's tiles (chunk ^ row % 8); the 64-byte rows of
// an e4m3 d64 ring put two rows in 128 bytes, so there the chunk is xor-ed with (row / 2) % 4.
template <int ROW_CHUNKS>
__device__ __forceinline__ uint32_t ring_offset(int row, int chunk) {
  if constexpr (ROW_CHUNKS >= 8) return tile_offset<ROW_CHUNKS, true>(row, chunk);
  else return uint32_t((row * ROW_CHUNKS + (chunk ^ ((row / 2) % ROW_CHUNKS))) * 16);
}

// Four e4m3 bytes -> fp16 pairs (byte 0, byte 1) and (byte 2, byte 3), low half first (exact: e4m3 has 3 mantissa
// bits and an exponent range inside fp16's). The register's halves split in PTX, so that on sm_90 the high pair's
// unpack reads its half in place (F2FP ... R.H1) instead of after a shift: two instructions per four bytes, not three
// (x >> 16 through __nv_cvt_fp8x2_to_halfraw2 compiled to SHF + F2FP).
__device__ __forceinline__ void e4m3x4_to_half2x2(uint32_t x, uint32_t& lo, uint32_t& hi) {
#if __CUDA_ARCH__ >= 890
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\ncvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(x));
#else
  const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(x & 0xffff), __NV_E4M3);
  const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(x >> 16), __NV_E4M3);
  lo = uint32_t(a.x) | (uint32_t(a.y) << 16);
  hi = uint32_t(b.x) | (uint32_t(b.y) << 16);
#endif
}

// e4m3 K/V: the CTA's Q tile (16-bit T, swizzled) rewritten in place as fp16 times q_mul, a power of two that puts
// the tile's largest magnitude in [2^14, 2^15) (a bf16 q may lie beyond fp16's range; small ones keep their bits).
// Returns q_mul. Every thread of the CTA calls it once Q has landed.
template <typename T, int THREADS, int CHUNKS>
__device__ float q_tile_to_half(uint8_t* Q_tile, int tid) {
  __shared__ uint32_t warp_amax[THREADS / 32];
  uint4* chunks = reinterpret_cast<uint4*>(Q_tile);
  uint32_t amax = 0;  // |x| as float bits: same order as the values (NaN above inf)
  for (int i = tid; i < CHUNKS; i += THREADS) {
    const uint4 v = chunks[i];
    const T* x = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int j = 0; j < 8; j++) amax = max(amax, __float_as_uint(fabsf(float(x[j]))));
  }
  amax = __reduce_max_sync(0xffffffff, amax);
  if (tid % 32 == 0) warp_amax[tid / 32] = amax;
  __syncthreads();
#pragma unroll
  for (int wp = 0; wp < THREADS / 32; wp++) amax = max(amax, warp_amax[wp]);
  const int q_exp = min(max(14 - (int(amax >> 23) - 127), -100), 100);
  const float q_mul = __int_as_float((q_exp + 127) << 23);
  for (int i = tid; i < CHUNKS; i += THREADS) {
    uint4 v = chunks[i];
    const T* x = reinterpret_cast<const T*>(&v);
    const uint4 h = make_uint4(pack2<__half>(float(x[0]) * q_mul, float(x[1]) * q_mul),
                               pack2<__half>(float(x[2]) * q_mul, float(x[3]) * q_mul),
                               pack2<__half>(float(x[4]) * q_mul, float(x[5]) * q_mul),
                               pack2<__half>(float(x[6]) * q_mul, float(x[7]) * q_mul));
    chunks[i] = h;
  }
  __syncthreads();
  return q_mul;
}

template <typename T, typename KV, int DIM>
__global__ void __launch_bounds__(DECODE_WARPS * 32, DecodeTiles<DIM, KV>::CTAS_PER_SM)
    fwd_decode_kernel(const DecodeParams p, const FastDiv page_div) {
  using C = DecodeTiles<DIM, KV>;
  constexpr int STAGES = C::STAGES, BLOCK_N = C::BLOCK_N, KW = C::KEYS_PER_WARP;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t Q_smem = smem_u32(smem);
  const uint32_t KV_smem = Q_smem + C::Q_TILE_BYTES;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  launch_dependents();  // the merge (more than one split) may get resident now

  DecodeWork w = decode_work(p, TILE_ROWS, BLOCK_N);
  const int capacity = p.max_pages * p.page_size;
  const int* table = p.block_table != nullptr ? p.block_table + w.batch * p.block_table_stride : nullptr;

  if (chunk_poisoned<C::THREADS>(p, w, table, page_div, capacity)) {
    write_poison<T, DIM, C::THREADS>(p, w, TILE_ROWS);
    return;
  }

  // Query i sees the chunk's keys i + diag - left .. i + diag + right (a side of -1: unbounded; causal: right 0).
  // Later rows' windows start and end later: the CTA reads the key tiles from its first row's first key to its
  // last row's last, and the first row's end (min_end) is where tiles start to need a mask on the right.
  const int diag = w.length - p.seqlen_q, left = p.window_left, right = p.causal ? 0 : p.window_right;
  auto key_start = [&](int query) { return left >= 0 ? max(w.chunk0, query + diag - left) : w.chunk0; };
  auto key_end = [&](int query) { return right >= 0 ? min(w.kv_end, query + diag + right + 1) : w.kv_end; };
  const int last_row = min(w.rows, w.row0 + TILE_ROWS) - 1;
  w.cta_end = key_end(query_of(w, last_row));
  w.min_end = key_end(query_of(w, w.row0));
  w.cta_start = w.chunk0 + (key_start(query_of(w, w.row0)) - w.chunk0) / BLOCK_N * BLOCK_N;
  const int n_tiles = w.cta_end > w.cta_start ? (w.cta_end - w.cta_start + BLOCK_N - 1) / BLOCK_N : 0;

  // Q tile: row r of the tile from (query r / g, head hk * g + r % g); padding rows are zeros.
  {
    const T* Q = static_cast<const T*>(p.q) + w.batch * p.q_stride[0];
    for (int c = tid; c < TILE_ROWS * C::ROW_CHUNKS; c += C::THREADS) {
      const int r = c / C::ROW_CHUNKS, chunk = c % C::ROW_CHUNKS, row = w.row0 + r;
      const bool valid = row < w.rows;
      const T* src = Q + query_of(w, row) * p.q_stride[1] + head_of(w, row) * p.q_stride[2] + chunk * 8;
      cp_async_16(Q_smem + tile_offset<C::ROW_CHUNKS, true>(r, chunk), valid ? src : Q, valid ? 16 : 0);
    }
  }

  // K/V of key tile `tile` into ring slot `stage`: each thread's rows are tid / KV_ROW_CHUNKS + i * ROWS_PER_PASS,
  // at its own 16-byte chunk; rows past the CTA's last key are zero-filled without touching the block table. Pages are
  // looked up as the tile is copied, once per tile where it lies in one or two pages, else once per row (the MLA
  // kernels' look-ahead, RowPages, gained nothing here: journal 2026-12-04 mla-wgmma, call 14).
  const KV* K_head = static_cast<const KV*>(p.k) + w.head_kv * p.k_stride[2];
  const KV* V_head = static_cast<const KV*>(p.v) + w.head_kv * p.v_stride[2];
  constexpr int ROWS_PER_PASS = C::THREADS / C::KV_ROW_CHUNKS;
  constexpr int PASSES = BLOCK_N / ROWS_PER_PASS;
  constexpr int KV_ELEMS_PER_CHUNK = 16 / int(sizeof(KV));
  const int load_row = tid / C::KV_ROW_CHUNKS, load_chunk = tid % C::KV_ROW_CHUNKS;
  const int64_t ks1 = p.k_stride[1], vs1 = p.v_stride[1];
  auto load_kv = [&](int tile, uint32_t stage) {
    const int tile_start = w.cta_start + tile * BLOCK_N;
    const int elem = load_chunk * KV_ELEMS_PER_CHUNK;
    // A tile whose keys lie in at most two pages (always in a contiguous cache; in a paged one with pages of BLOCK_N
    // keys or more, or of BLOCK_N / 2 where the tile starts on a page): the pages looked up once per tile, each row at
    // its page's base plus its key times the row stride (key `pos` of page entry `index` is row pos - index *
    // page_size of that page), instead of a division, a table read and four 64-bit products per row.
    const int tile_last = min(tile_start + BLOCK_N, w.cta_end) - 1;
    const int first = table != nullptr ? page_div(tile_start) : 0;
    const int second = table != nullptr ? page_div(tile_last) : 0;
    if (C::TILE_PAGES && second - first <= 1) {  // (tile < n_tiles: the tile holds a key before cta_end)
      int64_t k_base[2], v_base[2];
      bool page_ok[2];
#pragma unroll
      for (int j = 0; j < 2; j++) {
        const int index = first + j;
        const int page = table == nullptr ? w.batch : table[j == 0 || second > first ? index : first];
        page_ok[j] = page >= 0 && page < p.num_pages;  // checked above; kept so that no path reads outside
        const int64_t origin = int64_t(index) * p.page_size;  // the entry's first key (0: contiguous)
        k_base[j] = page * p.k_stride[0] - origin * ks1;
        v_base[j] = page * p.v_stride[0] - origin * vs1;
      }
      const int boundary = table != nullptr ? (first + 1) * p.page_size : INT_MAX;
      const int pos0 = tile_start + load_row;
      int64_t k_row = pos0 * ks1, v_row = pos0 * vs1;  // key pos0 + i * ROWS_PER_PASS times the row strides
#pragma unroll
      for (int i = 0; i < PASSES; i++) {
        const int r = load_row + i * ROWS_PER_PASS, pos = pos0 + i * ROWS_PER_PASS;
        const bool later = pos >= boundary;
        const bool valid = pos < w.cta_end && (later ? page_ok[1] : page_ok[0]);
        const int64_t k_off = (later ? k_base[1] : k_base[0]) + k_row;
        const int64_t v_off = (later ? v_base[1] : v_base[0]) + v_row;
        const uint32_t dst = stage + ring_offset<C::KV_ROW_CHUNKS>(r, load_chunk);
        cp_async_16(dst, valid ? K_head + k_off + elem : K_head, valid ? 16 : 0);
        cp_async_16(dst + C::KV_TILE_BYTES, valid ? V_head + v_off + elem : V_head, valid ? 16 : 0);
        k_row += ROWS_PER_PASS * ks1;
        v_row += ROWS_PER_PASS * vs1;
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < PASSES; i++) {
      const int r = load_row + i * ROWS_PER_PASS, pos = tile_start + r;
      bool valid = pos < w.cta_end;
      int64_t k_off = 0, v_off = 0;
      if (valid) {
        int page = w.batch, in_page = pos;
        if (table != nullptr) {
          const int index = page_div(pos);
          page = table[index];
          in_page = pos - index * p.page_size;
          valid = page >= 0 && page < p.num_pages;  // checked above; kept so that no path reads outside
        }
        k_off = page * p.k_stride[0] + in_page * ks1;
        v_off = page * p.v_stride[0] + in_page * vs1;
      }
      const uint32_t dst = stage + ring_offset<C::KV_ROW_CHUNKS>(r, load_chunk);
      cp_async_16(dst, K_head + k_off + elem, valid ? 16 : 0);
      cp_async_16(dst + C::KV_TILE_BYTES, V_head + v_off + elem, valid ? 16 : 0);
    }
  };

  // One commit group per tile (Q rides with tile 0), committed even when empty: the group count stays fixed.
#pragma unroll
  for (int tile = 0; tile < STAGES - 1; tile++) {
    if (tile < n_tiles) load_kv(tile, KV_smem + tile * C::STAGE_BYTES);
    cp_async_commit();
  }
  cp_async_wait<STAGES - 2>();
  __syncthreads();
  // Q (swizzled in shared memory: 16 rows read at one column) and V share ldmatrix.x4 lanes: lanes 0-15 rows
  // 0-15 at the low 8 columns, lanes 16-31 at the high 8. K: one n-tile of two k-steps per x4 (K_lane), or with
  // Q from shared memory one k-step of two n-tiles (K_pair_lane: lanes 16-31 key rows 8-15).
  const SwizzledLane<C::ROW_BYTES, 2> V_lane(lane % 16, lane / 16);
  const SwizzledLane<C::ROW_BYTES, 4> K_lane(lane % 8, lane / 8);
  const SwizzledLane<C::ROW_BYTES, 2> K_pair_lane(lane % 8 + (lane / 16) * 8, (lane / 8) % 2);
  // e4m3: Q as fp16 (q_tile_to_half) in the column order of the K fragments: k-step kk's A fragment holds, for
  // rows g and g + 8 (g = lane / 4), columns 16 kk + 4 c .. + 1 in slots 2c, 2c+1 and + 2 .. + 3 in slots 2c+8, 2c+9
  // (c = lane % 4): one 8-byte read per row.
  float q_mul = 1.f;
  if constexpr (C::FP8) q_mul = q_tile_to_half<T, C::THREADS, TILE_ROWS * C::ROW_CHUNKS>(smem, tid);
  auto q_half_fragment = [&](uint32_t (&frag)[4], int kk) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const uint32_t src = Q_smem + tile_offset<C::ROW_CHUNKS, true>(lane / 4 + 8 * h, 2 * kk + (lane % 4) / 2) +
                           (lane % 2) * 8;
      asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(frag[h]), "=r"(frag[h + 2]) : "r"(src));
    }
  };
  uint32_t Q_rmem[C::Q_FROM_SMEM ? 1 : C::D_STEPS][4];  // every warp holds all 16 rows
  if constexpr (!C::Q_FROM_SMEM)
#pragma unroll
    for (int kk = 0; kk < C::D_STEPS; kk++) {
      if constexpr (C::FP8) q_half_fragment(Q_rmem[kk], kk);
      else ldmatrix_x4(Q_rmem[kk], Q_smem + V_lane.at(kk * 2));
    }

  // The keys each of this thread's two accumulator rows (lane / 4 and + 8) sees: row_start[h] .. + row_width[h]
  // (one unsigned compare per score masks both sides; an empty window has width 0).
  int row_start[2], row_width[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int query = query_of(w, min(w.row0 + lane / 4 + 8 * h, w.rows - 1));
    row_start[h] = key_start(query);
    row_width[h] = max(key_end(query) - row_start[h], 0);
  }

  float O_rmem[1][C::D_TILES][4] = {};
  float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {{0.f, 0.f}};
  float softmax_scale = p.scale;
  if constexpr (C::FP8) softmax_scale *= p.k_descale[w.batch * p.heads_kv + w.head_kv] / q_mul;
  const float scale_log2 = softmax_scale * LOG2E;

  // This warp's KW keys of the stage at `slot`: scores, mask, online softmax, O += P V.
  using MMA_T = std::conditional_t<C::FP8, __half, T>;
  auto warp_step = [&](uint32_t slot, int warp_key0) {
    const int warp_row0 = warp * KW;  // the warp's first row of the stage
    float S[1][C::KV_TILES][4];
#pragma unroll
    for (int nt = 0; nt < C::KV_TILES; nt++)
#pragma unroll
      for (int i = 0; i < 4; i++) S[0][nt][i] = 0.f;
    if constexpr (C::FP8) {
      // One x4 = 8 keys x four k-steps (matrix j: chunk kq + j); lane gets columns 16 (kq + j) + 4c .. + 3 of key g.
#pragma unroll
      for (int kq = 0; kq < C::D_STEPS; kq += 4) {
        uint32_t Q_frag[C::Q_FROM_SMEM ? 4 : 1][4];
        if constexpr (C::Q_FROM_SMEM)
#pragma unroll
          for (int j = 0; j < 4; j++) q_half_fragment(Q_frag[j], kq + j);
#pragma unroll
        for (int nt = 0; nt < C::KV_TILES; nt++) {
          uint32_t K8[4];
          ldmatrix_x4(K8, slot + ring_offset<C::KV_ROW_CHUNKS>(warp_row0 + nt * 8 + lane % 8, kq + lane / 8));
#pragma unroll
          for (int j = 0; j < 4; j++) {
            uint32_t b0, b1;
            e4m3x4_to_half2x2(K8[j], b0, b1);
            if constexpr (C::Q_FROM_SMEM) mma_m16n8k16<__half>(S[0][nt], Q_frag[j], b0, b1);
            else mma_m16n8k16<__half>(S[0][nt], Q_rmem[kq + j], b0, b1);
          }
        }
      }
    } else if constexpr (C::Q_FROM_SMEM) {
      const uint32_t K_smem = slot + warp_row0 * C::KV_ROW_BYTES;
#pragma unroll
      for (int kk = 0; kk < C::D_STEPS; kk++) {
        uint32_t Q_frag[4];
        ldmatrix_x4(Q_frag, Q_smem + V_lane.at(kk * 2));
#pragma unroll
        for (int nt = 0; nt < C::KV_TILES; nt += 2) {
          uint32_t K_frag[4];
          ldmatrix_x4(K_frag, K_smem + K_pair_lane.at(kk * 2) + nt * 8 * C::ROW_BYTES);
          mma_m16n8k16<T>(S[0][nt], Q_frag, K_frag[0], K_frag[1]);
          mma_m16n8k16<T>(S[0][nt + 1], Q_frag, K_frag[2], K_frag[3]);
        }
      }
    } else {
      const uint32_t K_smem = slot + warp_row0 * C::KV_ROW_BYTES;
#pragma unroll
      for (int nt = 0; nt < C::KV_TILES; nt++)
#pragma unroll
        for (int kk = 0; kk < C::D_STEPS; kk += 2) {
          uint32_t K_frag[4];
          ldmatrix_x4(K_frag, K_smem + K_lane.at(kk * 2) + nt * 8 * C::ROW_BYTES);
          mma_m16n8k16<T>(S[0][nt], Q_rmem[kk], K_frag[0], K_frag[1]);
          mma_m16n8k16<T>(S[0][nt], Q_rmem[kk + 1], K_frag[2], K_frag[3]);
        }
    }
    // Keys outside a row's range: past its end (chunk tail, length, causal diagonal, window) or before its start.
    // With a left bound every tile is masked: testing for the tiles all rows see whole would keep one more register
    // live in the loop, and the e4m3 d256 kernel spills with it.
    if (warp_key0 + KW > w.min_end || p.window_left >= 0) {
#pragma unroll
      for (int nt = 0; nt < C::KV_TILES; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const int key = warp_key0 + nt * 8 + (lane % 4) * 2 + i % 2;
          if (uint32_t(key - row_start[i / 2]) >= uint32_t(row_width[i / 2])) S[0][nt][i] = -INFINITY;
        }
    }
    uint32_t P_rmem[1][C::KV_STEPS][4];
    online_softmax<MMA_T>(S, row_max, row_sum, O_rmem, P_rmem, scale_log2);
    const uint32_t V_stage = slot + C::KV_TILE_BYTES;
    if constexpr (C::FP8) {
      // One x4.trans = 16 keys x two 16-column chunks; a register holds keys 2c, 2c+1 (+8 in the second matrix) at
      // columns 2n, 2n+1 (n = lane / 4): bytes regrouped by column give B fragments of n-tiles that hold the even
      // (O n-tile 2G) and the odd (2G + 1) columns of chunk G.
#pragma unroll
      for (int kk = 0; kk < C::KV_STEPS; kk++)
#pragma unroll
        for (int g = 0; g < DIM / 16; g += 2) {
          uint32_t V8[4];
          ldmatrix_x4_trans(V8, V_stage + ring_offset<C::KV_ROW_CHUNKS>(
                                              warp_row0 + kk * 16 + lane % 8 + 8 * ((lane / 8) % 2), g + lane / 16));
#pragma unroll
          for (int j = 0; j < 2; j++) {
            uint32_t even0, odd0, even1, odd1;
            e4m3x4_to_half2x2(__byte_perm(V8[2 * j], 0, 0x3120), even0, odd0);
            e4m3x4_to_half2x2(__byte_perm(V8[2 * j + 1], 0, 0x3120), even1, odd1);
            mma_m16n8k16<__half>(O_rmem[0][2 * (g + j)], P_rmem[0][kk], even0, even1);
            mma_m16n8k16<__half>(O_rmem[0][2 * (g + j) + 1], P_rmem[0][kk], odd0, odd1);
          }
        }
    } else {
      const uint32_t V_smem = V_stage + warp_row0 * C::KV_ROW_BYTES;
#pragma unroll
      for (int kk = 0; kk < C::KV_STEPS; kk++)
#pragma unroll
        for (int nd = 0; nd < C::D_TILES; nd += 2) {
          uint32_t V_frag[4];
          ldmatrix_x4_trans(V_frag, V_smem + V_lane.at(nd) + kk * 16 * C::ROW_BYTES);
          mma_m16n8k16<T>(O_rmem[0][nd], P_rmem[0][kk], V_frag[0], V_frag[1]);
          mma_m16n8k16<T>(O_rmem[0][nd + 1], P_rmem[0][kk], V_frag[2], V_frag[3]);
        }
    }
  };

  // The ring (ladder v5's protocol): the barrier that publishes tile t also proves every warp is done with
  // tile t-1, whose slot then takes tile t + STAGES - 1.
  const uint32_t ring_end = KV_smem + STAGES * C::STAGE_BYTES;
  uint32_t slot = KV_smem, prev = KV_smem + (STAGES - 1) * C::STAGE_BYTES;
  for (int tile = 0; tile < n_tiles; tile++) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (tile + STAGES - 1 < n_tiles) load_kv(tile + STAGES - 1, prev);
    cp_async_commit();
    const int warp_key0 = w.cta_start + tile * BLOCK_N + warp * KW;
    if (warp_key0 < w.cta_end) warp_step(slot, warp_key0);
    prev = slot;
    slot = slot + C::STAGE_BYTES == ring_end ? KV_smem : slot + C::STAGE_BYTES;
  }

  // In-CTA merge of the warps' (m, l, O), in warp order. The ring is free once every copy has landed.
  cp_async_wait<0>();
  __syncthreads();
  float* O_part = reinterpret_cast<float*>(smem);  // [warp][row][O_ROW_FLOATS]
  float* m_part = O_part + DECODE_WARPS * TILE_ROWS * C::O_ROW_FLOATS;  // [warp][row]
  float* l_part = m_part + DECODE_WARPS * TILE_ROWS;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = lane / 4 + 8 * h;
    float l = row_sum[0][h];
    l += __shfl_xor_sync(0xffffffff, l, 1);
    l += __shfl_xor_sync(0xffffffff, l, 2);
    if (lane % 4 == 0) {
      m_part[warp * TILE_ROWS + row] = row_max[0][h];
      l_part[warp * TILE_ROWS + row] = l;
    }
    float* O_row = O_part + (warp * TILE_ROWS + row) * C::O_ROW_FLOATS;
    if constexpr (C::FP8) {  // n-tiles 2G / 2G + 1: columns 16 G + 4c, + 2 / 16 G + 4c + 1, + 3
#pragma unroll
      for (int g = 0; g < DIM / 16; g++)
        *reinterpret_cast<float4*>(O_row + 16 * g + (lane % 4) * 4) =
            make_float4(O_rmem[0][2 * g][2 * h], O_rmem[0][2 * g + 1][2 * h], O_rmem[0][2 * g][2 * h + 1],
                        O_rmem[0][2 * g + 1][2 * h + 1]);
    } else {
#pragma unroll
      for (int nd = 0; nd < C::D_TILES; nd++)
        *reinterpret_cast<float2*>(O_row + nd * 8 + (lane % 4) * 2) =
            make_float2(O_rmem[0][nd][2 * h], O_rmem[0][nd][2 * h + 1]);
    }
  }
  __syncthreads();
  // Thread -> (row tid / 8, columns (tid % 8) * COLS ..).
  constexpr int COLS = DIM / 8;
  const int row = tid / 8, col0 = (tid % 8) * COLS;
  if (w.row0 + row >= w.rows) return;
  float m = -INFINITY;
#pragma unroll
  for (int wp = 0; wp < DECODE_WARPS; wp++) m = fmaxf(m, m_part[wp * TILE_ROWS + row]);
  float l = 0.f, o[COLS] = {};
#pragma unroll
  for (int wp = 0; wp < DECODE_WARPS; wp++) {
    const float m_w = m_part[wp * TILE_ROWS + row];
    const float f = m_w == -INFINITY ? 0.f : fast_exp2((m_w - m) * scale_log2);
    l += f * l_part[wp * TILE_ROWS + row];
    const float* src = O_part + (wp * TILE_ROWS + row) * C::O_ROW_FLOATS + col0;
#pragma unroll
    for (int c = 0; c < COLS; c += 4) {
      const float4 x = *reinterpret_cast<const float4*>(src + c);
      o[c] += f * x.x, o[c + 1] += f * x.y, o[c + 2] += f * x.z, o[c + 3] += f * x.w;
    }
  }
  // Rows that saw no key: zeros and -inf (weight 0 in the merge).
  float inv = l > 0.f ? 1.f / l : 0.f;
  if constexpr (C::FP8) inv *= p.v_descale[w.batch * p.heads_kv + w.head_kv];
#pragma unroll
  for (int c = 0; c < COLS; c++) o[c] *= inv;
  const float lse = l > 0.f ? m * softmax_scale + logf(l) : -INFINITY;
  store_row<T, DIM, COLS>(p, w, w.row0 + row, col0, o, lse, tid % 8 == 0);
}

// Calls launcher.template operator()<T, KV, DIM>() for the runtime dtypes and head_dim.
template <typename Launcher>
int decode_dispatch(int dtype, int kv_dtype, int head_dim, char* err, int err_len, Launcher&& launcher) {
  auto by_dim = [&]<typename T, typename KV>() {
    if (head_dim == 64) return launcher.template operator()<T, KV, 64>();
    if (head_dim == 128) return launcher.template operator()<T, KV, 128>();
    if (head_dim == 256) return launcher.template operator()<T, KV, 256>();
    return report(err, err_len, "head_dim", "supported: 64, 128, 256");
  };
  if (dtype != FA_DTYPE_BF16 && dtype != FA_DTYPE_FP16) return report(err, err_len, "dtype", "q: bfloat16, float16");
  if (kv_dtype != dtype && kv_dtype != KV_E4M3)
    return report(err, err_len, "dtype", "K/V: q's dtype or float8_e4m3fn");
  if (dtype == FA_DTYPE_BF16)
    return kv_dtype == KV_E4M3 ? by_dim.template operator()<__nv_bfloat16, __nv_fp8_e4m3>()
                               : by_dim.template operator()<__nv_bfloat16, __nv_bfloat16>();
  return kv_dtype == KV_E4M3 ? by_dim.template operator()<__half, __nv_fp8_e4m3>()
                             : by_dim.template operator()<__half, __half>();
}

}  // namespace fa

extern "C" int cuda_fa_decode_params_size() { return static_cast<int>(sizeof(DecodeParams)); }

// Keys of the kernel's tile at (head_dim, kv_dtype): split_keys must be a multiple of it. -1: not supported.
extern "C" int cuda_fa_decode_block_n(int head_dim, int kv_dtype) {
  int block_n = -1;
  const int kv = kv_dtype == fa::KV_E4M3 ? kv_dtype : fa::FA_DTYPE_BF16;
  fa::decode_dispatch(fa::FA_DTYPE_BF16, kv, head_dim, nullptr, 0, [&]<typename T, typename KV, int DIM>() {
    block_n = fa::DecodeTiles<DIM, KV>::BLOCK_N;
    return 0;
  });
  return block_n;
}

// CTAs of the decode kernel that fit on one SM of the current device (the split heuristic's slots), or -1.
extern "C" int cuda_fa_decode_ctas_per_sm(int dtype, int kv_dtype, int head_dim) {
  return fa::decode_dispatch(dtype, kv_dtype, head_dim, nullptr, 0, []<typename T, typename KV, int DIM>() {
    using C = fa::DecodeTiles<DIM, KV>;
    return fa::resident_ctas(fa::fwd_decode_kernel<T, KV, DIM>, C::THREADS, C::SMEM_BYTES);
  });
}

extern "C" int cuda_fa_decode(const DecodeParams* params, cudaStream_t stream, char* err, int err_len) {
  const DecodeParams& p = *params;
  return fa::decode_dispatch(p.dtype, p.kv_dtype, p.head_dim, err, err_len, [&]<typename T, typename KV, int DIM>() {
    using C = fa::DecodeTiles<DIM, KV>;
    if (int rc = fa::check_decode_params(p, C::BLOCK_N, fa::TILE_ROWS, err, err_len)) return rc;
    if (p.head_dim_v != DIM) return fa::report(err, err_len, "head_dim_v", "this kernel takes V of Q's head_dim");
    // A side wider than any row reaches is unbounded and comes as -1 (cuda_impl/decode.py): the key arithmetic
    // stays in int range.
    if (p.window_left < -1 || p.window_left > p.max_pages * p.page_size || p.window_right < -1 ||
        p.window_right > p.seqlen_q)
      return fa::report(err, err_len, "window", "each side -1 or at most the capacity (left) / seqlen_q (right)");
    const int rows = p.seqlen_q * (p.heads_q / p.heads_kv);
    const dim3 grid((rows + fa::TILE_ROWS - 1) / fa::TILE_ROWS, p.heads_kv * p.num_splits, p.batch);
    const fa::FastDiv page_div(uint32_t(p.page_size));
    if (int rc = fa::launch_kernel(fa::fwd_decode_kernel<T, KV, DIM>, grid, C::THREADS, C::SMEM_BYTES, stream, err,
                                   err_len, p, page_div))
      return rc;
    return p.num_splits == 1 ? 0 : fa::launch_merge<T, DIM>(p, stream, err, err_len);
  });
}
