// What the two MLA decode kernels share: the shape (Q/K 576 = 512 latent + 64 rotary columns, V the first 512) and
// the wgmma kernel's entry points (fwd_mla_decode_wgmma.cu), which the host dispatch in fwd_mla_decode.cu calls.
#pragma once

#include "params.cuh"

namespace fa {

constexpr int MLA_DQK = 576, MLA_DV = 512;
constexpr int MLA_WGMMA_ROWS = 64;  // the wgmma kernel's query rows per CTA: one m64 tile

// The end of both kernels for one accumulator row of a warp (rows g and g + 8 of its 16): the row's sum over its
// four lanes, then O / l over TILES n-tiles of eight columns from col0 (a lane's two columns of n-tile j: o(j, 0),
// o(j, 1)) to out (one split) or to the fp32 partials, and the row's LSE where write_lse (one lane of the row).
// Every lane calls it (the shuffles); rows past the packed rows store nothing.
template <typename T, int TILES, typename O>
__device__ __forceinline__ void mla_finish_row(const DecodeParams& p, const DecodeWork& w, int r, int col0,
                                               float row_sum, float row_max, bool write_lse, O&& o) {
  float l = row_sum;
  l += __shfl_xor_sync(0xffffffff, l, 1);
  l += __shfl_xor_sync(0xffffffff, l, 2);
  if (r >= w.rows) return;
  const float inv = l > 0.f ? 1.f / l : 0.f;  // rows that saw no key: zeros and -inf (weight 0 in the merge)
  const float lse = l > 0.f ? row_max * p.scale + logf(l) : -INFINITY;
  const int query = query_of(w, r), head = head_of(w, r);
  const int64_t lse_row = (int64_t(w.batch) * p.heads_q + head) * p.seqlen_q + query;
  if (p.num_splits == 1) {
    T* dst = static_cast<T*>(p.out) + ((int64_t(w.batch) * p.seqlen_q + query) * p.heads_q + head) * MLA_DV + col0;
#pragma unroll
    for (int j = 0; j < TILES; j++) *reinterpret_cast<uint32_t*>(dst + 8 * j) = pack2<T>(o(j, 0) * inv, o(j, 1) * inv);
    if (write_lse) p.lse[lse_row] = lse;
  } else {
    const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seqlen_q;
    const int64_t part_row = w.split * rows_total + lse_row;
    float* dst = p.workspace + part_row * MLA_DV + col0;
#pragma unroll
    for (int j = 0; j < TILES; j++) *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o(j, 0) * inv, o(j, 1) * inv);
    if (write_lse) p.workspace[int64_t(p.num_splits) * rows_total * MLA_DV + part_row] = lse;
  }
}

// Launches the wgmma kernel (and the merge, with more than one split) for q's dtype; 0 or report()'s code.
int mla_decode_wgmma(const DecodeParams& p, const FastDiv& page_div, cudaStream_t stream, char* err, int err_len);
// Its resident CTAs per SM for q's dtype (-1 if the launch cannot be prepared).
int mla_decode_wgmma_ctas_per_sm(int dtype);

}  // namespace fa
