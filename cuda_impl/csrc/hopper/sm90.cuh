// Hopper-only (sm_90a) PTX wrappers: mbarriers, TMA tile loads, wgmma and its shared-memory
// descriptors, setmaxnreg; and what persistent CTAs share (their progress through the work items, the
// hand-over of an item from the producer thread to the consumers). Callers compile these only inside
// `FA_SM90A` sections, because the library is also built for sm_80, where none of these instructions
// exist.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: the library does not link libcuda)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

// True in the device pass for sm_90a, where wgmma and setmaxnreg are legal.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA_SM90A 1
#else
#define FA_SM90A 0
#endif

namespace fa::sm90 {

// --- mbarriers ----------------------------------------------------------------------------
// A barrier completes a phase when `count` arrivals have happened and every byte announced with
// expect_tx has landed; waiters name the phase by its parity (0, 1, 0, ...).

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialised barriers visible to the async proxy (TMA) before anyone uses them.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also announces `bytes` of TMA traffic that must land before the phase ends.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// One arrival, made when every cp.async this thread has issued so far has landed (.noinc: the
// barrier's count already includes it). Lets threads other than the copier wait for cp.async data.
__device__ __forceinline__ void mbar_arrive_cp_async(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// One arrival on the barrier at the same shared offset in CTA `cta` of the cluster, made by the
// threads with `pred` set: predicated, not branched, so it may sit between a wgmma and its wait.
// Default (cta-scope) release, as CUTLASS's ClusterBarrier: .release.cluster put a CGAERRBAR in
// front of every arrival, which cost 7-16%.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t cta, bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b32 remote;\n"
      "setp.ne.b32 p, %2, 0;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "@p mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(bar), "r"(cta), "r"(uint32_t(pred))
      : "memory");
}

// Spin until the phase of parity `parity` has completed. On a fresh barrier (phase 0 running)
// parity 1 counts as completed: that is what lets a producer pass its first round of "slot
// empty" waits without any consumer arrival.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n"
        ".reg .pred ready;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 ready, [%1], %2;\n"
        "selp.u32 %0, 1, 0, ready;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

// --- TMA ----------------------------------------------------------------------------------

// One box of a 4-D tensor map (coordinates innermost first) into shared memory; completion is
// counted in bytes on `bar`. Out-of-bounds elements arrive as zeros and still count.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// The same box written to the same shared offset of every CTA in `cta_mask` (cluster ranks), each
// of whose barriers at offset `bar` counts the bytes that land in it.
__device__ __forceinline__ void tma_load_4d_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                                      int c0, int c1, int c2, int c3, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "h"(cta_mask)
      : "memory");
}

// tma_load_4d for a 5-D map (fwd_hopper_fp8.cu's key-permuted K tiles).
__device__ __forceinline__ void tma_load_5d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
      : "memory");
}

// --- named barriers (ids 1..15; 0 is __syncthreads) ------------------------------------------
// `threads` counts every participant of one phase, arrivers and waiters together (a multiple of
// 32). bar.arrive does not wait, so one warpgroup can hand a turn to another without stalling.

__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// --- shared-memory staging ----------------------------------------------------------------------

// Four 8x8 16-bit matrices from the mma / wgmma accumulator layout (lane l holds row l / 4, columns
// 2 (l % 4) and + 1 of each, one 32-bit register per matrix) into shared memory; lane l gives the address
// of row l % 8 of matrix l / 8.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// The CTA's 1024-aligned dynamic shared base, as the kernels compute it, but through a volatile cvta.to.shared:
// ptxas rebuilds it wherever it is read instead of keeping it in a uniform register, which pins a KV-tile loop to the
// schedule that interleaves its S wgmmas with their descriptor arithmetic (HopperTiles::PIN_BASE).
__device__ __forceinline__ uint32_t shared_base_anew() {
  extern __shared__ __align__(1024) uint8_t smem_dyn[];
  uint32_t generic_to_shared;
  asm volatile("{.reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t;}" : "=r"(generic_to_shared) : "l"(smem_dyn));
  return (generic_to_shared + 1023) & ~1023u;
}

// --- clusters ---------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// Every thread of every CTA in the cluster arrives and waits; memory written before it (barrier
// initialisation included, after fence.mbarrier_init) is visible to the whole cluster after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// --- register budget per warpgroup ----------------------------------------------------------

template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

// --- wgmma ----------------------------------------------------------------------------------

// Shared-memory matrix descriptor for the swizzle that TMA writes, rows of SWIZZLE bytes (128, 64 or 32: layout
// types 1, 2, 3), 8-row atoms of 8 * SWIZZLE bytes aligned to their size. sbo: bytes between 8-row groups; lbo: for
// MN-major operands the bytes between column panels of SWIZZLE / 2 16-bit elements (ignored for K-major).
template <int SWIZZLE>
__device__ __forceinline__ uint64_t desc_swizzled(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  static_assert(SWIZZLE == 128 || SWIZZLE == 64 || SWIZZLE == 32, "desc_swizzled: 128-, 64- or 32-byte swizzle");
  constexpr uint64_t layout = SWIZZLE == 128 ? 1 : SWIZZLE == 64 ? 2 : 3;
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
         static_cast<uint64_t>(lbo >> 4) << 16 | static_cast<uint64_t>(sbo >> 4) << 32 | layout << 62;
}
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return desc_swizzled<128>(addr, lbo, sbo);
}

// The same descriptor `bytes` further on (a multiple of 16): the start address field holds
// address / 16 in 14 bits, and shared addresses stay below 256 KB, so the sum never carries out
// of it. One descriptor per operand and GEMM, advanced per k-step, instead of one built per
// k-step: ptxas did not fold the mask and shifts of desc_sw128 and rebuilt every descriptor
// (about ten instructions, two of them R2UR, per wgmma).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// Orders this thread's generic-proxy shared-memory writes (st.shared, cp.async) before later async-proxy reads
// (wgmma operands): each writer fences, then the CTA meets at a barrier, then the wgmmas read.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}

// Pins registers that an in-flight wgmma reads or writes, so the compiler neither moves them
// nor touches them between the issue and the wait.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+r"(r[i])::"memory");
}
template <int M, int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[M][N]) {
#pragma unroll
  for (int i = 0; i < M; i++) fence_regs(r[i]);
}

// Inline-asm operand lists of wgmma accumulators: FA_ACCn(d) binds d[0..n) as "+f" operands and
// FA_OPSn spells the matching {%0, ..., %n-1}. Kept defined (FA_-prefixed) for the fp8 and block-
// scaled wgmma wrappers in hopper_fp8.cuh and hopper_mx.cuh.
#define FA_ACC8(d, i)                                                                        \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define FA_ACC32(d) FA_ACC8(d, 0), FA_ACC8(d, 8), FA_ACC8(d, 16), FA_ACC8(d, 24)
#define FA_ACC64(d) FA_ACC32(d), FA_ACC8(d, 32), FA_ACC8(d, 40), FA_ACC8(d, 48), FA_ACC8(d, 56)
#define FA_ACC88(d) FA_ACC64(d), FA_ACC8(d, 64), FA_ACC8(d, 72), FA_ACC8(d, 80)
#define FA_ACC40(d) FA_ACC32(d), FA_ACC8(d, 32)
#define FA_ACC48(d) FA_ACC32(d), FA_ACC8(d, 32), FA_ACC8(d, 40)
#define FA_ACC56(d) FA_ACC32(d), FA_ACC8(d, 32), FA_ACC8(d, 40), FA_ACC8(d, 48)
#define FA_ACC32_AT(d, i) FA_ACC8(d, i), FA_ACC8(d, i + 8), FA_ACC8(d, i + 16), FA_ACC8(d, i + 24)
#define FA_ACC96(d) FA_ACC64(d), FA_ACC32_AT(d, 64)
#define FA_ACC128(d) FA_ACC64(d), FA_ACC32_AT(d, 64), FA_ACC32_AT(d, 96)
#define FA_OPS32                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "      \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FA_OPS64                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "      \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define FA_OPS40                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "      \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39}"
#define FA_OPS48                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "      \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}"
#define FA_OPS56                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "      \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55}"
#define FA_OPS128                                                                 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "      \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define FA_OPS88                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "      \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87}"
#define FA_OPS96                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "      \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"

template <typename T>
struct WgmmaType;
template <>
struct WgmmaType<__nv_bfloat16> {
  static constexpr bool BF16 = true;
};
template <>
struct WgmmaType<__half> {
  static constexpr bool BF16 = false;
};

// D (64 x 128, fp32) = A (64 x 16, shared, K-major) * B (16 x 128, shared, K-major) [+ D].
// Accumulator layout: warp w of the warpgroup owns rows 16w..16w+15; register 4j + 2h + c
// holds row g + 8h, column 8j + 2t + c (g = lane / 4, t = lane % 4), as mma.sync m16n8.
template <typename T>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                              bool accumulate) {
#define FA_SS_N128(TY)                                                                   \
  asm volatile(                                                                          \
      "{\n.reg .pred acc;\nsetp.ne.b32 acc, %66, 0;\n"                                   \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " FA_OPS64              \
      ", %64, %65, acc, 1, 1, 0, 0;\n}\n"                                                \
      : FA_ACC64(d)                                                                      \
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<uint32_t>(accumulate)))
  if constexpr (WgmmaType<T>::BF16) {
    FA_SS_N128("bf16");
  } else {
    FA_SS_N128("f16");
  }
#undef FA_SS_N128
}

// As wgmma_ss_n128 for N = 64, 80, 96, 112, 128, 176 or 192 keys per KV tile (80 and 176: FlashAttention-3's
// d256 and d128 shapes; 96: the d80 / d96 tile; 112: the d192 tile (S 56 + P 28 + O 96 registers); 64: the d256
// ablation and the MLA decode block; 192: the widest d128 tile whose S, P and O fit the consumers' registers,
// FlashAttention-4's sm90 config search). The asm string must spell out its operand
// numbers: the N / 2 accumulators first, then the two descriptors (DESCS) and the accumulate
// flag (FLAG). ACC is an FA_ACC macro's name, applied to d only inside FA_SS (expanded earlier,
// its commas would split the arguments).
#define FA_SS_TYPED(SHAPE, OPS, ACC, DESCS, FLAG)                                        \
  do {                                                                                   \
    if constexpr (WgmmaType<T>::BF16) {                                                  \
      FA_SS(SHAPE, "bf16", OPS, ACC, DESCS, FLAG);                                       \
    } else {                                                                             \
      FA_SS(SHAPE, "f16", OPS, ACC, DESCS, FLAG);                                        \
    }                                                                                    \
  } while (0)
#define FA_SS(SHAPE, TY, OPS, ACC, DESCS, FLAG)                                          \
  asm volatile(                                                                          \
      "{\n.reg .pred acc;\nsetp.ne.b32 acc, " FLAG ", 0;\n"                              \
      "wgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " " OPS                    \
      ", " DESCS ", acc, 1, 1, 0, 0;\n}\n"                                                \
      : ACC(d)                                                                           \
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<uint32_t>(accumulate)))
template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                         bool accumulate) {
  static_assert(N == 64 || N == 80 || N == 96 || N == 112 || N == 128 || N == 176 || N == 192,
                "wgmma_ss: N = 64, 80, 96, 112, 128, 176 or 192");
  if constexpr (N == 128) {
    wgmma_ss_n128<T>(d, desc_a, desc_b, accumulate);
  } else if constexpr (N == 64) {
    FA_SS_TYPED("m64n64k16", FA_OPS32, FA_ACC32, "%32, %33", "%34");
  } else if constexpr (N == 80) {
    FA_SS_TYPED("m64n80k16", FA_OPS40, FA_ACC40, "%40, %41", "%42");
  } else if constexpr (N == 96) {
    FA_SS_TYPED("m64n96k16", FA_OPS48, FA_ACC48, "%48, %49", "%50");
  } else if constexpr (N == 112) {
    FA_SS_TYPED("m64n112k16", FA_OPS56, FA_ACC56, "%56, %57", "%58");
  } else if constexpr (N == 176) {
    FA_SS_TYPED("m64n176k16", FA_OPS88, FA_ACC88, "%88, %89", "%90");
  } else {
    FA_SS_TYPED("m64n192k16", FA_OPS96, FA_ACC96, "%96, %97", "%98");
  }
}
#undef FA_SS_TYPED
#undef FA_SS

// D (64 x N, fp32) += A (64 x 16, registers: the mma.sync A-fragment layout per warp) *
// B (16 x N, shared, MN-major: the transpose bit set). N = 64, 80, 96, 128, 192 or 256 (= the kernel's head_dim). As FA_SS:
// the asm string spells out its operand numbers, the N / 2 accumulators first, then A's four registers (AREGS), the
// descriptor (DESC) and the accumulate flag (FLAG, always set).
#define FA_RS(SHAPE, TY, OPS, ACC, AREGS, DESC, FLAG)                                    \
  asm volatile(                                                                          \
      "{\n.reg .pred acc;\nsetp.ne.b32 acc, " FLAG ", 0;\n"                              \
      "wgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " " OPS                    \
      ", " AREGS ", " DESC ", acc, 1, 1, 1;\n}\n"                                         \
      : ACC(d)                                                                           \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1u))
#define FA_RS_TYPED(SHAPE, OPS, ACC, AREGS, DESC, FLAG)                                  \
  do {                                                                                   \
    if constexpr (WgmmaType<T>::BF16) {                                                  \
      FA_RS(SHAPE, "bf16", OPS, ACC, AREGS, DESC, FLAG);                                 \
    } else {                                                                             \
      FA_RS(SHAPE, "f16", OPS, ACC, AREGS, DESC, FLAG);                                  \
    }                                                                                    \
  } while (0)
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4],
                                         uint64_t desc_b) {
  static_assert(N == 64 || N == 80 || N == 96 || N == 128 || N == 192 || N == 256,
                "wgmma_rs: N = 64, 80, 96, 128, 192 or 256");
  if constexpr (N == 256) {
    FA_RS_TYPED("m64n256k16", FA_OPS128, FA_ACC128, "{%128, %129, %130, %131}", "%132", "%133");
  } else if constexpr (N == 192) {
    FA_RS_TYPED("m64n192k16", FA_OPS96, FA_ACC96, "{%96, %97, %98, %99}", "%100", "%101");
  } else if constexpr (N == 128) {
    FA_RS_TYPED("m64n128k16", FA_OPS64, FA_ACC64, "{%64, %65, %66, %67}", "%68", "%69");
  } else if constexpr (N == 96) {
    FA_RS_TYPED("m64n96k16", FA_OPS48, FA_ACC48, "{%48, %49, %50, %51}", "%52", "%53");
  } else if constexpr (N == 80) {
    FA_RS_TYPED("m64n80k16", FA_OPS40, FA_ACC40, "{%40, %41, %42, %43}", "%44", "%45");
  } else {
    FA_RS_TYPED("m64n64k16", FA_OPS32, FA_ACC32, "{%32, %33, %34, %35}", "%36", "%37");
  }
}
#undef FA_RS_TYPED
#undef FA_RS

// --- fp8 (e4m3) wgmma: QGMMA, K-major descriptors, e4m3 A fragments -----------------------

// K-major descriptor for the swizzled rows TMA writes: SWIZZLE = row bytes (32, 64 or 128), 8-row
// atoms of 8 * SWIZZLE bytes (SBO), atoms aligned to their size. LBO is unused for K-major
// swizzled layouts.
template <int SWIZZLE>
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t addr) {
  return desc_swizzled<SWIZZLE>(addr, 16, 8 * SWIZZLE);
}

// D (64 x 128, fp32) = A (64 x 32 e4m3, shared, K-major) * B (32 x 128 e4m3, shared, K-major)
// [+ D]. fp8 wgmma has no transpose bits: both operands must be K-major.
__device__ __forceinline__ void qgmma_ss_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                              bool accumulate) {
  asm volatile(
      "{\n.reg .pred acc;\nsetp.ne.b32 acc, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " FA_OPS64
      ", %64, %65, acc, 1, 1;\n}\n"
      : FA_ACC64(d)
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<uint32_t>(accumulate)));
}

// D (64 x N, fp32) = A (64 x 32 e4m3, registers: qgmma_a_fragment's layout) * B (32 x N e4m3,
// shared, K-major, i.e. V^T rows) [+ D]. N = 64 or 128. D's registers are bound "+f" also when
// accumulate is false: that ties a fresh product to the registers it is written to (see
// hopper_fp8::kv_tiles).
template <int N>
__device__ __forceinline__ void qgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                         bool accumulate) {
  static_assert(N == 64 || N == 128, "qgmma_rs: N = 64 or 128");
  if constexpr (N == 128) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " FA_OPS64
        ", {%64, %65, %66, %67}, %68, acc, 1, 1;\n}\n"
        : FA_ACC64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<uint32_t>(accumulate)));
  } else {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " FA_OPS32
        ", {%32, %33, %34, %35}, %36, acc, 1, 1;\n}\n"
        : FA_ACC32(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<uint32_t>(accumulate)));
  }
}

// Two fp32 -> e4m3x2 (round to nearest even, saturating to +-448: compare.formats.round_to_e4m3),
// `lo` in the low byte. PTX puts the first source operand in the upper byte.
__device__ __forceinline__ uint32_t pack_e4m3x2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// Four fp32 -> one word of e4m3 (round to nearest even, saturating), `b0` in the lowest byte. Both pairs are
// converted into 16-bit halves of one 32-bit register: pack_e4m3x2's 16-bit result costs a zero-extension (LOP3)
// before it is merged, one per pair, 32 per 128-key tile and thread (ncu).
__device__ __forceinline__ uint32_t pack_e4m3x4(float b0, float b1, float b2, float b3) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(b0), "f"(b1), "f"(b2), "f"(b3));
  return r;
}

// 32 keys of the S accumulator (fp32, columns 32kk.. of one m64 tile) -> the e4m3 A fragment of
// one m64nNk32 wgmma.
//
// Accumulator (per warp, g = lane / 4, t = lane % 4): acc[4 * b + 2 * h + c] holds row g + 8h,
// key 8b + 2t + c (b = 0..3 inside the 32 keys; acc = S + 16 kk for keys 32kk..).
// A fragment (PTX ISA, "WGMMA .m64nNk32 register fragment layout for matrix A", 8-bit types):
// a[0] row g keys 4t..4t+3, a[1] row g+8 keys 4t..4t+3, a[2] row g keys 16+4t.., a[3] row g+8
// keys 16+4t.., lowest key in the lowest byte.
// So lane t owns key pairs (2t, 2t+1) of each 8-key block, but must hold 4t..4t+3 of each
// 16-key half: pairs move across the quad. Per row, pair "A" of a lane is its block-0/2 pair,
// pair "B" its block-1/3 pair; destination t needs the A pairs of lanes 2(t%2), 2(t%2)+1 when
// t < 2 and their B pairs when t >= 2. Each lane packs [A half0, A half1] and [B half0, B
// half1] as two words and two shuffles move them: in the first, destinations 0..3 read lanes
// 0, 2, 1, 3 and in the second 1, 3, 0, 2, so every source is read for one word per shuffle
// (even lanes offer A first, odd lanes B first). Two byte permutes per row then interleave the
// two received words into the 16-key halves.
__device__ __forceinline__ void qgmma_a_fragment(const float* acc, uint32_t (&a)[4]) {
  const int t = threadIdx.x % 4;
  const int quad = threadIdx.x % 32 - t;
  const int src_first = (t & 1) * 2 + (t >> 1);  // 0, 2, 1, 3
  const uint32_t offer_first = (t & 1) ? 0x7632 : 0x5410;  // odd lanes offer B first
  const uint32_t offer_second = offer_first ^ 0x2222;
  const uint32_t low_half = t < 2 ? 0x5410 : 0x1054;  // which received word holds keys 4t, 4t+1
  const uint32_t high_half = low_half ^ 0x2222;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    // [block0 pair, block1 pair] and [block2 pair, block3 pair] of row g + 8h.
    const uint32_t u01 = pack_e4m3x4(acc[2 * h], acc[2 * h + 1], acc[4 + 2 * h], acc[4 + 2 * h + 1]);
    const uint32_t u23 = pack_e4m3x4(acc[8 + 2 * h], acc[8 + 2 * h + 1], acc[12 + 2 * h], acc[12 + 2 * h + 1]);
    const uint32_t first = __shfl_sync(0xffffffff, __byte_perm(u01, u23, offer_first), quad + src_first);
    const uint32_t second =
        __shfl_sync(0xffffffff, __byte_perm(u01, u23, offer_second), quad + (src_first ^ 1));
    a[h] = __byte_perm(first, second, low_half);
    a[2 + h] = __byte_perm(first, second, high_half);
  }
}

// The same when the K tile was loaded key-permuted (fwd_common.cuh wgmma_key<true>): accumulator
// blocks 0 and 1 hold this lane's keys 4t..4t+3 of the 32, blocks 2 and 3 keys 16+4t..: packing
// is all that is left, no shuffles.
__device__ __forceinline__ void qgmma_a_fragment_permuted(const float* acc, uint32_t (&a)[4]) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    a[h] = pack_e4m3x4(acc[2 * h], acc[2 * h + 1], acc[4 + 2 * h], acc[4 + 2 * h + 1]);
    a[2 + h] = pack_e4m3x4(acc[8 + 2 * h], acc[8 + 2 * h + 1], acc[12 + 2 * h], acc[12 + 2 * h + 1]);
  }
}


// --- 16-bit wgmma with a K-major B from shared memory (V^T tiles) --------------------------------

// D (64 x N, fp32) += A (64 x 16, registers, mma.sync A layout) * B (16 x N, shared, K-major:
// N rows of 16 contiguous k, as a V^T tile). T = bf16 or half; N = 64 or 128.
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs_kmajor(float (&d)[N / 2], const uint32_t (&a)[4],
                                                uint64_t desc_b) {
  static_assert(N == 64 || N == 128, "wgmma_rs_kmajor: N = 64 or 128");
#define FA_RS128(TY)                                                               \
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " FA_OPS64      \
               ", {%64, %65, %66, %67}, %68, 1, 1, 1, 0;\n"                               \
               : FA_ACC64(d)                                                              \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
#define FA_RS64(TY)                                                                \
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " FA_OPS32       \
               ", {%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"                               \
               : FA_ACC32(d)                                                              \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
  // Operands after B: scale-d 1 (accumulate), scale-a 1, scale-b 1, transpose-b 0 (K-major).
  constexpr bool BF16 = WgmmaType<T>::BF16;
  if constexpr (N == 128) {
    if constexpr (BF16) FA_RS128("bf16"); else FA_RS128("f16");
  } else {
    if constexpr (BF16) FA_RS64("bf16"); else FA_RS64("f16");
  }
#undef FA_RS128
#undef FA_RS64
}

}  // namespace fa::sm90
