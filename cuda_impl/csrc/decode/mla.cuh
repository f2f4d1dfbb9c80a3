// What the two MLA decode kernels share: the shape (Q/K 576 = 512 latent + 64 rotary columns, V the first 512) and
// the wgmma kernel's entry points (fwd_mla_decode_wgmma.cu), which the host dispatch in fwd_mla_decode.cu calls.
#pragma once

#include "params.cuh"

namespace fa {

constexpr int MLA_DQK = 576, MLA_DV = 512;
constexpr int MLA_WGMMA_ROWS = 64;     // the wgmma kernel's query rows per CTA: one m64 tile
constexpr int MLA_WGMMA_BLOCK_N = 64;  // its keys per block: a warpgroup's S tile

// The wgmma kernel keeps a row's running maximum while it grows by at most 2^MLA_LAZY_RESCALE (log2 units): P then
// reaches 2^8, harmless in 16-bit P and fp32 sums (O / l and the LSE use the same maximum), and most tiles of a long
// cache skip O's rescale (the d256 prefill kernel's lazy rescale). The mma.sync kernel rescales on every new maximum:
// with the lazy rescale and the skipped O rescale it ran 0.93-0.98x as fast at 16 heads (docs/design/decode.md).
constexpr float MLA_LAZY_RESCALE = 8.f;

// The online-softmax step of both kernels for one accumulator row of a warp over a tile of TILES n-tiles of eight
// keys (s(j, c): the lane's score c of n-tile j, raw in, P out in place): the row's maximum over its four lanes (LAZY:
// kept within MLA_LAZY_RESCALE), row_sum (this lane's columns) rescaled and added to; returns O's factor for the row
// (1 where the maximum stayed). Every lane calls it (the shuffles).
template <int TILES, bool LAZY, typename S>
__device__ __forceinline__ float mla_softmax_row(float& row_max, float& row_sum, float scale_log2, S&& s) {
  float m = row_max;
#pragma unroll
  for (int j = 0; j < TILES; j++) m = fmaxf(m, fmaxf(s(j, 0), s(j, 1)));
  m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, 1));
  m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, 2));
  if (LAZY && row_max != -INFINITY && (m - row_max) * scale_log2 <= MLA_LAZY_RESCALE) m = row_max;
  // A row that has seen no key keeps max -inf; shifting by 0 makes its P and the rescale 0, not NaN.
  const float m_scaled = m == -INFINITY ? 0.f : m * scale_log2;
  const float alpha = rescale_factor(row_max, m, m_scaled, scale_log2);
  row_max = m;
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < TILES; j++)
#pragma unroll
    for (int c = 0; c < 2; c++) {
      float& x = s(j, c);
      x = fast_exp2(fmaf(x, scale_log2, -m_scaled));
      sum += x;
    }
  row_sum = row_sum * alpha + sum;
  return alpha;
}

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
