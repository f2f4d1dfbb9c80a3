// Every per-head_dim and per-length choice of the Hopper kernels, in one place: the tile tables of the three
// families (HopperTiles: bf16/fp16, Fp8Tiles: e4m3, MxTiles: block-scaled on 16-bit tiles) and which
// instantiation a 16-bit launch takes (hopper_tile_choice). Why each value is what it is, with the
// measurement behind it: docs/design/hopper.md, table of decisions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "fwd_common.cuh"
#include "hopper/epilogue.cuh"
#include "hopper/scheduler.cuh"

// The standing ablations of cuda:hopper (bf16/fp16): one build define picks the option set, e.g.
// -DFA_HOPPER_ABLATION=no_pingpong (scripts/dev.toml lists them). Each switches off one technique whose
// effect the design doc reports: the intra-warpgroup overlap of S(t) with P(t-1) V(t-1), the consumers'
// ping-pong turns, persistent CTAs, 2-CTA clusters with TMA multicast, the split last round.
#ifndef FA_HOPPER_ABLATION
#define FA_HOPPER_ABLATION none
#endif

namespace fa {

enum class HopperAblation { none, no_overlap, no_pingpong, no_persistent, no_cluster, no_split };

struct HopperOptions {
  bool overlap = true;     // S(t) and P(t-1) V(t-1) in flight together; softmax(t) waits for S(t) only
  bool pingpong = true;    // consumers issue their GEMMs in turn (named barriers)
  bool persistent = true;  // one CTA per SM walks the items (non-causal; causal where the scheduler says)
  bool cluster = true;     // non-causal d128 / d256 in pairs of CTAs sharing K/V by multicast
  bool split_tail = true;  // the last, partly filled round of items split over all clusters
};

constexpr HopperOptions hopper_options(HopperAblation a) {
  HopperOptions o;
  o.overlap = a != HopperAblation::no_overlap;
  o.pingpong = a != HopperAblation::no_pingpong;
  o.persistent = a != HopperAblation::no_persistent;
  o.cluster = a != HopperAblation::no_cluster;
  o.split_tail = a != HopperAblation::no_split;
  return o;
}

constexpr HopperOptions HOPPER_OPTIONS = hopper_options(HopperAblation::FA_HOPPER_ABLATION);

// --- bf16 / fp16 (fwd_hopper.cu) -----------------------------------------------------------------

// The kernel head_dim of a 16-bit launch: 64, 80, 96, 128, 192 or 256, the smallest that holds Q/K's and V's head
// dims (multiples of 8 from 32 to 256; V's 0: Q/K's). Q, K and V load through TMA maps of their own head_dim columns,
// which fill the columns past it with zeros: they add nothing to S, O's columns past V's head_dim stay zero and the
// epilogue writes V's head_dim of them. The MMAs run at the kernel's width (d72 costs what d80 costs, d112 what
// d128 costs, d160 and Q/K 192 with V 128 what d192 costs).
constexpr int hopper_kernel_dim(int head_dim, int head_dim_v = 0) {
  const int widest = head_dim > head_dim_v ? head_dim : head_dim_v;
  return widest <= 64 ? 64 : widest <= 80 ? 80 : widest <= 96 ? 96 : widest <= 128 ? 128 : widest <= 192 ? 192 : 256;
}
// The head_dim whose tile choices a kernel takes (every table below): d80 and d96 those of d64 (three consumers,
// three stages, the split last round in shared memory, no clusters) on 96-key tiles.
constexpr int hopper_tile_dim(int head_dim) { return head_dim == 80 || head_dim == 96 ? 64 : head_dim; }
// Bytes per shared-memory row of a 64 / 32 / 16-column panel, the TMA swizzle of the tiles: 128 where the head_dim is
// a multiple of 64 columns, 64 at d96 (three panels), 32 at d80 (five panels).
constexpr int hopper_swizzle(int head_dim) { return head_dim % 64 == 0 ? 128 : head_dim % 32 == 0 ? 64 : 32; }
constexpr bool hopper_takes_head_dim(int head_dim) { return head_dim >= 32 && head_dim <= 256 && head_dim % 8 == 0; }

// Whether causal launches at head_dim take the dynamic scheduler (persistent CTAs fed by a counter).
constexpr bool hopper_dynamic_causal(int head_dim) { return head_dim != 256; }

// Keys per KV tile of the long non-causal loops: 176 at d128 (the per-tile costs, O's rescale included,
// spread over more keys), 112 at d192 (S 56 + P 28 + O 96 registers; Q 48 KB + 2 x (K + V 42 KB) of shared
// memory), 80 at d256 (S 40 + P 20 + O 128 registers; Q 64 KB + 2 x (K + V 40 KB)), 96 at d80 / d96 (d64's three
// consumers: S 48 + P 24 + O 48 of 160 registers; 128 keys spilled there); 128 elsewhere and in every causal d64 /
// d128 launch (d80, d96, d192 and d256 run their one tile in causal launches too).
constexpr int hopper_block_kv(int head_dim) {
  return head_dim == 192 ? 112 : head_dim == 80 || head_dim == 96 ? 96 : by_head_dim(head_dim, 128, 176, 80);
}
// Whether a launch of these head dims (dense, local or varlen) takes kernels whose P V runs at V's width: Q/K 192 with
// V up to 128 (O 64 registers and V tiles of two panels, so that 128-key tiles fit: S 64 + P 32 + O 64 registers,
// Q 48 KB + 2 x (K 48 KB + V 32 KB) of shared memory).
constexpr bool hopper_narrow_v(int head_dim, int head_dim_v) {
  return hopper_kernel_dim(head_dim, head_dim_v) == 192 && head_dim_v > 0 && head_dim_v <= 128;
}
// Whether a launch's query tiles of block_q rows pair up, as a cluster of `cluster` CTAs takes them (two of one head).
inline bool hopper_tiles_pair(const FwdParams& p, int block_q, int cluster) {
  return ((p.seqlen_q + block_q - 1) / block_q) % cluster == 0;
}
// The wide head dims, 192 and 256, whose O takes most of the consumers' registers: lazy rescale, the retire at the
// top of the step, the pinned shared base (HopperTiles), their one tile size in causal launches.
constexpr bool hopper_wide(int head_dim) { return head_dim >= 192; }

// CTAs per cluster of non-causal d128-d256 where a head's query tiles pair up.
constexpr int hopper_cluster(int head_dim) {
  return hopper_tile_dim(head_dim) == 64 || !HOPPER_OPTIONS.cluster ? 1 : 2;
}

// Non-causal d128 up to this many keys runs the 128-key one-CTA kernel: a 176-key tail tile is a third
// or more empty there.
constexpr int HOPPER_D128_SHORT_KEYS = 1024;
// ... and up to this many (above SHORT_KEYS) 128-key tiles in the clusters: 4096 = 32 x 128 wastes no
// key; from 8k keys the 176-key tiles' lower cost per key wins.
constexpr int HOPPER_D128_KV128_KEYS = 4096;
// Causal d64 with at most this many query rows runs two consumers (128-row items) instead of three:
// a 192-row item's tail and diagonal tiles are a third or more of its work there.
constexpr int HOPPER_D64_SHORT_CAUSAL_ROWS = 1024;
// Local d64 launches (not varlen) whose window spans at most this many keys run two consumers, the others (wider
// windows, a cap alone) three: a row tile reads its window plus its own rows' span of keys, so at short windows a
// 192-row tile reads more keys per row than a 128-row one (docs/design/hopper.md's table has the measurements). The
// three-consumer local kernel spills a few words, outside its KV loop.
constexpr int HOPPER_D64_SHORT_WINDOW = 1024;

// CONSUMERS_: consumer warpgroups, 0 for the head_dim's own count (3 at d64, else 2). LOCAL_: the kernel of
// local launches (a window or softcap; scheduled as causal ones, fwd_common.cuh local_work). VARLEN_: the kernel of
// packed variable-length batches (each item reads its sequence's offsets, fwd_common.cuh varlen_item), a twin of a
// local kernel (windows, caps) or of a plain one. DIM_V_: V's and O's width (128 where hopper_narrow_v), 0 for DIM's.
template <int DIM_, int BLOCK_KV_, int CLUSTER_ = 1, int CONSUMERS_ = 0, bool LOCAL_ = false, bool VARLEN_ = false,
          int DIM_V_ = 0>
struct HopperTiles {
  static constexpr int DIM = DIM_;  // Q's and K's
  static constexpr int DIM_V = DIM_V_ > 0 ? DIM_V_ : DIM;
  static_assert(DIM_V == DIM || (DIM == 192 && DIM_V == 128), "V narrower than Q/K: the Q/K 192 with V 128 kernels only");
  static constexpr int TILE_DIM = hopper_tile_dim(DIM);  // whose choices below it takes
  static constexpr bool LOCAL = LOCAL_;
  static constexpr bool VARLEN = VARLEN_;
  static constexpr int CLUSTER = CLUSTER_;  // CTAs sharing each K/V tile through multicast
  static_assert(!VARLEN || CLUSTER == 1, "a cluster's two query tiles are one head's: not a varlen item's");
  static_assert(CLUSTER == 1 || CLUSTER == 2, "pairs of CTAs at most");
  static constexpr int CONSUMERS = CONSUMERS_ > 0 ? CONSUMERS_ : TILE_DIM == 64 ? 3 : 2;  // 64 rows each
  static constexpr int THREADS = 128 * (1 + CONSUMERS);
  static constexpr int CONSUMER_THREADS = 128 * CONSUMERS;
  static constexpr int BLOCK_Q = 64 * CONSUMERS;
  static constexpr int BLOCK_KV = BLOCK_KV_;
  // d128: Q 32 KB + 2 x (K 32 KB + V 32 KB) = 160 KB (208 KB with 176 keys); d64 fits a third
  // stage in less; d192 (112 keys): Q 48 KB + 2 x (K 42 KB + V 42 KB) = 216 KB; d256 (80 keys): Q 64 KB +
  // 2 x (K 40 KB + V 40 KB) = 224 KB.
  static constexpr int STAGES = TILE_DIM == 64 ? 3 : 2;
  static constexpr bool OVERLAP = HOPPER_OPTIONS.overlap;
  static constexpr bool PINGPONG = HOPPER_OPTIONS.pingpong;
  static constexpr bool PERSISTENT = HOPPER_OPTIONS.persistent;
  // Lazy rescale (log2 units; 0: eager): at d192 / d256 a row keeps its old max while a tile's max exceeds it by
  // at most 8, so P reaches 2^8 (harmless in 16-bit P and fp32 sums: O / l and the LSE use the same max),
  // and a warp whose rows all kept theirs skips the O rescale (96 / 128 FMUL per thread). At d64 / d128 the
  // rescale is 32 / 64 FMUL, less than the vote and branch.
  static constexpr int LAZY_RESCALE = hopper_wide(DIM) ? 8 : 0;
  static constexpr int SOFTMAX_CHAINS = 4;  // independent chains of the row max and row sum
  // Where P(t-1) V(t-1) is waited for: at the top of step t+1 (d192, d256: softmax(t) then runs under it), or
  // right after softmax(t), where ptxas moves the wait ahead of the softmax (d64, d128: faster there).
  static constexpr bool RETIRE_AT_TOP = hopper_wide(DIM);
  // The KV loop as two copies of the step, the tiles that need no mask first, so that the steady loop's
  // softmax has no mask branch and ptxas leaves the P V wait inside it (d128; d64-d96, d192, d256 run one loop).
  // (Local launches: the window's left edge, masked, before the mask-free copy.)
  static constexpr bool UNMASKED_LOOP = TILE_DIM == 128;
  // Each step reads the CTA's shared base anew through a volatile cvta (d192, d256), so that ptxas rebuilds it in
  // the loop and issues the S wgmmas interleaved instead of back to back.
  static constexpr bool PIN_BASE = hopper_wide(DIM);
  // Causal launches with persistent CTAs in the balanced static order, for seqlen_k in
  // [CAUSAL_PERSISTENT_FROM, CAUSAL_PERSISTENT_KEYS]: d256 only (the others take the dynamic scheduler).
  static constexpr int CAUSAL_PERSISTENT_KEYS = DIM == 256 ? 8192 : 0;
  static constexpr int CAUSAL_PERSISTENT_FROM = DIM == 256 ? 4096 : 0;
  // (d128: only the 128-key instantiation that causal launches use carries the hand-over; the non-causal
  // 176-key kernels keep their machine code)
  static constexpr bool DYNAMIC_CAUSAL = hopper_dynamic_causal(DIM) && (TILE_DIM != 128 || BLOCK_KV == 128);
  // Whether a launch walks causal items with persistent CTAs (host and kernel must agree; cluster kernels run
  // non-causal launches only).
  __host__ __device__ static bool causal_persistent(const FwdParams& p) {
    return CLUSTER == 1 && (DYNAMIC_CAUSAL || CAUSAL_PERSISTENT_KEYS > 0) && p.causal &&
           (DYNAMIC_CAUSAL || (p.seqlen_k >= CAUSAL_PERSISTENT_FROM && p.seqlen_k <= CAUSAL_PERSISTENT_KEYS));
  }
  // Heads per group of the work order (scheduler's work_item): d128 walks all query tiles of one head
  // before the next (FlashAttention-4's grid order); 0: l2_head_group (heads filling half of L2).
  static constexpr int HEAD_GROUP = by_head_dim(TILE_DIM, 0, 1, 0);
  static constexpr int SWIZZLE = hopper_swizzle(DIM);  // bytes per panel row
  static constexpr int PANEL_COLS = SWIZZLE / 2;
  // panels of 64 columns in 128-byte rows (d96: 32 columns in 64 bytes; d80: 16 in 32)
  static constexpr int PANELS = DIM / PANEL_COLS;
  static constexpr int Q_PANEL_BYTES = BLOCK_Q * SWIZZLE;
  static constexpr int KV_PANEL_BYTES = BLOCK_KV * SWIZZLE;
  static constexpr int V_PANELS = DIM_V / PANEL_COLS;
  static constexpr int Q_BYTES = PANELS * Q_PANEL_BYTES;
  static constexpr int K_BYTES = PANELS * KV_PANEL_BYTES;    // one K tile
  static constexpr int V_BYTES = V_PANELS * KV_PANEL_BYTES;  // one V tile, after its K in the stage
  static constexpr int STAGE_BYTES = K_BYTES + V_BYTES;
  // Rows of K/V one producer loads per tile: all of them, or its share of a multicast tile. A share
  // starts on a swizzle atom (8 rows), so TMA swizzles it as it would the whole tile.
  static constexpr int KV_BOX_ROWS = BLOCK_KV / CLUSTER;
  static_assert(KV_BOX_ROWS % 8 == 0, "a multicast share of a K/V tile starts on a swizzle atom");
  static constexpr int K_OFFSET = Q_BYTES;  // stage s: K at + s * STAGE_BYTES
  static constexpr int BARRIER_OFFSET = Q_BYTES + STAGES * STAGE_BYTES;
  // Whether non-causal launches split their last round: d64-d96 and the 176-key d128 kernels. At d256 the split's
  // state spills in the consumers (O alone is 128 registers there), and the 128-key d128 kernel runs causal
  // and short launches only.
  static constexpr bool SPLIT_TAIL =
      HOPPER_OPTIONS.split_tail && !VARLEN && (TILE_DIM == 64 || (TILE_DIM == 128 && BLOCK_KV > 128));
  // Where a CTA keeps its range of the split tail: d64-d96 in shared memory, read back where it is used (its
  // producer and consumers have no register to keep it live across the item loop); d128 in registers, with the
  // round's split decided at its start (the walk from shared memory compiled to a slower d128 loop).
  static constexpr bool TAIL_IN_SMEM = SPLIT_TAIL && TILE_DIM == 64;
  // q_full, q_empty, k/v_full, k/v_empty (+ item_full/empty[2] and two item slots, dynamic causal)
  static constexpr int RING_BARRIERS = 2 + 4 * STAGES + (DYNAMIC_CAUSAL ? 5 : 0);
  // (+ the split tail's TailRange, TAIL_IN_SMEM: 4 words after an 8-byte pad where the count is odd)
  static constexpr int BARRIERS = RING_BARRIERS + (TAIL_IN_SMEM ? 2 + RING_BARRIERS % 2 : 0);
  // the split tail's TailRange, after the barriers and the item slots, 16-byte aligned
  static constexpr int TAIL_RANGE_OFFSET = BARRIER_OFFSET + 8 * (RING_BARRIERS + RING_BARRIERS % 2);
  static_assert(!TAIL_IN_SMEM || TAIL_RANGE_OFFSET % 16 == 0, "the tail range is one 16-byte shared access");
  // O leaves through shared memory, whole rows per store (epilogue.cuh): per consumer warp 8 rows of DIM_V
  // 16-bit values, at d64 and d128, and V 128 of Q/K 192 (the staging takes rows of a multiple of 128 bytes: not d80,
  // d96; d192 and d256 tiles leave too little of the 227 KB).
  static constexpr bool STAGED_STORE = DIM_V == 64 || DIM_V == 128;
  static constexpr int STORE_OFFSET = staged_store_offset(BARRIER_OFFSET + 8 * BARRIERS);
  static constexpr int STORE_BYTES = STAGED_STORE ? staged_store_bytes(CONSUMER_THREADS / 32, DIM_V) : 0;
  // The consumers take their next item while the last P V runs, instead of after the stores: in the 128-key
  // kernels (d128 causal and up to 1k keys) and d64-d96's; the 176-key loops compiled slower with it.
  static constexpr bool EARLY_NEXT = (TILE_DIM == 128 && BLOCK_KV == 128) || TILE_DIM == 64;
  static_assert(!(EARLY_NEXT && SPLIT_TAIL && !TAIL_IN_SMEM), "the next item would overwrite the part the finish reads");
  // k/v_empty arrivals: every local consumer thread, plus one per consumer warp of the other CTA
  // of a cluster, whose producer writes into this CTA's ring too.
  static constexpr int EMPTY_ARRIVALS = CONSUMER_THREADS + (CLUSTER - 1) * CONSUMER_THREADS / 32;
  static constexpr int PINGPONG_BAR = 1;  // named barriers 1..CONSUMERS (0 is __syncthreads)
  static constexpr int PINGPONG_THREADS = 256;  // one turn's barrier: the waiting and the passing consumer
  // +1024: the dynamic shared base is rounded up to the 1024-byte swizzle-atom alignment.
  static constexpr int SMEM_BYTES = STORE_OFFSET + STORE_BYTES + 1024;
  static_assert(SMEM_BYTES <= 227 * 1024, "more shared memory than one CTA may use on sm_90");
  // 128 x 24 + 256 x 240 = 64512 <= 65536 registers per SM (3 consumers: 128 x 32 + 384 x 160 = 65536, all
  // of the 128 per thread a 512-thread CTA launches with: the producer's walk of a split tail in shared memory,
  // d64's, fits in 32, not in 24; two d64 consumers: 128 x 32 + 256 x 232). d256 needs O 128 + S 40 + P 20 of the
  // consumers' 240 (S(t), P(t-1) and O are live together under the overlap); d64 with 128-key tiles S 64 + P 32
  // + O 32 of 160.
  static constexpr int PRODUCER_REGS = CONSUMERS == 3 || TAIL_IN_SMEM ? 32 : 24;
  static constexpr int CONSUMER_REGS = CONSUMERS == 3 ? 160 : TAIL_IN_SMEM ? 232 : 240;
  static_assert(128 * PRODUCER_REGS + CONSUMER_THREADS * CONSUMER_REGS <= 65536, "register file");
  static constexpr int S_REGS = BLOCK_KV / 2;  // 64 x BLOCK_KV fp32 accumulator per warpgroup
  static constexpr int O_REGS = DIM_V / 2;
  using Split = SplitSpace<CLUSTER, CONSUMERS, O_REGS>;  // the split workspace
};

// Whether a launch is a varlen one (packed sequences).
inline bool hopper_varlen(const FwdParams& p) { return p.cu_seqlens_q != nullptr; }

// Whether a launch runs a local kernel: a window or softcap.
inline bool hopper_local(const FwdParams& p) { return p.local != 0; }

// Whether a local launch (p from hopper_local_params) has a window of at most HOPPER_D64_SHORT_WINDOW keys.
inline bool hopper_short_window(const FwdParams& p) {
  return p.window_left >= 0 && p.window_left + p.window_right <= HOPPER_D64_SHORT_WINDOW;
}

// A local launch's parameters as its kernel takes them: scheduled as causal, with the right bound window_right >= 0
// keys past the diagonal (0 under causal; seqlen_q when unbounded, past every key of every row: in a varlen launch
// seqlen_q is the longest sequence's).
inline FwdParams hopper_local_params(const FwdParams& p) {
  FwdParams local = p;
  local.window_right = p.causal ? 0 : p.window_right >= 0 ? p.window_right : p.seqlen_q;
  local.causal = 1;
  return local;
}

// The instantiation of a dense (or, VARLEN, packed) 16-bit launch without a window or cap. Non-causal d128 / d256
// in clusters when the query tiles of a head pair up; non-causal d128 on 128-key tiles up to HOPPER_D128_KV128_KEYS
// (without clusters up to HOPPER_D128_SHORT_KEYS), on 176 above; causal d64-d96 on two consumers up to
// HOPPER_D64_SHORT_CAUSAL_ROWS query rows. Varlen launches (p's lengths the longest ones) take the varlen twin of the
// kernel a dense launch would take, but never a cluster (nor the split round: SPLIT_TAIL), and no 128-key tiles
// between HOPPER_D128_SHORT_KEYS and HOPPER_D128_KV128_KEYS (the clusters' range; 176 there).
template <int DIM, bool VARLEN, typename F>
int hopper_plain_choice(const FwdParams& p, F&& f) {
  constexpr int block_kv = hopper_block_kv(DIM);
  constexpr int causal_kv = hopper_tile_dim(DIM) == 128 ? 128 : block_kv;
  if constexpr (hopper_tile_dim(DIM) == 64) {
    if (p.causal && p.seqlen_q <= HOPPER_D64_SHORT_CAUSAL_ROWS)
      return f.template operator()<block_kv, 1, 2, false, VARLEN>();
    return f.template operator()<block_kv, 1, 0, false, VARLEN>();
  } else {
    if (p.causal || (hopper_tile_dim(DIM) == 128 && p.seqlen_k <= HOPPER_D128_SHORT_KEYS))
      return f.template operator()<causal_kv, 1, 0, false, VARLEN>();
    if constexpr (!VARLEN) {
      constexpr int cluster = hopper_cluster(DIM);
      const bool pairs = hopper_tiles_pair(p, HopperTiles<DIM, block_kv>::BLOCK_Q, cluster);
      if constexpr (hopper_tile_dim(DIM) == 128) {
        if (p.seqlen_k <= HOPPER_D128_KV128_KEYS) {
          if constexpr (cluster > 1)
            if (pairs) return f.template operator()<128, cluster, 0, false, false>();
          return f.template operator()<128, 1, 0, false, false>();
        }
      }
      if constexpr (cluster > 1)
        if (pairs) return f.template operator()<block_kv, cluster, 0, false, false>();
    }
    return f.template operator()<block_kv, 1, 0, false, VARLEN>();
  }
}

// The instantiation a 16-bit launch takes: f.template operator()<BLOCK_KV, CLUSTER, CONSUMERS, LOCAL, VARLEN>()
// (CONSUMERS 0: the head_dim's own). Local launches (p from hopper_local_params) take the causal tiles in their own
// kernel, on two consumers at d80 / d96 and in varlen launches (three spilled more there: the cap and the second mask
// bound do not fit 160 registers), and at d64 where the window is short (hopper_short_window); the others
// hopper_plain_choice's. Q/K 192 with V 128 (DIM_V 128) takes its own 128-key kernels: dense ones in clusters as
// d192's, local and varlen ones on one CTA.
template <int DIM, int DIM_V, typename F>
int hopper_tile_choice(const FwdParams& p, F&& f) {
  if constexpr (DIM_V != DIM) {  // Q/K 192 with V 128 (hopper_narrow_v): 128-key tiles
    if (hopper_local(p))
      return hopper_varlen(p) ? f.template operator()<128, 1, 0, true, true>()
                              : f.template operator()<128, 1, 0, true, false>();
    if (hopper_varlen(p)) return f.template operator()<128, 1, 0, false, true>();
    constexpr int block_q = HopperTiles<DIM, 128, 1, 0, false, false, DIM_V>::BLOCK_Q;
    if (!p.causal && hopper_tiles_pair(p, block_q, hopper_cluster(DIM)))
      return f.template operator()<128, hopper_cluster(DIM), 0, false, false>();
    return f.template operator()<128, 1, 0, false, false>();
  } else {
    constexpr int causal_kv = hopper_tile_dim(DIM) == 128 ? 128 : hopper_block_kv(DIM);
    constexpr int local_consumers = hopper_tile_dim(DIM) == 64 ? 2 : 0;
    if (hopper_local(p)) {
      if (hopper_varlen(p)) return f.template operator()<causal_kv, 1, local_consumers, true, true>();
      if constexpr (DIM == 64)
        if (!hopper_short_window(p)) return f.template operator()<causal_kv, 1, 0, true, false>();
      return f.template operator()<causal_kv, 1, local_consumers, true, false>();
    }
    return hopper_varlen(p) ? hopper_plain_choice<DIM, true>(p, f) : hopper_plain_choice<DIM, false>(p, f);
  }
}

// --- e4m3 (fwd_hopper_fp8.cu) --------------------------------------------------------------------

constexpr int FA_DTYPE_E4M3 = 2;

// How a launch's CTAs get their work items: persistent CTAs walking a static order (non-causal) or fed by a
// counter (causal). A template argument, so that each keeps its own machine code. (1 and 2: the values
// the kernels' names carry.)
enum Fp8Schedule : int { FP8_PERSISTENT = 1, FP8_DYNAMIC = 2 };

template <int DIM_, bool FLAT_K_, int SCHEDULE>
struct Fp8Tiles {
  static constexpr int DIM = DIM_;
  // K through the 5-D map, its rows key-permuted so that P is packed in place (hopper/host.cuh
  // k_rows_flat; else K in key order and P's keys moved by shuffles)
  static constexpr bool FLAT_K = FLAT_K_;
  static constexpr bool PERSISTENT = true;  // every fp8 launch: run_roles initialises q_empty (Q reloaded per item)
  static constexpr bool DYNAMIC = SCHEDULE == FP8_DYNAMIC;  // items from the counter: the hand-over
  static constexpr int CONSUMERS = DIM == 64 ? 3 : 2;
  static constexpr int THREADS = 128 * (1 + CONSUMERS);
  static constexpr int CONSUMER_THREADS = 128 * CONSUMERS;
  static constexpr int BLOCK_Q = 64 * CONSUMERS;
  static constexpr int BLOCK_KV = 128;  // one 128-byte swizzle row of V^T
  // d256: K and V^T tiles of 128 keys are 32 KB each, so three stages (and Q's 32 KB) fill the 227 KB.
  static constexpr int STAGES = DIM == 256 ? 3 : 4;
  static constexpr int LAZY_RESCALE = 0;  // the online softmax rescales on every new max
  // Independent chains of the row max and row sum: four at d64, two at d128, one at d256 (two spilled there).
  static constexpr int SOFTMAX_CHAINS = by_head_dim(DIM, 4, 2, 1);
  static constexpr bool UNMASKED_LOOP = DIM == 256;  // the mask-free steady loop (as HopperTiles)
  static_assert(STAGES >= 2, "a consumer holds one stage at a time; the producer fills the others ahead");
  // A Q/K row is DIM bytes: one 64- or 128-byte swizzled row at d64 / d128; at d256 two 128-byte panels, each a
  // whole tile of 128-byte rows (the widest TMA swizzle), the second after the first.
  static constexpr int QK_SWIZZLE = DIM < 128 ? DIM : 128;
  static constexpr int QK_PANELS = DIM / QK_SWIZZLE;
  static constexpr int Q_PANEL_BYTES = BLOCK_Q * QK_SWIZZLE;
  static constexpr int K_PANEL_BYTES = BLOCK_KV * QK_SWIZZLE;
  static constexpr int Q_BYTES = QK_PANELS * Q_PANEL_BYTES;
  static constexpr int K_BYTES = QK_PANELS * K_PANEL_BYTES;
  static constexpr int V_BYTES = DIM * BLOCK_KV;  // V^T tile: DIM rows of BLOCK_KV keys
  static constexpr int STAGE_BYTES = K_BYTES + V_BYTES;
  static constexpr int K_OFFSET = Q_BYTES;  // stage s: K at + s * STAGE_BYTES, V after it
  static constexpr int BARRIER_OFFSET = Q_BYTES + STAGES * STAGE_BYTES;
  static constexpr int BARRIERS = 1 + 3 * STAGES + (PERSISTENT ? 1 : 0) + (DYNAMIC ? 5 : 0);  // ring.cuh RingBarriers
  // the epilogue's staging slots, one per consumer warp, after the barriers
  // (d256: the three stages leave no room; O is stored from the registers)
  static constexpr bool STAGED_STORE = DIM <= 128;
  static constexpr int STORE_OFFSET = staged_store_offset(BARRIER_OFFSET + 8 * BARRIERS);
  static constexpr int SMEM_BYTES =
      STORE_OFFSET + (STAGED_STORE ? staged_store_bytes(CONSUMER_THREADS / 32, DIM) : 0) + 1024;  // +1024: alignment
  static_assert(SMEM_BYTES <= 227 * 1024, "more shared memory than one CTA may use on sm_90");
  // 128 x 24 + 256 x 240 (or 384 x 160: d64's S 64 + P 16 + O 32) <= 65536 registers.
  static constexpr int PRODUCER_REGS = 24;
  static constexpr int CONSUMER_REGS = CONSUMERS == 3 ? 160 : 240;
  static constexpr int S_REGS = BLOCK_KV / 2;
  static constexpr int O_REGS = DIM / 2;
  static constexpr int K_STEPS_QK = DIM / 32;    // k32 steps of Q K^T
  static constexpr int K_STEPS_PER_PANEL = QK_SWIZZLE / 32;
  static constexpr int K_STEPS_PV = BLOCK_KV / 32;  // k32 steps of P V
  // Non-causal d64 splits its last round (at d128 the split walk compiled to a slower loop).
  static constexpr bool SPLIT_TAIL = SCHEDULE == FP8_PERSISTENT && DIM == 64;
  using Split = SplitSpace<1, CONSUMERS, O_REGS>;  // the split last round's workspace
};

// --- block-scaled on dequantized 16-bit tiles (fwd_hopper_mx.cu) ---------------------------------

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
  // d128: Q 32 KB + 2 x (K 32 KB + V^T 32 KB) = 160 KB, as the 16-bit kernel; d64: 3 stages.
  static constexpr int STAGES = DIM == 64 ? 3 : 2;
  static constexpr int Q_PANEL_BYTES = BLOCK_Q * 128;  // 64 columns of 2 bytes per row
  static constexpr int K_PANEL_BYTES = BLOCK_KV * 128;
  static constexpr int V_PANEL_BYTES = DIM * 128;      // 64 keys of DIM V^T rows
  static constexpr int Q_BYTES = DIM / 64 * Q_PANEL_BYTES;
  static constexpr int K_BYTES = DIM / 64 * K_PANEL_BYTES;
  static constexpr int V_BYTES = BLOCK_KV / 64 * V_PANEL_BYTES;
  static constexpr int STAGE_BYTES = K_BYTES + V_BYTES;
  static constexpr int K_OFFSET = Q_BYTES;
  static constexpr int BARRIER_OFFSET = Q_BYTES + STAGES * STAGE_BYTES;
  static constexpr bool PERSISTENT = false;  // one CTA per item: RingBarriers without q_empty
  static constexpr bool DYNAMIC = false;     // ... and without the item hand-over
  static constexpr int BARRIERS = 1 + 3 * STAGES;
  static constexpr int SMEM_BYTES = BARRIER_OFFSET + 8 * BARRIERS + 1024;
  static_assert(SMEM_BYTES <= 227 * 1024, "more shared memory than one CTA may use on sm_90");
  static constexpr int PRODUCER_REGS = 24;
  static constexpr int CONSUMER_REGS = 240;
  static constexpr int S_REGS = BLOCK_KV / 2;
  static constexpr int O_REGS = DIM / 2;
};

}  // namespace fa
