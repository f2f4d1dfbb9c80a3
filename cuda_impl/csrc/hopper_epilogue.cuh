// The Hopper kernels' epilogue through shared memory (fwd_hopper.cu, fwd_hopper_fp8.cu): store_wgmma_rows's values
// and LSE, but each warp puts its rows into its own staging slot with stmatrix, from where they leave whole: by bulk
// copies of the copy engine, one per row (BULK), or read back as 16-byte chunks and stored by the warp. Straight from
// the registers, O leaves as 4-byte stores that touch 8 rows per warp instruction; at d128 they held an item's
// epilogue for 2.5-3.1 k cycles, the read-back and stores 2.2 k (scripts/trace_hopper_gpu.py, docs/perf-notes-hopper.md
// session 14).
#pragma once

#include "fwd_common.cuh"
#include "hopper.cuh"

namespace fa {

// Bytes between two rows of a slot. Bulk copies read a row from contiguous bytes, so its rows are padded by one
// 16-byte chunk (row r's chunk c in banks 4(r + c) mod 32: the 8 rows of one stmatrix matrix never share a bank);
// read back by the warp, a row's chunks are XOR-swizzled by the row instead.
__host__ __device__ constexpr int staged_store_pitch(bool bulk, int head_dim) { return head_dim * 2 + (bulk ? 16 : 0); }

// Bytes of one warp's staging slot of `rows` rows (8, or 16: all of a warp's rows at once).
__host__ __device__ constexpr int staged_store_warp_bytes(bool bulk, int rows, int head_dim) {
  return rows * staged_store_pitch(bulk, head_dim);
}

// Bytes of the slots of `consumer_warps` warps.
constexpr int staged_store_bytes(bool bulk, int rows, int consumer_warps, int head_dim) {
  return consumer_warps * staged_store_warp_bytes(bulk, rows, head_dim);
}

// Where the staging slots start: after a kernel's first `used` bytes of shared memory, 128-byte aligned.
constexpr int staged_store_offset(int used) { return (used + 127) / 128 * 128; }

// Rows per slot: 16 (a warp's rows leave together) where a CTA's shared memory holds them after `used` bytes (plus
// the 1024 of the base's alignment), else 8. Read back by the warp, always 8 (the swizzle spans 8 rows).
constexpr int staged_store_rows(bool bulk, int used, int consumer_warps, int head_dim) {
  return bulk && staged_store_offset(used) + staged_store_bytes(true, 16, consumer_warps, head_dim) + 1024 <=
                     227 * 1024
             ? 16
             : 8;
}

#if FA_SM90A
// store_wgmma_rows (fwd_common.cuh) through the warp's slot at `slot` (staged_store_warp_bytes, 16-byte aligned) of
// SLOT_ROWS rows. BULK: lanes 0.. copy the slot's rows out with the copy engine, which runs on while the warp goes on
// to its next item; the slot's next use waits only for those copies to have read it. Otherwise the warp reads each
// 8 rows back and stores them as 16-byte chunks, whole rows per warp instruction. Needs 16-byte aligned output rows
// (checked on the host).
template <typename T, bool BULK, int SLOT_ROWS, int O_REGS, typename Lse>
__device__ __forceinline__ void store_wgmma_rows_staged(const FwdParams& p, const CtaWork& w, int row0,
                                                        float (&O)[O_REGS], const float (&row_max)[2],
                                                        const float (&row_sum)[2], float out_factor, uint32_t slot,
                                                        Lse&& lse) {
  constexpr int ROW_BYTES = O_REGS * 4, CHUNKS = ROW_BYTES / 16;  // a row: head_dim = 2 O_REGS values
  constexpr int PITCH = staged_store_pitch(BULK, 2 * O_REGS);
  static_assert(CHUNKS % 8 == 0, "stmatrix takes 4 chunks of a row at a time; the read-back 32 of 8 rows");
  static_assert(SLOT_ROWS == 8 || (BULK && SLOT_ROWS == 16), "8 rows per slot, or 16 with bulk copies");
  T* out = static_cast<T*>(p.out) + w.batch * p.out_stride[0] + w.head_q * p.out_stride[1];
  const int lane = threadIdx.x % 32;
  const int warp_row0 = row0 - lane / 4;  // the warp's first row; row0 + 8 h is the warp's row 8 h + lane / 4
  const auto chunk_at = [&](int row, int chunk) {
    return slot + row * PITCH + (BULK ? chunk : chunk ^ row) * 16;
  };
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int slot_row0 = SLOT_ROWS == 16 ? 8 * h : 0;  // where rows 8 h.. of the warp go
    const bool flush = SLOT_ROWS == 8 || h == 1;        // the slot is full: its rows leave
    const float l = quad_row_sum(row_sum[h]);
    const float inv = l > 0.f ? out_factor / l : 0.f;
    if (SLOT_ROWS == 8 || h == 0) {
      if constexpr (BULK) sm90::bulk_wait_read<0>();  // this lane's copies out of the slot have read it
      __syncwarp();  // ... and every lane's, or the warp has read its previous rows back
    }
#pragma unroll
    for (int j0 = 0; j0 < CHUNKS; j0 += 4) {
      uint32_t r[4];
#pragma unroll
      for (int k = 0; k < 4; k++) r[k] = pack2<T>(O[4 * (j0 + k) + 2 * h] * inv, O[4 * (j0 + k) + 2 * h + 1] * inv);
      sm90::stmatrix_x4(chunk_at(slot_row0 + lane % 8, j0 + lane / 8), r);
    }
    if (flush) {
      if constexpr (BULK) {
        sm90::fence_proxy_async_shared();
        __syncwarp();
        // slot row `lane` is the warp's row lane (16 rows) or 8 h + lane (8)
        const int q_row = warp_row0 + (SLOT_ROWS == 16 ? 0 : 8 * h) + lane;
        if (lane < SLOT_ROWS && q_row < p.seqlen_q) sm90::bulk_store(out + q_row * p.out_stride[2], chunk_at(lane, 0), ROW_BYTES);
        sm90::bulk_commit();
      } else {
        __syncwarp();
#pragma unroll
        for (int i = lane; i < 8 * CHUNKS; i += 32) {
          const int row = i / CHUNKS, chunk = i % CHUNKS;
          const uint4 v = sm90::ld_shared_v4(chunk_at(row, chunk));
          const int q_row = warp_row0 + 8 * h + row;
          if (q_row < p.seqlen_q) *reinterpret_cast<uint4*>(out + q_row * p.out_stride[2] + chunk * 8) = v;
        }
      }
    }
    if (row0 + 8 * h < p.seqlen_q) store_wgmma_lse(p, w, row0 + 8 * h, row_max[h], l, lse);
  }
}

// This warp's slot among the consumer warps' slots at `slots`: the consumers follow the producer warpgroup (warps 0-3).
__device__ __forceinline__ uint32_t staged_store_slot(uint32_t slots, int warp_bytes) {
  return slots + (threadIdx.x / 32 - 4) * warp_bytes;
}

// The epilogue a kernel was built with: through the warp's staging slot among those at `slots` (STAGED; BULK and
// SLOT_ROWS as for store_wgmma_rows_staged), or store_wgmma_rows from the registers.
template <bool STAGED, bool BULK, int SLOT_ROWS, typename T, int O_REGS, typename Lse>
__device__ __forceinline__ void store_wgmma_rows_via(const FwdParams& p, const CtaWork& w, int row0, float (&O)[O_REGS],
                                                     const float (&row_max)[2], const float (&row_sum)[2],
                                                     float out_factor, uint32_t slots, Lse&& lse) {
  if constexpr (STAGED)
    store_wgmma_rows_staged<T, BULK, SLOT_ROWS>(
        p, w, row0, O, row_max, row_sum, out_factor,
        staged_store_slot(slots, staged_store_warp_bytes(BULK, SLOT_ROWS, 2 * O_REGS)), lse);
  else
    store_wgmma_rows<T>(p, w, row0, O, row_max, row_sum, out_factor, lse);
}

// Before a consumer thread exits: its bulk copies have read their slots, which the CTA's end would free.
template <bool STAGED, bool BULK>
__device__ __forceinline__ void staged_store_drain() {
  if constexpr (STAGED && BULK) sm90::bulk_wait_read<0>();
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
