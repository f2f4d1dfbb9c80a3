// A timeline of one cuda:hopper launch, for `scripts/dev.py trace`: with -DFA_HOPPER_TRACE=1 the producer
// thread and lane 0 of each consumer warpgroup's first warp write the SM's clock at fixed points of every item
// into a device buffer (cuda_fa_hopper_trace copies it out). It answers where a persistent CTA's cycles go
// between two items, which the counters only give as totals. Off (the default) every mark is empty and the
// kernels are the measured ones.
#pragma once

#include <cstdint>

#ifndef FA_HOPPER_TRACE
#define FA_HOPPER_TRACE 0
#endif

namespace fa::trace {

constexpr int CTAS = 132;   // CTAs traced (blockIdx.x below this): one persistent grid on an H200
constexpr int ROLES = 4;    // 0: the producer thread, 1..: consumer warpgroups
constexpr int ITEMS = 64;   // items per CTA (the CTA's q_loads count)
constexpr int EVENTS = 8;   // marks per item and role

// Marks, in slot order (scripts/dev.py trace reads them by these numbers; slot 0, BEGIN, in both roles).
// Producer: item begin, Q load issued (after q_empty), K(0) issued, last V issued; its last slot holds the item's KV
// tile count (a value, not a time). Consumer: item begin, Q landed, turn for S(0) taken, S(0) retired, loop entered
// (softmax(0) and P(0) done), loop left, last P V retired, rows stored (or handed over).
enum ProducerMark : int { BEGIN, Q_ISSUED, K0_ISSUED, LAST_V_ISSUED, TILES = EVENTS - 1 };
enum ConsumerMark : int { Q_LANDED = 1, S0_TURN, S0_RETIRED, LOOP_IN, LOOP_OUT, LAST_PV_RETIRED, STORED };

constexpr int64_t BYTES = int64_t(CTAS) * ROLES * ITEMS * EVENTS * 8;

#if FA_HOPPER_TRACE && defined(__CUDACC__)
__device__ unsigned long long buffer[CTAS][ROLES][ITEMS][EVENTS];
#endif

// The value (the SM clock unless given) of `event` of the CTA's item `item` for `role`, written by the role's
// first thread (a predicated store: no branch that could sit between a wgmma and its wait).
__device__ __forceinline__ void mark(int role, int item, int event, long long value = -1) {
#if FA_HOPPER_TRACE && defined(__CUDA_ARCH__)
  const long long v = value >= 0 ? value : clock64();
  if (blockIdx.x < CTAS && item < ITEMS && threadIdx.x % 128 == 0) buffer[blockIdx.x][role][item][event] = v;
#endif
}

}  // namespace fa::trace
