// wgmma throughput ceiling on sm_90a: the instruction Hopper's own GEMM/attention kernels (cuBLAS,
// cuDNN, Triton, FA3) run on, and the only real FP8 tensor-core path there (FP8 mma.sync is emulated).
//
// Each warpgroup keeps one m64n256 fp32 accumulator (128 registers per thread) and per loop
// iteration issues WGMMAS_PER_ITER wgmmas that walk K across one 128-byte swizzle row, as a GEMM
// main loop does: fence, the wgmmas, commit, then wait until at most one group is in flight, so the
// next group is always queued behind the running one. Both operands come from shared memory through
// 128B-swizzle K-major descriptors (the layout production kernels use, so the bank access pattern is
// theirs); the bytes are random values loaded from global memory, which keeps the tensor cores
// toggling like real data does. All accumulators are summed into `out`, so no wgmma is dead.
// compare/ceilings/wgmma.py checks the SASS holds exactly WGMMAS_PER_ITER GMMAs per loop.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace wgmma_ceiling {

constexpr int N = 256;              // widest shape: most MMA work per operand byte read from smem
constexpr int ACC_REGS = 64 * N / 128;  // m64nN fp32 accumulator spread over 128 threads
constexpr int WGMMAS_PER_ITER = 4;  // 4 x 32 bytes of K = one 128-byte swizzle row
constexpr int K_STEP_DESC = 32 >> 4;  // descriptor addresses count 16-byte units
constexpr int WARPGROUPS = 2;       // a second warpgroup covers the first one's issue/wait gaps
constexpr int ROW_BYTES = 128;
constexpr int A_BYTES = 64 * ROW_BYTES;  // per warpgroup: its own 64 rows of A
constexpr int B_BYTES = N * ROW_BYTES;   // shared by both warpgroups
constexpr int OPERAND_BYTES = WARPGROUPS * A_BYTES + B_BYTES;
constexpr int SWIZZLE_ATOM = 1024;  // 8 rows x 128 bytes; tiles start on an atom
constexpr int SMEM_BYTES = OPERAND_BYTES + SWIZZLE_ATOM;  // slack to align the dynamic smem base

// Shared-memory matrix descriptor: start address, leading byte offset (unused by K-major swizzled
// layouts), stride byte offset (one 8-row atom), layout type 1 = 128B swizzle. Fields are >> 4.
__device__ __forceinline__ uint64_t swizzle128_desc(uint32_t smem_addr) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) |
         (static_cast<uint64_t>(SWIZZLE_ATOM >> 4) << 32) | (uint64_t{1} << 62);
}

#define WGMMA_ACC_LIST                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7,"                          \
  "%8, %9, %10, %11, %12, %13, %14, %15,"                     \
  "%16, %17, %18, %19, %20, %21, %22, %23,"                   \
  "%24, %25, %26, %27, %28, %29, %30, %31,"                   \
  "%32, %33, %34, %35, %36, %37, %38, %39,"                   \
  "%40, %41, %42, %43, %44, %45, %46, %47,"                   \
  "%48, %49, %50, %51, %52, %53, %54, %55,"                   \
  "%56, %57, %58, %59, %60, %61, %62, %63,"                   \
  "%64, %65, %66, %67, %68, %69, %70, %71,"                   \
  "%72, %73, %74, %75, %76, %77, %78, %79,"                   \
  "%80, %81, %82, %83, %84, %85, %86, %87,"                   \
  "%88, %89, %90, %91, %92, %93, %94, %95,"                   \
  "%96, %97, %98, %99, %100, %101, %102, %103,"               \
  "%104, %105, %106, %107, %108, %109, %110, %111,"           \
  "%112, %113, %114, %115, %116, %117, %118, %119,"           \
  "%120, %121, %122, %123, %124, %125, %126, %127}"
#define WGMMA_ACC8(d, i)                                                                     \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define WGMMA_ACC128(d)                                                                          \
  WGMMA_ACC8(d, 0), WGMMA_ACC8(d, 8), WGMMA_ACC8(d, 16), WGMMA_ACC8(d, 24), WGMMA_ACC8(d, 32),   \
      WGMMA_ACC8(d, 40), WGMMA_ACC8(d, 48), WGMMA_ACC8(d, 56), WGMMA_ACC8(d, 64),                 \
      WGMMA_ACC8(d, 72), WGMMA_ACC8(d, 80), WGMMA_ACC8(d, 88), WGMMA_ACC8(d, 96),                 \
      WGMMA_ACC8(d, 104), WGMMA_ACC8(d, 112), WGMMA_ACC8(d, 120)

static_assert(ACC_REGS == 128, "the asm operand lists above are written for N = 256");

// scale-d is a predicate: set to true, D = A*B + D. Operand scales +1, no transposes (K-major).
struct Bf16 {
  __device__ __forceinline__ static void mma(float (&d)[ACC_REGS], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " WGMMA_ACC_LIST
        ", %128, %129, accumulate, 1, 1, 0, 0;\n}\n"
        : WGMMA_ACC128(d)
        : "l"(desc_a), "l"(desc_b), "r"(1));
  }
};

// FP8 wgmma has no transpose immediates: both operands are always K-major.
struct E4m3 {
  __device__ __forceinline__ static void mma(float (&d)[ACC_REGS], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 " WGMMA_ACC_LIST
        ", %128, %129, accumulate, 1, 1;\n}\n"
        : WGMMA_ACC128(d)
        : "l"(desc_a), "l"(desc_b), "r"(1));
  }
};

// Keeps the compiler from moving accumulator reads above the wait that makes them valid.
__device__ __forceinline__ void fence_operands(float (&d)[ACC_REGS]) {
#pragma unroll
  for (int i = 0; i < ACC_REGS; i++) asm volatile("" : "+f"(d[i])::"memory");
}

template <typename Op>
__global__ void __launch_bounds__(WARPGROUPS * 128, 1)
    wgmma_kernel(const uint4* __restrict__ operands, float* __restrict__ out, int iters) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + SWIZZLE_ATOM - 1) & ~uint32_t{SWIZZLE_ATOM - 1};
  uint4* smem = reinterpret_cast<uint4*>(smem_raw + (base - raw));
  for (int i = threadIdx.x; i < OPERAND_BYTES / 16; i += blockDim.x) smem[i] = operands[i];
  // wgmma reads shared memory through the async proxy: make the generic-proxy stores visible to it.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  const uint64_t desc_a = swizzle128_desc(base + warpgroup * A_BYTES);
  const uint64_t desc_b = swizzle128_desc(base + WARPGROUPS * A_BYTES);
  float acc[ACC_REGS];
#pragma unroll
  for (int i = 0; i < ACC_REGS; i++) acc[i] = static_cast<float>(threadIdx.x * ACC_REGS + i);
  fence_operands(acc);

#pragma unroll 1
  for (int it = 0; it < iters; it++) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int k = 0; k < WGMMAS_PER_ITER; k++)
      Op::mma(acc, desc_a + k * K_STEP_DESC, desc_b + k * K_STEP_DESC);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  fence_operands(acc);

  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < ACC_REGS; i++) sum += acc[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

template <typename Op>
cudaError_t launch(int blocks, int iters, const void* operands, float* out, cudaStream_t stream) {
  const cudaError_t e =
      cudaFuncSetAttribute(wgmma_kernel<Op>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
  if (e != cudaSuccess) return e;
  wgmma_kernel<Op><<<blocks, WARPGROUPS * 128, SMEM_BYTES, stream>>>(
      static_cast<const uint4*>(operands), out, iters);
  return cudaGetLastError();
}

}  // namespace wgmma_ceiling

extern "C" int wgmma_ceiling_wgmmas_per_iter() { return wgmma_ceiling::WGMMAS_PER_ITER; }
extern "C" int wgmma_ceiling_warpgroups() { return wgmma_ceiling::WARPGROUPS; }
extern "C" int wgmma_ceiling_operand_bytes() { return wgmma_ceiling::OPERAND_BYTES; }

// dtype: 0 bf16, 1 e4m3. `operands`: wgmma_ceiling_operand_bytes() device bytes, 16-byte aligned,
// copied to every CTA's shared memory; `out`: one float per thread (blocks x 128 x warpgroups).
extern "C" int wgmma_ceiling_launch(int dtype, int blocks, int iters, const void* operands, float* out,
                                    cudaStream_t stream, char* err, int err_len) {
  cudaGetLastError();
  cudaError_t e;
  if (dtype == 0)
    e = wgmma_ceiling::launch<wgmma_ceiling::Bf16>(blocks, iters, operands, out, stream);
  else if (dtype == 1)
    e = wgmma_ceiling::launch<wgmma_ceiling::E4m3>(blocks, iters, operands, out, stream);
  else {
    snprintf(err, err_len, "dtype: 0 (bf16) or 1 (e4m3)");
    return 1;
  }
  if (e != cudaSuccess) {
    snprintf(err, err_len, "kernel launch: %s", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}
