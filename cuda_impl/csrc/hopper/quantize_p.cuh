// P quantized inside the block-scaled kernel, as compare.formats.quantize_p does: MXFP8 (e4m3 values, one E8M0
// scale per 32 keys) and NVFP4 (e2m1 values, one e4m3 scale per 16 keys), both returned as the exact 16-bit A
// fragments of P V. The rounding rules are written out in compare/formats.py.
#pragma once

#include <cuda_fp8.h>

#include "common.cuh"
#include "hopper/sm90.cuh"

namespace fa::mx {

// Max of the row's values over the quad (the four lanes that share a row).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}

// Two e4m3 codes (low byte first) -> their exact values as fp32 (through f16, which holds
// every e4m3 value as a normal number).
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// MXFP8 P (blocks of 32 keys = 16 registers): e = floor(log2 amax) - 8 from the exponent bits
// (amax <= 1, so e <= -8; clamped at -127), elements e4m3(p * 2^-e) (RNE, saturating at 448),
// values e4m3 * 2^e. Written as bf16 A fragments of the k16 P V steps: exact whenever the
// value is a bf16 normal (>= 2^-126, i.e. for every p above 2^-126 of the running max).
template <int S_REGS>
__device__ __forceinline__ void quantize_p_mxfp8(const float (&S)[S_REGS],
                                                 uint32_t (&P)[S_REGS / 8][4]) {
#pragma unroll
  for (int b = 0; b < S_REGS / 16; b++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float amax = 0.f;
#pragma unroll
      for (int j = 0; j < 4; j++)
        amax = fmaxf(amax, fmaxf(S[16 * b + 4 * j + 2 * h], S[16 * b + 4 * j + 2 * h + 1]));
      amax = quad_max(amax);
      const int e = max(((__float_as_int(amax) >> 23) & 0xFF) - 127 - 8, -127);
      const float down = __int_as_float((127 - e) << 23);  // 2^-e, -e in [8, 127]
      const float up = e == -127 ? __int_as_float(1 << 22) : __int_as_float((127 + e) << 23);
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int i = 16 * b + 4 * j + 2 * h;  // keys 8(4b + j) + 2t, +1 of row g + 8h
        const float2 v = e4m3x2_to_float2(sm90::pack_e4m3x2(S[i] * down, S[i + 1] * down));
        const int group = 4 * b + j;  // A fragment of k-step group / 2, register 2 (group % 2) + h
        P[group / 2][2 * (group % 2) + h] = pack2<__nv_bfloat16>(v.x * up, v.y * up);
      }
    }
}

// x rounded to the nearest e2m1 magnitude, ties to the even code, saturating at 6 (for
// 0 <= x, not NaN): adding and subtracting M = 2^22 / 2^23 / 2^24 rounds to the e2m1 step
// (0.5 below 2, 1 in [2, 4), 2 from 4) with fp32's own ties-to-even, which is the even code.
__device__ __forceinline__ float round_to_e2m1(float x) {
  const float magic = __int_as_float(max(__float_as_int(x) & 0x7F800000, 0x3F800000) + (22 << 23));
  return fminf(__fsub_rn(__fadd_rn(x, magic), magic), 6.f);
}

// NVFP4 P (blocks of 16 keys = 8 registers, tensor scale 1): scale = e4m3(amax / 6) with a
// true division, elements e2m1(p / scale), 0 where the scale is 0; values e2m1 * scale, exact
// in fp16 (>= 2^-10 or 0). p / scale is the correctly rounded quotient: q0 = p * RN(1/scale)
// then one FMA correction (Markstein), so no per-element division.
template <int S_REGS>
__device__ __forceinline__ void quantize_p_nvfp4(const float (&S)[S_REGS],
                                                 uint32_t (&P)[S_REGS / 8][4]) {
#pragma unroll
  for (int b = 0; b < S_REGS / 8; b++) {
    float amax[2];
#pragma unroll
    for (int h = 0; h < 2; h++)
      amax[h] = quad_max(fmaxf(fmaxf(S[8 * b + 2 * h], S[8 * b + 2 * h + 1]),
                               fmaxf(S[8 * b + 4 + 2 * h], S[8 * b + 4 + 2 * h + 1])));
    const float2 scale =
        e4m3x2_to_float2(sm90::pack_e4m3x2(__fdiv_rn(amax[0], 6.f), __fdiv_rn(amax[1], 6.f)));
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const float s = h ? scale.y : scale.x;
      const float r = s > 0.f ? __frcp_rn(s) : 0.f;
      float v[4];
#pragma unroll
      for (int j = 0; j < 2; j++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
          const float p = S[8 * b + 4 * j + 2 * h + c];
          const float q0 = __fmul_rn(p, r);
          const float q = __fmaf_rn(__fmaf_rn(-q0, s, p), r, q0);
          v[2 * j + c] = round_to_e2m1(q) * s;
        }
      // keys 16b + 2t, +1 (register 2 * 0 + h of step b) and 16b + 8 + 2t, +1 (register 2 + h)
      P[b][h] = pack2<__half>(v[0], v[1]);
      P[b][2 + h] = pack2<__half>(v[2], v[3]);
    }
  }
}

}  // namespace fa::mx
