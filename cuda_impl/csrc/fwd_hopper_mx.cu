// hopper-mxfp8 / hopper-nvfp4: exact block-scaled FlashAttention-2 forward for sm_90a
// (compare.formats "mxfp8" and "nvfp4"); output bf16, LSE of the scaled scores.
//
// The exact scheme (docs/perf-notes-hopper.md, "MXFP8 / NVFP4", says why it beats one k32
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
#include <cudaTypedefs.h>

#include "fwd_common.cuh"
#include "hopper_mx.cuh"

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

// OVERLAP = 1: S(t) is issued with P(t-1) V(t-1) and softmax(t) runs while P V is on the tensor
// cores (the fp8 kernel's schedule). Off by default until a GPU run has checked and timed it.
#ifndef FA_HOPPER_MX_OVERLAP
#define FA_HOPPER_MX_OVERLAP 0
#endif

namespace fa {

constexpr int FA_MX_FORMAT_MXFP8 = 0;
constexpr int FA_MX_FORMAT_NVFP4 = 1;

template <int FORMAT_, int DIM_>
struct MxTiles {
  static constexpr int FORMAT = FORMAT_;
  using T = std::conditional_t<FORMAT == FA_MX_FORMAT_MXFP8, __nv_bfloat16, __half>;
  static constexpr int DIM = DIM_;
  static constexpr int CONSUMERS = 2;
  static constexpr int THREADS = 128 * (1 + CONSUMERS);
  static constexpr int CONSUMER_THREADS = 128 * CONSUMERS;
  static constexpr int BLOCK_Q = 64 * CONSUMERS;
  static constexpr int BLOCK_KV = 128;
  static constexpr bool OVERLAP = FA_HOPPER_MX_OVERLAP;
  static constexpr bool RETIRE_AT_TOP = false;  // OVERLAP: hopper_fp8::overlapped_tiles' loop before session 6
  static constexpr bool UNMASKED_LOOP = false;   // every step checks its tile for a mask
  // d128: Q 32 KB + 2 x (K 32 KB + V^T 32 KB) = 160 KB, as fwd_hopper.cu; d64: 3 stages. The
  // overlap holds two stages per consumer (K of t, V^T of t - 1): 3 at d128 (224 KB).
  static constexpr int STAGES = DIM == 64 || OVERLAP ? 3 : 2;
  static constexpr int Q_PANEL_BYTES = BLOCK_Q * 128;  // 64 columns of 2 bytes per row
  static constexpr int K_PANEL_BYTES = BLOCK_KV * 128;
  static constexpr int V_PANEL_BYTES = DIM * 128;      // 64 keys of DIM V^T rows
  static constexpr int Q_BYTES = DIM / 64 * Q_PANEL_BYTES;
  static constexpr int K_BYTES = DIM / 64 * K_PANEL_BYTES;
  static constexpr int V_BYTES = BLOCK_KV / 64 * V_PANEL_BYTES;
  static constexpr int STAGE_BYTES = K_BYTES + V_BYTES;
  static constexpr int K_OFFSET = Q_BYTES;
  static constexpr int BARRIER_OFFSET = Q_BYTES + STAGES * STAGE_BYTES;
  static constexpr bool PERSISTENT = false;  // one CTA per item: hopper_fp8::Barriers without q_empty
  static constexpr bool DYNAMIC = false;     // ... and without the item hand-over
  static constexpr int BARRIERS = 1 + 3 * STAGES;
  static constexpr int SMEM_BYTES = BARRIER_OFFSET + 8 * BARRIERS + 1024;
  static_assert(SMEM_BYTES <= 227 * 1024, "more shared memory than one CTA may use on sm_90");
  static constexpr int PRODUCER_REGS = 24;
  static constexpr int CONSUMER_REGS = 240;
  static constexpr int S_REGS = BLOCK_KV / 2;
  static constexpr int O_REGS = DIM / 2;
};

#if FA_SM90A
namespace hopper_mx {

template <typename C>
__device__ void produce(const CtaWork& w, uint32_t smem, hopper_fp8::Barriers<C::STAGES> bars,
                        const CUtensorMap* map_q, const CUtensorMap* map_k,
                        const CUtensorMap* map_vt) {
  if (w.n_kv_tiles == 0) return;
  sm90::mbar_arrive_expect_tx(bars.q_full(), C::Q_BYTES);
#pragma unroll
  for (int panel = 0; panel < C::DIM / 64; panel++)
    sm90::tma_load_4d(smem + panel * C::Q_PANEL_BYTES, map_q, bars.q_full(), panel * 128,
                      w.q_start, w.head_q, w.batch);
  for (int tile = 0; tile < w.n_kv_tiles; tile++) {
    const int s = tile % C::STAGES;
    sm90::mbar_wait(bars.kv_empty(s), ((tile / C::STAGES) & 1) ^ 1);
    const uint32_t k_smem = smem + C::K_OFFSET + s * C::STAGE_BYTES;
    const int kv_start = tile * C::BLOCK_KV;
    sm90::mbar_arrive_expect_tx(bars.k_full(s), C::K_BYTES);
#pragma unroll
    for (int panel = 0; panel < C::DIM / 64; panel++)
      sm90::tma_load_4d(k_smem + panel * C::K_PANEL_BYTES, map_k, bars.k_full(s), panel * 128,
                        kv_start, w.head_kv, w.batch);
    sm90::mbar_arrive_expect_tx(bars.v_full(s), C::V_BYTES);
#pragma unroll
    for (int panel = 0; panel < C::BLOCK_KV / 64; panel++)  // V^T: inner coordinate in bytes
      sm90::tma_load_4d(k_smem + C::K_BYTES + panel * C::V_PANEL_BYTES, map_vt, bars.v_full(s),
                        (kv_start + panel * 64) * 2, 0, w.head_kv, w.batch);
  }
}

// One online-softmax step on a raw S tile: returns the O rescale factors in alpha, writes the
// quantized P as 16-bit A fragments (pack_p, from the p left in S). row_max is kept as the rounded
// scaled score (log2 units).
template <typename C>
__device__ __forceinline__ void softmax_step(float (&S)[C::S_REGS], float (&row_max)[2],
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

template <typename C>
__device__ void consume(const MxFwdParams& mp, const CtaWork& w, uint32_t smem,
                        hopper_fp8::Barriers<C::STAGES> bars, int consumer) {
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
    softmax_step<C>(S, row_max, row_sum, alpha, scale_log2);
  };
  auto parity = [](int tile) { return uint32_t(tile / C::STAGES) & 1; };

  if (w.n_kv_tiles > 0) sm90::mbar_wait(bars.q_full(), 0);
  if constexpr (!C::OVERLAP) {
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
  } else if (w.n_kv_tiles > 0) {
    // Tile 0, then the same overlapped loop as fwd_hopper_fp8.cu (hopper_fp8::overlapped_tiles).
    float S[C::S_REGS];
    uint32_t P[C::BLOCK_KV / 16][4];
    sm90::mbar_wait(bars.k_full(0), 0);
    issue_qk(S, 0);
    sm90::wgmma_wait<0>();
    sm90::fence_regs(S);
    masked_softmax(S, 0);  // O is 0: its rescale changes nothing
    const auto no_turns = [] {};
    const auto softmax = [&](float (&scores)[C::S_REGS], int tile, auto) { masked_softmax(scores, tile); };
    hopper_fp8::overlapped_tiles<C>(w.n_kv_tiles, w.n_kv_tiles, 0, bars, S, O, alpha, P, issue_qk, issue_pv, softmax,
                                    pack_p<C>, no_turns, no_turns);
  }
  // LSE = (m + log2 l) ln 2: m is in log2 units, as triton's finish_rows.
  store_wgmma_rows<__nv_bfloat16>(p, w, row0, O, row_max, row_sum, nvfp4 ? *mp.v_tensor_scale : 1.f,
                                  [](float m, float l) { return (m + log2f(l)) * 0.6931471805599453f; });
}

}  // namespace hopper_mx
#endif  // FA_SM90A

template <int FORMAT, int DIM>
__global__ void __launch_bounds__(MxTiles<FORMAT, DIM>::THREADS, 1)
    fwd_hopper_mx_kernel(const MxFwdParams p, const __grid_constant__ CUtensorMap map_q,
                         const __grid_constant__ CUtensorMap map_k,
                         const __grid_constant__ CUtensorMap map_vt) {
#if FA_SM90A
  using C = MxTiles<FORMAT, DIM>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t smem = (smem_u32(smem_raw) + 1023) & ~1023u;
  const hopper_fp8::Barriers<C::STAGES> bars{smem + C::BARRIER_OFFSET};
  const CtaWork w = cta_work<C::BLOCK_Q, C::BLOCK_KV>(p.base);

  hopper_fp8::run_roles<C>(
      bars, [&] { hopper_mx::produce<C>(w, smem, bars, &map_q, &map_k, &map_vt); },
      [&](int consumer) { hopper_mx::consume<C>(p, w, smem, bars, consumer); });
#endif
}

// --- host ------------------------------------------------------------------------------------

namespace hopper_fp8_host {
int encode_map(CUtensorMap* map, const void* ptr, const int64_t (&stride)[3], int batch,
               int heads, int rows, int inner, int box_inner, int box_rows, char* err,
               int err_len);  // fwd_hopper_fp8.cu: a UINT8 map, strides in bytes
}  // namespace hopper_fp8_host

namespace hopper_mx_host {

// The 16-bit tensors as byte maps: element strides x 2, rows of `inner` elements.
int encode_map16(CUtensorMap* map, const void* ptr, const int64_t (&stride)[3], int batch,
                 int heads, int rows, int inner, int box_rows, char* err, int err_len) {
  const int64_t bytes[3] = {stride[0] * 2, stride[1] * 2, stride[2] * 2};
  return hopper_fp8_host::encode_map(map, ptr, bytes, batch, heads, rows, inner * 2, 128,
                                     box_rows, err, err_len);
}

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

}  // namespace hopper_mx_host
}  // namespace fa

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
