// FP8 (e4m3) additions to hopper.cuh for sm_90a: QGMMA wrappers (wgmma .e4m3, k32, fp32
// accumulate), K-major shared-memory descriptors for 64- and 128-byte swizzles, and the
// conversion of an fp32 S accumulator into e4m3 A fragments for P @ V.
// Like hopper.cuh, everything here is compiled only inside `FA_SM90A` sections. At the end, the
// pieces of the fp8 kernel that fwd_hopper_mx.cu reuses: the mbarrier set and the score mask.
#pragma once

#include <type_traits>

#include "fwd_common.cuh"
#include "hopper.cuh"

namespace fa::sm90 {

// K-major descriptor for the swizzled rows TMA writes: SWIZZLE = row bytes (64 or 128), 8-row
// atoms of 8 * SWIZZLE bytes (SBO), atoms aligned to their size. LBO is unused for K-major
// swizzled layouts. Layout type (bits 62-63): 1 = 128-byte, 2 = 64-byte swizzle.
template <int SWIZZLE>
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t addr) {
  static_assert(SWIZZLE == 64 || SWIZZLE == 128, "desc_kmajor: 64- or 128-byte swizzle");
  constexpr uint64_t layout = SWIZZLE == 128 ? 1 : 2;
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | static_cast<uint64_t>(16 >> 4) << 16 |
         static_cast<uint64_t>(8 * SWIZZLE >> 4) << 32 | layout << 62;
}

// D (64 x 128, fp32) = A (64 x 32 e4m3, shared, K-major) * B (32 x 128 e4m3, shared, K-major)
// [+ D]. fp8 wgmma has no transpose bits: both operands must be K-major.
__device__ __forceinline__ void qgmma_ss_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                              bool accumulate) {
  asm volatile(
      "{\n.reg .pred acc;\nsetp.ne.b32 acc, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " FA_OPS64
      ", %64, %65, acc, 1, 1;\n}\n"
      : FA_ACC64(d)
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<uint32_t>(accumulate)));
}

// D (64 x N, fp32) += A (64 x 32 e4m3, registers: qgmma_a_fragment's layout) * B (32 x N e4m3,
// shared, K-major, i.e. V^T rows). N = 64, 128 or 256.
template <int N>
__device__ __forceinline__ void qgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4],
                                         uint64_t desc_b) {
  static_assert(N == 64 || N == 128 || N == 256, "qgmma_rs: N = 64, 128 or 256");
  if constexpr (N == 256) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 " FA_OPS128
        ", {%128, %129, %130, %131}, %132, 1, 1, 1;\n"
        : FA_ACC128(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
  } else if constexpr (N == 128) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " FA_OPS64
        ", {%64, %65, %66, %67}, %68, 1, 1, 1;\n"
        : FA_ACC64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
  } else {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " FA_OPS32
        ", {%32, %33, %34, %35}, %36, 1, 1, 1;\n"
        : FA_ACC32(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
  }
}

// Named barriers (ids 1..15; 0 is __syncthreads) over `threads` threads: sync waits for all of
// them, arrive only counts this warp in. Consumer warpgroups use them to take turns on the
// tensor cores.
__device__ __forceinline__ void named_bar_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}


// Two fp32 -> e4m3x2 (round to nearest even, saturating to +-448: compare.formats.round_to_e4m3),
// `lo` in the low byte. PTX puts the first source operand in the upper byte.
__device__ __forceinline__ uint32_t pack_e4m3x2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// Four fp32 -> one word of e4m3 (round to nearest even, saturating), `b0` in the lowest byte. Both pairs are
// converted into 16-bit halves of one 32-bit register: pack_e4m3x2's 16-bit result costs a zero-extension (LOP3)
// before it is merged, one per pair, 32 per 128-key tile and thread (ncu, session 16).
__device__ __forceinline__ uint32_t pack_e4m3x4(float b0, float b1, float b2, float b3) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(b0), "f"(b1), "f"(b2), "f"(b3));
  return r;
}

// 32 keys of the S accumulator (fp32, columns 32kk.. of one m64 tile) -> the e4m3 A fragment of
// one m64nNk32 wgmma.
//
// Accumulator (per warp, g = lane / 4, t = lane % 4): acc[4 * b + 2 * h + c] holds row g + 8h,
// key 8b + 2t + c (b = 0..3 inside the 32 keys; acc = S + 16 kk for keys 32kk..).
// A fragment (PTX ISA, "WGMMA .m64nNk32 register fragment layout for matrix A", 8-bit types):
// a[0] row g keys 4t..4t+3, a[1] row g+8 keys 4t..4t+3, a[2] row g keys 16+4t.., a[3] row g+8
// keys 16+4t.., lowest key in the lowest byte.
// So lane t owns key pairs (2t, 2t+1) of each 8-key block, but must hold 4t..4t+3 of each
// 16-key half: pairs move across the quad. Per row, pair "A" of a lane is its block-0/2 pair,
// pair "B" its block-1/3 pair; destination t needs the A pairs of lanes 2(t%2), 2(t%2)+1 when
// t < 2 and their B pairs when t >= 2. Each lane packs [A half0, A half1] and [B half0, B
// half1] as two words and two shuffles move them: in the first, destinations 0..3 read lanes
// 0, 2, 1, 3 and in the second 1, 3, 0, 2, so every source is read for one word per shuffle
// (even lanes offer A first, odd lanes B first). Two byte permutes per row then interleave the
// two received words into the 16-key halves.
__device__ __forceinline__ void qgmma_a_fragment(const float* acc, uint32_t (&a)[4]) {
  const int t = threadIdx.x % 4;
  const int quad = threadIdx.x % 32 - t;
  const int src_first = (t & 1) * 2 + (t >> 1);  // 0, 2, 1, 3
  const uint32_t offer_first = (t & 1) ? 0x7632 : 0x5410;  // odd lanes offer B first
  const uint32_t offer_second = offer_first ^ 0x2222;
  const uint32_t low_half = t < 2 ? 0x5410 : 0x1054;  // which received word holds keys 4t, 4t+1
  const uint32_t high_half = low_half ^ 0x2222;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    // [block0 pair, block1 pair] and [block2 pair, block3 pair] of row g + 8h.
    const uint32_t u01 = pack_e4m3x4(acc[2 * h], acc[2 * h + 1], acc[4 + 2 * h], acc[4 + 2 * h + 1]);
    const uint32_t u23 = pack_e4m3x4(acc[8 + 2 * h], acc[8 + 2 * h + 1], acc[12 + 2 * h], acc[12 + 2 * h + 1]);
    const uint32_t first = __shfl_sync(0xffffffff, __byte_perm(u01, u23, offer_first), quad + src_first);
    const uint32_t second =
        __shfl_sync(0xffffffff, __byte_perm(u01, u23, offer_second), quad + (src_first ^ 1));
    a[h] = __byte_perm(first, second, low_half);
    a[2 + h] = __byte_perm(first, second, high_half);
  }
}

// The same when the K tile was loaded key-permuted (fwd_common.cuh wgmma_key<true>): accumulator
// blocks 0 and 1 hold this lane's keys 4t..4t+3 of the 32, blocks 2 and 3 keys 16+4t..: packing
// is all that is left, no shuffles.
__device__ __forceinline__ void qgmma_a_fragment_permuted(const float* acc, uint32_t (&a)[4]) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    a[h] = pack_e4m3x4(acc[2 * h], acc[2 * h + 1], acc[4 + 2 * h], acc[4 + 2 * h + 1]);
    a[2 + h] = pack_e4m3x4(acc[8 + 2 * h], acc[8 + 2 * h + 1], acc[12 + 2 * h], acc[12 + 2 * h + 1]);
  }
}

}  // namespace fa::sm90

#if FA_SM90A
namespace fa::hopper_fp8 {

// Shared addresses of the CTA's mbarriers (8 bytes each, after the tiles).
template <int STAGES>
struct Barriers {
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
__device__ __forceinline__ void run_roles(const Barriers<C::STAGES>& bars, Produce&& produce,
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
  const int group = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);  // warp-uniform to ptxas (see fwd_hopper.cu)
  if (group == 0) {
    sm90::setmaxnreg_dec<C::PRODUCER_REGS>();
    if (threadIdx.x == 0) produce();
  } else {
    sm90::setmaxnreg_inc<C::CONSUMER_REGS>();
    consume(group - 1);
  }
}

// O *= alpha, per row of the accumulator layout (alpha[0]: row g, alpha[1]: row g + 8).
template <typename C>
__device__ __forceinline__ void rescale(float (&O)[C::O_REGS], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < C::O_REGS / 4; j++) {
    O[4 * j] *= alpha[0];
    O[4 * j + 1] *= alpha[0];
    O[4 * j + 2] *= alpha[1];
    O[4 * j + 3] *= alpha[1];
  }
}

// KV tiles 1 .. n-1 and the last P V of a consumer whose tile 0 has had its softmax (S holds its p).
// Step t waits for K(t) and V(t-1), retires P(t-2) V(t-2) (wait, free its stage, O *= alpha,
// P = pack(S): P(t-1)), issues S(t) and P(t-1) V(t-1), waits for S(t) alone and runs softmax(t)
// while P V is on the tensor cores. The retire sits at the top of the next step, after its mbarrier
// waits, and not right after softmax(t): ptxas hoists a wgmma wait to the start of its basic block,
// so a wait written after the softmax ran before it and the softmax never overlapped its own P V
// (docs/perf-notes-hopper.md, session 6). One P buffer: it is rewritten only after its P V retired.
// Without C::RETIRE_AT_TOP, the loop before session 6: P(t) packed right after softmax(t) into the
// other of two P buffers, then the wait for P(t-1) V(t-1), which ptxas moves ahead of the softmax.
// issue_qk(S, stage) and issue_pv(P, stage) issue one GEMM each, between turn_begin() and turn_end()
// (ping-pong with the other consumer; no-ops without); softmax(S, tile) leaves p in S and sets
// alpha, O's rescale factors; pack(S, P) writes P's A fragments. The ring position of the item's
// tile t is ring_tiles + t: ring_tiles counts the KV tiles of the CTA's earlier items (persistent CTAs).
// With C::UNMASKED_LOOP, tiles 1 .. first_masked - 1 run a copy of the step whose softmax(S, tile, may_mask) is
// given std::false_type (no mask branch; see fwd_hopper.cu, FA_HOPPER_D128_UNMASKED_LOOP), the rest std::true_type.
template <typename C, int P_STEPS, typename IssueQK, typename IssuePV, typename Softmax, typename Pack,
          typename TurnBegin, typename TurnEnd>
__device__ __forceinline__ void overlapped_tiles(int n_kv_tiles, int first_masked, int ring_tiles,
                                                 const Barriers<C::STAGES>& bars,
                                                 float (&S)[C::S_REGS], float (&O)[C::O_REGS],
                                                 const float (&alpha)[2], uint32_t (&P)[P_STEPS][4],
                                                 IssueQK&& issue_qk, IssuePV&& issue_pv, Softmax&& softmax,
                                                 Pack&& pack, TurnBegin&& turn_begin, TurnEnd&& turn_end) {
  const auto stage = [&](int tile) { return (ring_tiles + tile) % C::STAGES; };
  const auto parity = [&](int tile) { return uint32_t((ring_tiles + tile) / C::STAGES) & 1; };
  const auto retire = [&](int tile) {  // P(tile) V(tile) is done (tile < 0: none was issued)
    sm90::wgmma_wait<0>();
    sm90::fence_regs(O);
    sm90::fence_regs(P);
    if (tile >= 0) sm90::mbar_arrive(bars.kv_empty(stage(tile)));
    rescale<C>(O, alpha);
    pack(S, P);
    sm90::fence_regs(O);  // keeps the rescale and the packing ahead of the next wgmma.fence
    sm90::fence_regs(P);
  };
  // Step `tile`: wait for K(tile) and V(tile - 1), run before_issue(), issue S(tile) and
  // P_prev V(tile - 1), wait for S(tile) alone, softmax(tile).
  const auto step = [&](int tile, const uint32_t (&P_prev)[P_STEPS][4], auto&& before_issue, auto may_mask) {
    const int s = stage(tile), prev = stage(tile - 1);
    sm90::mbar_wait(bars.k_full(s), parity(tile));
    sm90::mbar_wait(bars.v_full(prev), parity(tile - 1));
    before_issue();
    turn_begin();
    issue_qk(S, s);
    issue_pv(P_prev, prev);
    turn_end();
    sm90::wgmma_wait<1>();  // S(tile) is done, P(tile - 1) V(tile - 1) may still run
    sm90::fence_regs(S);
    softmax(S, tile, may_mask);
  };
  // The last tile's P V, issued alone after before_issue().
  const auto last_pv = [&](const uint32_t (&P_last)[P_STEPS][4], auto&& before_issue) {
    const int last = stage(n_kv_tiles - 1);
    sm90::mbar_wait(bars.v_full(last), parity(n_kv_tiles - 1));
    before_issue();
    turn_begin();
    issue_pv(P_last, last);
    turn_end();
    sm90::wgmma_wait<0>();
    sm90::fence_regs(O);
    sm90::mbar_arrive(bars.kv_empty(last));
  };
  const auto nothing = [] {};
  const std::true_type may_mask;
  const std::false_type no_mask;
  if constexpr (!C::RETIRE_AT_TOP) {
    uint32_t P1[P_STEPS][4];
    pack(S, P);
    const auto old_step = [&](int tile, const uint32_t (&P_prev)[P_STEPS][4], uint32_t (&P_next)[P_STEPS][4],
                              auto tile_may_mask) {
      step(tile, P_prev, nothing, tile_may_mask);
      pack(S, P_next);
      sm90::wgmma_wait<0>();
      sm90::fence_regs(O);
      sm90::mbar_arrive(bars.kv_empty(stage(tile - 1)));
      rescale<C>(O, alpha);
    };
    int tile = 1;
    if constexpr (C::UNMASKED_LOOP)
      for (; tile + 1 < first_masked; tile += 2) {
        old_step(tile, P, P1, no_mask);
        old_step(tile + 1, P1, P, no_mask);
      }
    for (; tile + 1 < n_kv_tiles; tile += 2) {
      old_step(tile, P, P1, may_mask);
      old_step(tile + 1, P1, P, may_mask);
    }
    if (tile < n_kv_tiles) {
      old_step(tile, P, P1, may_mask);
      last_pv(P1, nothing);
    } else {
      last_pv(P, nothing);
    }
  } else {
    int tile = 1;
    if constexpr (C::UNMASKED_LOOP)
      for (; tile < first_masked; tile++) step(tile, P, [&] { retire(tile - 2); }, no_mask);
    for (; tile < n_kv_tiles; tile++) step(tile, P, [&] { retire(tile - 2); }, may_mask);
    last_pv(P, [&] { retire(n_kv_tiles - 2); });
  }
}

}  // namespace fa::hopper_fp8
#endif  // FA_SM90A
