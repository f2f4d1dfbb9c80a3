// hopper-mxfp8 / hopper-nvfp4: exact block-scaled FlashAttention-2 forward for sm_90a
// (compare.formats "mxfp8" and "nvfp4"); output bf16, LSE of the scaled scores.
//
// The exact scheme (docs/design/block-scaled.md says why it beats one k32
// QGMMA per block): every block-scaled value is exact in a 16-bit type, an MXFP8 value
// (e4m3 * 2^e, 4 significant bits) in bf16 and an NVFP4 value (e2m1 * e4m3 scale, at most 6
// bits, in [2^-10, 2688]) in fp16. dequant_blocked.cu expands Q, K and V^T (without nvfp4's
// tensor scales) once, O(S * D) work against the O(S^2 * D) here, and this kernel runs 16-bit
// wgmma on them: products exact, fp32 accumulation, as the oracle's fp32 matmul of the
// dequantized values. The tensor scales are applied once: q_ts * k_ts in the exponent's factor,
// v_ts in the final 1 / l.
//
// Skeleton of fwd_hopper.cu (1 producer warpgroup issuing TMA into a STAGES-deep K/V ring on
// mbarriers, 2 consumer warpgroups of 64 query rows, same barrier protocol; read its header
// comment), with V arriving transposed (B, H, D, Sk) as the block-scaled formats store it: a
// V^T tile is D rows x 128 keys in two 64-key panels, the K-major B operand of P V
// (sm90::wgmma_rs_kmajor). TMA moves raw bytes (fwd_hopper_fp8.cu's UINT8 maps).
//
// Softmax (the oracle's plain reference and triton:*-dequant): the scaled score is rounded once
// (mul.rn, never contracted into the exponent's FMA) and the row max is taken of those same
// values, so the largest p is exactly 1 (an FMA-contracted exponent gives 1 - 2^-24 half the
// time, which the MX floor rule saturates to 0.875). P is quantized against the running max
// (hopper_mx.cuh), the row sum adds the unrounded p.
#include "fwd_common.cuh"
#include "hopper/config.cuh"
#include "hopper/host.cuh"
#include "hopper/mainloop_mx.cuh"
#include "hopper/producer.cuh"
#include "hopper/ring.cuh"

namespace fa {

template <int FORMAT, int DIM>
__global__ void __launch_bounds__(MxTiles<FORMAT, DIM>::THREADS, 1)
    fwd_hopper_mx_kernel(const MxFwdParams p, const __grid_constant__ CUtensorMap map_q,
                         const __grid_constant__ CUtensorMap map_k,
                         const __grid_constant__ CUtensorMap map_vt) {
#if FA_SM90A
  using C = MxTiles<FORMAT, DIM>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t smem = (smem_u32(smem_raw) + 1023) & ~1023u;
  const hopper_fp8::RingBarriers<C::STAGES> bars{smem + C::BARRIER_OFFSET};
  const CtaWork w = cta_work<C::BLOCK_Q, C::BLOCK_KV>(p.base);

  hopper_fp8::run_roles<C>(
      bars, [&] { hopper_mx::produce<C>(w, smem, bars, &map_q, &map_k, &map_vt); },
      [&](int consumer) { hopper_mx::consume<C>(p, w, smem, bars, consumer); });
#endif
}

}  // namespace fa

// --- host ------------------------------------------------------------------------------------

namespace fa::hopper_mx_host {

template <int FORMAT, int DIM>
int launch(const MxFwdParams& mp, cudaStream_t stream, char* err, int err_len) {
  using C = MxTiles<FORMAT, DIM>;
  const FwdParams& p = mp.base;
  CUtensorMap map_q, map_k, map_vt;
  if (int rc = encode_map16(&map_q, p.q, p.q_stride, p.batch, p.heads_q, p.seqlen_q, DIM,
                            C::BLOCK_Q, err, err_len))
    return rc;
  if (int rc = encode_map16(&map_k, p.k, p.k_stride, p.batch, p.heads_kv, p.seqlen_k, DIM,
                            C::BLOCK_KV, err, err_len))
    return rc;
  // V^T: DIM rows of seqlen_k keys (the map stops there: padding keys arrive as zeros).
  if (int rc = encode_map16(&map_vt, p.v, p.v_stride, p.batch, p.heads_kv, DIM, p.seqlen_k, DIM,
                            err, err_len))
    return rc;
  return launch_kernel(fwd_hopper_mx_kernel<FORMAT, DIM>, q_tile_grid(p, C::BLOCK_Q), C::THREADS, C::SMEM_BYTES,
                       stream, err, err_len, mp, map_q, map_k, map_vt);
}

}  // namespace fa::hopper_mx_host

extern "C" int cuda_fa_mx_params_size() { return static_cast<int>(sizeof(MxFwdParams)); }

extern "C" int cuda_fa_fwd_hopper_mx(const MxFwdParams* mp, cudaStream_t stream, char* err,
                                     int err_len) {
  using namespace fa;
  const FwdParams& p = mp->base;
  if (int rc = check_params(p, err, err_len)) return rc;
  if (mp->format != FA_MX_FORMAT_MXFP8 && mp->format != FA_MX_FORMAT_NVFP4)
    return report(err, err_len, "format", "0 (mxfp8) or 1 (nvfp4)");
  const int want = mp->format == FA_MX_FORMAT_MXFP8 ? FA_DTYPE_BF16 : FA_DTYPE_FP16;
  if (p.dtype != want)
    return report(err, err_len, "dtype", "mxfp8 runs on bf16 tiles, nvfp4 on fp16 tiles");
  if (mp->format == FA_MX_FORMAT_NVFP4 &&
      (!mp->q_tensor_scale || !mp->k_tensor_scale || !mp->v_tensor_scale))
    return report(err, err_len, "tensor scale", "nvfp4 needs q, k and v tensor scales");
  if (p.head_dim != 64 && p.head_dim != 128)
    return report(err, err_len, "head_dim", "supported: 64, 128");
  if (int rc = check_sm90("variants hopper-mxfp8/nvfp4 run on sm_90 (H100/H200) only", err, err_len)) return rc;
  if (mp->format == FA_MX_FORMAT_MXFP8)
    return p.head_dim == 64 ? hopper_mx_host::launch<FA_MX_FORMAT_MXFP8, 64>(*mp, stream, err, err_len)
                            : hopper_mx_host::launch<FA_MX_FORMAT_MXFP8, 128>(*mp, stream, err, err_len);
  return p.head_dim == 64 ? hopper_mx_host::launch<FA_MX_FORMAT_NVFP4, 64>(*mp, stream, err, err_len)
                          : hopper_mx_host::launch<FA_MX_FORMAT_NVFP4, 128>(*mp, stream, err, err_len);
}
