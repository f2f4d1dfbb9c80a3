// What the two MLA decode kernels share: the shape (Q/K 576 = 512 latent + 64 rotary columns, V the first 512) and
// the wgmma kernel's entry points (fwd_mla_decode_wgmma.cu), which the host dispatch in fwd_mla_decode.cu calls.
#pragma once

#include "params.cuh"

namespace fa {

constexpr int MLA_DQK = 576, MLA_DV = 512;
constexpr int MLA_WGMMA_ROWS = 64;  // the wgmma kernel's query rows per CTA: one m64 tile

// Launches the wgmma kernel (and the merge, with more than one split) for q's dtype; 0 or report()'s code.
int mla_decode_wgmma(const DecodeParams& p, const FastDiv& page_div, cudaStream_t stream, char* err, int err_len);
// Its resident CTAs per SM for q's dtype (-1 if the launch cannot be prepared).
int mla_decode_wgmma_ctas_per_sm(int dtype);

}  // namespace fa
