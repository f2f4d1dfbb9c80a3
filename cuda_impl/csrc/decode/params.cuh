// What every decode kernel (fwd_decode.cu: GQA heads of d64-256; fwd_mla_decode.cu: MLA's 576 / 512) shares: the
// parameter block the host fills (cuda_impl/_lib.py mirrors it), the page-index division, where a CTA's rows and
// keys are, the output / partial writes, the poison check of lengths and block tables, the programmatic dependent
// launch between a split kernel and its merge (decode/merge.cuh), and the host-side checks.
#pragma once

#include <cmath>

#include "../fwd_common.cuh"
#include "params_abi.h"

namespace fa {

constexpr int KV_E4M3 = 2;  // the same code as FA_DTYPE_E4M3 (hopper/config.cuh)
// n / d for 0 <= n < 2^31 as a multiply-high and a shift (d = the page size, fixed per launch): with
// s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d) + 1, n / d = (umulhi(n, m) + n) >> s.
struct FastDiv {
  uint32_t mul, shift;
  __host__ explicit FastDiv(uint32_t d) : mul(0), shift(0) {
    while ((uint64_t(1) << shift) < d) shift++;
    mul = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ int operator()(int n) const {
    return int((__umulhi(uint32_t(n), mul) + uint32_t(n)) >> shift);
  }
};

// Programmatic dependent launch (sm_90+): the split kernel lets the merge's CTAs launch as soon as all of its own
// are resident, and the merge waits here for the split kernel's writes, so that no launch gap sits between the two.
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_primary() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Where the CTA's rows and keys are, shared by the main kernel's phases.
struct DecodeWork {
  int batch, head_kv, split, group, rows, row0;
  int length;     // L, the sequence's keys
  int chunk0;     // first key of the chunk
  int kv_end;     // min(chunk end, L)
  int cta_end;    // kv_end, shortened under causal masking or a window to the last key the tile's last row sees
  int min_end;    // the end the tile's first (most restricted) row sees: key tiles past it need a mask
  int cta_start;  // first key the CTA reads: chunk0, or under a window the first key its first row sees, rounded
                  // down to the key tile
};

// First key of chunk `split`: split * split_keys, or under a left window bound counted from the first key any row
// of the sequence sees, max(0, length - seqlen_q - window_left) rounded down to the key tile `block_n`; the host
// then plans the chunks over the window's span (window_left + seqlen_q + block_n keys) instead of the capacity.
// Either way a chunk depends on its sequence alone.
__device__ __forceinline__ int decode_chunk0(const DecodeParams& p, int length, int split, int block_n) {
  const int start = p.window_left >= 0 ? max(0, length - p.seqlen_q - p.window_left) / block_n * block_n : 0;
  return start + split * p.split_keys;
}

// The CTA's place in the grid (x: its tile of `tile_rows` packed rows; y: split * heads_kv + KV head; z: the
// sequence), its sequence's length and its chunk of keys (the ends that masking shortens are the kernel's to set).
__device__ __forceinline__ DecodeWork decode_work(const DecodeParams& p, int tile_rows, int block_n) {
  DecodeWork w;
  w.batch = blockIdx.z;
  w.head_kv = blockIdx.y % p.heads_kv;
  w.split = blockIdx.y / p.heads_kv;
  w.group = p.heads_q / p.heads_kv;
  w.rows = p.seqlen_q * w.group;
  w.row0 = blockIdx.x * tile_rows;
  w.length = p.seqlens != nullptr ? p.seqlens[w.batch] : p.max_pages * p.page_size;
  w.chunk0 = decode_chunk0(p, w.length, w.split, block_n);
  w.kv_end = min(w.chunk0 + p.split_keys, w.length);
  return w;
}

// The pages of N key rows of a tile (rows pos0, pos0 + step, .. of the CTA's sequence), looked up a tile ahead of
// their copies, so that the block-table read is not waited for in front of them; entries at or past `end` are not
// read (the MLA kernels).
template <int N>
struct RowPages {
  // (the row in the page is kept too: recomputed where the row is copied, the MLA kernels lost what the look-ahead
  // gained, the table reads apparently sunk back to the copies)
  int page[N], in_page[N];
  __device__ __forceinline__ void lookup(const DecodeParams& p, const DecodeWork& w, const int* table,
                                         const FastDiv& page_div, int pos0, int step, int end) {
#pragma unroll
    for (int i = 0; i < N; i++) {
      const int pos = pos0 + i * step;
      const int index = table != nullptr ? page_div(pos) : 0;
      in_page[i] = pos - index * p.page_size;
      page[i] = table != nullptr && pos < end ? table[index] : w.batch;
    }
  }
  // Whether row i (key `pos`) is read: not past `end`, nor from an entry outside the cache (chunk_poisoned has
  // refused such a chunk: kept so that no path reads outside).
  __device__ __forceinline__ bool valid(const DecodeParams& p, int i, int pos, int end) const {
    return pos < end && page[i] >= 0 && page[i] < p.num_pages;
  }
  // Row i's element offset in a cache of these strides (page, row in the page).
  __device__ __forceinline__ int64_t offset(int i, const int64_t (&stride)[3]) const {
    return page[i] * stride[0] + in_page[i] * stride[1];
  }
};

// Output row r of the CTA's tile -> (query position, query head).
__device__ __forceinline__ int query_of(const DecodeWork& w, int r) { return r / w.group; }
__device__ __forceinline__ int head_of(const DecodeWork& w, int r) { return w.head_kv * w.group + r % w.group; }

// Writes of one finished row segment: `o` holds COLS fp32 values of (query row, columns col0..) already divided
// by l (DIM: out's row, V's head_dim); `lse` is that row's natural-log LSE. One split: out in T and lse; several: the fp32 partials.
template <typename T, int DIM, int COLS>
__device__ __forceinline__ void store_row(const DecodeParams& p, const DecodeWork& w, int r, int col0,
                                          const float (&o)[COLS], float lse, bool write_lse) {
  const int query = query_of(w, r), head = head_of(w, r);
  const int64_t lse_row = (int64_t(w.batch) * p.heads_q + head) * p.seqlen_q + query;
  if (p.num_splits == 1) {
    T* dst = static_cast<T*>(p.out) + ((int64_t(w.batch) * p.seqlen_q + query) * p.heads_q + head) * DIM + col0;
#pragma unroll
    for (int c = 0; c < COLS; c += 8) {
      const uint4 v = make_uint4(pack2<T>(o[c], o[c + 1]), pack2<T>(o[c + 2], o[c + 3]),
                                 pack2<T>(o[c + 4], o[c + 5]), pack2<T>(o[c + 6], o[c + 7]));
      *reinterpret_cast<uint4*>(dst + c) = v;
    }
    if (write_lse) p.lse[lse_row] = lse;
  } else {
    const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seqlen_q;
    const int64_t part_row = w.split * rows_total + lse_row;
    float* dst = p.workspace + part_row * DIM + col0;
#pragma unroll
    for (int c = 0; c < COLS; c += 4)
      *reinterpret_cast<float4*>(dst + c) = make_float4(o[c], o[c + 1], o[c + 2], o[c + 3]);
    if (write_lse) p.workspace[int64_t(p.num_splits) * rows_total * DIM + part_row] = lse;
  }
}

// The poison check every decode kernel runs before any K/V read: a length outside [0, capacity], or a block-table
// entry the chunk's keys use (all of them, also those past a tile's causal or window end, so that every row of the
// sequence agrees) outside [0, num_pages). Every thread of the CTA calls it; true for all of them if poisoned.
template <int THREADS>
__device__ __forceinline__ bool chunk_poisoned(const DecodeParams& p, const DecodeWork& w, const int* table,
                                               const FastDiv& page_div, int capacity) {
  bool bad = w.length < 0 || w.length > capacity;
  if (!bad && table != nullptr && w.kv_end > w.chunk0) {
    const int last = page_div(w.kv_end - 1);
    for (int pg = page_div(w.chunk0) + int(threadIdx.x); pg <= last; pg += THREADS) {
      const int page = table[pg];
      bad |= page < 0 || page >= p.num_pages;
    }
  }
  return __syncthreads_or(bad);
}

// A poisoned chunk's output: NaN rows (one split) or a NaN partial LSE, which the merge turns into NaN rows. Rows
// w.row0 .. w.row0 + tile_rows of the tile, DIM (V's head_dim) columns in eight segments per row.
template <typename T, int DIM, int THREADS>
__device__ void write_poison(const DecodeParams& p, const DecodeWork& w, int tile_rows) {
  constexpr int COLS = DIM / 8;
  const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seqlen_q;
  for (int i = threadIdx.x; i < tile_rows * 8; i += THREADS) {
    const int r = w.row0 + i / 8;
    if (r >= w.rows) continue;
    if (p.num_splits == 1) {
      float o[COLS];
#pragma unroll
      for (int c = 0; c < COLS; c++) o[c] = NAN;
      store_row<T, DIM, COLS>(p, w, r, (i % 8) * COLS, o, NAN, i % 8 == 0);
    } else if (i % 8 == 0) {
      const int64_t lse_row = (int64_t(w.batch) * p.heads_q + head_of(w, r)) * p.seqlen_q + query_of(w, r);
      p.workspace[int64_t(p.num_splits) * rows_total * DIM + w.split * rows_total + lse_row] = NAN;
    }
  }
}

// The checks every decode kernel shares; `block_n` its key tile, `tile_rows` its query rows per CTA.
inline int check_decode_params(const DecodeParams& p, int block_n, int tile_rows, char* err, int err_len) {
  if (p.batch < 1 || p.seqlen_q < 1 || p.heads_q < 1 || p.heads_kv < 1)
    return report(err, err_len, "shape", "batch, seqlen_q and heads must be >= 1");
  if (p.heads_q % p.heads_kv != 0) return report(err, err_len, "heads", "heads_q must be a multiple of heads_kv");
  if (p.page_size < 1 || p.max_pages < 0 || p.num_pages < 0 || int64_t(p.page_size) * p.max_pages > INT32_MAX)
    return report(err, err_len, "cache", "page_size >= 1 and a capacity below 2^31 keys");
  if (p.num_splits < 1 || p.split_keys < block_n || p.split_keys % block_n != 0)
    return report(err, err_len, "splits", "num_splits >= 1 and split_keys a positive multiple of the key tile");
  if (p.num_splits > 1 && p.workspace == nullptr)
    return report(err, err_len, "splits", "more than one split needs the workspace");
  if (int64_t(p.num_splits) * p.heads_kv > 65535 || p.batch > 65535)
    return report(err, err_len, "grid", "num_splits * heads_kv and batch must be <= 65535");
  if ((p.seqlen_q * int64_t(p.heads_q / p.heads_kv) + tile_rows - 1) / tile_rows > INT32_MAX)
    return report(err, err_len, "grid", "too many query rows");
  if (p.kv_dtype == KV_E4M3 && (p.k_descale == nullptr || p.v_descale == nullptr))
    return report(err, err_len, "descale", "e4m3 K/V need k_descale and v_descale");
  if (p.head_dim_v < 1 || p.head_dim_v > p.head_dim)
    return report(err, err_len, "head_dim_v", "must be in [1, head_dim]");
  if (!(p.scale > 0.f) || std::isinf(p.scale)) return report(err, err_len, "scale", "must be finite and > 0");
  return 0;
}

// A launch that may begin before the stream's previous kernel has finished (programmatic stream serialization,
// sm_90+; plain stream order below): the kernel waits itself (wait_for_primary) before it reads that kernel's output.
template <typename... Params, typename... Args>
int launch_dependent(void (*kernel)(Params...), dim3 grid, int threads, cudaStream_t stream, char* err, int err_len,
                     const Args&... args) {
  cudaGetLastError();
  int device = 0, major = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = major >= 9 ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&config, kernel, args...);
  return e == cudaSuccess ? 0 : report(err, err_len, "kernel launch", cudaGetErrorString(e));
}

}  // namespace fa
