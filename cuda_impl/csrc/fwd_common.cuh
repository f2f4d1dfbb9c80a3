// What every forward kernel shares, the ladder (ladder.cuh) and the Hopper families (hopper/): the C parameter
// block, a CTA's work (query rows, KV tiles) and the order of work items, which tiles need a mask, and the host
// side (error reports, launch, dispatch on dtype and head_dim).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common.cuh"

extern "C" {
// Mirrored field by field by cuda_impl/_lib.py (ctypes); strides are in elements.
struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;              // (batch, heads_q, seqlen_q) contiguous, or null
  int64_t q_stride[3];     // batch, head, seq; the head_dim stride is 1
  int64_t k_stride[3];
  int64_t v_stride[3];
  int64_t out_stride[3];
  int32_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  float scale;             // softmax scale, > 0
  int32_t causal;          // bottom-right aligned: query i sees keys j <= i + seqlen_k - seqlen_q
  int32_t dtype;           // FA_DTYPE_*
  int32_t head_dim_v;      // V's and O's head_dim where it differs from Q/K's (hopper: Q/K 192 with V 128), else 0
                           // (in the 4 bytes before the next pointer: the layout of the other fields is unchanged)
  int32_t* tile_counter;   // zeroed by the caller for each launch that takes one (hopper's dynamic causal
                           // scheduler, cuda_fa_hopper_dynamic_causal(head_dim)), else null and unused
  void* split_workspace;   // hopper's split last round: cuda_fa_hopper_split_workspace() bytes, the first
                           // `zeroed` of them zeroed by the caller for each launch; null when it asks for none
  // A local launch (local != 0; hopper only, other kernels refuse it on the Python side): query i sees keys
  // i + Sk - Sq - window_left .. i + Sk - Sq + window_right (-1: unbounded; causal: right 0), and scaled scores
  // s become softcap * tanh(s / softcap) when softcap > 0. Zero-initialised: a plain launch.
  int32_t local;
  int32_t window_left, window_right;
  float softcap;
  // A varlen launch (cu_seqlens_q not null; hopper only, its local kernels): q, k, v and out hold the sequences
  // packed one after another, (total, heads, head_dim) as strided (1, heads, total, head_dim) tensors (stride[0]
  // unused); sequence b's rows are cu_seqlens[b] .. cu_seqlens[b + 1] - 1 (device int32, batch + 1 each);
  // seqlen_q / seqlen_k are the longest sequences' lengths (they size the grid), lse is (heads_q, total_q).
  // Zero-initialised: a dense launch.
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int32_t total_q, total_k;
};
}

namespace fa {

constexpr int FA_DTYPE_BF16 = 0;
constexpr int FA_DTYPE_FP16 = 1;
constexpr float LOG2E = 1.4426950408889634f;

// A per-head_dim setting: v64 at 64, v128 at 128, v256 otherwise.
constexpr int by_head_dim(int head_dim, int v64, int v128, int v256) {
  return head_dim == 64 ? v64 : head_dim == 128 ? v128 : v256;
}

// Which query rows and KV tiles one CTA owns.
struct CtaWork {
  int batch, head_q, head_kv;
  int q_start;       // first query row of the CTA
  int n_kv_tiles;    // KV tiles holding at least one key some row of the CTA sees (from kv_tile0 on)
  int kv_tile0;      // first KV tile: 0, or where a part of a split item starts (hopper, non-causal)
  int diag;          // seqlen_k - seqlen_q: causal row i sees keys j <= i + diag
  // Local kernels (local_work): row i also sees only keys j >= i + left_diag when has_left, and keys from
  // left_clear on are past the left bound of every row of the CTA.
  bool has_left;
  int left_diag, left_clear;
  // Varlen kernels (varlen_item): the lengths of the item's sequence and its first rows in the packed q and k / v
  // (batch is then 0: the packed tensors are one batch entry).
  int seqlen_q, seqlen_k;
  int q_row0, k_row0;
};

// The work of query tile `q_tile` of (batch, head_q).
template <int BLOCK_Q, int BLOCK_KV>
__device__ __forceinline__ CtaWork tile_work(const FwdParams& p, int batch, int head_q, int q_tile) {
  CtaWork w;
  w.batch = batch;
  w.head_q = head_q;
  w.head_kv = head_q / (p.heads_q / p.heads_kv);
  w.q_start = q_tile * BLOCK_Q;
  w.diag = p.seqlen_k - p.seqlen_q;
  int kv_end = p.seqlen_k;
  if (p.causal) {
    const int last_row = min(w.q_start + BLOCK_Q, p.seqlen_q) - 1;
    kv_end = max(0, min(kv_end, last_row + w.diag + 1));
  }
  w.n_kv_tiles = (kv_end + BLOCK_KV - 1) / BLOCK_KV;
  w.kv_tile0 = 0;
  w.has_left = false;
  w.left_diag = w.left_clear = 0;
  return w;
}

// The work of a local launch (window or softcap), from tile_work's: the host passes causal = 1 and window_right
// >= 0 (hopper_local_params), so the right bound is the causal one moved by window_right, and a left bound
// (window_left >= 0) moves the first KV tile up to the first key the CTA's first row sees.
template <int BLOCK_Q, int BLOCK_KV>
__device__ __forceinline__ CtaWork local_work(const FwdParams& p, CtaWork w) {
  const int diag0 = p.seqlen_k - p.seqlen_q;
  const int last_row = min(w.q_start + BLOCK_Q, p.seqlen_q) - 1;
  w.diag = diag0 + p.window_right;
  const int kv_end = max(0, min(p.seqlen_k, last_row + w.diag + 1));
  int kv_begin = 0;
  w.has_left = p.window_left >= 0;
  if (w.has_left) {
    w.left_diag = diag0 - p.window_left;
    w.left_clear = last_row + w.left_diag;
    kv_begin = min(max(0, w.q_start + w.left_diag), kv_end);
  }
  w.kv_tile0 = kv_begin / BLOCK_KV;
  w.n_kv_tiles = (kv_end + BLOCK_KV - 1) / BLOCK_KV - w.kv_tile0;
  return w;
}

// --- varlen launches: items are heads_q x the query tiles of each sequence, sequence after sequence ---------

// Query tiles of sequence b of a varlen launch.
__device__ __forceinline__ int varlen_q_tiles(const FwdParams& p, int b, int block_q) {
  return (p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] + block_q - 1) / block_q;
}

// Work items of a varlen launch (no empty ones: the grid is sized by the longest sequence, the item walk by this),
// summed by each warp over its lanes' sequences; every lane of the calling warp must take part.
__device__ __forceinline__ uint32_t varlen_items(const FwdParams& p, int block_q) {
  uint32_t tiles = 0;
  for (int b = threadIdx.x % 32; b < p.batch; b += 32) tiles += varlen_q_tiles(p, b, block_q);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) tiles += __shfl_xor_sync(0xffffffffu, tiles, offset);
  return tiles * p.heads_q;
}

// Where a walk of varlen items stands: the sequence of its last item and that sequence's first item. A role's
// items only grow (rounds, the counter), so the producer's lookups move forward from its last one (varlen_walk).
struct VarlenCursor {
  int batch = 0;
  uint32_t first_item = 0;
};

// The sequence of item `item` (< varlen_items) and its first item, walked forward from `at` (one thread).
template <int BLOCK_Q>
__device__ __forceinline__ VarlenCursor varlen_walk(const FwdParams& p, uint32_t item, VarlenCursor at) {
  uint32_t items_of = uint32_t(varlen_q_tiles(p, at.batch, BLOCK_Q)) * p.heads_q;
  while (item >= at.first_item + items_of) {
    at.first_item += items_of;
    at.batch++;
    items_of = uint32_t(varlen_q_tiles(p, at.batch, BLOCK_Q)) * p.heads_q;
  }
  return at;
}

// The same found by the calling warp together (every lane takes part), from the first sequence: each lane counts
// one sequence's items of 32 at a time, a prefix sum over the lanes finds the one holding `item`. Nothing is kept
// between items (the consumers, which have no register to spare through their KV loop).
template <int BLOCK_Q>
__device__ __forceinline__ VarlenCursor varlen_find(const FwdParams& p, uint32_t item) {
  const int lane = threadIdx.x % 32;
  uint32_t first = 0;  // items of the sequences before this round's 32
  for (int b0 = 0;; b0 += 32) {
    const int b = b0 + lane;
    const uint32_t own = b < p.batch ? uint32_t(varlen_q_tiles(p, b, BLOCK_Q)) * p.heads_q : 0;
    uint32_t upto = own;  // items of this round's sequences up to and with lane's
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const uint32_t below = __shfl_up_sync(0xffffffffu, upto, offset);
      if (lane >= offset) upto += below;
    }
    const unsigned holds = __ballot_sync(0xffffffffu, item < first + upto);
    if (holds != 0) {
      const int found = __ffs(holds) - 1;
      return VarlenCursor{b0 + found, first + __shfl_sync(0xffffffffu, upto - own, found)};
    }
    first += __shfl_sync(0xffffffffu, upto, 31);
  }
}

// Item `item` (< varlen_items) of a varlen launch, in sequence `at.batch` whose first item is at.first_item:
// sequence b's items are its heads (fastest) x query tiles, the bottom tile first (under causal masking the
// heaviest, so a sequence's last items are its light ones). Returns the item's head and query tile with its
// sequence's lengths and first packed rows (batch 0: the packed tensors are one batch entry); the key range is
// local_work's or sequence_work's.
template <int BLOCK_Q>
__device__ __forceinline__ CtaWork varlen_item(const FwdParams& p, uint32_t item, const VarlenCursor& at) {
  const int rank = int(item - at.first_item) / p.heads_q;
  CtaWork w{};
  w.head_q = int(item - at.first_item) % p.heads_q;
  w.head_kv = w.head_q / (p.heads_q / p.heads_kv);
  w.q_row0 = p.cu_seqlens_q[at.batch];
  w.seqlen_q = p.cu_seqlens_q[at.batch + 1] - w.q_row0;
  w.k_row0 = p.cu_seqlens_k[at.batch];
  w.seqlen_k = p.cu_seqlens_k[at.batch + 1] - w.k_row0;
  w.q_start = ((w.seqlen_q + BLOCK_Q - 1) / BLOCK_Q - 1 - rank) * BLOCK_Q;
  return w;
}

// A varlen item's key range (p: its sequence_bounds) in a plain kernel: tile_work's for a dense launch of its sequence.
template <int BLOCK_Q, int BLOCK_KV>
__device__ __forceinline__ CtaWork sequence_work(const FwdParams& p, CtaWork w) {
  const CtaWork dense = tile_work<BLOCK_Q, BLOCK_KV>(p, w.batch, w.head_q, w.q_start / BLOCK_Q);
  w.diag = dense.diag;
  w.n_kv_tiles = dense.n_kv_tiles;
  return w;
}

// A varlen item's parameters with its sequence's lengths (what the masks and key ranges read).
__device__ __forceinline__ FwdParams sequence_bounds(const FwdParams& p, const CtaWork& w) {
  FwdParams s = p;
  s.seqlen_q = w.seqlen_q;
  s.seqlen_k = w.seqlen_k;
  return s;
}

// A varlen item's parameters as if its sequence were a dense launch of its own: its lengths, and out and lse
// moved to its first row. The epilogue indexes lse (batch 0, head h) at h * seqlen_q + row; the packed LSE is
// (heads_q, total_q), where h's rows start at h * total_q + q_row0, hence the head-dependent shift.
__device__ __forceinline__ FwdParams sequence_params(const FwdParams& p, const CtaWork& w, int out_elem_bytes) {
  FwdParams s = sequence_bounds(p, w);
  s.batch = 1;
  s.out = static_cast<char*>(p.out) + int64_t(w.q_row0) * p.out_stride[2] * out_elem_bytes;
  if (p.lse != nullptr) s.lse = p.lse + w.q_row0 + int64_t(w.head_q) * (p.total_q - w.seqlen_q);
  return s;
}

template <int BLOCK_Q, int BLOCK_KV>
__device__ __forceinline__ CtaWork cta_work(const FwdParams& p) {
  // Causal CTAs at the bottom see the most keys; issue them first so the last wave is short.
  const int q_tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  return tile_work<BLOCK_Q, BLOCK_KV>(p, blockIdx.z, blockIdx.y, q_tile);
}

// Heads whose K/V fit in about half of L2 (24 MB): the default group of `work_item`.
__device__ __forceinline__ int l2_head_group(const FwdParams& p) {
  const int64_t head_kv_bytes = int64_t(p.seqlen_k) * p.head_dim * 2 * 2;
  return int(max(int64_t(1), min(int64_t(p.batch) * p.heads_q, (int64_t(24) << 20) / head_kv_bytes)));
}

// Work item `item` (0 .. batch * heads_q * q_tiles - 1) of a grid that walks the items in order.
// Heads are taken in groups of `group`; inside a group the head varies fastest and the query tile
// slowest, so the CTAs running at once share K/V through L2, and under causal masking the
// heaviest tiles (bottom rows: most keys) of the group go first, which keeps the last wave short.
template <int BLOCK_Q, int BLOCK_KV>
__device__ __forceinline__ CtaWork work_item(const FwdParams& p, int item, int group) {
  const int q_tiles = (p.seqlen_q + BLOCK_Q - 1) / BLOCK_Q;
  const int heads = p.batch * p.heads_q;
  const int group_start = item / (group * q_tiles) * group;
  const int in_group = item - group_start * q_tiles;
  const int group_size = min(group, heads - group_start);
  const int rank = in_group / group_size;
  const int head = group_start + in_group % group_size;  // batch * heads_q + head_q
  const int q_tile = p.causal ? q_tiles - 1 - rank : rank;
  return tile_work<BLOCK_Q, BLOCK_KV>(p, head / p.heads_q, head % p.heads_q, q_tile);
}

// Start of one (batch, head) slice of a strided (B, H, S, D) tensor.
template <typename T>
__device__ __forceinline__ const T* head_base(const void* ptr, const int64_t (&stride)[3],
                                              int batch, int head) {
  return static_cast<const T*>(ptr) + batch * stride[0] + head * stride[1];
}

// A tile needs per-element masking when it runs past seqlen_k or crosses the causal diagonal
// of the CTA's first (most restricted) row; interior tiles skip the compares entirely.
template <int BLOCK_KV>
__device__ __forceinline__ bool tile_needs_mask(const FwdParams& p, const CtaWork& w,
                                                int kv_start) {
  if (kv_start + BLOCK_KV > p.seqlen_k) return true;
  return p.causal && kv_start + BLOCK_KV - 1 > w.q_start + w.diag;
}

// The same for a local launch's tile: also where it starts before the left bound of the CTA's last row.
template <int BLOCK_KV>
__device__ __forceinline__ bool local_tile_needs_mask(const FwdParams& p, const CtaWork& w, int kv_start) {
  return tile_needs_mask<BLOCK_KV>(p, w, kv_start) || (w.has_left && kv_start < w.left_clear);
}

// The first of an item's KV tiles from .. n-1 from which on every tile may need a mask (n: none does). Needing one
// is monotonic in the tile (the tail past seqlen_k, the causal diagonal and after), so the Hopper kernels run tiles
// from .. first-1 in a copy of their step without the mask branch (HopperTiles / Fp8Tiles::UNMASKED_LOOP): from 1
// (tile 0 is always masked), or in a local launch from its first tile past the window's left edge.
template <int BLOCK_KV>
__device__ __forceinline__ int first_masked_tile(const FwdParams& p, const CtaWork& w, int n, int from = 1) {
  int first = n;
  while (first > from && tile_needs_mask<BLOCK_KV>(p, w, (w.kv_tile0 + first - 1) * BLOCK_KV)) first--;
  return first;
}

// Local launches: the first of an item's tiles 1 .. n from which on no tile starts before the window's left bound
// of the CTA's last row (local_work's left_clear; 1 without a left bound).
template <int BLOCK_KV>
__device__ __forceinline__ int first_clear_tile(const CtaWork& w, int n) {
  if (!w.has_left) return min(1, n);
  const int clear = (w.left_clear - w.kv_tile0 * BLOCK_KV + BLOCK_KV - 1) / BLOCK_KV;
  return min(max(clear, 1), n);
}

// --- host side ---------------------------------------------------------------------------

inline int report(char* err, int err_len, const char* what, const char* detail) {
  if (err != nullptr && err_len > 0) snprintf(err, err_len, "%s: %s", what, detail);
  return 1;
}

// Before any launch: drop stale errors from earlier calls so they are not blamed on it, and raise
// the kernel's dynamic shared-memory limit (needed past 48 KB).
template <typename Kernel>
int prepare_launch(Kernel kernel, int smem_bytes, char* err, int err_len) {
  cudaGetLastError();
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  return e == cudaSuccess ? 0 : report(err, err_len, "cudaFuncSetAttribute(shared memory)", cudaGetErrorString(e));
}

// CTAs of `kernel` (threads x smem_bytes) resident on one SM of the current device, or -1 if the launch cannot be
// prepared (the decode kernels' split heuristic).
template <typename Kernel>
int resident_ctas(Kernel kernel, int threads, int smem_bytes) {
  int blocks = 0;
  if (prepare_launch(kernel, smem_bytes, nullptr, 0) != 0 ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem_bytes) != cudaSuccess)
    return -1;
  return blocks;
}

// Launch grid x threads on `stream` with `args` (prepare_launch first), and turn any CUDA error into
// a message.
template <typename Kernel, typename... Args>
int launch_kernel(Kernel kernel, dim3 grid, int threads, int smem_bytes, cudaStream_t stream, char* err,
                  int err_len, const Args&... args) {
  if (int rc = prepare_launch(kernel, smem_bytes, err, err_len)) return rc;
  kernel<<<grid, threads, smem_bytes, stream>>>(args...);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return report(err, err_len, "kernel launch", cudaGetErrorString(e));
  return 0;
}

// Work items of a launch: query tiles of block_q rows x heads x batch. (The persistent kernels take it
// in 32 bits: the host checks it with check_work_items first.)
__host__ __device__ inline int64_t work_items(const FwdParams& p, int block_q) {
  return int64_t(p.batch) * p.heads_q * ((p.seqlen_q + block_q - 1) / block_q);
}

// The persistent kernels number their items in 32 bits (one CTA's next item is item + gridDim.x).
inline int check_work_items(int64_t items, char* err, int err_len) {
  return items > INT32_MAX
             ? report(err, err_len, "grid", "batch * heads_q * ceil(seqlen_q / BLOCK_Q) must be < 2^31")
             : 0;
}

// CTAs of a persistent grid on the current device: one per SM, at most one per item.
inline int persistent_grid(int64_t items) {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return int(std::min<int64_t>(items, sms));
}

// One CTA per (query tile of block_q rows, head, batch).
inline dim3 q_tile_grid(const FwdParams& p, int block_q) {
  return dim3((p.seqlen_q + block_q - 1) / block_q, p.heads_q, p.batch);
}

template <typename Kernel>
int launch_fwd(Kernel kernel, int block_q, int threads, int smem_bytes, const FwdParams& p,
               cudaStream_t stream, char* err, int err_len) {
  return launch_kernel(kernel, q_tile_grid(p, block_q), threads, smem_bytes, stream, err, err_len, p);
}

// The Hopper kernels run on sm_90 only (wgmma, setmaxnreg and TMA as compiled for sm_90a);
// `message` names the variant.
inline int check_sm90(const char* message, char* err, int err_len) {
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0 ? 0 : report(err, err_len, "arch", message);
}

// Checks the C caller could get wrong even after Python validated (the library is usable alone).
inline int check_params(const FwdParams& p, char* err, int err_len) {
  if (p.batch < 1 || p.heads_q < 1 || p.heads_kv < 1 || p.seqlen_q < 1 || p.seqlen_k < 1)
    return report(err, err_len, "shape", "batch, heads and seqlens must be >= 1");
  if (p.heads_q % p.heads_kv != 0)
    return report(err, err_len, "heads", "heads_q must be a multiple of heads_kv");
  if (p.batch > 65535 || p.heads_q > 65535)
    return report(err, err_len, "grid", "batch and heads_q must be <= 65535");
  if (!(p.scale > 0.f) || std::isinf(p.scale))
    return report(err, err_len, "scale", "must be finite and > 0");
  return 0;
}

// The head dims a launcher is instantiated for (the ladder: 64 and 128; hopper adds 256).
template <int... DIMS>
struct HeadDims {};

template <typename T, typename Launcher, int... DIMS>
int dispatch_dim(const FwdParams& p, char* err, int err_len, Launcher& launcher, HeadDims<DIMS...>) {
  bool found = false;
  int rc = 0;
  ((!found && p.head_dim == DIMS ? (found = true, rc = launcher.template operator()<T, DIMS>()) : 0), ...);
  if (found) return rc;
  char supported[64] = "supported:";
  int used = 10;
  ((used += snprintf(supported + used, sizeof(supported) - used, used > 10 ? ", %d" : " %d", DIMS)), ...);
  return report(err, err_len, "head_dim", supported);
}

// Calls launcher.template operator()<T, DIM>() for the runtime dtype and head_dim (one of Dims).
template <typename Dims = HeadDims<64, 128>, typename Launcher>
int dispatch(const FwdParams& p, char* err, int err_len, Launcher&& launcher) {
  if (int rc = check_params(p, err, err_len)) return rc;
  if (p.dtype == FA_DTYPE_BF16) return dispatch_dim<__nv_bfloat16>(p, err, err_len, launcher, Dims{});
  if (p.dtype == FA_DTYPE_FP16) return dispatch_dim<__half>(p, err, err_len, launcher, Dims{});
  return report(err, err_len, "dtype", "supported: bfloat16, float16");
}

}  // namespace fa
