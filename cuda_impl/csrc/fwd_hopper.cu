// hopper: FlashAttention-2 forward for sm_90a with TMA, mbarriers and wgmma, warp-specialised.
//
// CTA = 1 + CONSUMERS warpgroups, 64 query rows per consumer (2 consumers, 128 rows; 3 at d64, 192 rows, but 2
// for short causal rows), KV swept in tiles of BLOCK_KV keys (128; 176 for non-causal d128 above 1k keys; 80 at
// d256, where O alone takes 128 registers per consumer thread):
// - warpgroup 0, the producer: drops to PRODUCER_REGS registers; one thread issues every TMA
//   load (Q once, then K and V of each tile into a STAGES-deep ring);
// - warpgroups 1.., the consumers: raise to CONSUMER_REGS; each owns 64 query rows and
//   runs S = Q K^T (wgmma, both operands in shared memory), the online softmax in the
//   accumulator registers, and O += P V (wgmma with P from registers, V from shared memory).
// Shared tiles are what TMA writes with the 128-byte swizzle: 64-column panels of 128-byte
// rows. Q and K feed wgmma K-major, V MN-major (the descriptor's transpose bit), so no operand
// is ever rearranged in shared memory.
//
// Each consumer issues its two GEMMs together (FlashAttention-3's intra-warpgroup overlap): in
// iteration t it issues S(t) = Q K(t)^T and then O += P(t-1) V(t-1), waits only for S(t) and
// runs the softmax of tile t; it waits for P V before rescaling O and packing P(t) ("retire").
// Written right after the softmax, that wait is moved ahead of it by ptxas, so the softmax runs
// after P V; at the top of the next iteration (RETIRE_AT_TOP, d256) it stays behind the
// softmax, which then runs under P V (docs/perf-notes-hopper.md, session 6, has both measured).
// The consumers also take turns issuing those GEMMs (round robin on named barriers), so one's
// softmax overlaps the others' GEMMs.
// Non-causal d128 and d256 run in clusters of two CTAs (FlashAttention-3's launch) when a head's
// query tiles pair up: the pair takes query tiles 2i and 2i + 1 of one head, and each producer
// loads half the rows of every K and V tile with TMA multicast into both CTAs' rings.
// Non-causal d64 and d128 split their last, partly filled round of items over all clusters
// (hopper_split.cuh): there a work item is a part of an item, KV tiles kv_tile0 .. of it.
//
// Barrier protocol (n = number of KV tiles the CTA needs, identical in every role; tile t
// lives in stage s = t % STAGES, round parity r = (t / STAGES) & 1):
//   q_full             count 1: producer arrive.expect_tx(Q bytes) + TMA; consumers wait parity 0.
//   q_empty            count CONSUMER_THREADS: arrival once the item's last S has retired (Q is not read
//                      after it); the producer waits on it before loading the next item's Q.
//   k_full[s], v_full[s]  count 1: producer arrive.expect_tx(tile bytes) + TMA for tile t;
//                      consumers wait parity r.
//   k_empty[s]         count CONSUMER_THREADS (every consumer thread): arrival once S(t) has retired;
//   v_empty[s]         count CONSUMER_THREADS: arrival once P(t) V(t) has retired (its retire).
//                      The producer waits parity r ^ 1 on each before refilling that half of
//                      stage s with tile t (the first round passes on the fresh barrier's
//                      parity), so K(t + STAGES) loads while V(t) is still being read.
//                      In a cluster, +1 per consumer warp of the other CTA (its lane 0 arrives
//                      remotely), whose producer writes half of this CTA's slot; k/v_full then
//                      expect the whole tile's bytes, half from each producer. A CTA's full barrier
//                      needs its own producer's arrive.expect_tx, which follows that producer's
//                      empty wait, so no arrival for tile t can reach an empty barrier whose phase
//                      of tile t - STAGES is still open. Before exiting, the producer waits for the
//                      last phase of every slot (drain_ring): the other CTA's last remote arrivals.
//   named barriers PINGPONG_BAR + c, 256 threads: consumer c waits (bar.sync) for its turn to
//                      issue the GEMMs of one iteration; consumer c - 1's bar.arrive right after
//                      its own issue hands the turn over (round robin). Consumer 0 arrives once on
//                      its own barrier first, so it starts, and waits once more at the very end
//                      to absorb the last consumer's last hand-over, so every barrier ends
//                      balanced.
// Every tile 0..n-1 is produced exactly once and consumed exactly once by every consumer
// thread, with no early exit and no skipped tile inside that range (causally invisible tiles
// are outside it: n stops at the CTA's last visible key), so each wait has its arrivals. A
// consumer waits for k_full before its turn and for v_full of a tile whose K it already holds,
// so holding the turn never blocks on the other consumer. With n = 0 (causal, Sq > Sk, rows
// that see no key) nobody loads or waits: the consumers store zeros and lse -inf. Arrivals on
// the empty barriers for the last STAGES tiles are waited for only in a cluster (drain_ring). The
// producer's other 127 threads, and finally the producer thread, just exit: no CTA-wide
// barrier follows the role split.
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled (fetched at run time: no -lcuda)

#include <atomic>
#include <type_traits>

#include "fwd_common.cuh"
#include "hopper.cuh"
#include "hopper_epilogue.cuh"
#include "hopper_split.cuh"
#include "hopper_trace.cuh"

// K/V ring depth at d128, a build flag so that scripts/dev_hopper_gpu.py can time 3 stages
// (Q 32 KB + 3 x 64 KB = 224 KB + barriers: inside the 227 KB a CTA may opt into) beside 2.
#ifndef FA_HOPPER_D128_STAGES
#define FA_HOPPER_D128_STAGES 2
#endif
// ... and at d64 (Q 24 KB + 3 x 32 KB, or 4 x 32 KB = 152 KB): with 4 the ring slot and phase of a tile
// are a mask and a shift instead of a multiply-high, which measured level (session 17).
#ifndef FA_HOPPER_D64_STAGES
#define FA_HOPPER_D64_STAGES 3
#endif
// Ablation flags for scripts/dev_hopper_gpu.py (one library each): FA_HOPPER_OVERLAP=0 waits
// for P V before the softmax (the GEMMs of one iteration still go out together);
// FA_HOPPER_PINGPONG=0 lets the consumers issue whenever they are ready; FA_HOPPER_PERSISTENT=0
// launches one CTA per work item instead of one per SM;
// FA_HOPPER_CAUSAL_PERSISTENT / FA_HOPPER_D64_CAUSAL_PERSISTENT / FA_HOPPER_D256_CAUSAL_PERSISTENT(_FROM): causal
// persistent too, over a range of lengths (below).
// Keys per KV tile of non-causal d128 (128 or 176, FlashAttention-3's choice: the per-tile
// costs, O rescale included, spread over more keys). Causal and d64 always take 128.
#ifndef FA_HOPPER_D128_BLOCK_KV
#define FA_HOPPER_D128_BLOCK_KV 176
#endif
// Non-causal d128 with at most this many keys runs the 128-key kernel (causal d128's): at 512 and 1k keys a 176-key
// tail tile is a third or more empty, and that kernel's loop and item boundary are the shorter ones (measured 8% and
// 3% fewer cycles, 2k level; docs/perf-notes-hopper.md, session 14). 0: the 176-key kernels at every length.
#ifndef FA_HOPPER_D128_SHORT_KEYS
#define FA_HOPPER_D128_SHORT_KEYS 1024
#endif
// Non-causal d128 with more keys than that and at most this many runs 128-key tiles in the 176-key kernels' clusters
// of two (where query tiles pair up; else the 128-key kernel above): on the mask-free loop (session 19) that measured
// 3.5% fewer cycles at 2k and 1.6% at 4k (4096 = 32 x 128 wastes no key, 176-key tiles 3.1%), but 1.7-2.0% more at
// 8k and 16k, where the 176-key tiles' lower cost per key wins (docs/perf-notes-hopper.md). 0: 176 keys above SHORT_KEYS.
#ifndef FA_HOPPER_D128_KV128_KEYS
#define FA_HOPPER_D128_KV128_KEYS 4096
#endif
// Consumer warpgroups at d64 (64 query rows each): 3, FlashAttention-3's d64 shape (192 rows),
// since a d64 tile's GEMMs are half as long as d128's and two warpgroups' GEMMs cover less of
// each other's softmax; 2 is the ablation (the d128 structure).
#ifndef FA_HOPPER_D64_CONSUMERS
#define FA_HOPPER_D64_CONSUMERS 3
#endif
// Causal d64 with at most this many query rows runs two consumers (128-row items, as triton:fa2-ws does): at 512
// and 1k rows a 192-row item's tail and diagonal tiles are a third or more of its work (measured 8-9% fewer cycles
// than three consumers, 7% more at 2k; docs/perf-notes-hopper.md, session 15). 0: three at every length.
#ifndef FA_HOPPER_D64_SHORT_CAUSAL_ROWS
#define FA_HOPPER_D64_SHORT_CAUSAL_ROWS 1024
#endif
// Keys per KV tile at d256 (80, FlashAttention-3's choice: S 40 + P 20 + O 128 registers, and
// Q 64 KB + 2 x (K 40 KB + V 40 KB) = 224 KB of shared memory; 64 is the ablation).
#ifndef FA_HOPPER_D256_BLOCK_KV
#define FA_HOPPER_D256_BLOCK_KV 80
#endif
#ifndef FA_HOPPER_OVERLAP
#define FA_HOPPER_OVERLAP 1
#endif
#ifndef FA_HOPPER_PINGPONG
#define FA_HOPPER_PINGPONG 1
#endif
#ifndef FA_HOPPER_PERSISTENT
#define FA_HOPPER_PERSISTENT 1
#endif
// Causal persistent too (the balanced static order), up to this many keys (0: never), per head_dim (see the host
// launch). d64: 1024, where the balanced static order measured +10-28% at causal 512 and 1k over one CTA per item in
// every run; from 2k up one paper sweep read it 3-8% below and interleaved dev runs level to +5%, so the bound
// stays where both agree (d64 now takes the dynamic scheduler, below, which overrides it); d128 never (level at 4k
// and 16k and -4% at 1k; docs/perf-notes-hopper.md, session 8). d256 from FA_HOPPER_D256_CAUSAL_PERSISTENT_FROM to
// 8192 keys: there it measured 8-9% fewer cycles and 4-5% less time at 4k and 8k, but 17-20% more cycles at 512 and
// 1k, 1-2% more at 2k and 16k (session 15). A head_dim with the dynamic causal scheduler is persistent regardless.
#ifndef FA_HOPPER_CAUSAL_PERSISTENT
#define FA_HOPPER_CAUSAL_PERSISTENT 0
#endif
#ifndef FA_HOPPER_D64_CAUSAL_PERSISTENT
#define FA_HOPPER_D64_CAUSAL_PERSISTENT 1024
#endif
#ifndef FA_HOPPER_D256_CAUSAL_PERSISTENT
#define FA_HOPPER_D256_CAUSAL_PERSISTENT 8192
#endif
#ifndef FA_HOPPER_D256_CAUSAL_PERSISTENT_FROM
#define FA_HOPPER_D256_CAUSAL_PERSISTENT_FROM 4096
#endif
// Per head_dim, 1: causal launches persistent CTAs at every length that take their items from a counter in
// global memory (FlashAttention-3's causal scheduler) in the one-CTA-per-item order (L2 head groups,
// heaviest query tile first in each), so an SM that finishes early takes the next item. The producer
// fetches it and hands it to the consumers through shared memory (two slots, item_full / item_empty
// barriers). On at d128: +4-21% at causal 4k-512, level at 16k; on at d64 since session 15, when its hand-over
// no longer spilled: 3-13% fewer cycles at causal 512-4k. Off at d256: there the hand-over state spills 1-2
// words, which the non-causal kernels (the same instantiation) pay too, -2-4%, and session 15 measured it level
// at causal 512-2k (docs/perf-notes-hopper.md, sessions 8, 9 and 15).
#ifndef FA_HOPPER_D128_DYNAMIC_CAUSAL
#define FA_HOPPER_D128_DYNAMIC_CAUSAL 1
#endif
#ifndef FA_HOPPER_D64_DYNAMIC_CAUSAL
#define FA_HOPPER_D64_DYNAMIC_CAUSAL 1
#endif
#ifndef FA_HOPPER_D256_DYNAMIC_CAUSAL
#define FA_HOPPER_D256_DYNAMIC_CAUSAL 0
#endif
// Heads per group of the d128 work order (fwd_common.cuh work_item): 1 walks all query tiles of one
// head before the next (FlashAttention-4's grid order), measured +2-7% at 1k-16k over the groups of
// l2_head_group (3 heads at 16k; docs/perf-notes-hopper.md, session 5); 0 is that ablation. d64 and
// d256 keep l2_head_group (d256 makes groups of 1 from 8k up); at d64, FA4's order (1, build
// d64-group1) measured +1% at 16k and 4k and -3% causal over 5 rounds (session 6), so 0 stays.
#ifndef FA_HOPPER_D128_HEAD_GROUP
#define FA_HOPPER_D128_HEAD_GROUP 1
#endif
#ifndef FA_HOPPER_D64_HEAD_GROUP
#define FA_HOPPER_D64_HEAD_GROUP 0
#endif
// A consumer frees Q for the next item as soon as its last S has retired, so that the next Q
// loads under the last softmax, the last P V and the O stores; 0 frees it after the last P V
// (before session 4), which left the Q load's latency at every item boundary.
#ifndef FA_HOPPER_EARLY_Q_RELEASE
#define FA_HOPPER_EARLY_Q_RELEASE 1
#endif
// Lazy rescale at d256 (FlashAttention-4's): a row keeps its old max while a tile's max exceeds it
// by at most FA_HOPPER_LAZY_RESCALE in log2 units, so P reaches 2^that (harmless in 16-bit P and
// fp32 sums: O / l and the LSE use the same max, exact), and a warp whose rows all kept theirs
// skips the O rescale (128 FMUL per thread). 0 rescales on every new max. Measured on H200
// (docs/perf-notes-hopper.md): +3 to +15% at d256; at d128 and d64, where the rescale is 64 / 32
// FMUL, the vote and branch cost more than they save (-1 to -4%), so they rescale eagerly.
#ifndef FA_HOPPER_LAZY_RESCALE
#define FA_HOPPER_LAZY_RESCALE 8
#endif

// Per head_dim, 1: the KV loop runs as two copies of the step, first the tiles that need no mask, then those that do
// (the tail past seqlen_k, the causal diagonal), so that the steady loop's softmax has no mask branch. Then ptxas
// leaves the wait for P(t-1) V(t-1) in the middle of softmax(t), as in FlashAttention-4's sm90 loop (which has no
// mask branch either), instead of hoisting it to the start of the block after the branch. Measured
// (docs/perf-notes-hopper.md, session 19): d128 4-8% fewer cycles at 4k-16k in both masks; d64 +2.5-2.7% (three
// consumers), d256 level, so those keep one loop in which every step checks its tile.
#ifndef FA_HOPPER_D64_UNMASKED_LOOP
#define FA_HOPPER_D64_UNMASKED_LOOP 0
#endif
#ifndef FA_HOPPER_D128_UNMASKED_LOOP
#define FA_HOPPER_D128_UNMASKED_LOOP 1
#endif
#ifndef FA_HOPPER_D256_UNMASKED_LOOP
#define FA_HOPPER_D256_UNMASKED_LOOP 0
#endif

// Where P(t-1) V(t-1) is waited for, per head_dim: 1, at the top of step t+1 (after its mbarrier
// waits), so that softmax(t) runs under it; 0, right after softmax(t), where ptxas moves the wait
// ahead of the softmax (the placement before session 6). Measured (docs/perf-notes-hopper.md, session
// 6): d256 +2-10% at the top (three calls); d64 and d128 0-4% faster with the wait where ptxas puts it.
#ifndef FA_HOPPER_D64_RETIRE_AT_TOP
#define FA_HOPPER_D64_RETIRE_AT_TOP 0
#endif
#ifndef FA_HOPPER_D128_RETIRE_AT_TOP
#define FA_HOPPER_D128_RETIRE_AT_TOP 0
#endif
#ifndef FA_HOPPER_D256_RETIRE_AT_TOP
#define FA_HOPPER_D256_RETIRE_AT_TOP 1
#endif

// CTAs per cluster for non-causal d128 and d256 (FlashAttention-3's choice for 16-bit inputs from
// head_dim 128): the two CTAs of a cluster take adjacent query tiles of one head, and each producer
// loads half of every K and V tile with TMA multicast into both CTAs, which halves the L2-to-SM
// traffic of K/V. Used when the query tiles per head are even (else, and for causal, 1).
#ifndef FA_HOPPER_D128_CLUSTER
#define FA_HOPPER_D128_CLUSTER 2
#endif
#ifndef FA_HOPPER_D256_CLUSTER
#define FA_HOPPER_D256_CLUSTER 2
#endif

// Independent chains of the row max and row sum per thread (fwd_common.cuh wgmma_row_max):
// fewer dependent FMNMX / FADD between "S retired" and the next GEMM issue.
#ifndef FA_HOPPER_SOFTMAX_CHAINS
#define FA_HOPPER_SOFTMAX_CHAINS 4
#endif

// Non-causal persistent launches split their last, partly filled round of items over all clusters
// (hopper_split.cuh; where: HopperTiles::SPLIT_TAIL). 1: on; 0: a plain last round, the ablation.
#ifndef FA_HOPPER_SPLIT_TAIL
#define FA_HOPPER_SPLIT_TAIL 1
#endif

// O leaves through shared memory, whole rows per store (store_wgmma_rows_staged; where: HopperTiles::STAGED_STORE);
// 0 stores it from the registers, 4 bytes per thread and row (store_wgmma_rows), the ablation.
#ifndef FA_HOPPER_STAGED_STORE
#define FA_HOPPER_STAGED_STORE 1
#endif
// Each KV-tile step reads the CTA's shared base anew through a volatile cvta (where: HopperTiles::PIN_BASE), so that
// ptxas rebuilds it in the loop instead of keeping it in a uniform register. Changes after the loop had made it keep the
// base and then issue the S wgmmas back to back, each time 0.3-1.9% slower (sessions 13-18); read anew, the 176-key
// loops issue them interleaved whatever follows the loop: -0.3 / -0.4% cycles at 4k / 16k, -1.2 / -0.5% with the staged
// stores they now take, d256 -0.7%; the 128-key d128 loop +0.6-0.9% and d64 level, which keep theirs (session 18).
// On the mask-free d128 loop (session 19) the 176-key kernels measured 0.5-1.0% faster without it, so d128 reads it anew
// only with FA_HOPPER_D128_PIN_BASE=1. FA_HOPPER_PIN_BASE=0: no step reads it anew, the ablation.
#ifndef FA_HOPPER_PIN_BASE
#define FA_HOPPER_PIN_BASE 1
#endif
#ifndef FA_HOPPER_D128_PIN_BASE
#define FA_HOPPER_D128_PIN_BASE 0
#endif
// The next item's bookkeeping (its index from the scheduler, its work) under the last P V of the current one
// (where: HopperTiles::EARLY_NEXT); 0 does it after the stores, the ablation.
#ifndef FA_HOPPER_EARLY_NEXT
#define FA_HOPPER_EARLY_NEXT 1
#endif

namespace fa {

// Whether causal launches at head_dim take the dynamic causal scheduler (FA_HOPPER_D*_DYNAMIC_CAUSAL).
constexpr bool hopper_dynamic_causal(int head_dim) {
  return by_head_dim(head_dim, FA_HOPPER_D64_DYNAMIC_CAUSAL, FA_HOPPER_D128_DYNAMIC_CAUSAL, FA_HOPPER_D256_DYNAMIC_CAUSAL);
}

// CONSUMERS_: consumer warpgroups, 0 for the head_dim's own count (FA_HOPPER_D64_CONSUMERS at d64, else 2).
template <int DIM_, int BLOCK_KV_, int CLUSTER_ = 1, int CONSUMERS_ = 0>
struct HopperTiles {
  static constexpr int DIM = DIM_;
  static constexpr int CLUSTER = CLUSTER_;  // CTAs sharing each K/V tile through multicast
  static_assert(CLUSTER == 1 || CLUSTER == 2, "pairs of CTAs at most");
  static constexpr int CONSUMERS = CONSUMERS_ > 0 ? CONSUMERS_ : DIM == 64 ? FA_HOPPER_D64_CONSUMERS : 2;  // 64 rows each
  static constexpr int THREADS = 128 * (1 + CONSUMERS);
  static constexpr int CONSUMER_THREADS = 128 * CONSUMERS;
  static constexpr int BLOCK_Q = 64 * CONSUMERS;
  static constexpr int BLOCK_KV = BLOCK_KV_;
  // d128: Q 32 KB + 2 x (K 32 KB + V 32 KB) = 160 KB (208 KB with 176 keys); d64 fits a third
  // stage in less; d256 (80 keys): Q 64 KB + 2 x (K 40 KB + V 40 KB) = 224 KB.
  static constexpr int STAGES =
      DIM == 64 ? FA_HOPPER_D64_STAGES : DIM == 128 && BLOCK_KV == 128 ? FA_HOPPER_D128_STAGES : 2;
  static constexpr int LAZY_RESCALE = DIM == 256 ? FA_HOPPER_LAZY_RESCALE : 0;  // log2 units; 0: eager
  static constexpr int SOFTMAX_CHAINS = FA_HOPPER_SOFTMAX_CHAINS;
  static constexpr bool RETIRE_AT_TOP =
      by_head_dim(DIM, FA_HOPPER_D64_RETIRE_AT_TOP, FA_HOPPER_D128_RETIRE_AT_TOP, FA_HOPPER_D256_RETIRE_AT_TOP);
  static constexpr bool UNMASKED_LOOP =
      by_head_dim(DIM, FA_HOPPER_D64_UNMASKED_LOOP, FA_HOPPER_D128_UNMASKED_LOOP, FA_HOPPER_D256_UNMASKED_LOOP);
  // Whether each step reads the CTA's shared base anew (FA_HOPPER_PIN_BASE): d256, and the 176-key d128 kernels with
  // FA_HOPPER_D128_PIN_BASE=1.
  static constexpr bool PIN_BASE =
      FA_HOPPER_PIN_BASE && (DIM == 256 || (DIM == 128 && BLOCK_KV > 128 && FA_HOPPER_D128_PIN_BASE));
  static constexpr int CAUSAL_PERSISTENT_KEYS =
      by_head_dim(DIM, FA_HOPPER_D64_CAUSAL_PERSISTENT, FA_HOPPER_CAUSAL_PERSISTENT, FA_HOPPER_D256_CAUSAL_PERSISTENT);
  static constexpr int CAUSAL_PERSISTENT_FROM = DIM == 256 ? FA_HOPPER_D256_CAUSAL_PERSISTENT_FROM : 0;
  // (d128: only the 128-key instantiation that causal launches use carries the hand-over; the non-causal
  // 176-key kernels keep their machine code)
  static constexpr bool DYNAMIC_CAUSAL = hopper_dynamic_causal(DIM) && (DIM != 128 || BLOCK_KV == 128);
  // Whether a launch walks causal items with persistent CTAs (host and kernel must agree; cluster kernels run
  // non-causal launches only).
  __host__ __device__ static bool causal_persistent(const FwdParams& p) {
    return CLUSTER == 1 && (DYNAMIC_CAUSAL || CAUSAL_PERSISTENT_KEYS > 0) && p.causal &&
           (DYNAMIC_CAUSAL || (p.seqlen_k >= CAUSAL_PERSISTENT_FROM && p.seqlen_k <= CAUSAL_PERSISTENT_KEYS));
  }
  static constexpr int HEAD_GROUP =
      by_head_dim(DIM, FA_HOPPER_D64_HEAD_GROUP, FA_HOPPER_D128_HEAD_GROUP, 0);  // 0: l2_head_group
  static constexpr int PANELS = DIM / 64;              // 64-column, 128-byte-row panels
  static constexpr int Q_PANEL_BYTES = BLOCK_Q * 128;
  static constexpr int KV_PANEL_BYTES = BLOCK_KV * 128;
  static constexpr int Q_BYTES = PANELS * Q_PANEL_BYTES;
  static constexpr int KV_BYTES = PANELS * KV_PANEL_BYTES;  // one K or one V tile
  // Rows of K/V one producer loads per tile: all of them, or its share of a multicast tile. A share
  // starts on a swizzle atom (8 rows), so TMA swizzles it as it would the whole tile.
  static constexpr int KV_BOX_ROWS = BLOCK_KV / CLUSTER;
  static_assert(KV_BOX_ROWS % 8 == 0, "a multicast share of a K/V tile starts on a swizzle atom");
  static constexpr int K_OFFSET = Q_BYTES;                  // stage s: K at + s * 2 * KV_BYTES
  static constexpr int BARRIER_OFFSET = Q_BYTES + STAGES * 2 * KV_BYTES;
  // Whether non-causal launches split their last round: d64 and the 176-key d128 kernels. At d256 the split's
  // state spilled 24-28 bytes in the consumers (O alone is 128 registers there), and the 128-key d128 kernel
  // runs causal only.
  static constexpr bool SPLIT_TAIL = FA_HOPPER_SPLIT_TAIL && (DIM == 64 || (DIM == 128 && BLOCK_KV > 128));
  // Where a CTA keeps its range of the split tail: d64 in shared memory, read back where it is used (its
  // producer and consumers have no register to keep it live across the item loop); d128 in registers, with the
  // round's split decided at its start (the walk from shared memory measured 0.7-1.3% slower at d128: ptxas
  // scheduled the loop differently; docs/perf-notes-hopper.md, session 13).
  static constexpr bool TAIL_IN_SMEM = SPLIT_TAIL && DIM == 64;
  // q_full, q_empty, k/v_full, k/v_empty (+ item_full/empty[2] and two item slots, dynamic causal)
  static constexpr int RING_BARRIERS = 2 + 4 * STAGES + (DYNAMIC_CAUSAL ? 5 : 0);
  // (+ the split tail's TailRange, TAIL_IN_SMEM: 4 words after an 8-byte pad where the count is odd)
  static constexpr int BARRIERS = RING_BARRIERS + (TAIL_IN_SMEM ? 2 + RING_BARRIERS % 2 : 0);
  // the split tail's TailRange, after the barriers and the item slots, 16-byte aligned
  static constexpr int TAIL_RANGE_OFFSET = BARRIER_OFFSET + 8 * (RING_BARRIERS + RING_BARRIERS % 2);
  static_assert(!TAIL_IN_SMEM || TAIL_RANGE_OFFSET % 16 == 0, "the tail range is one 16-byte shared access");
  // The epilogue's staging (FA_HOPPER_STAGED_STORE): per consumer warp 8 rows of DIM 16-bit values, at d64 and d128.
  // (The 176-key kernels gained from it only once their loop stopped changing with it: PIN_BASE in session 18; the
  // mask-free loop of session 19 keeps its schedule without the pin, and was measured with the staging.) At
  // d256 the tiles leave 3 KB of the 227 (docs/perf-notes-hopper.md, session 14).
  static constexpr bool STAGED_STORE = FA_HOPPER_STAGED_STORE && DIM <= 128;
  static constexpr int STAGE_OFFSET = staged_store_offset(BARRIER_OFFSET + 8 * BARRIERS);
  static constexpr int STAGE_BYTES = STAGED_STORE ? staged_store_bytes(CONSUMER_THREADS / 32, DIM) : 0;
  // The consumers take their next item while the last P V runs (FA_HOPPER_EARLY_NEXT), instead of after the
  // stores: in the 128-key kernels (d128 causal and up to 1k keys, d64). The 176-key kernels measured 0.5-1% slower with it, their
  // loops compiled differently (docs/perf-notes-hopper.md, session 14).
  static constexpr bool EARLY_NEXT = FA_HOPPER_EARLY_NEXT && ((DIM == 128 && BLOCK_KV == 128) || DIM == 64);
  static_assert(!(EARLY_NEXT && SPLIT_TAIL && !TAIL_IN_SMEM), "the next item would overwrite the part the finish reads");
  // k/v_empty arrivals: every local consumer thread, plus one per consumer warp of the other CTA
  // of a cluster, whose producer writes into this CTA's ring too.
  static constexpr int EMPTY_ARRIVALS = CONSUMER_THREADS + (CLUSTER - 1) * CONSUMER_THREADS / 32;
  static constexpr int PINGPONG_BAR = 1;  // named barriers 1..CONSUMERS (0 is __syncthreads)
  static constexpr int PINGPONG_THREADS = 256;  // one turn's barrier: the waiting and the passing consumer
  // +1024: the dynamic shared base is rounded up to the 1024-byte swizzle-atom alignment.
  static constexpr int SMEM_BYTES = STAGE_OFFSET + STAGE_BYTES + 1024;
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
  static constexpr int O_REGS = DIM / 2;
  using Split = SplitSpace<CLUSTER, CONSUMERS, O_REGS>;  // the split workspace (FA_HOPPER_SPLIT_TAIL)
};

#if FA_SM90A
namespace hopper {

// Shared addresses of the CTA's mbarriers (8 bytes each, after the tiles).
template <int STAGES>
struct Barriers {
  uint32_t base;
  __device__ uint32_t q_full() const { return base; }
  __device__ uint32_t q_empty() const { return base + 8; }
  __device__ uint32_t k_full(int s) const { return base + 8 * (2 + s); }
  __device__ uint32_t v_full(int s) const { return base + 8 * (2 + STAGES + s); }
  __device__ uint32_t k_empty(int s) const { return base + 8 * (2 + 2 * STAGES + s); }
  __device__ uint32_t v_empty(int s) const { return base + 8 * (2 + 3 * STAGES + s); }
  // dynamic causal scheduler (FA_HOPPER_D*_DYNAMIC_CAUSAL): slot s holds the item of rounds s, s + 2, ...
  __device__ uint32_t item_full(int s) const { return base + 8 * (2 + 4 * STAGES + s); }
  __device__ uint32_t item_empty(int s) const { return base + 8 * (4 + 4 * STAGES + s); }
  __device__ uint32_t item_slot(int s) const { return base + 8 * (6 + 4 * STAGES) + 4 * s; }
};

// One K or V tile into the ring: the whole tile, or (cluster) this CTA's share of its rows,
// multicast to the same place in every CTA of the cluster.
template <typename C>
__device__ __forceinline__ void load_kv_tile(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                             int kv_start, const CtaWork& w, uint32_t rank) {
#pragma unroll
  for (int panel = 0; panel < C::PANELS; panel++) {
    if constexpr (C::CLUSTER == 1)
      sm90::tma_load_4d(dst + panel * C::KV_PANEL_BYTES, map, bar, panel * 64, kv_start, w.head_kv, w.batch);
    else
      sm90::tma_load_4d_multicast(dst + panel * C::KV_PANEL_BYTES + rank * C::KV_BOX_ROWS * 128, map, bar,
                                  panel * 64, kv_start + rank * C::KV_BOX_ROWS, w.head_kv, w.batch,
                                  (1u << C::CLUSTER) - 1);
  }
}

template <typename C>
__device__ void produce_item(const CtaWork& w, uint32_t smem, Barriers<C::STAGES> bars,
                             sm90::Progress& done, const CUtensorMap* map_q, const CUtensorMap* map_k,
                             const CUtensorMap* map_v, uint32_t rank) {
  if (w.n_kv_tiles == 0) return;
  trace::mark(0, done.q_loads, trace::BEGIN);
  trace::mark(0, done.q_loads, trace::TILES, w.n_kv_tiles);
  sm90::mbar_wait(bars.q_empty(), (done.q_loads & 1) ^ 1);
  trace::mark(0, done.q_loads, trace::Q_ISSUED);
  sm90::mbar_arrive_expect_tx(bars.q_full(), C::Q_BYTES);
#pragma unroll
  for (int panel = 0; panel < C::PANELS; panel++)
    sm90::tma_load_4d(smem + panel * C::Q_PANEL_BYTES, map_q, bars.q_full(), panel * 64,
                      w.q_start, w.head_q, w.batch);
  for (int tile = 0; tile < w.n_kv_tiles; tile++) {
    const int s = (done.kv_tiles + tile) % C::STAGES;
    const uint32_t round_parity = ((done.kv_tiles + tile) / C::STAGES) & 1;
    const uint32_t k_smem = smem + C::K_OFFSET + s * 2 * C::KV_BYTES;
    const int kv_start = (w.kv_tile0 + tile) * C::BLOCK_KV;
    // (cluster: the whole tile's bytes land here, this producer's share and the other's)
    sm90::mbar_wait(bars.k_empty(s), round_parity ^ 1);
    sm90::mbar_arrive_expect_tx(bars.k_full(s), C::KV_BYTES);
    load_kv_tile<C>(k_smem, map_k, bars.k_full(s), kv_start, w, rank);
    if (tile == 0) trace::mark(0, done.q_loads, trace::K0_ISSUED);
    sm90::mbar_wait(bars.v_empty(s), round_parity ^ 1);
    sm90::mbar_arrive_expect_tx(bars.v_full(s), C::KV_BYTES);
    load_kv_tile<C>(k_smem + C::KV_BYTES, map_v, bars.v_full(s), kv_start, w, rank);
  }
  trace::mark(0, done.q_loads, trace::LAST_V_ISSUED);
  done.kv_tiles += w.n_kv_tiles;
  done.q_loads++;
}

// Cluster: the other CTA's consumers arrive on this CTA's empty barriers until they have read
// its last tiles, so the producer waits for the last round of every stage before the CTA may exit.
template <typename C>
__device__ void drain_ring(Barriers<C::STAGES> bars, const sm90::Progress& done) {
  for (int j = 0; j < C::STAGES; j++) {
    const int t = done.kv_tiles + j;
    sm90::mbar_wait(bars.k_empty(t % C::STAGES), ((t / C::STAGES) & 1) ^ 1);
    sm90::mbar_wait(bars.v_empty(t % C::STAGES), ((t / C::STAGES) & 1) ^ 1);
  }
}

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

// Second half, once P V of the previous tile has retired: O *= alpha, P = S as wgmma A
// fragments. Key block kk (16 keys) = accumulator column blocks 2kk, 2kk+1: the A-fragment order
// (row g keys 0-7, row g+8 keys 0-7, row g keys 8-15, row g+8 keys 8-15) is register order.
// No wgmma is in flight here, so the warp-uniform branch of the lazy rescale cannot serialise any.
// (O *= alpha between the next S and P V issues, FlashAttention-3's order, measured no gain:
// docs/perf-notes-hopper.md, session 5.)
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

// The consumers' turns to issue GEMMs, round robin (see the protocol above); no-ops with
// FA_HOPPER_PINGPONG=0. No branch may sit between a wgmma and its wait (ptxas would serialise the
// wgmmas, C7520), so pass_turn is unconditional and consumer 0 takes one extra turn at the end
// (finish) to absorb the last consumer's last hand-over.
template <typename C>
struct PingPong {
  int consumer;
  __device__ __forceinline__ void start() const {
    if (FA_HOPPER_PINGPONG && consumer == 0)
      sm90::named_barrier_arrive(C::PINGPONG_BAR, C::PINGPONG_THREADS);
  }
  __device__ __forceinline__ void wait_turn() const {
    if (FA_HOPPER_PINGPONG) sm90::named_barrier_sync(C::PINGPONG_BAR + consumer, C::PINGPONG_THREADS);
  }
  __device__ __forceinline__ void pass_turn() const {
    // (1 - consumer for two: the same machine code as before the round robin)
    const int next = C::CONSUMERS == 2 ? 1 - consumer : (consumer + 1) % C::CONSUMERS;
    if (FA_HOPPER_PINGPONG) sm90::named_barrier_arrive(C::PINGPONG_BAR + next, C::PINGPONG_THREADS);
  }
  __device__ __forceinline__ void finish() const {
    if (consumer == 0) wait_turn();
  }
};

// S = Q K^T: k-step kk reads 16 columns = 32 bytes inside panel kk / 4 of both operands.
template <typename T, typename C>
__device__ __forceinline__ void issue_s(float (&S)[C::S_REGS], uint32_t q_smem, uint32_t k_smem) {
  const uint64_t q_desc = sm90::desc_sw128(q_smem, 16, 1024), k_desc = sm90::desc_sw128(k_smem, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < C::PANELS * 4; kk++) {
    const uint32_t in_panel = (kk % 4) * 32;
    sm90::wgmma_ss<T, C::BLOCK_KV>(S, sm90::desc_advance(q_desc, (kk / 4) * C::Q_PANEL_BYTES + in_panel),
                                   sm90::desc_advance(k_desc, (kk / 4) * C::KV_PANEL_BYTES + in_panel), kk > 0);
  }
  sm90::wgmma_commit();
}

// O += P V: key step kk is rows 16kk.. of V = two 8-row atoms (2048 bytes) further; the
// head_dim (N) panels are KV_PANEL_BYTES apart (the MN-major descriptor's LBO).
template <typename T, typename C>
__device__ __forceinline__ void issue_pv(float (&O)[C::O_REGS], const uint32_t (&P)[C::BLOCK_KV / 16][4],
                                         uint32_t v_smem) {
  const uint64_t v_desc = sm90::desc_sw128(v_smem, C::KV_PANEL_BYTES, 1024);
#pragma unroll
  for (int kk = 0; kk < C::BLOCK_KV / 16; kk++) sm90::wgmma_rs<T, C::DIM>(O, P[kk], sm90::desc_advance(v_desc, kk * 2048));
  sm90::wgmma_commit();
}

// KV tiles kv_tile0 .. kv_tile0 + n_kv_tiles - 1 of one item; `finish(O, row_max, row_sum, row0)` then takes
// the unnormalised rows (the stores, or a split part's hand-over). `next()` runs once, under the last P V (or at
// the end of an item with no KV tile).
template <typename T, typename C, typename Finish, typename Next>
__device__ void consume_item(const FwdParams& p, const CtaWork& w, uint32_t smem,
                             Barriers<C::STAGES> bars, const PingPong<C>& turns, sm90::Progress& done,
                             uint32_t rank, Finish&& finish, Next&& next) {
  const int consumer = turns.consumer;
  const int warp_in_group = (threadIdx.x % 128) / 32;
  const int row0 = w.q_start + consumer * 64 + warp_in_group * 16 + (threadIdx.x % 32) / 4;
  float O[C::O_REGS];
#pragma unroll
  for (int i = 0; i < C::O_REGS; i++) O[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  const float scale_log2 = p.scale * LOG2E;
  // This warpgroup's 64 rows start 64 rows into every Q panel (8 swizzle atoms: aligned).
  const uint32_t q_smem = smem + consumer * 64 * 128;
  const auto k_smem = [&](int s) { return smem + C::K_OFFSET + s * 2 * C::KV_BYTES; };
  // Stage and phase parity of the item's KV tile `tile` in the ring.
  const auto stage = [&](int tile) { return (done.kv_tiles + tile) % C::STAGES; };
  const auto parity = [&](int tile) { return uint32_t((done.kv_tiles + tile) / C::STAGES) & 1; };
  // This CTA is done reading a K or V slot; in a cluster the other CTA's producer, which writes its
  // share of the slot here too, hears it from one thread per warp (the wgmma reads of the whole warp
  // retired at the wait before).
  const auto release = [&](uint32_t bar) {
    sm90::mbar_arrive(bar);
    if constexpr (C::CLUSTER > 1) sm90::mbar_arrive_cluster(bar, rank ^ 1, threadIdx.x % 32 == 0);
  };
  const int n = w.n_kv_tiles;
  float S[C::S_REGS];
  uint32_t P[C::BLOCK_KV / 16][4];  // P(t-1), read by the P V wgmma in flight during softmax(t)
  float alpha[2];

  // Masks keys past seqlen_k and after the diagonal (if the tile may need it), then the first half of the softmax.
  const auto softmax = [&](int tile, auto may_mask) {
    const int kv_start = (w.kv_tile0 + tile) * C::BLOCK_KV;
    if constexpr (decltype(may_mask)::value)
      if (tile_needs_mask<C::BLOCK_KV>(p, w, kv_start)) mask_scores(S, p, w, row0, kv_start);
    softmax_exp<C>(S, row_max, row_sum, alpha, scale_log2);
  };
  const std::true_type may_mask;
  // P(tile) V(tile) is done (tile < 0: none was issued): free its V, O *= alpha, P = the next P.
  // It runs at the top of the next step, after that step's mbarrier waits: ptxas hoists a wgmma
  // wait to the start of its basic block, so written right after softmax(t) the wait ran before
  // the softmax, which then never overlapped its own warpgroup's P V (docs/perf-notes-hopper.md,
  // session 6).
  const auto retire = [&](int tile) {
    sm90::wgmma_wait<0>();
    sm90::fence_regs(O);
    sm90::fence_regs(P);  // P(t-1) stays untouched until its wgmma has retired
    if (tile >= 0) release(bars.v_empty(stage(tile)));
    rescale_and_pack<T, C>(S, O, alpha, P);
    sm90::fence_regs(O);  // keeps the rescale and the packing ahead of the next wgmma.fence
    sm90::fence_regs(P);
  };
  // Step t >= 1: S(t), and O += P(t-1) V(t-1). (A lambda: the form whose machine code was measured in session 18;
  // written inline in the loop, as before, the 128-key and d64 kernels compile with one compare's operands swapped.)
  const auto step = [&](int tile, auto tile_may_mask) {
    const uint32_t base = C::PIN_BASE ? sm90::shared_base_anew() : smem;
    const auto k_smem = [&](int s) { return base + C::K_OFFSET + s * 2 * C::KV_BYTES; };
    const uint32_t q_smem = base + consumer * 64 * 128;
    const int s = stage(tile), prev = stage(tile - 1);
    sm90::mbar_wait(bars.k_full(s), parity(tile));
    // V(t-1) landed with K(t-1), long ago; waiting here keeps every branch out of the span
    // between wgmma.fence and the last wgmma (ptxas would inject a warpgroup.arrive, C7519).
    sm90::mbar_wait(bars.v_full(prev), parity(tile - 1));
    if (C::RETIRE_AT_TOP) retire(tile - 2);  // P(t-2) V(t-2) ran under softmax(t-1)
    turns.wait_turn();
    sm90::wgmma_fence();
    issue_s<T, C>(S, q_smem, k_smem(s));
    issue_pv<T, C>(O, P, k_smem(prev) + C::KV_BYTES);  // O += P(t-1) V(t-1), queued behind S(t)
    turns.pass_turn();
    sm90::wgmma_wait<FA_HOPPER_OVERLAP ? 1 : 0>();  // S(t) only: P V may still run (see retire)
    sm90::fence_regs(S);
    release(bars.k_empty(s));
    if (FA_HOPPER_EARLY_Q_RELEASE && tile == n - 1) sm90::mbar_arrive(bars.q_empty());
    softmax(tile, tile_may_mask);
    if (!C::RETIRE_AT_TOP) retire(tile - 1);
  };
  // The last tile's P V; `next()` under it. (Also a lambda as measured: written out in place, ptxas compiled six of
  // the kernels differently.)
  const auto last_pv = [&] {
    const int s = stage(n - 1);
    sm90::mbar_wait(bars.v_full(s), parity(n - 1));
    if (C::RETIRE_AT_TOP) retire(n - 2);
    sm90::wgmma_fence();
    issue_pv<T, C>(O, P, k_smem(s) + C::KV_BYTES);
    next();
    sm90::wgmma_wait<0>();
    sm90::fence_regs(O);
    trace::mark(turns.consumer + 1, done.q_loads, trace::LAST_PV_RETIRED);
    release(bars.v_empty(s));
  };

  // One block for tile 0, the loop and the last P V: with the loop outside it, ptxas saw a path
  // from the loop (a P V in flight) past a skipped last block and injected a wait (C7517).
  if (n > 0) {
    const int role = consumer + 1;
    trace::mark(role, done.q_loads, trace::BEGIN);
    // tile 0: S only (O is still zero)
    sm90::mbar_wait(bars.q_full(), done.q_loads & 1);
    trace::mark(role, done.q_loads, trace::Q_LANDED);
    sm90::mbar_wait(bars.k_full(stage(0)), parity(0));
    turns.wait_turn();
    trace::mark(role, done.q_loads, trace::S0_TURN);
    sm90::wgmma_fence();
    issue_s<T, C>(S, q_smem, k_smem(stage(0)));
    turns.pass_turn();
    sm90::wgmma_wait<0>();
    sm90::fence_regs(S);
    trace::mark(role, done.q_loads, trace::S0_RETIRED);
    release(bars.k_empty(stage(0)));
    if (FA_HOPPER_EARLY_Q_RELEASE && n == 1) sm90::mbar_arrive(bars.q_empty());
    softmax(0, may_mask);
    if (!C::RETIRE_AT_TOP) retire(-1);  // P(0); then each retire right after its softmax
    trace::mark(role, done.q_loads, trace::LOOP_IN);
    int tile = 1;
    if constexpr (C::UNMASKED_LOOP)
      for (const int first_masked = first_masked_tile<C::BLOCK_KV>(p, w, n); tile < first_masked; tile++)
        step(tile, std::false_type{});
    for (; tile < n; tile++) step(tile, may_mask);
    trace::mark(role, done.q_loads, trace::LOOP_OUT);
    last_pv();
    if (!FA_HOPPER_EARLY_Q_RELEASE) sm90::mbar_arrive(bars.q_empty());
    done.kv_tiles += n;
    done.q_loads++;
  } else {
    next();
  }
  // The next item's loads are already under way while these stores drain.
  finish(O, row_max, row_sum, row0);
}

template <typename T, typename C>
__device__ __forceinline__ void store_rows(const FwdParams& p, const CtaWork& w, int row0, float (&O)[C::O_REGS],
                                           const float (&row_max)[2], const float (&row_sum)[2], uint32_t smem) {
  store_wgmma_rows_via<C::STAGED_STORE, T>(p, w, row0, O, row_max, row_sum, 1.f, smem + C::STAGE_OFFSET,
                                           [&p](float m, float l) { return m * p.scale + logf(l); });
}

}  // namespace hopper
#endif  // FA_SM90A

template <typename T, int DIM, int BLOCK_KV, int CLUSTER, int CONSUMERS>
__global__ void __launch_bounds__(HopperTiles<DIM, BLOCK_KV, CLUSTER, CONSUMERS>::THREADS, 1)
    fwd_hopper_kernel(const FwdParams p, const __grid_constant__ CUtensorMap map_q,
                      const __grid_constant__ CUtensorMap map_k,
                      const __grid_constant__ CUtensorMap map_v) {
#if FA_SM90A
  using C = HopperTiles<DIM, BLOCK_KV, CLUSTER, CONSUMERS>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t smem = (smem_u32(smem_raw) + 1023) & ~1023u;  // swizzle atoms: 1024-aligned
  const hopper::Barriers<C::STAGES> bars{smem + C::BARRIER_OFFSET};
  // Work items (q tile, head) go out in rounds of gridDim.x, every other round walked backwards,
  // so that a persistent CTA that got one of the heavier items of a round gets one of the lighter
  // ones of the next (causal; the items are equal otherwise). A persistent causal grid orders
  // them heaviest first over all heads (no L2 head groups), which makes each round nearly even.
  const uint32_t items = work_items(p, C::BLOCK_Q);
  // (a cluster's two items must be two query tiles of one head: groups of one head)
  // (the dynamic causal scheduler keeps the one-CTA-per-item grouping: its counter does the balancing)
  const int head_group = C::causal_persistent(p) && !C::DYNAMIC_CAUSAL ? p.batch * p.heads_q
                         : CLUSTER > 1 || C::HEAD_GROUP > 0        ? max(C::HEAD_GROUP, 1)
                                                                   : l2_head_group(p);
  // A cluster (non-causal only) takes adjacent items, the query tiles 2i and 2i + 1 of one head (the
  // host launches clusters only for an even number of query tiles per head), round after round.
  const uint32_t rank = CLUSTER > 1 ? sm90::cluster_ctarank() : 0;
  const auto cta_item = [&](uint32_t round) {  // < 2^32: the host keeps items below 2^31
    if constexpr (CLUSTER > 1) return (round * (gridDim.x / CLUSTER) + blockIdx.x / CLUSTER) * CLUSTER + rank;
    return round * gridDim.x + (round & 1 ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
  };
  sm90::Progress done;
  // items from the dynamic causal scheduler's counter, handed from the producer to the consumers
  const bool dynamic = C::DYNAMIC_CAUSAL && p.causal;
  // The split last round (FA_HOPPER_SPLIT_TAIL; never for causal, nor with one CTA per item: no tail there).
  const auto plan = [&] { return split_plan(p, items / CLUSTER, gridDim.x / CLUSTER, BLOCK_KV, C::SPLIT_TAIL); };
  // This cluster's range of the split tail: in registers, or (TAIL_IN_SMEM) stored below and read back at each use.
  const uint32_t tail_smem = smem + C::TAIL_RANGE_OFFSET;
  const TailRange tail = C::SPLIT_TAIL && !C::TAIL_IN_SMEM ? TailRange(plan(), blockIdx.x / CLUSTER) : TailRange();
  // Work of round `round` outside the dynamic scheduler, false once the CTA is done: whole items in the full
  // rounds, then the parts of this cluster's range of the split tail (part.t1 > 0: tiles [t0, t1) only).
  const auto round_work = [&](uint32_t round, uint32_t& item, SplitPart& part) {
    part = SplitPart{0, 0, 0};
    const TailRange range = C::TAIL_IN_SMEM ? load_tail_range(tail_smem) : tail;
    if (C::SPLIT_TAIL && round >= range.first_round) {
      if (!split_part(range, round - range.first_round, part)) return false;
      item = (range.first_round * (gridDim.x / CLUSTER) + part.tail_unit) * CLUSTER + rank;
      return true;
    }
    item = cta_item(round);
    return item < items;
  };
  const auto part_work = [&](uint32_t item, const SplitPart& part) {
    CtaWork w = work_item<C::BLOCK_Q, C::BLOCK_KV>(p, item, head_group);
    if (part.t1 > 0) {
      w.kv_tile0 = part.t0;
      w.n_kv_tiles = part.t1 - part.t0;
    }
    return w;
  };

  if (threadIdx.x == 0) {
    sm90::mbar_init(bars.q_full(), 1);
    sm90::mbar_init(bars.q_empty(), C::CONSUMER_THREADS);
    for (int s = 0; s < C::STAGES; s++) {
      sm90::mbar_init(bars.k_full(s), 1);
      sm90::mbar_init(bars.v_full(s), 1);
      sm90::mbar_init(bars.k_empty(s), C::EMPTY_ARRIVALS);
      sm90::mbar_init(bars.v_empty(s), C::EMPTY_ARRIVALS);
    }
    if constexpr (C::DYNAMIC_CAUSAL) {
      for (int s = 0; s < 2; s++) {
        sm90::mbar_init(bars.item_full(s), 1);
        sm90::mbar_init(bars.item_empty(s), C::CONSUMER_THREADS);
      }
    }
    sm90::mbar_init_fence();
    if constexpr (C::TAIL_IN_SMEM) store_tail_range(tail_smem, TailRange(plan(), blockIdx.x / CLUSTER));
  }
  // The last CTA-wide barrier (roles diverge below); in a cluster, the other CTA's barriers are
  // initialised too before any multicast or remote arrival reaches them.
  if constexpr (CLUSTER > 1)
    sm90::cluster_sync();
  else
    __syncthreads();

  // shfl: warp-uniform to ptxas, so the Q descriptors (consumer-dependent) live in uniform registers
  const int group = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  if (group == 0) {
    sm90::setmaxnreg_dec<C::PRODUCER_REGS>();
    if (threadIdx.x == 0) {
      for (uint32_t round = 0;; round++) {
        uint32_t item;
        SplitPart part;
        bool more = round_work(round, item, part);
        // dynamic: items from the counter, handed to the consumers (an item past the end stops them too)
        if (dynamic) {
          item = sm90::publish_next_item(bars, round, p.tile_counter);
          more = item < items;
        }
        if (!more) break;
        hopper::produce_item<C>(part_work(item, part), smem, bars, done, &map_q, &map_k, &map_v, rank);
      }
      if constexpr (CLUSTER > 1) hopper::drain_ring<C>(bars, done);
    }
  } else {
    sm90::setmaxnreg_inc<C::CONSUMER_REGS>();
    const hopper::PingPong<C> turns{group - 1};
    turns.start();
    uint32_t item;
    SplitPart part;
    bool more;
    const auto take = [&](uint32_t round) {
      if (dynamic) {
        item = sm90::take_item(bars, round);
        part = SplitPart{0, 0, 0};
        more = item < items;
      } else {
        more = round_work(round, item, part);
      }
    };
    if constexpr (C::EARLY_NEXT) take(0);
    for (uint32_t round = 0;; round++) {
      if constexpr (!C::EARLY_NEXT) take(round);
      if (!more) break;
      const CtaWork w = part_work(item, part);
      // Whether this round's part is one of a split unit's: decided here, or (TAIL_IN_SMEM) found again at the
      // item's end, so that nothing of it stays live through the item.
      const bool split = !C::TAIL_IN_SMEM && C::SPLIT_TAIL && part.t1 > 0 && (part.t0 > 0 || part.t1 < int(tail.n));
      hopper::consume_item<T, C>(p, w, smem, bars, turns, done, rank,
                                 [&](float (&O)[C::O_REGS], float (&row_max)[2], float (&row_sum)[2], int row0) {
                                   const auto store = [&] { hopper::store_rows<T, C>(p, w, row0, O, row_max, row_sum, smem); };
                                   if constexpr (C::TAIL_IN_SMEM) {
                                     SplitPart mine;
                                     uint32_t again;
                                     if (!dynamic && round_work(round, again, mine) && mine.t1 > 0 &&
                                         (mine.t0 > 0 || mine.t1 < int(load_tail_range(tail_smem).n)))
                                       return finish_split_part<typename C::Split>(p.split_workspace, plan(),
                                                                                   mine.tail_unit, rank, turns.consumer,
                                                                                   O, row_max, row_sum,
                                                                                   p.scale * LOG2E, store);
                                   } else if constexpr (C::SPLIT_TAIL) {
                                     if (split)
                                       return finish_split_part<typename C::Split>(p.split_workspace, plan(),
                                                                                   part.tail_unit, rank, turns.consumer,
                                                                                   O, row_max, row_sum,
                                                                                   p.scale * LOG2E, store);
                                   }
                                   store();
                                 },
                                 [&] {  // (the split's finish above reads `part`: never both, see EARLY_NEXT)
                                   if constexpr (C::EARLY_NEXT) take(round + 1);
                                 });
      trace::mark(group, done.q_loads - 1, trace::STORED);
    }
    turns.finish();
  }
#endif
}

// --- host ------------------------------------------------------------------------------------

namespace hopper_host {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
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
// and block-scaled kernels build their byte maps on it too.
int encode_tiled_map(CUtensorMap* map, CUtensorMapDataType dtype, int rank, const void* ptr,
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

// 4-D map (head_dim, seq, heads, batch) over a strided (B, H, S, D) tensor; one box is 64
// columns (128 bytes, the swizzle span) x box_rows rows of one (batch, head). Rows past
// `seqlen` come back as zeros. Strides of size-1 dimensions are never stepped over, so they are
// replaced by a valid multiple of 16 bytes (a broadcast stride of 0 would be refused).
int encode_map(CUtensorMap* map, const void* ptr, const int64_t (&stride)[3], int batch,
               int heads, int seqlen, int dim, int box_rows, int dtype, char* err, int err_len) {
  const cuuint64_t sizes[4] = {cuuint64_t(dim), cuuint64_t(seqlen), cuuint64_t(heads), cuuint64_t(batch)};
  cuuint64_t bytes[3];
  bytes[0] = seqlen > 1 ? stride[2] * 2 : dim * 2;
  bytes[1] = heads > 1 ? stride[1] * 2 : bytes[0] * seqlen;
  bytes[2] = batch > 1 ? stride[0] * 2 : bytes[1] * heads;
  const cuuint32_t box[4] = {64, cuuint32_t(box_rows), 1, 1};
  return encode_tiled_map(
      map, dtype == FA_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, ptr,
      sizes, bytes, box, CU_TENSOR_MAP_SWIZZLE_128B, err, err_len);
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

template <typename T, int DIM, int BLOCK_KV, int CLUSTER, int CONSUMERS = 0>
struct HopperLaunch {
  using C = HopperTiles<DIM, BLOCK_KV, CLUSTER, CONSUMERS>;
  static constexpr auto kernel = fwd_hopper_kernel<T, DIM, BLOCK_KV, CLUSTER, CONSUMERS>;
  inline static std::atomic<int> fit_on[64];  // clusters that fit, per device (CLUSTER > 1)

  // Persistent: one CTA per SM walks the items (its next item's loads overlap this one's epilogue). Causal
  // items differ in length: a plain static walk of them measured 10% slower than one CTA per item handed out
  // by the hardware as SMs free up (16k: 515 vs 576 TFLOP/s, docs/perf-notes-hopper.md); a persistent causal
  // grid takes the balanced order of the kernel (all heads, heaviest first, every other round backwards),
  // which pays on short d64 rows only; d128 causal CTAs take their items from the dynamic scheduler's counter
  // (C::causal_persistent); elsewhere causal launches one CTA per item.
  static bool persistent(const FwdParams& p) { return FA_HOPPER_PERSISTENT && (!p.causal || C::causal_persistent(p)); }

  // Clusters (CTAs when CLUSTER is 1) of the launch.
  static int clusters(const FwdParams& p, int64_t& count, char* err, int err_len) {
    const int64_t items = work_items(p, C::BLOCK_Q);
    if (int rc = check_work_items(items, err, err_len)) return rc;
    count = items / CLUSTER;
    if (!persistent(p)) return 0;
    if constexpr (CLUSTER > 1) {
      int fit = 0;
      if (int rc = cluster_fit(kernel, fit_on, CLUSTER, C::THREADS, C::SMEM_BYTES, fit, err, err_len)) return rc;
      count = std::min<int64_t>(count, fit);
    } else {
      count = persistent_grid(items);
    }
    return 0;
  }

  // The split of a launch on `count` clusters, as the kernel computes it.
  static SplitPlan plan(const FwdParams& p, int64_t count) {
    return split_plan(p, uint32_t(work_items(p, C::BLOCK_Q) / CLUSTER), uint32_t(count), BLOCK_KV, C::SPLIT_TAIL);
  }

  // The split workspace the launch needs (bytes, 0: none) and how many of its first bytes must be zeroed.
  static int split_workspace(const FwdParams& p, int64_t& bytes, int64_t& zeroed, char* err, int err_len) {
    int64_t count = 0;
    if (int rc = clusters(p, count, err, err_len)) return rc;
    const SplitPlan split = plan(p, count);
    bytes = C::Split::bytes(split);
    zeroed = split.split() ? C::Split::zeroed_bytes(split) : 0;
    return 0;
  }

  static int launch(const FwdParams& p, cudaStream_t stream, char* err, int err_len) {
    CUtensorMap map_q, map_k, map_v;
    if (int rc = encode_map(&map_q, p.q, p.q_stride, p.batch, p.heads_q, p.seqlen_q, DIM, C::BLOCK_Q, p.dtype, err,
                            err_len))
      return rc;
    if (int rc = encode_map(&map_k, p.k, p.k_stride, p.batch, p.heads_kv, p.seqlen_k, DIM, C::KV_BOX_ROWS, p.dtype,
                            err, err_len))
      return rc;
    if (int rc = encode_map(&map_v, p.v, p.v_stride, p.batch, p.heads_kv, p.seqlen_k, DIM, C::KV_BOX_ROWS, p.dtype,
                            err, err_len))
      return rc;
    if (C::STAGED_STORE)
      if (int rc = check_staged_out(p, err, err_len)) return rc;
    if (C::DYNAMIC_CAUSAL && p.causal && (p.tile_counter == nullptr || !persistent(p)))
      return report(err, err_len, "tile_counter",
                    "the dynamic causal scheduler needs a zeroed counter and persistent CTAs");
    int64_t count = 0;
    if (int rc = clusters(p, count, err, err_len)) return rc;
    if (plan(p, count).split() && p.split_workspace == nullptr)
      return report(err, err_len, "split_workspace",
                    "this launch splits its last round: pass cuda_fa_hopper_split_workspace() bytes, the first "
                    "`zeroed` of them zeroed");
    if constexpr (CLUSTER > 1) {
      if (int rc = prepare_launch(kernel, C::SMEM_BYTES, err, err_len)) return rc;
      ClusterConfig<decltype(kernel)> c(CLUSTER, C::THREADS, C::SMEM_BYTES, stream);
      c.config.gridDim = dim3(uint32_t(count * CLUSTER));
      const cudaError_t e = cudaLaunchKernelEx(&c.config, kernel, p, map_q, map_k, map_v);
      if (e != cudaSuccess) return report(err, err_len, "kernel launch", cudaGetErrorString(e));
      return 0;
    }
    return launch_kernel(kernel, dim3(uint32_t(count)), C::THREADS, C::SMEM_BYTES, stream, err, err_len, p, map_q,
                         map_k, map_v);
  }
};

// The kernel instantiation a launch takes: non-causal d128 / d256 in clusters of their CLUSTER CTAs when the
// query tiles of a head pair up, non-causal d128 on its BLOCK_KV keys (on 128 up to FA_HOPPER_D128_SHORT_KEYS without
// clusters, and up to FA_HOPPER_D128_KV128_KEYS in them), causal
// d64 on two consumers up to FA_HOPPER_D64_SHORT_CAUSAL_ROWS; calls launcher.template operator()<HopperLaunch<...>>().
template <typename T, int DIM, typename Launcher>
int with_hopper_launch(const FwdParams& p, Launcher&& launcher) {
  constexpr int block_kv = DIM == 256 ? FA_HOPPER_D256_BLOCK_KV : DIM == 128 ? FA_HOPPER_D128_BLOCK_KV : 128;
  constexpr int cluster = DIM == 256 ? FA_HOPPER_D256_CLUSTER : DIM == 128 ? FA_HOPPER_D128_CLUSTER : 1;
  if constexpr (DIM == 64) {
    if constexpr (FA_HOPPER_D64_SHORT_CAUSAL_ROWS > 0 && FA_HOPPER_D64_CONSUMERS != 2) {
      if (p.causal && p.seqlen_q <= FA_HOPPER_D64_SHORT_CAUSAL_ROWS)
        return launcher.template operator()<HopperLaunch<T, DIM, 128, 1, 2>>();
    }
    return launcher.template operator()<HopperLaunch<T, DIM, 128, 1>>();
  } else {
    constexpr int causal_kv = DIM == 256 ? FA_HOPPER_D256_BLOCK_KV : 128;
    if (p.causal || (DIM == 128 && p.seqlen_k <= FA_HOPPER_D128_SHORT_KEYS))
      return launcher.template operator()<HopperLaunch<T, DIM, causal_kv, 1>>();
    constexpr int block_q = HopperTiles<DIM, block_kv>::BLOCK_Q;
    const bool pairs = ((p.seqlen_q + block_q - 1) / block_q) % cluster == 0;
    if constexpr (DIM == 128 && FA_HOPPER_D128_KV128_KEYS > 0 && block_kv != 128) {
      if (p.seqlen_k <= FA_HOPPER_D128_KV128_KEYS) {
        if constexpr (cluster > 1)
          if (pairs) return launcher.template operator()<HopperLaunch<T, DIM, 128, cluster>>();
        return launcher.template operator()<HopperLaunch<T, DIM, 128, 1>>();
      }
    }
    if constexpr (cluster > 1) {
      if (pairs) return launcher.template operator()<HopperLaunch<T, DIM, block_kv, cluster>>();
    }
    return launcher.template operator()<HopperLaunch<T, DIM, block_kv, 1>>();
  }
}

}  // namespace hopper_host
}  // namespace fa

// Whether causal launches at this head_dim need FwdParams::tile_counter (zeroed, one int32).
extern "C" int cuda_fa_hopper_dynamic_causal(int head_dim) { return fa::hopper_dynamic_causal(head_dim); }

extern "C" int cuda_fa_fwd_hopper(const FwdParams* p, cudaStream_t stream, char* err, int err_len) {
  return fa::dispatch<fa::HeadDims<64, 128, 256>>(*p, err, err_len, [&]<typename T, int DIM>() {
    if (int rc = fa::check_sm90("variant hopper runs on sm_90 (H100/H200) only", err, err_len)) return rc;
    return fa::hopper_host::with_hopper_launch<T, DIM>(
        *p, [&]<typename L>() { return L::launch(*p, stream, err, err_len); });
  });
}

// Bytes of FwdParams::split_workspace a launch of cuda_fa_fwd_hopper with these parameters needs (0: none; the
// pointer may stay null), and in *zeroed how many of its first bytes the caller zeroes before each launch.
// Negative: an error, described in err.
extern "C" int64_t cuda_fa_hopper_split_workspace(const FwdParams* p, int64_t* zeroed, char* err, int err_len) {
  int64_t bytes = 0;
  *zeroed = 0;
  const int rc = fa::dispatch<fa::HeadDims<64, 128, 256>>(*p, err, err_len, [&]<typename T, int DIM>() {
    if (int rc = fa::check_sm90("variant hopper runs on sm_90 (H100/H200) only", err, err_len)) return rc;
    return fa::hopper_host::with_hopper_launch<T, DIM>(
        *p, [&]<typename L>() { return L::split_workspace(*p, bytes, *zeroed, err, err_len); });
  });
  return rc != 0 ? -1 : bytes;
}

// The split tail of `units` units on `clusters` clusters with seqlen_k keys in tiles of block_kv, for the tests:
// every cluster's parts in order, 6 values each (cluster, tail unit, t0, t1, and the first and last cluster
// holding a part of that unit) into rows; returns the parts (at most max_parts written), -1 without a split.
extern "C" int cuda_fa_hopper_split_parts(uint32_t units, uint32_t clusters, int seqlen_k, int block_kv, int32_t* rows,
                                          int max_parts) {
  FwdParams p{};
  p.seqlen_k = seqlen_k;
  const fa::SplitPlan plan = fa::split_plan(p, units, clusters, block_kv, true);
  if (!plan.split()) return -1;
  int parts = 0;
  for (uint32_t g = 0; g < clusters; g++) {
    const fa::TailRange range(plan, g);
    fa::SplitPart part;
    for (uint32_t k = 0; fa::split_part(range, k, part); k++, parts++) {
      if (parts >= max_parts) continue;
      const uint32_t first_tile = part.tail_unit * plan.n;
      const int32_t row[6] = {int32_t(g), int32_t(part.tail_unit), part.t0, part.t1,
                              int32_t(plan.cluster_of(first_tile)), int32_t(plan.cluster_of(first_tile + plan.n - 1))};
      for (int i = 0; i < 6; i++) rows[6 * parts + i] = row[i];
    }
  }
  return parts;
}

// The timeline buffer of a -DFA_HOPPER_TRACE=1 build (hopper_trace.cuh, scripts/trace_hopper_gpu.py): its
// trace::BYTES copied to host memory at dst (when not null), then zeroed. Returns the byte count, 0 on a CUDA error
// (described in err), -1 in a build without the trace.
extern "C" int64_t cuda_fa_hopper_trace(void* dst, char* err, int err_len) {
#if FA_HOPPER_TRACE
  void* buffer = nullptr;
  cudaError_t e = cudaGetSymbolAddress(&buffer, fa::trace::buffer);
  if (e == cudaSuccess && dst != nullptr) e = cudaMemcpy(dst, buffer, fa::trace::BYTES, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemset(buffer, 0, fa::trace::BYTES);
  if (e != cudaSuccess) {
    fa::report(err, err_len, "trace", cudaGetErrorString(e));
    return 0;
  }
  return fa::trace::BYTES;
#else
  (void)dst, (void)err, (void)err_len;
  return -1;
#endif
}
