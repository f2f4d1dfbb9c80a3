// The Hopper kernels' epilogue: O / l and the LSE from a wgmma accumulator, straight from the registers
// (store_wgmma_rows: 4-byte stores that touch 8 rows per warp instruction) or through shared memory
// (store_wgmma_rows_staged, the 16-bit and fp8 kernels at d64 / d128): each warp puts 8 of its rows at a time into its own staging slot with stmatrix and writes them back
// as 16-byte chunks, whole rows per warp store instruction. Straight from the registers, O leaves as 4-byte stores
// that touch 8 rows per warp instruction; at d128 they held an item's epilogue for 2.5-3.1 k cycles
// (the trace build, hopper/trace.cuh).
#pragma once

#include "fwd_common.cuh"
#include "hopper/sm90.cuh"

namespace fa {

// The sum of a wgmma row: the partial sums of its quad's four threads.
__device__ __forceinline__ float quad_row_sum(float l) {
  l += __shfl_xor_sync(0xffffffff, l, 1);
  l += __shfl_xor_sync(0xffffffff, l, 2);
  return l;
}

// Columns of O: V's head_dim.
__device__ __forceinline__ int out_cols(const FwdParams& p) { return p.head_dim_v > 0 ? p.head_dim_v : p.head_dim; }

// A wgmma row's LSE, lse(m, l), stored by its quad's first thread; -inf for a row that saw no key.
template <typename Lse>
__device__ __forceinline__ void store_wgmma_lse(const FwdParams& p, const CtaWork& w, int row, float m, float l,
                                                Lse&& lse) {
  if (p.lse != nullptr && threadIdx.x % 4 == 0) {
    const int64_t head_row = (int64_t(w.batch) * p.heads_q + w.head_q) * p.seqlen_q;
    p.lse[head_row + row] = l > 0.f ? lse(m, l) : -INFINITY;
  }
}

// The epilogue for a wgmma O accumulator (the Hopper kernels): O * out_factor / l in T (out_factor:
// V's descale or tensor scale, 1 if none) and the LSE as lse(m, l) of the row max m (in the
// kernel's own units) and the row sum l; rows that saw no key get zeros and -inf. Rows row0 and
// row0 + 8 (row0: this thread's first row), register layout as mask_scores above. BOUNDED: only O's first
// out_cols(p) columns (a multiple of 8), for the 16-bit kernels whose O may be wider than V (hopper_kernel_dim); the
// fp8 and block-scaled kernels run at their own head_dim and keep the epilogue without the bound (the d64 fp8 kernels
// have no register to spare for it: ptxas serialises their wgmmas).
template <typename T, bool BOUNDED, int O_REGS, typename Lse>
__device__ __forceinline__ void store_wgmma_rows(const FwdParams& p, const CtaWork& w, int row0,
                                                 float (&O)[O_REGS], const float (&row_max)[2],
                                                 const float (&row_sum)[2], float out_factor, Lse&& lse) {
  T* out = static_cast<T*>(p.out) + w.batch * p.out_stride[0] + w.head_q * p.out_stride[1];
  const int quad_col = (threadIdx.x % 4) * 2;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const float l = quad_row_sum(row_sum[h]);
    const float inv = l > 0.f ? out_factor / l : 0.f;
    const int row = row0 + 8 * h;
    if (row >= p.seqlen_q) continue;  // tail rows of the last Q tile are never written
    T* dst = out + row * p.out_stride[2] + quad_col;
#pragma unroll
    for (int j = 0; j < O_REGS / 4; j++)
      if (!BOUNDED || 8 * j < out_cols(p))  // the zero columns past V's head_dim stay unwritten
        *reinterpret_cast<uint32_t*>(dst + 8 * j) =
            pack2<T>(O[4 * j + 2 * h] * inv, O[4 * j + 2 * h + 1] * inv);
    store_wgmma_lse(p, w, row, row_max[h], l, lse);
  }
}


// Bytes of one warp's staging slot: 8 rows of head_dim 16-bit values.
__host__ __device__ constexpr int staged_store_warp_bytes(int head_dim) { return 8 * head_dim * 2; }

// Bytes of the slots of `consumer_warps` warps.
constexpr int staged_store_bytes(int consumer_warps, int head_dim) {
  return consumer_warps * staged_store_warp_bytes(head_dim);
}

// Where the staging slots start: after a kernel's first `used` bytes of shared memory, 128-byte aligned.
constexpr int staged_store_offset(int used) { return (used + 127) / 128 * 128; }

#if FA_SM90A
// store_wgmma_rows through the warp's slot at `stage` (staged_store_warp_bytes, 16-byte aligned).
// In the slot a row's 16-byte chunks are XOR-swizzled by the row, so neither the stmatrix (8 rows of one chunk) nor
// the read-back (8 chunks of one row) has bank conflicts. Needs 16-byte aligned output rows (checked on the host).
template <typename T, bool BOUNDED, int O_REGS, typename Lse>
__device__ __forceinline__ void store_wgmma_rows_staged(const FwdParams& p, const CtaWork& w, int row0,
                                                        float (&O)[O_REGS], const float (&row_max)[2],
                                                        const float (&row_sum)[2], float out_factor, uint32_t stage,
                                                        Lse&& lse) {
  constexpr int ROW_BYTES = O_REGS * 4, CHUNKS = ROW_BYTES / 16;  // a row: head_dim = 2 O_REGS values
  static_assert(CHUNKS % 8 == 0, "stmatrix takes 4 chunks of a row at a time; the read-back 32 of 8 rows");
  T* out = static_cast<T*>(p.out) + w.batch * p.out_stride[0] + w.head_q * p.out_stride[1];
  const int lane = threadIdx.x % 32;
  const int warp_row0 = row0 - lane / 4;  // the warp's first row
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const float l = quad_row_sum(row_sum[h]);
    const float inv = l > 0.f ? out_factor / l : 0.f;
    __syncwarp();  // the warp has read its previous rows back
#pragma unroll
    for (int j0 = 0; j0 < CHUNKS; j0 += 4) {
      uint32_t r[4];
#pragma unroll
      for (int k = 0; k < 4; k++) r[k] = pack2<T>(O[4 * (j0 + k) + 2 * h] * inv, O[4 * (j0 + k) + 2 * h + 1] * inv);
      const int row = lane % 8, chunk = j0 + lane / 8;
      sm90::stmatrix_x4(stage + row * ROW_BYTES + (chunk ^ row) * 16, r);
    }
    __syncwarp();
#pragma unroll
    for (int i = lane; i < 8 * CHUNKS; i += 32) {
      const int row = i / CHUNKS, chunk = i % CHUNKS;
      const uint4 v = sm90::ld_shared_v4(stage + row * ROW_BYTES + (chunk ^ row) * 16);
      const int q_row = warp_row0 + 8 * h + row;
      if (q_row < p.seqlen_q && (!BOUNDED || chunk * 8 < out_cols(p)))
        *reinterpret_cast<uint4*>(out + q_row * p.out_stride[2] + chunk * 8) = v;
    }
    if (row0 + 8 * h < p.seqlen_q) store_wgmma_lse(p, w, row0 + 8 * h, row_max[h], l, lse);
  }
}

// This warp's slot among the consumer warps' slots at `slots`: the consumers follow the producer warpgroup (warps 0-3).
__device__ __forceinline__ uint32_t staged_store_slot(uint32_t slots, int head_dim) {
  return slots + (threadIdx.x / 32 - 4) * staged_store_warp_bytes(head_dim);
}

// The epilogue a kernel was built with: through the warp's staging slot among those at `slots` (STAGED), or
// store_wgmma_rows from the registers.
template <bool STAGED, typename T, bool BOUNDED, int O_REGS, typename Lse>
__device__ __forceinline__ void store_wgmma_rows_via(const FwdParams& p, const CtaWork& w, int row0, float (&O)[O_REGS],
                                                     const float (&row_max)[2], const float (&row_sum)[2],
                                                     float out_factor, uint32_t slots, Lse&& lse) {
  if constexpr (STAGED)
    store_wgmma_rows_staged<T, BOUNDED>(p, w, row0, O, row_max, row_sum, out_factor, staged_store_slot(slots, 2 * O_REGS),
                                        lse);
  else
    store_wgmma_rows<T, BOUNDED>(p, w, row0, O, row_max, row_sum, out_factor, lse);
}
#endif  // FA_SM90A

// Whether output rows start on 16 bytes, as the staged epilogue stores them (a dimension of one row or head is
// never stepped over); 0, or an error described in err.
inline int check_staged_out(const FwdParams& p, char* err, int err_len) {
  if (reinterpret_cast<uintptr_t>(p.out) % 16 || (p.batch > 1 && p.out_stride[0] % 8) ||
      (p.heads_q > 1 && p.out_stride[1] % 8) || (p.seqlen_q > 1 && p.out_stride[2] % 8))
    return report(err, err_len, "out", "rows must start on 16 bytes: strides in multiples of 8 elements");
  return 0;
}

}  // namespace fa
