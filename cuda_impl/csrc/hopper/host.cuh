// Host side shared by the Hopper families: TMA tensor maps (cuTensorMapEncodeTiled, fetched from the driver at
// run time, so the library does not link libcuda) for 16-bit, e4m3 and byte-addressed 16-bit tiles, and the
// launch of a cluster kernel.
#pragma once

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <atomic>
#include <cstdio>

#include "fwd_common.cuh"

namespace fa::hopper_host {

inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const auto fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                                           cudaEnableDefault, &found);
    return e == cudaSuccess && found == cudaDriverEntryPointSuccess
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr)
               : nullptr;
  }();
  return fn;
}

// One tiled TMA map of `rank` dimensions (sizes and box innermost first, byte strides of dimensions
// 1..), elementwise boxes, no interleave, zeros out of range; a failure becomes a message. The fp8
// and block-scaled kernels build their byte maps on it too (below).
inline int encode_tiled_map(CUtensorMap* map, CUtensorMapDataType dtype, int rank, const void* ptr,
                     const cuuint64_t* sizes, const cuuint64_t* bytes, const cuuint32_t* box,
                     CUtensorMapSwizzle swizzle, char* err, int err_len) {
  const auto encode = encode_tiled();
  if (encode == nullptr)
    return report(err, err_len, "driver", "cuTensorMapEncodeTiled not available (driver < 12.0?)");
  const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
  const CUresult r = encode(map, dtype, rank, const_cast<void*>(ptr), sizes, bytes, box, unit,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    char detail[112];
    snprintf(detail, sizeof(detail), "cuTensorMapEncodeTiled failed (CUresult %d): strides must "
             "be positive multiples of 16 bytes", int(r));
    return report(err, err_len, "tma", detail);
  }
  return 0;
}

// 4-D map (head_dim, seq, heads, batch) over a strided (B, H, S, D) tensor; one box is swizzle / 2
// columns (the swizzle span: 128, 64 or 32 bytes) x box_rows rows of one (batch, head). Rows past
// `seqlen` come back as zeros. Strides of size-1 dimensions are never stepped over, so they are
// replaced by a valid multiple of 16 bytes (a broadcast stride of 0 would be refused).
inline int encode_map(CUtensorMap* map, const void* ptr, const int64_t (&stride)[3], int batch,
               int heads, int seqlen, int dim, int box_rows, int dtype, char* err, int err_len, int swizzle = 128) {
  const cuuint64_t sizes[4] = {cuuint64_t(dim), cuuint64_t(seqlen), cuuint64_t(heads), cuuint64_t(batch)};
  cuuint64_t bytes[3];
  bytes[0] = seqlen > 1 ? stride[2] * 2 : dim * 2;
  bytes[1] = heads > 1 ? stride[1] * 2 : bytes[0] * seqlen;
  bytes[2] = batch > 1 ? stride[0] * 2 : bytes[1] * heads;
  const cuuint32_t box[4] = {cuuint32_t(swizzle / 2), cuuint32_t(box_rows), 1, 1};
  const CUtensorMapSwizzle mode = swizzle == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                  : swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                  : CU_TENSOR_MAP_SWIZZLE_32B;
  return encode_tiled_map(
      map, dtype == FA_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, ptr,
      sizes, bytes, box, mode, err, err_len);
}

// The launch configuration of a cluster kernel (cluster x 1 x 1 CTAs; the grid set by the caller).
template <typename Kernel>
struct ClusterConfig {
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t config{};
  ClusterConfig(int cluster, int threads, int smem_bytes, cudaStream_t stream) {
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    config.gridDim = dim3(cluster);
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smem_bytes;
    config.stream = stream;
    config.attrs = &attr;
    config.numAttrs = 1;
  }
};

// Clusters of `cluster` CTAs that fit on the current device at once (cudaOccupancyMaxActiveClusters: not every
// SM can take part in a pair), cached per device for one kernel in `fit_on`: the query takes longer than a launch.
template <typename Kernel>
int cluster_fit(Kernel kernel, std::atomic<int> (&fit_on)[64], int cluster, int threads, int smem_bytes, int& fit,
                char* err, int err_len) {
  int device = 0;
  cudaGetDevice(&device);
  fit = device < 64 ? fit_on[device].load() : 0;
  if (fit > 0) return 0;
  if (int rc = prepare_launch(kernel, smem_bytes, err, err_len)) return rc;
  ClusterConfig<Kernel> c(cluster, threads, smem_bytes, nullptr);
  const cudaError_t e = cudaOccupancyMaxActiveClusters(&fit, kernel, &c.config);
  if (e != cudaSuccess) return report(err, err_len, "cudaOccupancyMaxActiveClusters", cudaGetErrorString(e));
  if (fit < 1) return report(err, err_len, "cluster", "no cluster of this kernel fits on the device");
  if (device < 64) fit_on[device] = fit;
  return 0;
}

}  // namespace fa::hopper_host

namespace fa::hopper_fp8_host {

// A byte map of `rank` dimensions whose innermost box row of `box[0]` bytes is also its swizzle
// span (64 or 128).
inline int encode_e4m3(CUtensorMap* map, const void* ptr, int rank, const cuuint64_t* sizes,
                const cuuint64_t* bytes, const cuuint32_t* box, char* err, int err_len) {
  return hopper_host::encode_tiled_map(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, rank, ptr, sizes, bytes, box,
                                       box[0] == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                                       err, err_len);
}

// 4-D e4m3 map (inner, rows, heads, batch) with byte strides (rows, heads, batch); one box is
// `box_inner` bytes (= the swizzle span) x box_rows rows. Out-of-range elements read as zeros.
// Strides of size-1 dimensions are never stepped over and are replaced by valid ones.
inline int encode_map(CUtensorMap* map, const void* ptr, const int64_t (&stride)[3], int batch,
               int heads, int rows, int inner, int box_inner, int box_rows, char* err,
               int err_len) {
  const cuuint64_t sizes[4] = {cuuint64_t(inner), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(batch)};
  cuuint64_t bytes[3];
  bytes[0] = rows > 1 ? stride[2] : (inner + 15) / 16 * 16;
  bytes[1] = heads > 1 ? stride[1] : bytes[0] * rows;
  bytes[2] = batch > 1 ? stride[0] : bytes[1] * heads;
  const cuuint32_t box[4] = {cuuint32_t(box_inner), cuuint32_t(box_rows), 1, 1};
  return encode_e4m3(map, ptr, 4, sizes, bytes, box, err, err_len);
}

// K's rows form one sequence r = (batch * heads_kv + head) * seqlen_k + key of stride k_stride[2]
// (size-1 axes impose nothing), cut into whole 16-key blocks: what the permuted map needs. The
// kernel computes r in 32 bits (a TMA coordinate is 32-bit anyway).
inline bool k_rows_flat(const FwdParams& p) {
  const int64_t row = p.k_stride[2], head = p.k_stride[1], batch = p.k_stride[0];
  const int64_t rows = int64_t(p.batch) * p.heads_kv * p.seqlen_k;
  return rows < (int64_t(1) << 31) && p.seqlen_k % 16 == 0 &&
         (p.heads_kv == 1 || head == p.seqlen_k * row) &&
         (p.batch == 1 || batch == int64_t(p.heads_kv) * p.seqlen_k * row);
}

// Flat K tiles with their rows permuted (hopper/mask.cuh wgmma_key<true>): within each 16-key
// block, shared row e + 2t + 8 g0 (e, g0 in 0..1, t in 0..3) takes key e + 2 g0 + 4t. Axes
// innermost first: head_dim bytes, e (stride 1 row), t (4 rows), g0 (2 rows), 16-key block of all
// rows; TMA writes a box in that order .
// Rows past the last read as zeros; rows past a head's seqlen_k are the next head's keys, masked
// like any key past seqlen_k.
template <typename C>
int encode_flat_k_map(CUtensorMap* map, const FwdParams& p, char* err, int err_len) {
  const cuuint64_t row = p.k_stride[2];
  const cuuint64_t blocks = cuuint64_t(p.batch) * p.heads_kv * p.seqlen_k / 16;
  const cuuint64_t sizes[5] = {C::DIM, 2, 4, 2, blocks};
  const cuuint64_t bytes[4] = {row, 4 * row, 2 * row,
                               16 * row};
  const cuuint32_t box[5] = {C::QK_SWIZZLE, 2, 4, 2, C::BLOCK_KV / 16};  // one panel
  return encode_e4m3(map, p.k, 5, sizes, bytes, box, err, err_len);
}

}  // namespace fa::hopper_fp8_host

namespace fa::hopper_mx_host {

// The 16-bit tensors as byte maps: element strides x 2, rows of `inner` elements.
inline int encode_map16(CUtensorMap* map, const void* ptr, const int64_t (&stride)[3], int batch,
                 int heads, int rows, int inner, int box_rows, char* err, int err_len) {
  const int64_t bytes[3] = {stride[0] * 2, stride[1] * 2, stride[2] * 2};
  return hopper_fp8_host::encode_map(map, ptr, bytes, batch, heads, rows, inner * 2, 128,
                                     box_rows, err, err_len);
}

}  // namespace fa::hopper_mx_host
