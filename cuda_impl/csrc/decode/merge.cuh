// The split merge of every decode kernel: partials (fp32 O over V's head_dim, LSE) of a sequence's chunks combined
// through their LSE in a fixed order (bitwise deterministic), launched after the split kernel as its programmatic
// dependent (sm_90+).
#pragma once

#include "params.cuh"

namespace fa {

constexpr int MERGE_WARPS = 8;  // warps of a merge CTA
constexpr int MERGE_BATCH = 8;  // splits per warp whose O loads are in flight together

// The splits' partials of each output row (batch, head, query) merged through their LSE. A row takes row_warps of
// the CTA's warps (a power of two, more for more splits: host side); warp j of a row reads splits j, j + row_warps,
// .. and issues the O loads of MERGE_BATCH of them before it reads any LSE (they do not depend on one another), so
// that one L2 round trip, not one per split, sets the pace: a warp per row reading its splits in turn took 8 us at
// 43 splits. Every warp reduces all the row's LSEs itself (max and sum as fixed shuffle trees); the warps' weighted
// sums meet in shared memory in warp order, so the bits are the same on every call. A NaN partial LSE (a poisoned
// sequence) makes the row NaN. Every split of a sound sequence wrote its O (zeros where it saw no key, weight
// exp(-inf) = 0), so all are read.
template <typename T, int DIM>
__global__ void __launch_bounds__(MERGE_WARPS * 32) fwd_decode_merge_kernel(const DecodeParams p, int row_warps) {
  constexpr int COLS = DIM / 32;  // per lane
  __shared__ __align__(16) float O_sum[MERGE_WARPS][DIM];
  wait_for_primary();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, part = warp % row_warps;
  const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seqlen_q;
  const int64_t row = int64_t(blockIdx.x) * (MERGE_WARPS / row_warps) + warp / row_warps;
  const bool live = row < rows_total;
  const int n = p.num_splits;
  const int64_t split_stride = rows_total * DIM;
  const float* lse_part = p.workspace + int64_t(n) * split_stride + row;
  const float* O_part = p.workspace + row * DIM + lane * COLS;
  auto load_batch = [&](float (&x)[MERGE_BATCH][COLS], int s0) {
#pragma unroll
    for (int j = 0; j < MERGE_BATCH; j++) {
      const int s = s0 + j * row_warps;
#pragma unroll
      for (int c = 0; c < COLS; c += 2) {
        const float2 v = s < n ? *reinterpret_cast<const float2*>(O_part + s * split_stride + c) : float2{0.f, 0.f};
        x[j][c] = v.x, x[j][c + 1] = v.y;
      }
    }
  };
  float o[COLS] = {}, lse = -INFINITY;
  bool nan = false;
  if (live) {
    float x[MERGE_BATCH][COLS];
    load_batch(x, part);
    float m = -INFINITY;
    for (int s = lane; s < n; s += 32) {
      const float v = lse_part[s * rows_total];
      nan |= v != v;
      m = fmaxf(m, v);
    }
#pragma unroll
    for (int d = 16; d > 0; d /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, d));
    nan = __any_sync(0xffffffff, nan);
    if (!nan && m != -INFINITY) {
      float sum = 0.f;
      for (int s = lane; s < n; s += 32) sum += expf(lse_part[s * rows_total] - m);  // exp(-inf) = 0
#pragma unroll
      for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffff, sum, d);
      lse = m + logf(sum);
      for (int s0 = part;; s0 += MERGE_BATCH * row_warps) {
#pragma unroll
        for (int j = 0; j < MERGE_BATCH; j++) {
          const int s = s0 + j * row_warps;
          const float f = s < n ? expf(lse_part[s * rows_total] - lse) : 0.f;
#pragma unroll
          for (int c = 0; c < COLS; c++) o[c] += f * x[j][c];
        }
        if (s0 + MERGE_BATCH * row_warps >= n) break;
        load_batch(x, s0 + MERGE_BATCH * row_warps);
      }
    }
  }
  if (row_warps > 1) {
#pragma unroll
    for (int c = 0; c < COLS; c++) O_sum[warp][lane * COLS + c] = o[c];
    __syncthreads();
    if (part == 0)
      for (int j = 1; j < row_warps; j++)
#pragma unroll
        for (int c = 0; c < COLS; c++) o[c] += O_sum[warp + j][lane * COLS + c];
  }
  if (!live || part != 0) return;
  if (nan) {
#pragma unroll
    for (int c = 0; c < COLS; c++) o[c] = NAN;
    lse = NAN;
  }
  // row = (batch * heads_q + head) * seqlen_q + query; out is (batch, seqlen_q, heads_q, DIM).
  const int query = int(row % p.seqlen_q), head = int(row / p.seqlen_q % p.heads_q);
  const int64_t batch = row / (int64_t(p.seqlen_q) * p.heads_q);
  T* dst = static_cast<T*>(p.out) + ((batch * p.seqlen_q + query) * p.heads_q + head) * DIM + lane * COLS;
#pragma unroll
  for (int c = 0; c < COLS; c += 2) *reinterpret_cast<uint32_t*>(dst + c) = pack2<T>(o[c], o[c + 1]);
  if (lane == 0) p.lse[row] = lse;
}

// Warps per merged row: enough that each reads at most four splits' partials, up to the whole CTA.
inline int merge_row_warps(int num_splits) {
  int warps = 1;
  while (warps < MERGE_WARPS && warps * 4 < num_splits) warps *= 2;
  return warps;
}

// The merge of p.num_splits > 1 partials of V's head_dim DIM, on `stream` after the split kernel.
template <typename T, int DIM>
int launch_merge(const DecodeParams& p, cudaStream_t stream, char* err, int err_len) {
  const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seqlen_q;
  const int row_warps = merge_row_warps(p.num_splits), rows_per_cta = MERGE_WARPS / row_warps;
  return launch_dependent(fwd_decode_merge_kernel<T, DIM>, dim3(unsigned((rows_total + rows_per_cta - 1) /
                          rows_per_cta)), MERGE_WARPS * 32, stream, err, err_len, p, row_warps);
}

}  // namespace fa
