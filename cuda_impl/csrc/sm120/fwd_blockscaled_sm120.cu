// MXFP8 and NVFP4 attention for sm_120a on the block-scaled warp MMA (compiled, never run here:
// the project's GPU is an H200). The ladder's shape (v3: Q in registers, 2-stage K/V ring, one
// m16 tile per warp) with the MMAs replaced:
// - S = Q K^T: one block-scaled MMA per k-step of head_dim (MXFP8 k32 = one E8M0 block per row,
//   NVFP4 k64 = four e4m3 blocks per row); the hardware applies both operands' block scales, so
//   S is exact up to fp32 accumulation.
// - P: exponentiated with the running max (fwd_common's softmax_update, row sums unquantized, as
//   the oracle's emulation does), then quantized in registers exactly as formats.quantize_p (MX
//   blocks of 32 keys, NVFP4 blocks of 16 with scale e4m3(amax / 6)); tiles start at multiples of
//   64 keys, so the blocks are quantize_p's. K is read in a permuted key order (key_base) that
//   leaves each lane's S values where the A operand of P @ V wants them: no shuffles for P.
// - O += P V^T-blocked: V stored (B, H, D, Sk) is the "col" B operand as it is, with its block
//   scales along the keys.
// V^T is read in 16-byte (MXFP8) or 8-byte (NVFP4: rows padded to 16 keys) cp.async pieces.
// Block scales are small and unaligned (rows of 1..8 bytes), so they travel through registers:
// fetched from global at the start of an iteration, stored to the next stage at its end.
#include "blockscaled.cuh"

namespace fa::bs {

template <typename F, int DIM>
struct BsTiles {
  static constexpr int NUM_WARPS = 4;
  static constexpr int THREADS = NUM_WARPS * 32;
  static constexpr int BLOCK_Q = NUM_WARPS * 16;
  static constexpr int BLOCK_KV = 64;                       // a multiple of both formats' k-step
  static constexpr int STAGES = 2;
  static constexpr int ROW_BYTES = DIM / F::PER_BYTE;       // one Q or K row
  static constexpr int VT_ROW_BYTES = BLOCK_KV / F::PER_BYTE;
  static constexpr int Q_BYTES = BLOCK_Q * ROW_BYTES;
  static constexpr int K_BYTES = BLOCK_KV * ROW_BYTES;
  static constexpr int VT_BYTES = DIM * VT_ROW_BYTES;
  static constexpr int ROW_SCALES = DIM / F::BLOCK;         // scale bytes of one Q or K row
  static constexpr int VT_SCALES = BLOCK_KV / F::BLOCK;     // scale bytes of one V^T tile row
  static constexpr int KS_BYTES = BLOCK_KV * ROW_SCALES;
  static constexpr int VS_BYTES = DIM * VT_SCALES;
  static constexpr int STAGE_BYTES = K_BYTES + VT_BYTES + KS_BYTES + VS_BYTES;
  static constexpr int SMEM_BYTES = Q_BYTES + STAGES * STAGE_BYTES;
  static constexpr int D_STEPS = DIM / F::K_STEP;           // k-steps of Q K^T
  static constexpr int KV_STEPS = BLOCK_KV / F::K_STEP;     // k-steps of P V
  static constexpr int KV_TILES = BLOCK_KV / 8;
  static constexpr int D_TILES = DIM / 8;
  static constexpr int J = F::K_STEP / 8;                   // n-tiles per k-step
  static constexpr int SCALE_FETCH = (KS_BYTES + VS_BYTES) / THREADS;  // bytes per thread and tile
  static_assert((KS_BYTES + VS_BYTES) % THREADS == 0 && STAGE_BYTES % 16 == 0, "scale tiles split evenly");
};

// Which scale word and byte hold k-step `step`'s scale(s) in a row of scales.
template <typename F>
__device__ __forceinline__ int scale_word_of(int step) { return step * F::SCALES_PER_STEP / 4; }
template <typename F>
__device__ __forceinline__ uint16_t scale_byte_of(int step) { return step * F::SCALES_PER_STEP % 4; }

// Word `word` of a row of `ROW` scale bytes (shared or global, any alignment).
template <int ROW>
__device__ __forceinline__ uint32_t row_scale_word(const uint8_t* row, int word) {
  if constexpr (ROW % 4 == 0) return *reinterpret_cast<const uint32_t*>(row + 4 * word);
  else return scale_word<ROW>(row + 4 * word);
}

template <typename F, int DIM>
__global__ void __launch_bounds__(BsTiles<F, DIM>::THREADS)
    fwd_blockscaled_kernel(const BlockScaledParams bp) {
  using C = BsTiles<F, DIM>;
  // NVFP4's Q and K tensor scales fold into the softmax scale (and so into the LSE), V's into
  // the epilogue; read from device memory, so the host never waits for them.
  FwdParams p = bp.base;
  float v_scale = 1.f;
  if constexpr (F::FORMAT == BS_FMT_NVFP4) {
    p.scale *= *bp.tensor_scale[0] * *bp.tensor_scale[1];
    v_scale = *bp.tensor_scale[2];
  }
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t Q_smem = smem_u32(smem);
  auto stage_base = [&](int tile) { return smem + C::Q_BYTES + (tile % C::STAGES) * C::STAGE_BYTES; };

  const CtaWork w = cta_work<C::BLOCK_Q, C::BLOCK_KV>(p);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_row0 = w.q_start + warp * 16;
  const int64_t q_head = int64_t(w.batch) * p.heads_q + w.head_q;
  const int64_t kv_head = int64_t(w.batch) * p.heads_kv + w.head_kv;
  const uint8_t* Q = static_cast<const uint8_t*>(p.q) + (q_head * p.seqlen_q + w.q_start) * C::ROW_BYTES;
  const uint8_t* K = static_cast<const uint8_t*>(p.k) + kv_head * p.seqlen_k * C::ROW_BYTES;
  const uint8_t* VT = static_cast<const uint8_t*>(p.v) + kv_head * DIM * int64_t(bp.vt_pitch);
  const uint8_t* K_scale = bp.k_scale + kv_head * p.seqlen_k * C::ROW_SCALES;
  const uint8_t* VT_scale = bp.vt_scale + kv_head * DIM * int64_t(bp.vt_scale_pitch);

  // K and V^T bytes by cp.async; their scales into registers (stored by store_scales).
  auto load_kv = [&](int tile) {
    uint8_t* stage = stage_base(tile);
    const int kv_start = tile * C::BLOCK_KV;
    const int vt_col = kv_start / F::PER_BYTE;
    load_bytes_async<C::BLOCK_KV, C::ROW_BYTES, 16, C::THREADS>(smem_u32(stage), K + kv_start * C::ROW_BYTES,
                                                                C::ROW_BYTES, p.seqlen_k - kv_start, C::ROW_BYTES);
    load_bytes_async<DIM, C::VT_ROW_BYTES, F::VT_COPY, C::THREADS>(smem_u32(stage + C::K_BYTES), VT + vt_col,
                                                                   bp.vt_pitch, DIM, bp.vt_pitch - vt_col);
  };
  auto fetch_scales = [&](uint8_t (&bytes)[C::SCALE_FETCH], int tile) {
    const int kv_start = tile * C::BLOCK_KV;
#pragma unroll
    for (int i = 0; i < C::SCALE_FETCH; i++) {
      const int e = threadIdx.x + i * C::THREADS;
      if (e < C::KS_BYTES) {  // K scales: one contiguous span, rows past seqlen_k read as 0
        const bool valid = kv_start + e / C::ROW_SCALES < p.seqlen_k;
        bytes[i] = valid ? K_scale[int64_t(kv_start) * C::ROW_SCALES + e] : 0;
      } else {  // V^T scales: DIM rows of VT_SCALES, blocks past the padded keys read as 0
        const int d = (e - C::KS_BYTES) / C::VT_SCALES, b = (e - C::KS_BYTES) % C::VT_SCALES;
        const int block = kv_start / F::BLOCK + b;
        bytes[i] = block < bp.vt_scale_pitch ? VT_scale[int64_t(d) * bp.vt_scale_pitch + block] : 0;
      }
    }
  };
  auto store_scales = [&](const uint8_t (&bytes)[C::SCALE_FETCH], int tile) {
    uint8_t* scales = stage_base(tile) + C::K_BYTES + C::VT_BYTES;  // K scales, then V^T scales
#pragma unroll
    for (int i = 0; i < C::SCALE_FETCH; i++) scales[threadIdx.x + i * C::THREADS] = bytes[i];
  };

  load_bytes_async<C::BLOCK_Q, C::ROW_BYTES, 16, C::THREADS>(Q_smem, Q, C::ROW_BYTES, p.seqlen_q - w.q_start,
                                                             C::ROW_BYTES);
  uint8_t scale_bytes[C::SCALE_FETCH];
  if (w.n_kv_tiles > 0) {
    load_kv(0);
    fetch_scales(scale_bytes, 0);
    store_scales(scale_bytes, 0);
  }
  cp_async_commit();

  // Q's scales for this lane's scale_A role, whole head_dim: row g (t = 0) or g + 8 (t = 1); lanes
  // t = 2, 3 hold the same as t = 0, 1 (CUTLASS's SM120 scale layout has both pairs own the rows).
  constexpr int Q_WORDS = (C::ROW_SCALES + 3) / 4;
  uint32_t Q_sf[Q_WORDS];
  const int q_row = warp_row0 + g + 8 * (t % 2);
#pragma unroll
  for (int i = 0; i < Q_WORDS; i++)
    Q_sf[i] = q_row < p.seqlen_q
                  ? row_scale_word<C::ROW_SCALES>(bp.q_scale + (q_head * p.seqlen_q + q_row) * C::ROW_SCALES, i)
                  : 0;
  cp_async_wait<0>();
  __syncthreads();
  uint32_t Q_rmem[C::D_STEPS][4];
#pragma unroll
  for (int kk = 0; kk < C::D_STEPS; kk++)
    ldmatrix_x4(Q_rmem[kk], Q_smem + swizzled<C::ROW_BYTES>(warp * 16 + lane % 16, (2 * kk + lane / 16) * 16));

  float O[1][C::D_TILES][4] = {};
  float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {{0.f, 0.f}};
  const float scale_log2 = p.scale * LOG2E;

  for (int tile = 0; tile < w.n_kv_tiles; tile++) {
    const bool has_next = tile + 1 < w.n_kv_tiles;
    if (has_next) {
      load_kv(tile + 1);  // into the stage every warp finished with before the last barrier
      fetch_scales(scale_bytes, tile + 1);
    }
    cp_async_commit();
    const uint8_t* stage = stage_base(tile);
    const uint32_t K_smem = smem_u32(stage);
    const uint32_t VT_smem = K_smem + C::K_BYTES;
    const uint8_t* K_sf_smem = stage + C::K_BYTES + C::VT_BYTES;
    const uint8_t* VT_sf_smem = K_sf_smem + C::KS_BYTES;

    // S = Q K^T in the permuted key order; lane 4g supplies scale_B for its column g.
    float S[1][C::KV_TILES][4] = {};
#pragma unroll
    for (int nt = 0; nt < C::KV_TILES; nt++) {
      const int ld_row = key_base<F>(nt) + key_offset<F>(lane % 8);
      const uint8_t* K_sf_row = K_sf_smem + (key_base<F>(nt) + key_offset<F>(g)) * C::ROW_SCALES;
#pragma unroll
      for (int kk = 0; kk < C::D_STEPS; kk++) {
        uint32_t K_frag[2];
        ldmatrix_x2(K_frag, K_smem + swizzled<C::ROW_BYTES>(ld_row, (2 * kk + (lane / 8) % 2) * 16));
        const uint32_t K_sf = row_scale_word<C::ROW_SCALES>(K_sf_row, scale_word_of<F>(kk));
        mma_block_scaled<F>(S[0][nt], Q_rmem[kk], K_frag[0], K_frag[1], Q_sf[scale_word_of<F>(kk)], K_sf,
                            scale_byte_of<F>(kk));
      }
    }
    const int kv_start = tile * C::BLOCK_KV;
    if (tile_needs_mask<C::BLOCK_KV>(p, w, kv_start)) mask_scores_permuted<F>(S, p, w, warp_row0, kv_start);
    softmax_update<true>(S, row_max, row_sum, O, scale_log2, 0);

    // P quantized per k-step, then O += P V with V^T's scales (lane 4g: row d = 8 nd + g).
    constexpr int P_WORDS = (C::KV_STEPS * F::SCALES_PER_STEP + 3) / 4;
    uint32_t P_rmem[C::KV_STEPS][4], P_sf_g[P_WORDS] = {}, P_sf_g8[P_WORDS] = {};
#pragma unroll
    for (int h = 0; h < C::KV_STEPS; h++) {
      float part[2][C::J / 2][4];
#pragma unroll
      for (int j = 0; j < C::J; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) part[j / (C::J / 2)][j % (C::J / 2)][i] = S[0][h * C::J + j][i];
      const int word = scale_word_of<F>(h);
      quantize_p_step(F{}, part, P_rmem[h], P_sf_g[word], P_sf_g8[word], scale_byte_of<F>(h));
    }
#pragma unroll
    for (int nd = 0; nd < C::D_TILES; nd++) {
      const uint8_t* VT_sf_row = VT_sf_smem + (nd * 8 + g) * C::VT_SCALES;
#pragma unroll
      for (int h = 0; h < C::KV_STEPS; h++) {
        uint32_t V_frag[2];
        ldmatrix_x2(V_frag, VT_smem + swizzled<C::VT_ROW_BYTES>(nd * 8 + lane % 8, (2 * h + (lane / 8) % 2) * 16));
        const int word = scale_word_of<F>(h);
        const uint32_t P_sf = t % 2 ? P_sf_g8[word] : P_sf_g[word];
        mma_block_scaled<F>(O[0][nd], P_rmem[h], V_frag[0], V_frag[1], P_sf,
                            row_scale_word<C::VT_SCALES>(VT_sf_row, word), scale_byte_of<F>(h));
      }
    }
    if (has_next) store_scales(scale_bytes, tile + 1);
    cp_async_wait<0>();
    __syncthreads();  // tile + 1 visible; every warp done with tile (its stage is refilled next)
  }

#pragma unroll
  for (int nd = 0; nd < C::D_TILES; nd++)
#pragma unroll
    for (int i = 0; i < 4; i++) O[0][nd][i] *= v_scale;
  store_output<__nv_bfloat16>(p, w, warp_row0, O, row_max, row_sum);
}

template <typename F, int DIM>
int launch(const BlockScaledParams& bp, cudaStream_t stream, char* err, int err_len) {
  using C = BsTiles<F, DIM>;
  return launch_kernel(fwd_blockscaled_kernel<F, DIM>, q_tile_grid(bp.base, C::BLOCK_Q), C::THREADS, C::SMEM_BYTES,
                       stream, err, err_len, bp);
}

}  // namespace fa::bs

extern "C" int cuda_fa_blockscaled_params_size() { return static_cast<int>(sizeof(BlockScaledParams)); }

extern "C" int cuda_fa_fwd_blockscaled_sm120(const BlockScaledParams* bp, cudaStream_t stream, char* err,
                                            int err_len) {
  using namespace fa::bs;
  if (int rc = fa::check_params(bp->base, err, err_len)) return rc;
  if (bp->format == BS_FMT_NVFP4 && !(bp->tensor_scale[0] && bp->tensor_scale[1] && bp->tensor_scale[2]))
    return fa::report(err, err_len, "tensor_scale", "NVFP4 needs the Q, K and V tensor scales");
  if (bp->vt_pitch % 8 != 0 || bp->vt_pitch < 8)
    return fa::report(err, err_len, "vt_pitch", "V^T rows must be a positive multiple of 8 bytes");
  auto by_dim = [&]<typename F>() {
    switch (bp->base.head_dim) {
      case 64: return launch<F, 64>(*bp, stream, err, err_len);
      case 128: return launch<F, 128>(*bp, stream, err, err_len);
      default: return fa::report(err, err_len, "head_dim", "supported: 64, 128");
    }
  };
  if (bp->format == BS_FMT_MXFP8) return by_dim.template operator()<Mxfp8>();
  if (bp->format == BS_FMT_NVFP4) return by_dim.template operator()<Nvfp4>();
  return fa::report(err, err_len, "format", "supported: 1 mxfp8, 2 nvfp4");
}
