// v1 (basic): the FlashAttention-2 forward in its plainest mma.sync form.
// Q tile: global -> shared (cp.async) -> registers (ldmatrix.x4), once per CTA.
// Per KV tile: K and V global -> shared with 16-byte cp.async, wait for both, then
// S = Q K^T (ldmatrix.x2 for K), online softmax in registers, O += P V (ldmatrix.x2.trans for V).
// Shared memory is row-major and unswizzled, and there is one K/V buffer, so loads and
// math never overlap: this is the baseline the later versions improve on.
#include "ladder.cuh"

namespace fa {

template <typename T, int DIM>
__global__ void __launch_bounds__(LadderTiles<DIM>::THREADS, 1) fwd_v1_kernel(const FwdParams p) {
  using C = LadderTiles<DIM>;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t Q_smem = smem_u32(smem);
  const uint32_t K_smem = Q_smem + C::Q_BYTES;
  const uint32_t V_smem = K_smem + C::KV_BYTES;

  const CtaWork w = cta_work<C::BLOCK_Q, C::BLOCK_KV>(p);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warp_row0 = w.q_start + warp * C::WARP_Q;
  const T* Q = head_base<T>(p.q, p.q_stride, w.batch, w.head_q) + w.q_start * p.q_stride[2];
  const T* K = head_base<T>(p.k, p.k_stride, w.batch, w.head_kv);
  const T* V = head_base<T>(p.v, p.v_stride, w.batch, w.head_kv);

  load_tile_async<C::BLOCK_Q, DIM, C::THREADS, false>(Q_smem, Q, p.q_stride[2],
                                                      p.seqlen_q - w.q_start);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t Q_rmem[C::M_TILES][C::D_STEPS][4];
  load_q_fragments<C>(Q_rmem, Q_smem, warp);

  float O_rmem[C::M_TILES][C::D_TILES][4] = {};
  float row_max[C::M_TILES][2], row_sum[C::M_TILES][2];
#pragma unroll
  for (int mt = 0; mt < C::M_TILES; mt++)
#pragma unroll
    for (int r = 0; r < 2; r++) row_max[mt][r] = -INFINITY, row_sum[mt][r] = 0.f;
  const float scale_log2 = p.scale * LOG2E;

  for (int tile = 0; tile < w.n_kv_tiles; tile++) {
    const int kv_start = tile * C::BLOCK_KV;
    load_tile_async<C::BLOCK_KV, DIM, C::THREADS, false>(K_smem, K + kv_start * p.k_stride[2],
                                                         p.k_stride[2], p.seqlen_k - kv_start);
    load_tile_async<C::BLOCK_KV, DIM, C::THREADS, false>(V_smem, V + kv_start * p.v_stride[2],
                                                         p.v_stride[2], p.seqlen_k - kv_start);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    // S = Q K^T. K rows are keys, contiguous along head_dim: that is already the column-major
    // B operand, so plain ldmatrix; lanes 0-7 address d 0-7 of the k-step, lanes 8-15 d 8-15.
    float S_rmem[C::M_TILES][C::KV_TILES][4] = {};
#pragma unroll
    for (int nt = 0; nt < C::KV_TILES; nt++)
#pragma unroll
      for (int kk = 0; kk < C::D_STEPS; kk++) {
        uint32_t K_frag[2];
        const int row = nt * 8 + lane % 8;
        ldmatrix_x2(K_frag, K_smem + tile_offset<C::ROW_CHUNKS, false>(row, kk * 2 + lane / 8 % 2));
#pragma unroll
        for (int mt = 0; mt < C::M_TILES; mt++)
          mma_m16n8k16<T>(S_rmem[mt][nt], Q_rmem[mt][kk], K_frag[0], K_frag[1]);
      }
    if (tile_needs_mask<C::BLOCK_KV>(p, w, kv_start)) mask_scores(S_rmem, p, w, warp_row0, kv_start);

    uint32_t P_rmem[C::M_TILES][C::KV_STEPS][4];
    online_softmax<T>(S_rmem, row_max, row_sum, O_rmem, P_rmem, scale_log2);

    // O += P V. V rows are keys (the reduction axis), so .trans yields the B fragment;
    // lanes 0-7 address keys 0-7 of the k-step, lanes 8-15 keys 8-15.
#pragma unroll
    for (int kk = 0; kk < C::KV_STEPS; kk++)
#pragma unroll
      for (int nd = 0; nd < C::D_TILES; nd++) {
        uint32_t V_frag[2];
        const int row = kk * 16 + lane % 16;
        ldmatrix_x2_trans(V_frag, V_smem + tile_offset<C::ROW_CHUNKS, false>(row, nd));
#pragma unroll
        for (int mt = 0; mt < C::M_TILES; mt++)
          mma_m16n8k16<T>(O_rmem[mt][nd], P_rmem[mt][kk], V_frag[0], V_frag[1]);
      }
    __syncthreads();  // the next tile's loads overwrite K_smem / V_smem
  }
  store_output<T>(p, w, warp_row0, O_rmem, row_max, row_sum);
}

}  // namespace fa

extern "C" int cuda_fa_fwd_v1(const FwdParams* p, cudaStream_t stream, char* err, int err_len) {
  return fa::dispatch(*p, err, err_len, [&]<typename T, int DIM>() {
    using C = fa::LadderTiles<DIM>;
    return fa::launch_fwd(fa::fwd_v1_kernel<T, DIM>, C::BLOCK_Q, C::THREADS,
                          C::Q_BYTES + 2 * C::KV_BYTES, *p, stream, err, err_len);
  });
}
