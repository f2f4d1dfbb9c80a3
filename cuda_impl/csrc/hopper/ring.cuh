// The shared-memory ring's mbarriers. Barriers: the 16-bit kernel's (separate k_empty / v_empty, so K(t + STAGES)
// loads while V(t) is still read; q_empty for persistent CTAs). RingBarriers: the fp8 and block-scaled kernels'
// (one kv_empty per stage, freed after P V), with run_roles, their common kernel body. The barrier protocol
// is written out in fwd_hopper.cu and fwd_hopper_fp8.cu.
#pragma once

#include "hopper/sm90.cuh"

#if FA_SM90A
namespace fa::hopper {

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
  // dynamic causal scheduler (HopperTiles::DYNAMIC_CAUSAL): slot s holds the item of rounds s, s + 2, ...
  __device__ uint32_t item_full(int s) const { return base + 8 * (2 + 4 * STAGES + s); }
  __device__ uint32_t item_empty(int s) const { return base + 8 * (4 + 4 * STAGES + s); }
  __device__ uint32_t item_slot(int s) const { return base + 8 * (6 + 4 * STAGES) + 4 * s; }
};

}  // namespace fa::hopper

namespace fa::hopper_fp8 {

// Shared addresses of the CTA's mbarriers (8 bytes each, after the tiles).
template <int STAGES>
struct RingBarriers {
  uint32_t base;
  __device__ uint32_t q_full() const { return base; }
  __device__ uint32_t k_full(int s) const { return base + 8 * (1 + s); }
  __device__ uint32_t v_full(int s) const { return base + 8 * (1 + STAGES + s); }
  __device__ uint32_t kv_empty(int s) const { return base + 8 * (1 + 2 * STAGES + s); }
  // Q's buffer is free again (count CONSUMER_THREADS): a persistent CTA's producer loads the next item's
  // Q. Persistent kernels only (C::PERSISTENT).
  __device__ uint32_t q_empty() const { return base + 8 * (1 + 3 * STAGES); }
  // The item hand-over of a dynamic scheduler (C::DYNAMIC; sm90::publish_next_item / take_item): slot s
  // holds the item of rounds s, s + 2, ...
  __device__ uint32_t item_full(int s) const { return base + 8 * (2 + 3 * STAGES + s); }
  __device__ uint32_t item_empty(int s) const { return base + 8 * (4 + 3 * STAGES + s); }
  __device__ uint32_t item_slot(int s) const { return base + 8 * (6 + 3 * STAGES) + 4 * s; }
};  // 8-byte words: 1 + 3 * STAGES, + 1 persistent (q_empty), + 5 dynamic (4 barriers, 2 slots)

// The body every kernel on this skeleton shares: thread 0 initialises the ring's barriers, one
// CTA-wide barrier (the last: roles diverge after it), then warpgroup 0 drops to PRODUCER_REGS and
// its thread 0 runs produce(); warpgroups 1.. raise to CONSUMER_REGS and run consume(consumer index).
template <typename C, typename Produce, typename Consume>
__device__ __forceinline__ void run_roles(const RingBarriers<C::STAGES>& bars, Produce&& produce,
                                          Consume&& consume) {
  if (threadIdx.x == 0) {
    sm90::mbar_init(bars.q_full(), 1);
    if constexpr (C::PERSISTENT) sm90::mbar_init(bars.q_empty(), C::CONSUMER_THREADS);
    if constexpr (C::DYNAMIC) {
      for (int s = 0; s < 2; s++) {
        sm90::mbar_init(bars.item_full(s), 1);
        sm90::mbar_init(bars.item_empty(s), C::CONSUMER_THREADS);
      }
    }
    for (int s = 0; s < C::STAGES; s++) {
      sm90::mbar_init(bars.k_full(s), 1);
      sm90::mbar_init(bars.v_full(s), 1);
      sm90::mbar_init(bars.kv_empty(s), C::CONSUMER_THREADS);
    }
    sm90::mbar_init_fence();
  }
  __syncthreads();
  const int group = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);  // warp-uniform to ptxas (see fwd_hopper.cu's kernel)
  if (group == 0) {
    sm90::setmaxnreg_dec<C::PRODUCER_REGS>();
    if (threadIdx.x == 0) produce();
  } else {
    sm90::setmaxnreg_inc<C::CONSUMER_REGS>();
    consume(group - 1);
  }
}

}  // namespace fa::hopper_fp8
#endif  // FA_SM90A
