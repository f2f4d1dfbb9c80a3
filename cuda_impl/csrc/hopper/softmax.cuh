// The online softmax of the Hopper kernels, on S tiles in the wgmma accumulator layout (two rows per thread, the
// four threads of a quad share a row). One algorithm, with the input formats as policies of the tile config C:
// - hopper::softmax_exp: row max, p = exp2(s * scale_log2 - m * scale_log2) in one FMA, row sums; C::LAZY_RESCALE
//   keeps an old max through small growth (16-bit d256), C::SOFTMAX_CHAINS sets the reduction chains. The
//   16-bit and the fp8 kernels share it (for fp8, scale_log2 carries the q and k descales).
// - hopper_mx::softmax_exact (block-scaled): the scaled score rounded once (no FMA contraction) and the max taken of those
//   values, so the largest p is exactly 1, which the MX / NVFP4 quantization of P needs (quantize_p.cuh).
// - P as the A operand of P V: hopper::rescale_and_pack (16-bit, O *= alpha with it), hopper_fp8::pack_p (e4m3)
//   and hopper_mx::pack_p (MX / NVFP4 blocks); hopper_fp8::rescale is O *= alpha for those two.
#pragma once

#include <cmath>

#include "common.cuh"
#include "fwd_common.cuh"
#include "hopper/quantize_p.cuh"
#include "hopper/sm90.cuh"

namespace fa {

// Row reductions over one thread's part of a wgmma accumulator row: half h (row row0 + 8h) is
// registers 4j + 2h + c, value v = 2j + c. Value v goes to chain v % CHAINS and the chains meet in a
// tree, so the dependent latency is S_REGS / (2 CHAINS) operations instead of S_REGS / 2: the row max
// and the row sum sit between "S is ready" and the next GEMM issue on every consumer's critical path.
// wgmma_row_max: fmaxf over the row half's values and init.
template <int CHAINS, int S_REGS>
__device__ __forceinline__ float wgmma_row_max(const float (&S)[S_REGS], int h, float init) {
  static_assert(CHAINS > 0 && (CHAINS & (CHAINS - 1)) == 0, "CHAINS: a power of 2");
  float m[CHAINS];
#pragma unroll
  for (int k = 0; k < CHAINS; k++) m[k] = init;
#pragma unroll
  for (int v = 0; v < S_REGS / 2; v++) m[v % CHAINS] = fmaxf(m[v % CHAINS], S[4 * (v / 2) + 2 * h + v % 2]);
#pragma unroll
  for (int width = CHAINS / 2; width > 0; width /= 2)
#pragma unroll
    for (int k = 0; k < width; k++) m[k] = fmaxf(m[k], m[k + width]);
  return m[0];
}

// S <- f(S) over row half h, returning the sum of the new values (chained as wgmma_row_max).
template <int CHAINS, int S_REGS, typename F>
__device__ __forceinline__ float wgmma_row_map_sum(float (&S)[S_REGS], int h, F&& f) {
  static_assert(CHAINS > 0 && (CHAINS & (CHAINS - 1)) == 0, "CHAINS: a power of 2");
  float sum[CHAINS];
#pragma unroll
  for (int k = 0; k < CHAINS; k++) sum[k] = 0.f;
#pragma unroll
  for (int v = 0; v < S_REGS / 2; v++) {
    float& x = S[4 * (v / 2) + 2 * h + v % 2];
    x = f(x);
    sum[v % CHAINS] += x;
  }
#pragma unroll
  for (int width = CHAINS / 2; width > 0; width /= 2)
#pragma unroll
    for (int k = 0; k < width; k++) sum[k] += sum[k + width];
  return sum[0];
}

}  // namespace fa

#if FA_SM90A
namespace fa::hopper {

// Online softmax, first half, on a fresh S tile in the wgmma accumulator layout (two rows per
// thread, the four threads of a quad share a row): new row max, S -> exp2 of the scaled
// difference, row sums. alpha is what O must be multiplied by; that waits for P V to retire.
template <typename C>
__device__ __forceinline__ void softmax_exp(float (&S)[C::S_REGS], float (&row_max)[2],
                                            float (&row_sum)[2], float (&alpha)[2],
                                            float scale_log2) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    float m = wgmma_row_max<C::SOFTMAX_CHAINS>(S, h, row_max[h]);
    m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, 2));
    if (C::LAZY_RESCALE > 0 && row_max[h] != -INFINITY &&
        (m - row_max[h]) * scale_log2 <= float(C::LAZY_RESCALE))
      m = row_max[h];  // small growth: keep the old max, alpha = 1
    // A row with no visible key so far keeps max -inf; subtracting 0 keeps exp2 at 0, not NaN.
    const float m_scaled = m == -INFINITY ? 0.f : m * scale_log2;
    alpha[h] = rescale_factor(row_max[h], m, m_scaled, scale_log2);
    row_max[h] = m;
    const float sum = wgmma_row_map_sum<C::SOFTMAX_CHAINS>(
        S, h, [&](float s) { return fast_exp2(fmaf(s, scale_log2, -m_scaled)); });
    row_sum[h] = row_sum[h] * alpha[h] + sum;
  }
}

// The logit cap of a local launch, on raw scores: S = softcap * tanh(S * cap_in), cap_in = scale / softcap (the
// SFU's tanh, as FlashAttention-3's; the softmax then takes S unscaled, score_scale).
template <int S_REGS>
__device__ __forceinline__ void softcap_scores(float (&S)[S_REGS], float cap_in, float softcap) {
#pragma unroll
  for (int i = 0; i < S_REGS; i++) S[i] = softcap * fast_tanh(S[i] * cap_in);
}

// Second half, once P V of the previous tile has retired: O *= alpha, P = S as wgmma A
// fragments. Key block kk (16 keys) = accumulator column blocks 2kk, 2kk+1: the A-fragment order
// (row g keys 0-7, row g+8 keys 0-7, row g keys 8-15, row g+8 keys 8-15) is register order.
// No wgmma is in flight here, so the warp-uniform branch of the lazy rescale cannot serialise any.
// (O *= alpha between the next S and P V issues, FlashAttention-3's order, measured no gain.)
template <typename T, typename C>
__device__ __forceinline__ void rescale_and_pack(const float (&S)[C::S_REGS], float (&O)[C::O_REGS],
                                                 const float (&alpha)[2],
                                                 uint32_t (&P)[C::BLOCK_KV / 16][4]) {
  if (C::LAZY_RESCALE == 0 || __any_sync(0xffffffff, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
    for (int j = 0; j < C::O_REGS / 4; j++)
#pragma unroll
      for (int i = 0; i < 4; i++) O[4 * j + i] *= alpha[i / 2];
  }
#pragma unroll
  for (int kk = 0; kk < C::BLOCK_KV / 16; kk++)
#pragma unroll
    for (int r = 0; r < 4; r++) P[kk][r] = pack2<T>(S[8 * kk + 2 * r], S[8 * kk + 2 * r + 1]);
}

}  // namespace fa::hopper

namespace fa::hopper_fp8 {

// O *= alpha, per row of the accumulator layout (alpha[0]: row g, alpha[1]: row g + 8).
template <typename C>
__device__ __forceinline__ void rescale(float (&O)[C::O_REGS], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < C::O_REGS / 4; j++) {
    O[4 * j] *= alpha[0];
    O[4 * j + 1] *= alpha[0];
    O[4 * j + 2] *= alpha[1];
    O[4 * j + 3] *= alpha[1];
  }
}

// P = e4m3(p) as the A fragments of P V, from the p that softmax_exp left in S.
template <typename C>
__device__ __forceinline__ void pack_p(const float (&S)[C::S_REGS], uint32_t (&P)[C::K_STEPS_PV][4]) {
#pragma unroll
  for (int kk = 0; kk < C::K_STEPS_PV; kk++) {
    if constexpr (C::FLAT_K)
      sm90::qgmma_a_fragment_permuted(S + 16 * kk, P[kk]);
    else
      sm90::qgmma_a_fragment(S + 16 * kk, P[kk]);
  }
}

}  // namespace fa::hopper_fp8

namespace fa::hopper_mx {

// One online-softmax step on a raw S tile: returns the O rescale factors in alpha, writes the
// quantized P as 16-bit A fragments (pack_p, from the p left in S). row_max is kept as the rounded
// scaled score (log2 units).
template <typename C>
__device__ __forceinline__ void softmax_exact(float (&S)[C::S_REGS], float (&row_max)[2],
                                             float (&row_sum)[2], float (&alpha)[2], float scale_log2) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    float m0 = -INFINITY, m1 = -INFINITY;  // two chains halve the dependent latency
#pragma unroll
    for (int j = 0; j < C::S_REGS / 4; j++) {
      S[4 * j + 2 * h] = __fmul_rn(S[4 * j + 2 * h], scale_log2);
      S[4 * j + 2 * h + 1] = __fmul_rn(S[4 * j + 2 * h + 1], scale_log2);
      m0 = fmaxf(m0, S[4 * j + 2 * h]);
      m1 = fmaxf(m1, S[4 * j + 2 * h + 1]);
    }
    const float m = fmaxf(row_max[h], mx::quad_max(fmaxf(m0, m1)));
    // A row with no visible key so far keeps max -inf; subtracting 0 keeps exp2 at 0, not NaN.
    const float m_sub = m == -INFINITY ? 0.f : m;
    alpha[h] = fast_exp2(row_max[h] - m_sub);
    row_max[h] = m;
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < C::S_REGS / 4; j++)
#pragma unroll
      for (int c = 0; c < 2; c++) {
        const float e = fast_exp2(S[4 * j + 2 * h + c] - m_sub);  // exactly 1 at the max
        S[4 * j + 2 * h + c] = e;
        sum[c] += e;
      }
    row_sum[h] = row_sum[h] * alpha[h] + (sum[0] + sum[1]);
  }
}

template <typename C>
__device__ __forceinline__ void pack_p(const float (&S)[C::S_REGS], uint32_t (&P)[C::BLOCK_KV / 16][4]) {
  if constexpr (C::FORMAT == FA_MX_FORMAT_MXFP8)
    mx::quantize_p_mxfp8(S, P);
  else
    mx::quantize_p_nvfp4(S, P);
}

}  // namespace fa::hopper_mx
#endif  // FA_SM90A
