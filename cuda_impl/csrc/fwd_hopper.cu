// hopper: FlashAttention-2 forward for sm_90a with TMA, mbarriers and wgmma, warp-specialised.
//
// CTA = 1 + CONSUMERS warpgroups, 64 query rows per consumer (2 consumers, 128 rows; 3 at d64-d96, 192 rows, but 2
// for short causal rows), KV swept in tiles of BLOCK_KV keys (128; 176 for non-causal d128 above 1k keys; 96 at d80 /
// d96; 112 at d192; 80 at d256, where O alone takes 128 registers per consumer thread):
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
// softmax, which then runs under P V (docs/design/hopper.md has both measured).
// The consumers also take turns issuing those GEMMs (round robin on named barriers), so one's
// softmax overlaps the others' GEMMs.
// Non-causal d128 and d256 run in clusters of two CTAs (FlashAttention-3's launch) when a head's
// query tiles pair up: the pair takes query tiles 2i and 2i + 1 of one head, and each producer
// loads half the rows of every K and V tile with TMA multicast into both CTAs' rings.
// Non-causal d64 and d128 split their last, partly filled round of items over all clusters
// (hopper/scheduler.cuh): there a work item is a part of an item, KV tiles kv_tile0 .. of it.
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
#include <atomic>
#include <type_traits>

#include "fwd_common.cuh"
#include "hopper/config.cuh"
#include "hopper/host.cuh"
#include "hopper/mainloop.cuh"
#include "hopper/producer.cuh"
#include "hopper/scheduler.cuh"
#include "hopper/trace.cuh"

namespace fa {

template <typename T, int DIM, int BLOCK_KV, int CLUSTER, int CONSUMERS, bool LOCAL, bool VARLEN, int DIM_V>
__global__ void __launch_bounds__(HopperTiles<DIM, BLOCK_KV, CLUSTER, CONSUMERS, LOCAL, VARLEN, DIM_V>::THREADS, 1)
    fwd_hopper_kernel(const FwdParams p, const __grid_constant__ CUtensorMap map_q,
                      const __grid_constant__ CUtensorMap map_k,
                      const __grid_constant__ CUtensorMap map_v) {
#if FA_SM90A
  using C = HopperTiles<DIM, BLOCK_KV, CLUSTER, CONSUMERS, LOCAL, VARLEN, DIM_V>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t smem = (smem_u32(smem_raw) + 1023) & ~1023u;  // swizzle atoms: 1024-aligned
  const hopper::Barriers<C::STAGES> bars{smem + C::BARRIER_OFFSET};
  // Work items (q tile, head) go out in rounds of gridDim.x, every other round walked backwards,
  // so that a persistent CTA that got one of the heavier items of a round gets one of the lighter
  // ones of the next (causal; the items are equal otherwise). A persistent causal grid orders
  // them heaviest first over all heads (no L2 head groups), which makes each round nearly even.
  // (varlen: the true count of the packed sequences' items; the grid is sized by the longest sequence)
  const uint32_t items = C::VARLEN ? varlen_items(p, C::BLOCK_Q) : work_items(p, C::BLOCK_Q);
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
  // The split last round (C::SPLIT_TAIL; never for causal, nor with one CTA per item: no tail there).
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
  // Varlen: the producer thread walks its items forward from the last one's sequence; each consumer warp finds
  // an item's sequence anew (warp_wide: every lane of the warp calls), keeping nothing through the item.
  VarlenCursor varlen_at;
  const auto part_work = [&](uint32_t item, const SplitPart& part, auto warp_wide) {
    CtaWork w;
    if constexpr (C::VARLEN) {
      if constexpr (decltype(warp_wide)::value)
        w = varlen_item<C::BLOCK_Q>(p, item, varlen_find<C::BLOCK_Q>(p, item));
      else
        w = varlen_item<C::BLOCK_Q>(p, item, varlen_at = varlen_walk<C::BLOCK_Q>(p, item, varlen_at));
      if constexpr (C::LOCAL)
        w = local_work<C::BLOCK_Q, C::BLOCK_KV>(sequence_bounds(p, w), w);
      else
        w = sequence_work<C::BLOCK_Q, C::BLOCK_KV>(sequence_bounds(p, w), w);
    } else {
      w = work_item<C::BLOCK_Q, C::BLOCK_KV>(p, item, head_group);
      if constexpr (C::LOCAL) w = local_work<C::BLOCK_Q, C::BLOCK_KV>(p, w);
    }
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
        hopper::produce_item<C>(part_work(item, part, std::false_type{}), smem, bars, done, &map_q, &map_k, &map_v,
                                rank);
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
      const CtaWork w = part_work(item, part, std::true_type{});
      // Whether this round's part is one of a split unit's: decided here, or (TAIL_IN_SMEM) found again at the
      // item's end, so that nothing of it stays live through the item.
      const bool split = !C::TAIL_IN_SMEM && C::SPLIT_TAIL && part.t1 > 0 && (part.t0 > 0 || part.t1 < int(tail.n));
      // ip: the launch's parameters, or a varlen item's sequence lengths in them (sequence_bounds); its stores
      // take the sequence as a dense launch of its own (sequence_params: built there, not kept through the loop)
      const auto consume = [&](const FwdParams& ip) {
        hopper::consume_item<T, C>(ip, w, smem, bars, turns, done, rank,
                                   [&](float (&O)[C::O_REGS], float (&row_max)[2], float (&row_sum)[2], int row0) {
                                     const auto store = [&] {
                                       if constexpr (C::VARLEN)
                                         hopper::store_rows<T, C>(sequence_params(p, w, sizeof(T)), w, row0, O, row_max,
                                                                  row_sum, smem);
                                       else
                                         hopper::store_rows<T, C>(p, w, row0, O, row_max, row_sum, smem);
                                     };
                                     if constexpr (C::TAIL_IN_SMEM) {
                                       SplitPart mine;
                                       uint32_t again;
                                       if (!dynamic && round_work(round, again, mine) && mine.t1 > 0 &&
                                           (mine.t0 > 0 || mine.t1 < int(load_tail_range(tail_smem).n)))
                                         return finish_split_part<typename C::Split>(
                                             p.split_workspace, plan(), mine.tail_unit, rank, turns.consumer, O,
                                             row_max, row_sum, p.scale * LOG2E, store);
                                     } else if constexpr (C::SPLIT_TAIL) {
                                       if (split)
                                         return finish_split_part<typename C::Split>(
                                             p.split_workspace, plan(), part.tail_unit, rank, turns.consumer, O,
                                             row_max, row_sum, p.scale * LOG2E, store);
                                     }
                                     store();
                                   },
                                   [&] {  // (the split's finish above reads `part`: never both, see EARLY_NEXT)
                                     if constexpr (C::EARLY_NEXT) take(round + 1);
                                   });
      };
      if constexpr (C::VARLEN)
        consume(sequence_bounds(p, w));
      else
        consume(p);
      trace::mark(group, done.q_loads - 1, trace::STORED);
    }
    turns.finish();
  }
#endif
}

// --- host ------------------------------------------------------------------------------------

namespace hopper_host {

template <typename T, int DIM, int BLOCK_KV, int CLUSTER, int CONSUMERS, bool LOCAL, bool VARLEN, int DIM_V>
struct HopperLaunch {
  using C = HopperTiles<DIM, BLOCK_KV, CLUSTER, CONSUMERS, LOCAL, VARLEN, DIM_V>;
  static constexpr auto kernel = fwd_hopper_kernel<T, DIM, BLOCK_KV, CLUSTER, CONSUMERS, LOCAL, VARLEN, DIM_V>;
  inline static std::atomic<int> fit_on[64];  // clusters that fit, per device (CLUSTER > 1)

  // Persistent: one CTA per SM walks the items (its next item's loads overlap this one's epilogue). Causal
  // items differ in length: a plain static walk of them measured 10% slower than one CTA per item handed out
  // by the hardware as SMs free up (16k: 515 vs 576 TFLOP/s); a persistent causal
  // grid takes the balanced order of the kernel (all heads, heaviest first, every other round backwards),
  // which pays on short d64 rows only; d128 causal CTAs take their items from the dynamic scheduler's counter
  // (C::causal_persistent); elsewhere causal launches one CTA per item.
  static bool persistent(const FwdParams& p) { return C::PERSISTENT && (!p.causal || C::causal_persistent(p)); }

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
    // (varlen: the packed tensors are one batch entry of all the sequences' rows)
    const int batch = C::VARLEN ? 1 : p.batch;
    const int rows_q = C::VARLEN ? p.total_q : p.seqlen_q, rows_k = C::VARLEN ? p.total_k : p.seqlen_k;
    if (int rc = encode_map(&map_q, p.q, p.q_stride, batch, p.heads_q, rows_q, p.head_dim, C::BLOCK_Q, p.dtype, err,
                            err_len, C::SWIZZLE))
      return rc;
    if (int rc = encode_map(&map_k, p.k, p.k_stride, batch, p.heads_kv, rows_k, p.head_dim, C::KV_BOX_ROWS, p.dtype, err,
                            err_len, C::SWIZZLE))
      return rc;
    const int head_dim_v = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
    if (int rc = encode_map(&map_v, p.v, p.v_stride, batch, p.heads_kv, rows_k, head_dim_v, C::KV_BOX_ROWS, p.dtype,
                            err, err_len, C::SWIZZLE))
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

// Calls launcher.template operator()<T, DIM, DIM_V>() for p's dtype at the kernel head dims of p's (hopper_kernel_dim;
// DIM_V: 128 where hopper_narrow_v, else DIM; p itself keeps its own).
template <typename Launcher>
int dispatch(const FwdParams& p, char* err, int err_len, Launcher&& launcher) {
  if (!hopper_takes_head_dim(p.head_dim) || (p.head_dim_v != 0 && !hopper_takes_head_dim(p.head_dim_v)))
    return report(err, err_len, "head_dim", "variant hopper takes multiples of 8 from 32 to 256");
  FwdParams kernel_dim = p;
  kernel_dim.head_dim = hopper_kernel_dim(p.head_dim, p.head_dim_v);
  const bool narrow_v = hopper_narrow_v(p.head_dim, p.head_dim_v);
  return fa::dispatch<HeadDims<64, 80, 96, 128, 192, 256>>(kernel_dim, err, err_len, [&]<typename T, int DIM>() {
    if constexpr (DIM == 192)
      if (narrow_v) return launcher.template operator()<T, DIM, 128>();
    return launcher.template operator()<T, DIM, DIM>();
  });
}

}  // namespace hopper_host
}  // namespace fa

// Whether causal launches at this head_dim need FwdParams::tile_counter (zeroed, one int32).
extern "C" int cuda_fa_hopper_dynamic_causal(int head_dim) {
  return fa::hopper_dynamic_causal(fa::hopper_kernel_dim(head_dim));
}

// (A local launch, a window or softcap, runs on its parameters as fa::hopper_local_params rewrites them.)
extern "C" int cuda_fa_fwd_hopper(const FwdParams* params, cudaStream_t stream, char* err, int err_len) {
  const FwdParams p = fa::hopper_local(*params) ? fa::hopper_local_params(*params) : *params;
  return fa::hopper_host::dispatch(p, err, err_len, [&]<typename T, int DIM, int DIM_V>() {
    if (int rc = fa::check_sm90("variant hopper runs on sm_90 (H100/H200) only", err, err_len)) return rc;
    return fa::hopper_tile_choice<DIM, DIM_V>(p, [&]<int BLOCK_KV, int CLUSTER, int CONSUMERS, bool LOCAL, bool VARLEN>() {
      return fa::hopper_host::HopperLaunch<T, DIM, BLOCK_KV, CLUSTER, CONSUMERS, LOCAL, VARLEN, DIM_V>::launch(
          p, stream, err, err_len);
    });
  });
}

// Bytes of FwdParams::split_workspace a launch of cuda_fa_fwd_hopper with these parameters needs (0: none; the
// pointer may stay null), and in *zeroed how many of its first bytes the caller zeroes before each launch.
// Negative: an error, described in err.
extern "C" int64_t cuda_fa_hopper_split_workspace(const FwdParams* params, int64_t* zeroed, char* err, int err_len) {
  int64_t bytes = 0;
  *zeroed = 0;
  const FwdParams p = fa::hopper_local(*params) ? fa::hopper_local_params(*params) : *params;
  const int rc = fa::hopper_host::dispatch(p, err, err_len, [&]<typename T, int DIM, int DIM_V>() {
    if (int rc = fa::check_sm90("variant hopper runs on sm_90 (H100/H200) only", err, err_len)) return rc;
    return fa::hopper_tile_choice<DIM, DIM_V>(p, [&]<int BLOCK_KV, int CLUSTER, int CONSUMERS, bool LOCAL, bool VARLEN>() {
      using L = fa::hopper_host::HopperLaunch<T, DIM, BLOCK_KV, CLUSTER, CONSUMERS, LOCAL, VARLEN, DIM_V>;
      return L::split_workspace(p, bytes, *zeroed, err, err_len);
    });
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

// The timeline buffer of a -DFA_HOPPER_TRACE=1 build (hopper/trace.cuh): its
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
