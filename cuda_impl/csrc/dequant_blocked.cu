// Block-scaled (compare.formats MXFP8 / NVFP4) storage -> the exact 16-bit values that
// fwd_hopper_mx.cu runs on: MXFP8 e4m3 * 2^e as bf16, NVFP4 e2m1 * e4m3 block scale as fp16
// (the fp32 tensor scale is not applied: the attention kernel folds it in once). Elementwise
// over the stored (contiguous, block-padded) layout, so Q, K and V^T use the same kernel.
// Every product is formed exactly in fp32 (at most 4 + 4 significant bits, >= 2^-136), then
// rounded to the 16-bit type, which holds it exactly: NVFP4 values lie in [2^-10, 2688] or 0,
// MXFP8 values are exact while >= 2^-126 (blocks with scale >= 2^-117).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

extern "C" {
// Mirrored by cuda_impl/_lib.py (DequantParams).
struct DequantParams {
  const void* data;    // mxfp8: e4m3 bytes (n); nvfp4: two e2m1 codes per byte (n / 2)
  const void* scales;  // mxfp8: E8M0 codes (n / 32); nvfp4: e4m3 (n / 16)
  void* out;           // n values: bf16 for mxfp8, fp16 for nvfp4
  int64_t n;           // stored elements, a multiple of the block
  int32_t format;      // 0 mxfp8, 1 nvfp4 (FA_MX_FORMAT_* in fwd_hopper_mx.cu)
};
}

namespace fa::dequant {

constexpr int PER_THREAD = 8;  // one 16-byte store

__device__ __forceinline__ float e8m0_value(uint32_t code) {
  if (code == 0xFF) return __int_as_float(0x7FC00000);      // NaN block
  return __int_as_float(code == 0 ? 1 << 22 : code << 23);  // 2^(code - 127); 2^-127 is subnormal
}

__device__ __forceinline__ float e4m3_value(uint32_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3)));
}

// e2m1 code (4 bits) -> value: magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6, bit 3 the sign.
__device__ __forceinline__ float e2m1_value(uint32_t code) {
  const uint32_t e = (code >> 1) & 3, m = code & 1;
  const float magnitude = e == 0 ? 0.5f * m : __int_as_float(((e + 126) << 23) | (m << 22));
  return code & 8 ? -magnitude : magnitude;
}

__global__ void mxfp8_kernel(const uint8_t* data, const uint8_t* scales, __nv_bfloat16* out, int64_t n) {
  const int64_t first = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * PER_THREAD;
  if (first >= n) return;
  const uint2 raw = *reinterpret_cast<const uint2*>(data + first);
  const float scale = e8m0_value(scales[first / 32]);
  alignas(16) __nv_bfloat16 v[PER_THREAD];
#pragma unroll
  for (int i = 0; i < PER_THREAD; i++)
    v[i] = __float2bfloat16_rn(e4m3_value(((i < 4 ? raw.x : raw.y) >> (8 * (i % 4))) & 0xFF) * scale);
  *reinterpret_cast<uint4*>(out + first) = *reinterpret_cast<const uint4*>(v);
}

__global__ void nvfp4_kernel(const uint8_t* data, const uint8_t* scales, __half* out, int64_t n) {
  const int64_t first = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * PER_THREAD;
  if (first >= n) return;
  const uint32_t raw = *reinterpret_cast<const uint32_t*>(data + first / 2);
  const float scale = e4m3_value(scales[first / 16]);
  alignas(16) __half v[PER_THREAD];
#pragma unroll
  for (int i = 0; i < PER_THREAD; i++)  // the even element in the low nibble
    v[i] = __float2half_rn(e2m1_value((raw >> (4 * i)) & 0xF) * scale);
  *reinterpret_cast<uint4*>(out + first) = *reinterpret_cast<const uint4*>(v);
}

int report(char* err, int err_len, const char* detail) {
  if (err != nullptr && err_len > 0) snprintf(err, err_len, "dequant: %s", detail);
  return 1;
}

}  // namespace fa::dequant

extern "C" int cuda_fa_dequant_params_size() { return static_cast<int>(sizeof(DequantParams)); }

extern "C" int cuda_fa_dequant_blocked(const DequantParams* p, cudaStream_t stream, char* err, int err_len) {
  using namespace fa::dequant;
  const int block = p->format == 0 ? 32 : 16;
  if (p->format != 0 && p->format != 1) return report(err, err_len, "format must be 0 (mxfp8) or 1 (nvfp4)");
  if (p->n <= 0 || p->n % block) return report(err, err_len, "n must be a positive multiple of the block");
  const uintptr_t bits = reinterpret_cast<uintptr_t>(p->data) | reinterpret_cast<uintptr_t>(p->out);
  if (bits % 16) return report(err, err_len, "data and out must be 16-byte aligned");
  cudaGetLastError();
  const int threads = 256;
  const int64_t blocks = (p->n / PER_THREAD + threads - 1) / threads;
  if (blocks > 0x7FFFFFFF) return report(err, err_len, "tensor too large");
  const auto* data = static_cast<const uint8_t*>(p->data);
  const auto* scales = static_cast<const uint8_t*>(p->scales);
  if (p->format == 0)
    mxfp8_kernel<<<unsigned(blocks), threads, 0, stream>>>(data, scales, static_cast<__nv_bfloat16*>(p->out), p->n);
  else
    nvfp4_kernel<<<unsigned(blocks), threads, 0, stream>>>(data, scales, static_cast<__half*>(p->out), p->n);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : report(err, err_len, cudaGetErrorString(e));
}
