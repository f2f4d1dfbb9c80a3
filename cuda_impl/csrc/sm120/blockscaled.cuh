// sm_120a (consumer/workstation Blackwell) block-scaled warp MMA and what the attention kernel
// needs around it: the parameter block, the two formats' traits, the key order that makes the
// S accumulator the A operand of P @ V, and P's in-register quantization (formats.quantize_p).
// Only sm_120a assembles these MMAs (ptxas refuses them for sm_90a), so the kernel is built in its
// own library (cuda_impl/sm120.py) and never linked into the sm_80/sm_90a one.
//
// Fragment facts used below (PTX ISA, "Block Scaling for mma.sync"; byte view of the operands):
// - A (16 x K, row-major): reg0 row g, bytes 4t..4t+3 of the k-step's first 16 bytes; reg1 row g+8;
//   reg2/reg3 the same rows at bytes 16+4t..; g = lane / 4, t = lane % 4. B (K x 8, "col": each
//   column's K bytes contiguous): b0 column g, bytes 4t..4t+3; b1 bytes 16+4t... In bytes both
//   formats share this layout (e4m3: one element per byte, e2m1: two, the even one in the low nibble).
// - scale_A: with thread-id-a = 0, lane 4g holds row g's scales and lane 4g+1 row g+8's; scale_B:
//   with thread-id-b = 0, lane 4g holds column g's. The kernel fills every lane of a quad (rows
//   by t % 2, columns by g), so a selector that picks another lane of the quad reads the same. 1X (MXFP8): one E8M0 byte per row per k32 step,
//   byte-id picks it from the register; 4X (NVFP4): four e4m3 bytes per row, one per 16 elements of
//   the k64 step, lowest k in byte 0, byte-id 0.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ladder.cuh"
#include "formats.cuh"

extern "C" {
// Mirrored by cuda_impl/sm120.py (ctypes). `base` carries the data pointers (q, k, v = V^T),
// out/lse, shapes, causal and the softmax scale, so the ladder's CTA work split, masking test and
// epilogue apply unchanged; dtype is bf16 (output).
// Containers are contiguous compare.formats layouts: Q/K (B, H, S, D), V^T (B, H, D, Sk padded).
struct BlockScaledParams {
  FwdParams base;
  const uint8_t* q_scale;
  const uint8_t* k_scale;
  const uint8_t* vt_scale;
  const float* tensor_scale[3];  // NVFP4: Q, K, V tensor scales (device); null for MXFP8
  int32_t vt_pitch;          // bytes per stored V^T row (padded keys / elements per byte)
  int32_t vt_scale_pitch;    // block scales per stored V^T row
  int32_t format;            // BS_FMT_*
};
}

namespace fa::bs {

constexpr int BS_FMT_MXFP8 = 1;
constexpr int BS_FMT_NVFP4 = 2;

// MXFP8: e4m3 elements, E8M0 per 32; one m16n8k32 step covers one scale block per row.
struct Mxfp8 {
  static constexpr int FORMAT = BS_FMT_MXFP8;
  static constexpr int PER_BYTE = 1;
  static constexpr int BLOCK = fmt::MX_BLOCK;
  static constexpr int K_STEP = 32;                 // elements per MMA k-step
  static constexpr int SCALES_PER_STEP = 1;         // scale_vec::1X
  static constexpr int VT_COPY = 16;                // V^T rows: padded to 32 keys = 32 bytes
};

// NVFP4: e2m1 elements (two per byte), e4m3 scale per 16; m16n8k64 with 4 scales per row.
struct Nvfp4 {
  static constexpr int FORMAT = BS_FMT_NVFP4;
  static constexpr int PER_BYTE = 2;
  static constexpr int BLOCK = fmt::NVFP4_BLOCK;
  static constexpr int K_STEP = 64;
  static constexpr int SCALES_PER_STEP = 4;         // scale_vec::4X
  static constexpr int VT_COPY = 8;                 // V^T rows: padded to 16 keys = 8 bytes
};

#ifndef FA_SM120_EMULATE
// D = A @ B + D with per-block scales; `byte` selects the scale byte (1X only; a constant after
// unrolling).
template <typename F>
__device__ __forceinline__ void mma_block_scaled(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1, uint32_t scale_a, uint32_t scale_b,
                                                 uint16_t byte) {
  if constexpr (F::FORMAT == BS_FMT_MXFP8) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e4m3.e4m3.f32.ue8m0 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {%12, %13}, %11, {%12, %13};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(scale_a), "r"(scale_b),
          "h"(byte), "h"(uint16_t(0)));
  } else {  // scale_vec::4X uses all four bytes: byte-id 0
    asm volatile(
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {%12, %12}, %11, {%12, %12};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(scale_a), "r"(scale_b),
          "h"(uint16_t(0)));
  }
}
#else
// FA_SM120_EMULATE: the same MMA in software, reading every operand and scale through the fragment
// layout described at the top of this file, so that everything else in the kernel (loads, key
// order, P quantization, scales, masking, pipeline) runs and is checked against the oracle on an
// sm_90 GPU (cuda_impl.sm120.attention(..., emulate=True)). Slow; a test harness only.
__device__ __forceinline__ float e2m1_value(uint32_t code) {
  constexpr float MAGNITUDE[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  return code & 8 ? -MAGNITUDE[code & 7] : MAGNITUDE[code & 7];
}

// Element e (in k order) of a 32-bit operand register.
template <typename F>
__device__ __forceinline__ float element_of(uint32_t reg, int e) {
  if constexpr (F::FORMAT == BS_FMT_MXFP8) return fmt::e4m3_value(uint8_t(reg >> (8 * e)));
  else return e2m1_value((reg >> (4 * e)) & 0xF);
}

// Scale of elements k of a row/column from its 32-bit scale word (1X: byte `byte`; 4X: k / 16).
template <typename F>
__device__ __forceinline__ float scale_of(uint32_t word, int k, int byte) {
  if constexpr (F::FORMAT == BS_FMT_MXFP8) {
    const uint32_t code = (word >> (8 * byte)) & 0xFF;
    return code == fmt::E8M0_NAN ? NAN : fmt::exact_pow2(int(code) - fmt::E8M0_BIAS);
  } else {
    return fmt::e4m3_value(uint8_t(word >> (8 * (k / 16))));
  }
}

template <typename F>
__device__ __noinline__ void mma_block_scaled(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                              uint32_t b1, uint32_t scale_a, uint32_t scale_b,
                                              uint16_t byte) {  // not inlined: one copy compiles fast
  constexpr int K = F::K_STEP, PER_REG = K / 8;
  __shared__ float A_emu[4][16][K], B_emu[4][8][K];  // one slice per warp (the kernel has 4)
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  __syncwarp();
#pragma unroll
  for (int r = 0; r < 4; r++)
    for (int e = 0; e < PER_REG; e++) A_emu[warp][g + 8 * (r % 2)][(r / 2) * K / 2 + t * PER_REG + e] = element_of<F>(a[r], e);
  for (int e = 0; e < PER_REG; e++) {
    B_emu[warp][g][t * PER_REG + e] = element_of<F>(b0, e);
    B_emu[warp][g][K / 2 + t * PER_REG + e] = element_of<F>(b1, e);
  }
  __syncwarp();
  uint32_t row_scale[2], col_scale[2];  // thread-id 0: rows g, g+8 from lanes 4g, 4g+1; column n from 4n
  for (int i = 0; i < 2; i++) {
    row_scale[i] = __shfl_sync(0xffffffff, scale_a, 4 * g + i);
    col_scale[i] = __shfl_sync(0xffffffff, scale_b, 4 * (2 * t + i));
  }
  for (int i = 0; i < 4; i++) {
    const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
    for (int k0 = 0; k0 < K; k0 += F::BLOCK) {
      float sum = 0.f;
      for (int k = k0; k < k0 + F::BLOCK; k++) sum = fmaf(A_emu[warp][row][k], B_emu[warp][col][k], sum);
      d[i] += sum * scale_of<F>(row_scale[i / 2], k0, byte) * scale_of<F>(col_scale[i % 2], k0, byte);
    }
  }
}
#endif

// --- key order ---------------------------------------------------------------------------
// The S accumulator gives lane t the columns 2t, 2t+1 of each 8-wide n-tile, while the A operand
// of P @ V wants K_STEP/8 consecutive keys per lane and half-step. So the K tile is read in a
// permuted order: within each k-step of keys, n-tile j's column n is key
//   (j / (J/2)) * K_STEP/2 + (K_STEP/8) * (n/2) + 2 * (j % (J/2)) + n % 2,   J = K_STEP / 8,
// which puts lane t's S values of n-tiles 0..J/2-1 (and J/2..J-1) on keys (K_STEP/8) t + [0, K_STEP/8)
// (and K_STEP/2 + the same): exactly its A fragment, in ascending key order. V^T stays in order.
// The n-tile's part (a compile-time constant in unrolled loops) and the column's part.
template <typename F>
__device__ __forceinline__ int key_base(int nt) {
  constexpr int J = F::K_STEP / 8;
  const int j = nt % J;
  return (nt / J) * F::K_STEP + (j / (J / 2)) * (F::K_STEP / 2) + 2 * (j % (J / 2));
}
template <typename F>
__device__ __forceinline__ int key_offset(int n) {
  return (F::K_STEP / 8) * (n / 2) + n % 2;
}

// mask_scores (fwd_common.cuh) for the permuted key order: -inf past seqlen_k and after the
// causal diagonal. One m-tile per warp.
template <typename F, int KV_TILES>
__device__ __forceinline__ void mask_scores_permuted(float (&S)[1][KV_TILES][4], const FwdParams& p,
                                                     const CtaWork& w, int warp_row0, int kv_start) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int nt = 0; nt < KV_TILES; nt++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int row = warp_row0 + lane / 4 + (i / 2) * 8;
      const int col = kv_start + key_base<F>(nt) + key_offset<F>(2 * (lane % 4) + i % 2);
      if (col >= p.seqlen_k || (p.causal && col > row + w.diag)) S[0][nt][i] = -INFINITY;
    }
}

// 8-byte async copy (cp.async.cg takes only 16): NVFP4's V^T rows are padded to 16 keys = 8 bytes.
__device__ __forceinline__ void cp_async_8(uint32_t smem_addr, const void* gmem, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr), "l"(gmem), "r"(src_bytes)
               : "memory");
}

// Shared-memory offset of byte `byte` of tile row `row` (rows of ROW_BYTES = 32, 64 or 128): the
// 16-byte chunk index is XORed with f(row), chosen so that every ldmatrix phase of the kernel hits
// 8 different 16-byte bank groups: 8 consecutive rows (Q, V^T) and the permuted K rows
// key_base + key_offset(0..7) (MXFP8: {0,1,4,5,8,9,12,13} + 2j, NVFP4: {0,1,8,9,16,17,24,25} + 2j).
// Rows of 32 bytes hold only 2 chunks: the NVFP4 d64 K rows keep a 2-way conflict.
template <int ROW_BYTES>
__device__ __forceinline__ uint32_t swizzled(int row, int byte) {
  constexpr int CHUNKS = ROW_BYTES / 16;
  static_assert(CHUNKS == 2 || CHUNKS == 4 || CHUNKS == 8, "rows of 32, 64 or 128 bytes");
  int f;
  if constexpr (CHUNKS == 8) f = (row ^ ((row >> 3) << 1)) & 7;
  else if constexpr (CHUNKS == 4) f = ((row >> 1) ^ (row >> 3)) & 3;
  else f = ((row >> 2) ^ (row >> 3)) & 1;
  return static_cast<uint32_t>(row * ROW_BYTES + (((byte >> 4) ^ f) << 4) + (byte & 15));
}

// ROWS x ROW_BYTES bytes (row pitch `pitch` bytes in global, swizzled in shared) in COPY-byte
// cp.async pieces; rows >= valid_rows and bytes >= valid_bytes are zero-filled, so nothing is
// read past a tensor's end and memory beyond a container cannot inject NaN into an MMA.
template <int ROWS, int ROW_BYTES, int COPY, int THREADS>
__device__ __forceinline__ void load_bytes_async(uint32_t smem, const uint8_t* gmem, int64_t pitch,
                                                 int valid_rows, int valid_bytes) {
  constexpr int PIECES = ROW_BYTES / COPY;
  static_assert(ROWS * PIECES % THREADS == 0, "tile must split evenly over the CTA");
#pragma unroll
  for (int i = threadIdx.x; i < ROWS * PIECES; i += THREADS) {
    const int row = i / PIECES, col = (i % PIECES) * COPY;
    const bool valid = row < valid_rows && col < valid_bytes;
    const uint8_t* src = valid ? gmem + row * pitch + col : gmem;
    const uint32_t dst = smem + swizzled<ROW_BYTES>(row, col);
    if constexpr (COPY == 16) cp_async_16(dst, src, valid ? COPY : 0);
    else cp_async_8(dst, src, valid ? COPY : 0);
  }
}

// --- P quantization (compare.formats.quantize_p), one k-step of one row pair ---------------
// p[h][j][i]: this lane's S values of k-step half h (0: keys K_STEP/8 t.., 1: K_STEP/2 + ..),
// n-tile j of the half, accumulator index i (0, 1: row g; 2, 3: row g+8), already exponentiated.
// Writes the A registers and this lane's scale_A word (row g for t = 0, row g+8 for t = 1).

// Both lanes of a pair (xor 1) or all four (xor 1, 2) agree on an amax and a finiteness flag.
template <int LANES>
__device__ __forceinline__ void group_amax(float& amax, bool& finite) {
#pragma unroll
  for (int offset = 1; offset < LANES; offset *= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, offset));
    finite = __shfl_xor_sync(0xffffffff, int(finite), offset) && finite;
  }
}

// MXFP8: a 32-key block is one row of the k-step, spread over the quad (8 values per lane).
__device__ __forceinline__ void quantize_p_step(Mxfp8, const float (&p)[2][2][4], uint32_t (&a)[4],
                                                uint32_t& codes_g, uint32_t& codes_g8, int h) {
#pragma unroll
  for (int r = 0; r < 2; r++) {  // row g (accumulator 0, 1), row g+8 (2, 3)
    float amax = 0.f;
    bool finite = true;
#pragma unroll
    for (int half = 0; half < 2; half++)
#pragma unroll
      for (int j = 0; j < 2; j++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
          const float v = p[half][j][2 * r + c];
          finite &= fmt::finite(v);
          amax = fmaxf(amax, v);
        }
    group_amax<4>(amax, finite);
    const uint8_t code = fmt::e8m0_code(amax, finite);
    const float scale = fmt::exact_pow2(fmt::E8M0_BIAS - code);
    auto element = [&](float v) { return finite ? fmt::mul_rn(v, scale) : 0.f; };
#pragma unroll
    for (int half = 0; half < 2; half++) {
      const uint32_t lo = fmt::e4m3x2(element(p[half][0][2 * r]), element(p[half][0][2 * r + 1]));
      const uint32_t hi = fmt::e4m3x2(element(p[half][1][2 * r]), element(p[half][1][2 * r + 1]));
      a[2 * half + r] = lo | (hi << 16);
    }
    (r == 0 ? codes_g : codes_g8) |= uint32_t(code) << (8 * h);
  }
}

// NVFP4: a 16-key block is 8 keys of lane t and 8 of lane t^1 (per half); scale e4m3(amax / 6).
__device__ __forceinline__ void quantize_p_step(Nvfp4, const float (&p)[2][4][4], uint32_t (&a)[4],
                                                uint32_t& scales_g, uint32_t& scales_g8, int) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    uint32_t mine = 0;  // this lane pair's block scales: byte 0 for half 0, byte 2 for half 1
#pragma unroll
    for (int half = 0; half < 2; half++) {
      float amax = 0.f;
      bool finite = true;
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
          finite &= fmt::finite(p[half][j][2 * r + c]);
          amax = fmaxf(amax, p[half][j][2 * r + c]);
        }
      group_amax<2>(amax, finite);
      const uint8_t scale = finite ? fmt::e4m3(fmt::div_rn(amax, fmt::E2M1_MAX)) : fmt::E4M3_NAN;
      const float denominator = fmt::e4m3_value(scale);
      const bool usable = denominator != 0.f && fmt::finite(denominator);
      uint32_t packed = 0;
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
          const float v = p[half][j][2 * r + c];
          const uint32_t code = usable ? fmt::e2m1_code(fmt::div_rn(v, denominator)) : 0;
          packed |= code << (4 * (2 * j + c));
        }
      a[2 * half + r] = packed;
      mine |= uint32_t(scale) << (16 * half);
    }
    // Blocks of the row: 0 and 2 from lanes t < 2, 1 and 3 from lanes t >= 2 (the xor-2 partner).
    const uint32_t other = __shfl_xor_sync(0xffffffff, mine, 2);
    const uint32_t word = t < 2 ? mine | (other << 8) : other | (mine << 8);
    (r == 0 ? scales_g : scales_g8) = word;
  }
}

// Up to 4 scale bytes at `src` (global or shared, any alignment) as one little-endian word.
template <int BYTES>
__device__ __forceinline__ uint32_t scale_word(const uint8_t* src) {
  uint32_t word = 0;
#pragma unroll
  for (int i = 0; i < BYTES && i < 4; i++) word |= uint32_t(src[i]) << (8 * i);
  return word;
}

}  // namespace fa::bs
