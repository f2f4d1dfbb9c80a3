// Score masks of the Hopper kernels on a wgmma accumulator: keys past seqlen_k and after the causal diagonal
// (and, in local launches, before the window's left bound) set to -inf. Which tiles need one at all:
// fwd_common.cuh tile_needs_mask / local_tile_needs_mask / first_masked_tile.
#pragma once

#include <cmath>

#include "fwd_common.cuh"

namespace fa {

// Key (from the tile's first) of wgmma accumulator register i of lane quad position t: column
// 8 * (i / 4) + 2 * t + i % 2 of S. With PERMUTED_KEYS the K tile's rows were loaded in the order
// of fwd_hopper_fp8.cu's permuted map, where column c = e + 2t + 8 g0 + 16 g (e = c % 2) holds key
// e + 2 g0 + 4t + 16 g: each lane's S values are then the keys its e4m3 A fragment needs.
template <bool PERMUTED_KEYS>
__device__ __forceinline__ int wgmma_key(int i, int t) {
  if constexpr (PERMUTED_KEYS) return i % 2 + 2 * (i / 4 % 2) + 4 * t + 16 * (i / 8);
  return 8 * (i / 4) + 2 * t + i % 2;
}

// The same for a wgmma accumulator (the Hopper kernels): S_REGS registers of one 64 x N tile, where
// register i holds row row0 + 8 * ((i / 2) % 2) (row0 is this thread's first row) and key
// wgmma_key<PERMUTED_KEYS>(i, lane % 4). LOCAL: a local launch (fwd_common.cuh local_work), whose right bound is
// w.diag (causal is always set there) and which also masks keys before the window's left bound.
template <bool PERMUTED_KEYS = false, bool LOCAL = false, int S_REGS>
__device__ __forceinline__ void mask_scores(float (&S)[S_REGS], const FwdParams& p, const CtaWork& w,
                                            int row0, int kv_start) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int i = 0; i < S_REGS; i++) {
    const int row = row0 + ((i / 2) % 2) * 8;
    const int col = kv_start + wgmma_key<PERMUTED_KEYS>(i, t);
    if constexpr (LOCAL) {
      if (col >= p.seqlen_k || col > row + w.diag || (w.has_left && col < row + w.left_diag)) S[i] = -INFINITY;
    } else {
      if (col >= p.seqlen_k || (p.causal && col > row + w.diag)) S[i] = -INFINITY;
    }
  }
}

}  // namespace fa
