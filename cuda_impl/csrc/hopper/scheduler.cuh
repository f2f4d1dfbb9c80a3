// The tile scheduler of the persistent Hopper kernels: each role's progress through the CTA's work items, the hand-over
// of an item from the producer to the consumers (dynamic causal scheduler), and the split last round of the
// non-causal kernels (fwd_hopper.cu, fwd_hopper_fp8.cu).
//
// The split last round:
//
// G clusters (CTAs when a kernel runs without clusters) take U units (a cluster's adjacent items) U / G full
// rounds at a time; a plain last round of M = U % G units would leave G - M clusters idle for a whole item
// (b4 h16 4k and b1 h16 16k at d128: 1024 pairs on 66 clusters, 15.5 rounds, 3% of the run). Split, the tail's
// M * n KV tiles (n per item) are laid end to end, unit after unit, and cut into G equal ranges, one per
// cluster (stream-K's tail): a range holds the end of one unit, whole units and the start of another. Each part
// of a split unit leaves its unnormalised O, row max and row sum in a workspace, and whichever part finishes
// last (a counter per unit and warp) merges the others into its own and stores the rows, so no part waits for
// another. The host sizes the workspace with the plan the kernel computes (split_plan on both sides).
#pragma once

#include "fwd_common.cuh"
#include "hopper/sm90.cuh"

#if FA_SM90A
namespace fa::sm90 {

// --- persistent CTAs: progress through the work items, and items handed to the consumers -------

// How far one role (producer, consumer) has got through the CTA's work items; every role advances it
// identically, so a ring slot's stage and phase parity follow from it alone.
struct Progress {
  int kv_tiles = 0;  // KV tiles of all earlier items
  int q_loads = 0;   // earlier items that loaded Q (those with at least one KV tile)
};

// A persistent CTA of a dynamic scheduler: its producer thread takes the next work item (round 0: the
// CTA's own index; after that, one past the grid per value of the zeroed counter in global memory),
// publishes it in shared memory and returns it; the consumers take it. An item past the last tells
// every role to stop. Bars names two item slots and their barriers: item_full(s) (count 1) and
// item_empty(s) (count: every consumer thread). Slot round % 2 is rewritten only after every consumer
// thread took the item of round - 2 (item_empty); mbarrier arrive (release) and wait (acquire) order
// the shared store and load.
// *counter += value at gpu scope, acquire and release in one (a counter of parts done that publishes their data).
__device__ __forceinline__ int atomic_add_acq_rel(int32_t* counter, int value) {
  int old;
  asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], %2;" : "=r"(old) : "l"(counter), "r"(value) : "memory");
  return old;
}

template <typename Bars>
__device__ __forceinline__ uint32_t publish_next_item(const Bars& bars, uint32_t round, int32_t* counter) {
  const uint32_t item = round == 0 ? blockIdx.x : gridDim.x + atomicAdd(counter, 1);
  const int s = round & 1;
  if (round >= 2) mbar_wait(bars.item_empty(s), ((round >> 1) - 1) & 1);
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(bars.item_slot(s)), "r"(item) : "memory");
  mbar_arrive(bars.item_full(s));
  return item;
}

template <typename Bars>
__device__ __forceinline__ uint32_t take_item(const Bars& bars, uint32_t round) {
  const int s = round & 1;
  mbar_wait(bars.item_full(s), (round >> 1) & 1);
  uint32_t item;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(item) : "r"(bars.item_slot(s)) : "memory");
  mbar_arrive(bars.item_empty(s));
  return item;
}

}  // namespace fa::sm90
#endif  // FA_SM90A

namespace fa {

// 32-bit arithmetic: split_plan splits only while (clusters + 1) * (tail tiles + 1) stays below 2^32, which bounds
// range_start's g * T and cluster_of's (x + 1) * clusters + T - 1.
struct SplitPlan {
  uint32_t full_rounds = 0;  // rounds of whole units before the tail
  uint32_t tail_units = 0;   // M, the units of the split tail; 0: no split
  uint32_t clusters = 1;     // G
  uint32_t n = 0;            // KV tiles per item
  __host__ __device__ bool split() const { return tail_units > 0; }
  // First tail tile of cluster g's range (g = clusters: the end of the last range).
  __host__ __device__ uint32_t range_start(uint32_t g) const { return g * (tail_units * n) / clusters; }
  // The cluster whose range holds tail tile x.
  __host__ __device__ uint32_t cluster_of(uint32_t x) const {
    return ((x + 1) * clusters + tail_units * n - 1) / (tail_units * n) - 1;
  }
};

// A split part costs about one item boundary more than the tiles it computes (its own Q load, a first S
// without overlap, the merge): the tail is split only where that takes this many tiles off the busiest cluster.
constexpr int SPLIT_MIN_SAVED_TILES = 3;

// The plan of a launch of `units` units on `clusters` clusters, KV tiles of block_kv keys (`allowed`: the
// kernel's switch). Non-causal only: causal items differ in length and take the dynamic scheduler.
__host__ __device__ inline SplitPlan split_plan(const FwdParams& p, uint32_t units, uint32_t clusters, int block_kv,
                                                bool allowed) {
  SplitPlan plan;
  plan.clusters = clusters;
  plan.n = uint32_t(p.seqlen_k + block_kv - 1) / uint32_t(block_kv);
  plan.full_rounds = units / clusters;
  const uint32_t m = units % clusters;
  const uint64_t tail_tiles = uint64_t(m) * plan.n;
  const uint64_t busiest = (tail_tiles + clusters - 1) / clusters;  // tail tiles of the longest range
  // (every range holds a tile, so the parts of a unit are the clusters cluster_of(its first tile) .. (its last))
  if (allowed && !p.causal && m > 0 && plan.n >= busiest + SPLIT_MIN_SAVED_TILES && tail_tiles >= clusters &&
      (tail_tiles + 1) * (clusters + 1) < (uint64_t(1) << 32))
    plan.tail_units = m;
  return plan;
}

// A cluster's part of the split tail: the rounds from `first_round` on take the parts of tiles [lo, hi) of
// the tail laid end to end (n per unit). first_round is ~0 without a split.
struct TailRange {
  uint32_t first_round = ~0u, lo = 0, hi = 0, n = 1;
  __host__ __device__ TailRange() {}
  __host__ __device__ TailRange(const SplitPlan& plan, uint32_t g) {
    if (!plan.split()) return;
    first_round = plan.full_rounds;
    lo = plan.range_start(g);
    hi = plan.range_start(g + 1);
    n = plan.n;
  }
};

// Part k (0, 1, ...) of a tail range: tiles [t0, t1) of tail unit `tail_unit`; false past the range's end.
struct SplitPart {
  uint32_t tail_unit;
  int t0, t1;  // t1 = 0: a whole item outside the tail
};
__host__ __device__ inline bool split_part(const TailRange& range, uint32_t k, SplitPart& part) {
  const uint32_t start = k == 0 ? range.lo : (range.lo / range.n + k) * range.n;
  if (start >= range.hi) return false;
  part.tail_unit = start / range.n;
  part.t0 = int(start - part.tail_unit * range.n);
  part.t1 = int(min(range.hi - part.tail_unit * range.n, range.n));
  return true;
}

// The workspace of a kernel whose clusters hold CLUSTER CTAs of CONSUMERS consumer warpgroups with O_REGS
// accumulators per thread: one counter per tail unit, CTA and consumer warp (zeroed by the caller before each
// launch), then per cluster two partial blocks (its range's first part, and its last when that starts a unit)
// per CTA and consumer: O, then the row maxima and sums; float4 j of thread i at 4 (128 j + i).
template <int CLUSTER_, int CONSUMERS, int O_REGS_>
struct SplitSpace {
  static constexpr int CLUSTER = CLUSTER_;
  static constexpr int O_REGS = O_REGS_;
  static constexpr int WARPS = CLUSTER * CONSUMERS * 4;  // counters per tail unit
  static constexpr int BLOCK_FLOATS = (O_REGS + 4) * 128;
  __host__ __device__ static int64_t zeroed_bytes(const SplitPlan& plan) {
    return (int64_t(plan.tail_units) * WARPS * 4 + 255) / 256 * 256;
  }
  __host__ __device__ static int64_t bytes(const SplitPlan& plan) {
    return plan.split() ? zeroed_bytes(plan) + int64_t(plan.clusters) * 2 * CLUSTER * CONSUMERS * BLOCK_FLOATS * 4
                        : 0;
  }
  // The counter of one consumer warp of CTA `rank` for tail unit `tail_unit`.
  __host__ __device__ static uint32_t counter_index(uint32_t tail_unit, uint32_t rank, int consumer, int warp) {
    return tail_unit * WARPS + (rank * CONSUMERS + consumer) * 4 + warp;
  }
  // The block (floats from the first) of `cluster`'s part of a unit whose first part is on cluster `first`, for
  // CTA `rank` and one consumer.
  __host__ __device__ static int64_t block_offset(uint32_t cluster, uint32_t first, uint32_t rank, int consumer) {
    return ((int64_t(cluster * 2 + (cluster == first)) * CLUSTER + rank) * CONSUMERS + consumer) * BLOCK_FLOATS;
  }
};

#if FA_SM90A
// A CTA's TailRange in shared memory, stored once before the role split and read back where it is used (for
// kernels whose producer or consumers have no register to keep it live across the item loop).
__device__ __forceinline__ void store_tail_range(uint32_t addr, const TailRange& r) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r.first_round), "r"(r.lo), "r"(r.hi),
               "r"(r.n) : "memory");
}
__device__ __forceinline__ TailRange load_tail_range(uint32_t addr) {
  TailRange r;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.first_round), "=r"(r.lo), "=r"(r.hi), "=r"(r.n) : "r"(addr) : "memory");
  return r;
}

// The end of one part of a split unit, per consumer warp: leave O, the row maxima and the per-thread row sums
// in this part's workspace block and count the part done. The warp that counts the unit's last part merges
// all parts' blocks, in cluster order whichever part that is, into its registers (scale_log2: what turns a score
// difference into a log2 factor) and calls store() for the rows: a fixed order makes the output the same bits on
// every call (the merge's FMAs are not symmetric in their two parts), which the benchmark's CUDA-graph replay
// check and users' reproducible runs need. Parts are the clusters plan.cluster_of(unit start) ..
// cluster_of(unit end - 1); the first of them holds the unit's first tiles (block 1: the last part of its
// range), every other one the first part of its range (block 0).
template <typename Space, typename Store>
__device__ void finish_split_part(void* workspace, const SplitPlan& plan, uint32_t tail_unit, uint32_t rank,
                                  int consumer, float (&O)[Space::O_REGS], float (&row_max)[2], float (&row_sum)[2],
                                  float scale_log2, Store&& store) {
  const uint32_t first_tile = tail_unit * plan.n;
  const uint32_t first = plan.cluster_of(first_tile), last = plan.cluster_of(first_tile + plan.n - 1);
  const int lane = threadIdx.x % 128, warp = lane / 32;
  int32_t* counters = static_cast<int32_t*>(workspace);
  float* blocks = reinterpret_cast<float*>(static_cast<char*>(workspace) + Space::zeroed_bytes(plan));
  const auto block = [&](uint32_t cluster) { return blocks + Space::block_offset(cluster, first, rank, consumer); };
  const uint32_t mine = blockIdx.x / Space::CLUSTER;
  float4* own = reinterpret_cast<float4*>(block(mine));
#pragma unroll
  for (int j = 0; j < Space::O_REGS / 4; j++)
    own[j * 128 + lane] = make_float4(O[4 * j], O[4 * j + 1], O[4 * j + 2], O[4 * j + 3]);
  own[Space::O_REGS / 4 * 128 + lane] = make_float4(row_max[0], row_max[1], row_sum[0], row_sum[1]);
  // The warp's stores, then lane 0's count, a release of them (cumulative over the warp barrier) and, for the
  // last part, an acquire of the other parts' blocks, which the warp then reads past L1 (ld.global.cg).
  __syncwarp();
  int done_before = 0;
  if (threadIdx.x % 32 == 0)
    done_before = sm90::atomic_add_acq_rel(counters + Space::counter_index(tail_unit, rank, consumer, warp), 1);
  done_before = __shfl_sync(0xffffffffu, done_before, 0);
  if (done_before != int(last - first)) return;  // another part of the unit finishes it
  // From the first part on; this warp's own part is read back from its block like the others, unless it is
  // the first (the registers hold exactly what the block does).
  for (uint32_t cluster = first; cluster <= last; cluster++) {
    const float4* other = reinterpret_cast<const float4*>(block(cluster));
    if (cluster == first) {
      if (cluster == mine) continue;
      const float4 stats = __ldcg(other + Space::O_REGS / 4 * 128 + lane);
      row_max[0] = stats.x, row_max[1] = stats.y, row_sum[0] = stats.z, row_sum[1] = stats.w;
#pragma unroll
      for (int j = 0; j < Space::O_REGS / 4; j++) {
        const float4 o = __ldcg(other + j * 128 + lane);
        O[4 * j] = o.x, O[4 * j + 1] = o.y, O[4 * j + 2] = o.z, O[4 * j + 3] = o.w;
      }
      continue;
    }
    const float4 stats = __ldcg(other + Space::O_REGS / 4 * 128 + lane);
    const float other_max[2] = {stats.x, stats.y}, other_sum[2] = {stats.z, stats.w};
    float mine_factor[2], other_factor[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const float m = fmaxf(row_max[h], other_max[h]);
      // (a part whose rows saw no key keeps max -inf: factor 0, not NaN)
      mine_factor[h] = row_max[h] == -INFINITY ? 0.f : exp2f((row_max[h] - m) * scale_log2);
      other_factor[h] = other_max[h] == -INFINITY ? 0.f : exp2f((other_max[h] - m) * scale_log2);
      row_sum[h] = row_sum[h] * mine_factor[h] + other_sum[h] * other_factor[h];
      row_max[h] = m;
    }
#pragma unroll
    for (int j = 0; j < Space::O_REGS / 4; j++) {
      const float4 o = __ldcg(other + j * 128 + lane);
      O[4 * j] = O[4 * j] * mine_factor[0] + o.x * other_factor[0];
      O[4 * j + 1] = O[4 * j + 1] * mine_factor[0] + o.y * other_factor[0];
      O[4 * j + 2] = O[4 * j + 2] * mine_factor[1] + o.z * other_factor[1];
      O[4 * j + 3] = O[4 * j + 3] * mine_factor[1] + o.w * other_factor[1];
    }
  }
  store();
}
#endif  // FA_SM90A

}  // namespace fa
