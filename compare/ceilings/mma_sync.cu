// mma.sync m16n8k16 throughput ceiling: the instruction family the v1..v5 ladder runs on.
// Each warp keeps CHAINS independent accumulators and issues one MMA per chain per loop
// iteration. Operands come from memory (opaque to the compiler) and stay loop-invariant; every
// chain starts from a different accumulator value and all chains are summed into `out`, so no
// MMA is dead and no two chains compute the same thing (ptxas merged identical chains in an
// earlier fp8 benchmark). compare/ceilings checks the SASS holds exactly CHAINS HMMAs per loop.
#include <cuda_runtime.h>

#include <cstdio>

#include "common.cuh"

namespace ceiling {

constexpr int CHAINS = 8;

template <typename T>
__global__ void mma_chains_kernel(const uint32_t* __restrict__ operands, float* __restrict__ out,
                                  int iters) {
  const uint32_t a[4] = {operands[0], operands[1], operands[2], operands[3]};
  const uint32_t b0 = operands[4], b1 = operands[5];
  float acc[CHAINS][4];
#pragma unroll
  for (int c = 0; c < CHAINS; c++)
#pragma unroll
    for (int i = 0; i < 4; i++) acc[c][i] = static_cast<float>(threadIdx.x * CHAINS + c * 4 + i);
#pragma unroll 1
  for (int it = 0; it < iters; it++)
#pragma unroll
    for (int c = 0; c < CHAINS; c++) fa::mma_m16n8k16<T>(acc[c], a, b0, b1);
  float sum = 0.f;
#pragma unroll
  for (int c = 0; c < CHAINS; c++)
#pragma unroll
    for (int i = 0; i < 4; i++) sum += acc[c][i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

}  // namespace ceiling

extern "C" int mma_ceiling_chains() { return ceiling::CHAINS; }

// dtype: 0 bf16, 1 fp16. `operands`: 6 device words (A fragment, B fragment); `out`: one float
// per thread of the grid.
extern "C" int mma_ceiling_launch(int dtype, int blocks, int threads, int iters,
                                  const uint32_t* operands, float* out, cudaStream_t stream,
                                  char* err, int err_len) {
  cudaGetLastError();
  if (dtype == 0)
    ceiling::mma_chains_kernel<__nv_bfloat16><<<blocks, threads, 0, stream>>>(operands, out, iters);
  else if (dtype == 1)
    ceiling::mma_chains_kernel<__half><<<blocks, threads, 0, stream>>>(operands, out, iters);
  else {
    snprintf(err, err_len, "dtype: 0 (bf16) or 1 (fp16)");
    return 1;
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    snprintf(err, err_len, "kernel launch: %s", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}
