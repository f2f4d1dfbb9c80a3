// Element and scale codecs of compare/formats.py (fp8 e4m3, E8M0, e2m1), bit for bit.
// __host__ __device__ so that the CPU tests run the very same code (quant/host_check.cu) against
// the Python definition; the GPU build differs only in the e4m3 cast, which is the hardware
// cvt.rn.satfinite on sm_89+ and cuda_fp8.h's software rounding elsewhere (both RNE).
// Every division is a true IEEE division and every product one rounding, as formats.py demands.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace fa::fmt {

constexpr float E4M3_MAX = 448.f;
constexpr float E2M1_MAX = 6.f;
constexpr float NVFP4_TENSOR_DIVISOR = 2688.f;  // E2M1_MAX * E4M3_MAX, exact in fp32
constexpr int E4M3_EMAX = 8;                     // exponent of e4m3's largest power of two
constexpr int E8M0_BIAS = 127;
constexpr uint8_t E8M0_NAN = 0xFF;
constexpr uint8_t E4M3_NAN = 0x7F;
constexpr int MX_BLOCK = 32;
constexpr int NVFP4_BLOCK = 16;

__host__ __device__ __forceinline__ uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
#endif
}

__host__ __device__ __forceinline__ float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  memcpy(&x, &u, 4);
  return x;
#endif
}

// The intrinsics pin the rounding on the device (no contraction into FMA, no reciprocal); host
// float arithmetic on x86-64 is SSE, already IEEE single.
__host__ __device__ __forceinline__ float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

__host__ __device__ __forceinline__ float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

__host__ __device__ __forceinline__ bool finite(float x) { return (float_bits(x) & 0x7F800000u) != 0x7F800000u; }

// --- e4m3 (OCP e4m3fn): RNE, saturating at +-448 (Inf too), NaN stays NaN -----------------

__host__ __device__ __forceinline__ uint8_t e4m3(float x) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

// Two values -> two bytes, `lo` in the low byte (one cvt.rn.satfinite.e4m3x2 on sm_89+).
__host__ __device__ __forceinline__ uint16_t e4m3x2(float lo, float hi) {
  return __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
}

__host__ __device__ __forceinline__ float e4m3_value(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));  // exact: e4m3 is in fp16
}

// --- E8M0 (MX shared scale) ------------------------------------------------------------------

// floor(log2(a)) for finite a > 0, from the bits (exact for subnormals too).
__host__ __device__ __forceinline__ int floor_log2(float a) {
  const uint32_t bits = float_bits(a);
  const int biased = static_cast<int>(bits >> 23);
  if (biased != 0) return biased - 127;
#ifdef __CUDA_ARCH__
  const int top = 31 - __clz(static_cast<int>(bits));
#else
  const int top = 31 - __builtin_clz(bits);
#endif
  return top - 149;  // subnormal: mantissa * 2**-149
}

// 2**e for e in [-127, 127], built from bits; 2**-127 is the fp32 subnormal 1 << 22.
__host__ __device__ __forceinline__ float exact_pow2(int e) {
  if (e == -127) return bits_float(1u << 22);
  return bits_float(static_cast<uint32_t>((e < -126 ? -126 : e) + 127) << 23);
}

// Block amax (finite blocks only) -> E8M0 code: e = floor(log2(amax)) - 8 clamped to
// [-127, 127]; zero or tiny blocks get code 0. `all_finite` false gives the NaN code 0xFF.
__host__ __device__ __forceinline__ uint8_t e8m0_code(float amax, bool all_finite) {
  if (!all_finite) return E8M0_NAN;
  int e = amax > 0.f ? floor_log2(amax) - E4M3_EMAX : -E8M0_BIAS;
  e = e < -E8M0_BIAS ? -E8M0_BIAS : (e > E8M0_BIAS ? E8M0_BIAS : e);
  return static_cast<uint8_t>(e + E8M0_BIAS);
}

// --- e2m1 (FP4) -----------------------------------------------------------------------------

// Ties to the even code: '>' where the lower code is even, '>=' where the upper one is.
// Saturates at 6 (Inf too); the sign bit comes from signbit (so -0 is code 8); NaN is code 0.
__host__ __device__ __forceinline__ uint8_t e2m1_code(float x) {
  if (x != x) return 0;
  const float a = fabsf(x);
  const int magnitude = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                        (a >= 3.5f) + (a > 5.f);
  return static_cast<uint8_t>(magnitude | ((float_bits(x) >> 31) << 3));
}

// --- scales derived from an amax ------------------------------------------------------------

// fp8 descale amax / 448 (amax over finite values), 1 when that is 0.
__host__ __device__ __forceinline__ float fp8_descale(float amax) {
  const float d = div_rn(amax, E4M3_MAX);
  return d > 0.f ? d : 1.f;
}

// NVFP4 tensor scale amax / (6 * 448), 1 when that is 0.
__host__ __device__ __forceinline__ float nvfp4_tensor_scale(float amax) {
  const float s = div_rn(amax, NVFP4_TENSOR_DIVISOR);
  return s > 0.f ? s : 1.f;
}

// --- one block of the stored last dim ------------------------------------------------------
// v: the block's values in fp32 (padding already 0). Outputs are the container bytes.

template <int N>
__host__ __device__ __forceinline__ void block_amax(const float (&v)[N], float& amax, bool& all_finite) {
  amax = 0.f;
  all_finite = true;
#pragma unroll
  for (int i = 0; i < N; i++) {
    all_finite &= finite(v[i]);
    amax = fmaxf(amax, fabsf(v[i]));
  }
}

// MXFP8: 32 e4m3 bytes and one E8M0 code.
__host__ __device__ __forceinline__ uint8_t mxfp8_block(const float (&v)[MX_BLOCK], uint8_t (&out)[MX_BLOCK]) {
  float amax;
  bool all_finite;
  block_amax(v, amax, all_finite);
  const uint8_t code = e8m0_code(amax, all_finite);
  const float scale = exact_pow2(E8M0_BIAS - code);  // 2**-e; unused for the NaN code
#pragma unroll
  for (int i = 0; i < MX_BLOCK; i += 2) {
    const float lo = all_finite ? mul_rn(v[i], scale) : 0.f;
    const float hi = all_finite ? mul_rn(v[i + 1], scale) : 0.f;
    const uint16_t pair = e4m3x2(lo, hi);
    out[i] = static_cast<uint8_t>(pair & 0xFF);
    out[i + 1] = static_cast<uint8_t>(pair >> 8);
  }
  return code;
}

// NVFP4: 8 bytes of packed e2m1 (even element in the low nibble) and one e4m3 block scale.
__host__ __device__ __forceinline__ uint8_t nvfp4_block(const float (&v)[NVFP4_BLOCK], float tensor_scale,
                                                        uint8_t (&out)[NVFP4_BLOCK / 2]) {
  float amax;
  bool all_finite;
  block_amax(v, amax, all_finite);
  const uint8_t scale = all_finite ? e4m3(div_rn(amax, mul_rn(E2M1_MAX, tensor_scale))) : E4M3_NAN;
  const float denominator = mul_rn(e4m3_value(scale), tensor_scale);
  const bool usable = denominator != 0.f && finite(denominator);
#pragma unroll
  for (int i = 0; i < NVFP4_BLOCK; i += 2) {
    const uint8_t lo = usable ? e2m1_code(div_rn(v[i], denominator)) : 0;
    const uint8_t hi = usable ? e2m1_code(div_rn(v[i + 1], denominator)) : 0;
    out[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
  }
  return scale;
}

// fp8: N e4m3 bytes of x / descale.
template <int N>
__host__ __device__ __forceinline__ void fp8_block(const float (&v)[N], float descale, uint8_t (&out)[N]) {
#pragma unroll
  for (int i = 0; i < N; i += 2) {
    const uint16_t pair = e4m3x2(div_rn(v[i], descale), div_rn(v[i + 1], descale));
    out[i] = static_cast<uint8_t>(pair & 0xFF);
    out[i + 1] = static_cast<uint8_t>(pair >> 8);
  }
}

}  // namespace fa::fmt
