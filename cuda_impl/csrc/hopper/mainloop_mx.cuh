// The block-scaled consumer mainloop (16-bit wgmma on the exactly dequantized tiles, V^T as the K-major B operand,
// P quantized to MX / NVFP4 blocks inside the kernel): one tile at a time, S, the exact softmax, P, then P V.
#pragma once

#include "fwd_common.cuh"
#include "hopper/epilogue.cuh"
#include "hopper/mask.cuh"
#include "hopper/ring.cuh"
#include "hopper/sm90.cuh"
#include "hopper/softmax.cuh"

extern "C" {
// Mirrored by cuda_impl/_lib.py (MxFwdParams). base.q/k: (B, H, S, D) 16-bit, base.v: V^T
// (B, H, D, Sk_padded) 16-bit, strides in elements; base.dtype bf16 for mxfp8, fp16 for nvfp4.
struct MxFwdParams {
  FwdParams base;
  // nvfp4's fp32 tensor scales (device scalars; null for mxfp8): q_ts * k_ts multiplies the
  // softmax scale, v_ts the output.
  const float* q_tensor_scale;
  const float* k_tensor_scale;
  const float* v_tensor_scale;
  int32_t format;  // FA_MX_FORMAT_*
};
}

#if FA_SM90A
namespace fa::hopper_mx {

template <typename C>
__device__ void consume(const MxFwdParams& mp, const CtaWork& w, uint32_t smem,
                        hopper_fp8::RingBarriers<C::STAGES> bars, int consumer) {
  using T = typename C::T;
  const FwdParams& p = mp.base;
  const int warp_in_group = (threadIdx.x % 128) / 32;
  const int row0 = w.q_start + consumer * 64 + warp_in_group * 16 + (threadIdx.x % 32) / 4;
  const bool nvfp4 = C::FORMAT == FA_MX_FORMAT_NVFP4;
  const float qk_factor = nvfp4 ? *mp.q_tensor_scale * *mp.k_tensor_scale : 1.f;
  const float scale_log2 = p.scale * qk_factor * LOG2E;
  float O[C::O_REGS];
#pragma unroll
  for (int i = 0; i < C::O_REGS; i++) O[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f}, alpha[2];
  const uint32_t q_smem = smem + consumer * 64 * 128;  // 64 rows into every Q panel

  auto k_smem = [&](int s) { return smem + C::K_OFFSET + s * C::STAGE_BYTES; };
  // S = Q K^T, issued: k-step kk reads 16 columns = 32 bytes inside panel kk / 4 of both operands.
  auto issue_qk = [&](float (&S)[C::S_REGS], int s) {
    const uint64_t q_desc = sm90::desc_sw128(q_smem, 16, 1024), k_desc = sm90::desc_sw128(k_smem(s), 16, 1024);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < C::DIM / 16; kk++) {
      const uint32_t in_panel = (kk % 4) * 32;
      sm90::wgmma_ss_n128<T>(S, sm90::desc_advance(q_desc, (kk / 4) * C::Q_PANEL_BYTES + in_panel),
                             sm90::desc_advance(k_desc, (kk / 4) * C::K_PANEL_BYTES + in_panel), kk > 0);
    }
    sm90::wgmma_commit();
  };
  // O += P V, issued: key step kk is 32 bytes into panel kk / 4 of every V^T row (K-major B).
  auto issue_pv = [&](const uint32_t (&P)[C::BLOCK_KV / 16][4], int s) {
    const uint64_t v_desc = sm90::desc_sw128(k_smem(s) + C::K_BYTES, 16, 1024);
    sm90::fence_regs(O);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < C::BLOCK_KV / 16; kk++)
      sm90::wgmma_rs_kmajor<T, C::DIM>(O, P[kk],
                                       sm90::desc_advance(v_desc, (kk / 4) * C::V_PANEL_BYTES + (kk % 4) * 32));
    sm90::wgmma_commit();
  };
  auto masked_softmax = [&](float (&S)[C::S_REGS], int tile) {
    const int kv_start = tile * C::BLOCK_KV;
    if (tile_needs_mask<C::BLOCK_KV>(p, w, kv_start))
      mask_scores(S, p, w, row0, kv_start);
    softmax_exact<C>(S, row_max, row_sum, alpha, scale_log2);
  };
  auto parity = [](int tile) { return uint32_t(tile / C::STAGES) & 1; };

  if (w.n_kv_tiles > 0) sm90::mbar_wait(bars.q_full(), 0);
  for (int tile = 0; tile < w.n_kv_tiles; tile++) {
    const int s = tile % C::STAGES;
    float S[C::S_REGS];
    uint32_t P[C::BLOCK_KV / 16][4];
    sm90::mbar_wait(bars.k_full(s), parity(tile));
    issue_qk(S, s);
    sm90::wgmma_wait<0>();
    sm90::fence_regs(S);
    masked_softmax(S, tile);
    pack_p<C>(S, P);
    hopper_fp8::rescale<C>(O, alpha);
    sm90::mbar_wait(bars.v_full(s), parity(tile));
    issue_pv(P, s);
    sm90::wgmma_wait<0>();
    sm90::fence_regs(O);
    sm90::mbar_arrive(bars.kv_empty(s));
  }
  // LSE = (m + log2 l) ln 2: m is in log2 units, as triton's finish_rows.
  store_wgmma_rows<__nv_bfloat16, false>(p, w, row0, O, row_max, row_sum, nvfp4 ? *mp.v_tensor_scale : 1.f,
                                  [](float m, float l) { return (m + log2f(l)) * 0.6931471805599453f; });
}

}  // namespace fa::hopper_mx
#endif  // FA_SM90A
