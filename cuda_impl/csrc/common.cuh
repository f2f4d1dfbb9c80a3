// PTX wrappers shared by every kernel: async copies, ldmatrix, mma.sync, swizzled offsets.
// Everything here is sm_80+ (Ampere-style warp MMA); nothing Hopper-only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <type_traits>

namespace fa {

// --- global -> shared ------------------------------------------------------------------

// 16-byte copy that skips L1 (.cg): K/V tiles are read once per CTA, L2 is where reuse happens.
// src_bytes < 16 zero-fills the rest; 0 turns an out-of-range row into zeros rather than garbage,
// which keeps masked-out V rows from injecting NaN/Inf into P @ V.
__device__ __forceinline__ void cp_async_16(uint32_t smem_addr, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Wait until at most `pending` of this thread's most recent groups are still in flight.
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// --- shared -> registers ---------------------------------------------------------------
// Lanes 8i..8i+7 give the row addresses of matrix i; lane l receives row l/4, columns 2(l%4)..+1
// of each matrix, which is exactly the mma.sync A/B fragment layout. `.trans` hands out the
// transpose, so a row-major V tile becomes the column-major B operand of P @ V.

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// --- tensor cores ------------------------------------------------------------------------

// D = A @ B + D, m16n8k16, 16-bit inputs, fp32 accumulation. A: 4 regs (16x16 row-major),
// B: b0, b1 (16x8 column-major), D: 4 floats (rows g and g+8, columns 2t, 2t+1), where
// g = lane / 4 and t = lane % 4.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __half>, "mma_m16n8k16: bf16 or fp16 only");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two fp32 values -> one register of two 16-bit values (low half = first), round to nearest.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// exp2 on the SFU without the denormal handling of exp2f (softmax never needs denormals).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// tanh on the SFU (sm_75+; relative error about 2^-11): one MUFU per score for a logit cap, where the exp2 form
// 1 - 2 / (e^2x + 1) takes two and the softmax's own exp2 already shares the unit.
__device__ __forceinline__ float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The online softmax's rescale of O and l, exp2(scale * (m_old - m_new)) in log2 units, exactly 1
// while the row max stays put. Computed alone, m_old * scale_log2 - m_new_scaled contracts to an FMA
// that keeps the rounding residual of m_new_scaled (up to half an ulp, ~2.4e-7 here) and multiplies
// l (and O, which hides it) by exp2 of it once per tile: over 512 tiles the LSE drifted by 8.5e-5
// (docs/design/ladder.md, "LSE drift").
__device__ __forceinline__ float rescale_factor(float m_old, float m_new, float m_new_scaled,
                                                float scale_log2) {
  return m_new == m_old ? 1.f : fast_exp2(m_old * scale_log2 - m_new_scaled);
}

// --- shared-memory layout ----------------------------------------------------------------

// Byte offset of 16-byte chunk `chunk` in row `row` of a tile with ROW_CHUNKS chunks per row.
// With SWIZZLE the chunk index is XORed with row % 8: the 8 rows that one ldmatrix phase reads
// at the same logical column then sit in 8 different 16-byte bank groups instead of one
// (rows are 128 or 256 bytes, so without it every row starts in the same banks).
template <int ROW_CHUNKS, bool SWIZZLE>
__device__ __forceinline__ uint32_t tile_offset(int row, int chunk) {
  static_assert(!SWIZZLE || ROW_CHUNKS % 8 == 0, "swizzle needs rows of >= 128 bytes");
  if constexpr (SWIZZLE) chunk ^= row % 8;
  return static_cast<uint32_t>((row * ROW_CHUNKS + chunk) * 16);
}

}  // namespace fa
