// Quantizers producing the containers of compare/formats.py (fp8, MXFP8, NVFP4) on the GPU.
// - One thread owns one block of the *stored* last dim (32 for MXFP8, 16 for NVFP4, a 16-column
//   work unit for fp8), so every scale is computed by the thread that writes its elements.
// - Q/K (blocks along D): consecutive threads take consecutive blocks of a row, so each thread
//   reads its own 16-byte vectors and a warp reads one contiguous span.
// - V stored transposed (B, H, D, S), blocks along S: consecutive threads take consecutive d of
//   the same S block, so each scalar load of a warp is one contiguous span of the input row and
//   no shared-memory transpose is needed; each thread then writes its block's bytes as vectors.
// - fp8 and NVFP4 need an amax over finite values first (per head, or per tensor): a separate
//   pass with one atomicMax per CTA on the float bits (monotonic for non-negative floats).
// quantize_unit() is __host__ __device__: cuda_fa_quantize_host runs it on the CPU for the tests.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <type_traits>

#include "formats.cuh"

extern "C" {
// Mirrored by cuda_impl/quant.py (ctypes); strides are in elements of the input.
struct QuantParams {
  const void* x;          // logical (B, H, S, D), any strides
  int64_t x_stride[4];
  int32_t batch, heads, seqlen, head_dim;
  int32_t dtype;          // QUANT_DTYPE_*
  int32_t format;         // QUANT_FMT_*
  int32_t transpose;      // store (B, H, D, S): blocks run along S (V)
  int32_t per_tensor;     // fp8 granularity "tensor": one amax for every head
  void* data;             // (B, H, rows, data_cols) bytes, contiguous
  void* scale;            // fp8: float (B, H); MXFP8/NVFP4: (B, H, rows, blocks) bytes
  float* tensor_scale;    // NVFP4: one float
  uint32_t* amax;         // workspace: float bits of the amax, B*H entries or 1
};
}

namespace fa::quant {

constexpr int QUANT_DTYPE_BF16 = 0, QUANT_DTYPE_FP16 = 1, QUANT_DTYPE_FP32 = 2, QUANT_DTYPE_FP64 = 3;
constexpr int FMT_FP8 = 0, FMT_MXFP8 = 1, FMT_NVFP4 = 2;
constexpr int THREADS = 256;
constexpr int AMAX_CHUNK = THREADS * 32;  // elements per CTA of the amax pass

template <int FMT>
constexpr int BLOCK = FMT == FMT_MXFP8 ? fmt::MX_BLOCK : fmt::NVFP4_BLOCK;  // fp8: 16-wide units

// The stored view of one head: rows x cols, blocks along cols.
struct Geometry {
  int rows, cols, blocks;        // blocks per row (padded up)
  int64_t row_stride, col_stride;
  int data_cols;                 // bytes per stored row

  __host__ __device__ Geometry(const QuantParams& p, int block) {
    rows = p.transpose ? p.head_dim : p.seqlen;
    cols = p.transpose ? p.seqlen : p.head_dim;
    row_stride = p.transpose ? p.x_stride[3] : p.x_stride[2];
    col_stride = p.transpose ? p.x_stride[2] : p.x_stride[3];
    blocks = (cols + block - 1) / block;
    data_cols = p.format == FMT_FP8 ? cols : p.format == FMT_MXFP8 ? blocks * block : blocks * block / 2;
  }
  __host__ __device__ int64_t units() const { return int64_t(rows) * blocks; }
};

template <typename T>
__host__ __device__ __forceinline__ float to_float(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(x);
  else if constexpr (std::is_same_v<T, __half>) return __half2float(x);
  else if constexpr (std::is_same_v<T, double>) return static_cast<float>(x);  // RNE, like .float()
  else return x;
}

__host__ __device__ __forceinline__ bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// N values of one stored row from column c0 on; columns past `cols` are the zero padding.
template <typename T, int N>
__host__ __device__ __forceinline__ void load_block(float (&v)[N], const T* row, int64_t col_stride,
                                                    int c0, int cols) {
#ifdef __CUDA_ARCH__
  if (col_stride == 1 && c0 + N <= cols && aligned16(row + c0)) {
    constexpr int PER_VEC = 16 / sizeof(T);
#pragma unroll
    for (int i = 0; i < N; i += PER_VEC) {
      const uint4 raw = *reinterpret_cast<const uint4*>(row + c0 + i);
      T e[PER_VEC];
      memcpy(e, &raw, 16);
#pragma unroll
      for (int j = 0; j < PER_VEC; j++) v[i + j] = to_float(e[j]);
    }
    return;
  }
#endif
#pragma unroll
  for (int i = 0; i < N; i++) {
    const int c = c0 + i;
    v[i] = c < cols ? to_float(row[c * col_stride]) : 0.f;
  }
}

// The first `valid` of N bytes; 16- or 8-byte stores when whole and aligned.
template <int N>
__host__ __device__ __forceinline__ void store_bytes(uint8_t* dst, const uint8_t (&src)[N], int valid) {
#ifdef __CUDA_ARCH__
  if (valid >= N && reinterpret_cast<uintptr_t>(dst) % (N >= 16 ? 16 : N) == 0) {
    if constexpr (N % 16 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 16) {
        uint4 w;
        memcpy(&w, src + i, 16);
        *reinterpret_cast<uint4*>(dst + i) = w;
      }
      return;
    } else if constexpr (N == 8) {
      uint2 w;
      memcpy(&w, src, 8);
      *reinterpret_cast<uint2*>(dst) = w;
      return;
    }
  }
#endif
#pragma unroll
  for (int i = 0; i < N; i++)  // constant indices keep src in registers
    if (i < valid) dst[i] = src[i];
}

// Quantize work unit `u` of head (b, h): one scale block (MXFP8/NVFP4) or 16 columns (fp8).
template <typename T, int FMT>
__host__ __device__ __forceinline__ void quantize_unit(const QuantParams& p, const Geometry& g, int b,
                                                       int h, int64_t u) {
  constexpr int N = BLOCK<FMT>;
  // Q/K: consecutive units run along a row; V^T: down the rows (see the file comment).
  const int r = p.transpose ? static_cast<int>(u % g.rows) : static_cast<int>(u / g.blocks);
  const int cb = p.transpose ? static_cast<int>(u / g.rows) : static_cast<int>(u % g.blocks);
  const int64_t bh = int64_t(b) * p.heads + h;
  const T* row = static_cast<const T*>(p.x) + b * p.x_stride[0] + h * p.x_stride[1] + r * g.row_stride;
  float v[N];
  load_block<T, N>(v, row, g.col_stride, cb * N, g.cols);

  const int64_t stored_row = bh * g.rows + r;
  uint8_t* data = static_cast<uint8_t*>(p.data) + stored_row * g.data_cols;
  uint8_t* block_scale = static_cast<uint8_t*>(p.scale) + stored_row * g.blocks + cb;
  if constexpr (FMT == FMT_FP8) {
    const float descale = fmt::fp8_descale(fmt::bits_float(p.amax[p.per_tensor ? 0 : bh]));
    uint8_t out[N];
    fmt::fp8_block(v, descale, out);
    store_bytes(data + cb * N, out, g.cols - cb * N);
    if (u == 0) static_cast<float*>(p.scale)[bh] = descale;
  } else if constexpr (FMT == FMT_MXFP8) {
    uint8_t out[N];
    *block_scale = fmt::mxfp8_block(v, out);
    store_bytes(data + cb * N, out, N);
  } else {
    const float tensor_scale = fmt::nvfp4_tensor_scale(fmt::bits_float(p.amax[0]));
    uint8_t out[N / 2];
    *block_scale = fmt::nvfp4_block(v, tensor_scale, out);
    store_bytes(data + cb * (N / 2), out, N / 2);
    if (u == 0 && bh == 0) *p.tensor_scale = tensor_scale;
  }
}

// Grid (units / THREADS, heads, batch).
template <typename T, int FMT>
__global__ void __launch_bounds__(THREADS) quantize_kernel(const QuantParams p) {
  const Geometry g(p, BLOCK<FMT>);
  const int64_t u = int64_t(blockIdx.x) * THREADS + threadIdx.x;
  if (u < g.units()) quantize_unit<T, FMT>(p, g, blockIdx.z, blockIdx.y, u);
}

// Max of |x| over the finite values of AMAX_CHUNK elements of head (blockIdx.z, blockIdx.y),
// folded into amax[per_tensor ? 0 : b * H + h] with one atomicMax on the float bits.
template <typename T>
__global__ void __launch_bounds__(THREADS) amax_kernel(const QuantParams p) {
  const int b = blockIdx.z, h = blockIdx.y;
  const T* x = static_cast<const T*>(p.x) + b * p.x_stride[0] + h * p.x_stride[1];
  const int64_t n = int64_t(p.seqlen) * p.head_dim;
  const int64_t start = int64_t(blockIdx.x) * AMAX_CHUNK;
  const bool dense = p.x_stride[3] == 1 && p.x_stride[2] == p.head_dim && aligned16(x);
  float m = 0.f;
  auto fold = [&](float value) { m = fmt::finite(value) ? fmaxf(m, fabsf(value)) : m; };
  if (dense && start + AMAX_CHUNK <= n) {
    constexpr int PER_VEC = 16 / sizeof(T);
#pragma unroll 4
    for (int i = threadIdx.x * PER_VEC; i < AMAX_CHUNK; i += THREADS * PER_VEC) {
      const uint4 raw = *reinterpret_cast<const uint4*>(x + start + i);
      T e[PER_VEC];
      memcpy(e, &raw, 16);
#pragma unroll
      for (int j = 0; j < PER_VEC; j++) fold(to_float(e[j]));
    }
  } else {
    const int64_t end = min(n, start + AMAX_CHUNK);
    for (int64_t i = start + threadIdx.x; i < end; i += THREADS)
      fold(to_float(x[(i / p.head_dim) * p.x_stride[2] + (i % p.head_dim) * p.x_stride[3]]));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, offset));
  __shared__ float warp_max[THREADS / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < THREADS / 32; w++) m = fmaxf(m, warp_max[w]);
    atomicMax(p.amax + (p.per_tensor ? 0 : int64_t(b) * p.heads + h), fmt::float_bits(m));
  }
}

inline int report(char* err, int err_len, const char* what, const char* detail) {
  if (err != nullptr && err_len > 0) snprintf(err, err_len, "%s: %s", what, detail);
  return 1;
}

inline int check_params(const QuantParams& p, char* err, int err_len) {
  if (p.batch < 1 || p.heads < 1 || p.seqlen < 1 || p.head_dim < 1)
    return report(err, err_len, "shape", "batch, heads, seqlen and head_dim must be >= 1");
  if (p.batch > 65535 || p.heads > 65535)
    return report(err, err_len, "grid", "batch and heads must be <= 65535");
  if (p.format < FMT_FP8 || p.format > FMT_NVFP4)
    return report(err, err_len, "format", "supported: 0 fp8, 1 mxfp8, 2 nvfp4");
  if (p.x == nullptr || p.data == nullptr || p.scale == nullptr || p.amax == nullptr ||
      (p.format == FMT_NVFP4 && p.tensor_scale == nullptr))
    return report(err, err_len, "pointers", "x, data, scale, amax (and tensor_scale for nvfp4) are required");
  return 0;
}

// Calls fn.template operator()<T, FMT>() for the runtime dtype and format.
template <typename Fn>
int dispatch(const QuantParams& p, char* err, int err_len, Fn&& fn) {
  if (int rc = check_params(p, err, err_len)) return rc;
  auto by_format = [&]<typename T>() {
    switch (p.format) {
      case FMT_FP8: return fn.template operator()<T, FMT_FP8>();
      case FMT_MXFP8: return fn.template operator()<T, FMT_MXFP8>();
      default: return fn.template operator()<T, FMT_NVFP4>();
    }
  };
  switch (p.dtype) {
    case QUANT_DTYPE_BF16: return by_format.template operator()<__nv_bfloat16>();
    case QUANT_DTYPE_FP16: return by_format.template operator()<__half>();
    case QUANT_DTYPE_FP32: return by_format.template operator()<float>();
    case QUANT_DTYPE_FP64: return by_format.template operator()<double>();
    default: return report(err, err_len, "dtype", "supported: bfloat16, float16, float32, float64");
  }
}

// fp8 per head keeps one amax per head; NVFP4 and fp8 per tensor one for the whole tensor.
inline int amax_entries(const QuantParams& p) {
  return p.format == FMT_FP8 && !p.per_tensor ? p.batch * p.heads : 1;
}

}  // namespace fa::quant

extern "C" int cuda_fa_quant_params_size() { return static_cast<int>(sizeof(QuantParams)); }

// Enqueue the quantization of p->x on `stream`: [amax pass,] quantize pass. 0 or an error code.
extern "C" int cuda_fa_quantize(const QuantParams* p, cudaStream_t stream, char* err, int err_len) {
  using namespace fa::quant;
  return dispatch(*p, err, err_len, [&]<typename T, int FMT>() {
    cudaGetLastError();  // drop stale errors from earlier calls so they are not blamed on us
    const Geometry g(*p, BLOCK<FMT>);
    if (FMT != FMT_MXFP8) {
      QuantParams amax_params = *p;
      amax_params.per_tensor = FMT == FMT_NVFP4 || p->per_tensor;
      cudaError_t e = cudaMemsetAsync(p->amax, 0, amax_entries(amax_params) * sizeof(uint32_t), stream);
      if (e != cudaSuccess) return report(err, err_len, "cudaMemsetAsync(amax)", cudaGetErrorString(e));
      const int64_t chunks = (int64_t(p->seqlen) * p->head_dim + AMAX_CHUNK - 1) / AMAX_CHUNK;
      amax_kernel<T><<<dim3(chunks, p->heads, p->batch), THREADS, 0, stream>>>(amax_params);
      if ((e = cudaGetLastError()) != cudaSuccess)
        return report(err, err_len, "amax kernel launch", cudaGetErrorString(e));
    }
    const int64_t ctas = (g.units() + THREADS - 1) / THREADS;
    quantize_kernel<T, FMT><<<dim3(ctas, p->heads, p->batch), THREADS, 0, stream>>>(*p);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return report(err, err_len, "quantize kernel launch", cudaGetErrorString(e));
    return 0;
  });
}

// The same computation on host memory, serially: the CPU tests compare it with compare.formats.
extern "C" int cuda_fa_quantize_host(const QuantParams* p, char* err, int err_len) {
  using namespace fa::quant;
  return dispatch(*p, err, err_len, [&]<typename T, int FMT>() {
    const Geometry g(*p, BLOCK<FMT>);
    const bool per_tensor = FMT == FMT_NVFP4 || p->per_tensor;
    for (int i = 0; i < amax_entries(*p); i++) p->amax[i] = 0;
    for (int b = 0; b < p->batch && FMT != FMT_MXFP8; b++)
      for (int h = 0; h < p->heads; h++)
        for (int s = 0; s < p->seqlen; s++)
          for (int d = 0; d < p->head_dim; d++) {
            const T* x = static_cast<const T*>(p->x);
            const float value = to_float(x[b * p->x_stride[0] + h * p->x_stride[1] +
                                           s * p->x_stride[2] + d * p->x_stride[3]]);
            uint32_t& m = p->amax[per_tensor ? 0 : b * p->heads + h];
            if (fa::fmt::finite(value)) m = std::max(m, fa::fmt::float_bits(fabsf(value)));
          }
    for (int b = 0; b < p->batch; b++)
      for (int h = 0; h < p->heads; h++)
        for (int64_t u = 0; u < g.units(); u++) quantize_unit<T, FMT>(*p, g, b, h, u);
    return 0;
  });
}
