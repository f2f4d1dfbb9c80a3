// hopper-fp8: FlashAttention-2 forward for sm_90a on e4m3 inputs (compare.formats "fp8"):
// Q, K (B, H, S, D) and V^T (B, H, D, Sk) in e4m3 with one fp32 descale per (batch, head);
// output bf16, LSE of the descaled, scaled scores.
//
// Same skeleton as fwd_hopper.cu (read its header comment first): 1 producer warpgroup issuing
// TMA into a STAGES-deep K/V ring, 2 consumer warpgroups of 64 query rows (3 at d64). Differences:
// - both products are QGMMA (wgmma .e4m3, k32, fp32 accumulate); fp8 wgmma reads shared
//   operands K-major only, which is why V arrives transposed: a V^T tile (DIM rows x BLOCK_KV
//   keys) is the K-major B operand of P @ V, the same way a K tile is for Q @ K^T;
// - P = e4m3(p) with no scale (compare.formats.quantize_p). The fp32 accumulator of S gives each
//   lane other keys than the e4m3 A fragment of P V needs. When K's rows form one flat sequence over
//   (batch, head, key) and seqlen_k % 16 == 0 (what compare.formats produces, for most lengths), a
//   5-D tensor map loads each K tile's rows key-permuted (hopper/mask.cuh wgmma_key) so that every
//   lane's scores are its own P keys and P is only packed (sm90::qgmma_a_fragment_permuted); else K
//   loads in order and sm90::qgmma_a_fragment moves the keys (byte permutes and 2 shuffles per row
//   and k-step);
// - head_dim 256: a 256-byte Q or K row is wider than the widest TMA swizzle, so both tiles load as two
//   128-byte panels (Fp8Tiles::QK_PANELS) and Q K^T's k-steps walk them; P V is two m64n128k32 halves; three K/V
//   stages fill shared memory, and O is stored from the registers;
// - descales: q_descale * k_descale * softmax scale is folded into the exponent, v_descale into
//   the final 1 / l;
// - each tile's P V goes into a fresh accumulator (S's registers, free once P is packed) and is added to O
//   in fp32: QGMMA keeps about 14 bits aligned to its accumulator, so P V summed into O itself erred with
//   the keys on non-zero-mean V. A consumer runs S, softmax and P V of a tile one after the other; the
//   other consumers' GEMMs fill the tensor cores meanwhile (hopper/mainloop_fp8.cuh kv_tiles).
//
// Barrier protocol: as fwd_hopper.cu (q_full; k_full[s], v_full[s] count 1 with expect_tx; kv_empty[s]
// count CONSUMER_THREADS; in the persistent kernels q_empty, count CONSUMER_THREADS, which each
// consumer thread arrives on after an item's last S = Q K^T, so that the producer may load the next
// item's Q). A consumer releases stage s of tile t once P(t) V(t) has retired, before it waits for
// K(t + 1): it holds one stage at a time, each of the n tiles is released exactly once by every consumer
// thread, so the argument of fwd_hopper.cu carries over, and the producer fills the other stages ahead.
#include "fwd_common.cuh"
#include "hopper/config.cuh"
#include "hopper/host.cuh"
#include "hopper/mainloop_fp8.cuh"
#include "hopper/producer.cuh"
#include "hopper/ring.cuh"
#include "hopper/scheduler.cuh"

namespace fa {

template <int DIM, bool FLAT_K, int SCHEDULE>
__global__ void __launch_bounds__(Fp8Tiles<DIM, FLAT_K, SCHEDULE>::THREADS, 1)
    fwd_hopper_fp8_kernel(const Fp8FwdParams p, const __grid_constant__ CUtensorMap map_q,
                          const __grid_constant__ CUtensorMap map_k,
                          const __grid_constant__ CUtensorMap map_vt) {
#if FA_SM90A
  using C = Fp8Tiles<DIM, FLAT_K, SCHEDULE>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t smem = (smem_u32(smem_raw) + 1023) & ~1023u;
  const hopper_fp8::RingBarriers<C::STAGES> bars{smem + C::BARRIER_OFFSET};
  sm90::Progress done;  // stays zero for one item: the ring offsets fold to constants
  // Persistent: items in the order of the one-CTA-per-item grid (all query tiles of one head, then the
  // next; causal: heaviest first), below 2^31 (the host checks)
  const uint32_t items = work_items(p.base, C::BLOCK_Q);
  const auto item_work = [&](int item) { return work_item<C::BLOCK_Q, C::BLOCK_KV>(p.base, item, 1); };
  // (an item's rows as they are: every schedule but the split tail's parts)
  const auto store_all = [](float (&)[C::O_REGS], float (&)[2], float (&)[2], float, auto&& store) { store(); };
  if constexpr (SCHEDULE == FP8_DYNAMIC) {
    // the first item is blockIdx.x, the rest come from the counter; an item past the end stops the consumers
    hopper_fp8::run_roles<C>(
        bars,
        [&] {
          for (uint32_t round = 0;; round++) {
            const uint32_t item = sm90::publish_next_item(bars, round, p.base.tile_counter);
            if (item >= items) break;
            hopper_fp8::produce_item<C>(p.base, item_work(item), smem, bars, done, &map_q, &map_k, &map_vt);
          }
        },
        [&](int consumer) {
          for (uint32_t round = 0;; round++) {
            const uint32_t item = sm90::take_item(bars, round);
            if (item >= items) break;
            hopper_fp8::consume_item<C>(p, item_work(item), smem, bars, consumer, done, store_all);
          }
        });
  } else if constexpr (!C::SPLIT_TAIL) {
    // CTA b takes items b, b + gridDim.x, ... (< 2^32: both terms are below 2^31)
    hopper_fp8::run_roles<C>(
        bars,
        [&] {
          for (uint32_t item = blockIdx.x; item < items; item += gridDim.x)
            hopper_fp8::produce_item<C>(p.base, item_work(item), smem, bars, done, &map_q, &map_k, &map_vt);
        },
        [&](int consumer) {
          for (uint32_t item = blockIdx.x; item < items; item += gridDim.x)
            hopper_fp8::consume_item<C>(p, item_work(item), smem, bars, consumer, done, store_all);
        });
  } else {
    // The same order in the full rounds, then the parts of this CTA's range of the split tail (hopper/scheduler.cuh)
    const auto plan = [&] { return split_plan(p.base, items, gridDim.x, C::BLOCK_KV, C::SPLIT_TAIL); };
    const TailRange tail(plan(), blockIdx.x);
    const auto round_work = [&](uint32_t round, uint32_t& item, SplitPart& part) {
      part = SplitPart{0, 0, 0};
      if (round >= tail.first_round) {
        if (!split_part(tail, round - tail.first_round, part)) return false;
        item = tail.first_round * gridDim.x + part.tail_unit;
        return true;
      }
      item = round * gridDim.x + blockIdx.x;
      return item < items;
    };
    const auto part_work = [&](uint32_t item, const SplitPart& part) {
      CtaWork w = item_work(item);
      if (part.t1 > 0) {
        w.kv_tile0 = part.t0;
        w.n_kv_tiles = part.t1 - part.t0;
      }
      return w;
    };
    hopper_fp8::run_roles<C>(
        bars,
        [&] {
          uint32_t item;
          SplitPart part;
          for (uint32_t round = 0; round_work(round, item, part); round++)
            hopper_fp8::produce_item<C>(p.base, part_work(item, part), smem, bars, done, &map_q, &map_k, &map_vt);
        },
        [&](int consumer) {
          uint32_t item;
          SplitPart part;
          for (uint32_t round = 0; round_work(round, item, part); round++) {
            const bool split = part.t1 > 0 && (part.t0 > 0 || part.t1 < int(tail.n));
            hopper_fp8::consume_item<C>(
                p, part_work(item, part), smem, bars, consumer, done,
                [&](float (&O)[C::O_REGS], float (&row_max)[2], float (&row_sum)[2], float scale_log2, auto&& store) {
                  if (split)
                    return finish_split_part<typename C::Split>(p.base.split_workspace, plan(), part.tail_unit, 0,
                                                                consumer, O, row_max, row_sum, scale_log2, store);
                  store();
                });
          }
        });
  }
#endif
}

}  // namespace fa

// --- host ------------------------------------------------------------------------------------

namespace fa::hopper_fp8_host {

// The split last round of a persistent launch on persistent_grid(items) CTAs, as the kernel computes it.
template <typename C>
SplitPlan launch_split_plan(const FwdParams& p) {
  const int64_t items = work_items(p, C::BLOCK_Q);
  return split_plan(p, uint32_t(items), uint32_t(persistent_grid(items)), C::BLOCK_KV, C::SPLIT_TAIL);
}

template <int DIM, bool FLAT_K, int SCHEDULE>
int launch(const Fp8FwdParams& fp, cudaStream_t stream, char* err, int err_len) {
  using C = Fp8Tiles<DIM, FLAT_K, SCHEDULE>;
  const FwdParams& p = fp.base;
  CUtensorMap map_q, map_k, map_vt;
  if (int rc = encode_map(&map_q, p.q, p.q_stride, p.batch, p.heads_q, p.seqlen_q, DIM, C::QK_SWIZZLE,
                          C::BLOCK_Q, err, err_len))
    return rc;
  if (int rc = FLAT_K ? encode_flat_k_map<C>(&map_k, p, err, err_len)
                      : encode_map(&map_k, p.k, p.k_stride, p.batch, p.heads_kv, p.seqlen_k, DIM, C::QK_SWIZZLE,
                                   C::BLOCK_KV, err, err_len))
    return rc;
  // V^T: rows are head_dim, the inner (contiguous) axis is the key.
  if (int rc = encode_map(&map_vt, p.v, p.v_stride, p.batch, p.heads_kv, DIM, p.seqlen_k,
                          C::BLOCK_KV, DIM, err, err_len))
    return rc;
  if (C::DYNAMIC && p.tile_counter == nullptr)
    return report(err, err_len, "tile_counter", "the dynamic causal scheduler needs a zeroed counter");
  if (C::STAGED_STORE)
    if (int rc = check_staged_out(p, err, err_len)) return rc;
  // persistent CTAs, one per SM (at most one per item)
  const int64_t items = work_items(p, C::BLOCK_Q);
  if (int rc = check_work_items(items, err, err_len)) return rc;
  if (launch_split_plan<C>(p).split() && p.split_workspace == nullptr)
    return report(err, err_len, "split_workspace",
                  "this launch splits its last round: pass cuda_fa_hopper_fp8_split_workspace() bytes, the first "
                  "`zeroed` of them zeroed");
  return launch_kernel(fwd_hopper_fp8_kernel<DIM, FLAT_K, SCHEDULE>, dim3(persistent_grid(items)), C::THREADS,
                       C::SMEM_BYTES, stream, err, err_len, fp, map_q, map_k, map_vt);
}

// The head dims the kernel is built for; any other is reported (before anything touches a device).
int check_head_dim(const FwdParams& p, char* err, int err_len) {
  if (p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256) return 0;
  return report(err, err_len, "head_dim", "supported: 64, 128, 256");
}

// f.template operator()<DIM>() for p.head_dim, one that check_head_dim passed.
template <typename F>
auto with_head_dim(const FwdParams& p, F&& f) {
  return p.head_dim == 64    ? f.template operator()<64>()
         : p.head_dim == 128 ? f.template operator()<128>()
                             : f.template operator()<256>();
}

}  // namespace fa::hopper_fp8_host

extern "C" int cuda_fa_fp8_params_size() { return static_cast<int>(sizeof(Fp8FwdParams)); }

// Whether causal launches at this head_dim need base.tile_counter (zeroed, one int32).
extern "C" int cuda_fa_hopper_fp8_dynamic_causal(int) { return 1; }

extern "C" int cuda_fa_fwd_hopper_fp8(const Fp8FwdParams* fp, cudaStream_t stream, char* err,
                                      int err_len) {
  using namespace fa;
  const FwdParams& p = fp->base;
  if (int rc = check_params(p, err, err_len)) return rc;
  if (p.dtype != FA_DTYPE_E4M3) return report(err, err_len, "dtype", "hopper-fp8 takes e4m3 inputs");
  if (fp->q_descale == nullptr || fp->k_descale == nullptr || fp->v_descale == nullptr)
    return report(err, err_len, "descale", "q, k and v descales are required");
  if (int rc = hopper_fp8_host::check_head_dim(p, err, err_len)) return rc;
  if (int rc = check_sm90("variant hopper-fp8 runs on sm_90 (H100/H200) only", err, err_len)) return rc;
  const bool flat = hopper_fp8_host::k_rows_flat(p);
  const auto launch = [&]<int DIM>() {
    const auto with = [&]<int SCHEDULE>() {
      return flat ? hopper_fp8_host::launch<DIM, true, SCHEDULE>(*fp, stream, err, err_len)
                  : hopper_fp8_host::launch<DIM, false, SCHEDULE>(*fp, stream, err, err_len);
    };
    if (p.causal) return with.template operator()<FP8_DYNAMIC>();
    return with.template operator()<FP8_PERSISTENT>();
  };
  return hopper_fp8_host::with_head_dim(p, launch);
}

// Bytes of base.split_workspace a launch of cuda_fa_fwd_hopper_fp8 with these parameters needs (0: none; the
// pointer may stay null), and in *zeroed how many of its first bytes the caller zeroes before each launch.
// Negative: an error, described in err. (Only persistent non-causal launches split; FLAT_K does not change
// the plan.)
extern "C" int64_t cuda_fa_hopper_fp8_split_workspace(const Fp8FwdParams* fp, int64_t* zeroed, char* err,
                                                       int err_len) {
  using namespace fa;
  const FwdParams& p = fp->base;
  *zeroed = 0;
  if (check_params(p, err, err_len)) return -1;
  if (hopper_fp8_host::check_head_dim(p, err, err_len)) return -1;
  if (p.causal) return 0;
  const auto sized = [&]<int DIM>() -> int64_t {
    using C = Fp8Tiles<DIM, true, FP8_PERSISTENT>;
    if (check_work_items(work_items(p, C::BLOCK_Q), err, err_len)) return -1;
    const SplitPlan plan = hopper_fp8_host::launch_split_plan<C>(p);
    *zeroed = plan.split() ? C::Split::zeroed_bytes(plan) : 0;
    return C::Split::bytes(plan);
  };
  return hopper_fp8_host::with_head_dim(p, sized);
}
