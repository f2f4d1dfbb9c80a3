"""Variant "fa2-ws": FlashAttention-2 forward in Gluon, Triton 3.6's explicit dialect, warp-specialized for sm_90.

Triton's tile language cannot split a program into roles on Hopper (`tl.range(warp_specialize=True)`
is Blackwell-only in 3.6, docs/journal/2026-11-29_triton.md). Gluon, shipped in the same wheel as
`triton.experimental.gluon`, can: a program here is one producer warp that issues the TMA loads and
two consumer warpgroups of 64 query rows each (three at head_dim 64), every one with its own
instruction stream, as in the CUDA kernel `cuda:hopper`. While one consumer runs its softmax, the
others' wgmma keep the tensor cores busy, which Triton's lock-step 128-row blocks only get from a
second co-resident program.

Shared memory: Q (one 64-row tile per consumer, reused for the 16-bit output store; fp8 stages its bf16
output in tiles of its own), a ring of STAGES K and V tiles. Barriers: `q_ready`; per stage `k_ready`, `v_ready`
(TMA transaction counts) and `kv_empty` (one arrival per consumer). Descriptors are 4-D over (batch, head,
seqlen, head_dim) with the inputs' own strides, so tails are zero-filled by TMA on loads and clipped on the
output store per head, and GQA is a head index (fp8's key-permuted K: fp8_ws.k_descriptor).

The same program serves `fp8-ws` (`FP8`: e4m3 operands, V^T tiles, descales) and takes two loop orders
(`OVERLAP`, chosen per head_dim and format in CONFIGS from measurements): one key tile in sequence, or
S(j) and P(j-1) V(j-1) issued back to back.
"""
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from triton_impl.kernels import tuning

ROWS = gl.constexpr(64)       # query rows per consumer warpgroup: one wgmma M
LN2 = gl.constexpr(0.6931471805599453)


@gluon.jit
def _producer(loads, CONSUMERS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, FP8: gl.constexpr,
              PERMUTED_K: gl.constexpr):
    """The TMA warp: Q once, then K and V of each key tile into the ring; `loads`: its runtime values."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, k_ready, v_ready, kv_empty, batch, head, head_kv, k_group0,
     q_row0, n_tiles) = loads
    mbarrier.expect(q_ready, CONSUMERS * q_desc.block_type.nbytes)
    for c in gl.static_range(CONSUMERS):
        tma.async_copy_global_to_shared(q_desc, [batch, head, q_row0 + c * ROWS, 0], q_ready, q_smem.index(c))
    for j in range(n_tiles):
        stage = j % STAGES
        # a fresh barrier counts as having completed the phase before its first: round 0 passes
        mbarrier.wait(kv_empty.index(stage), ((j // STAGES) & 1) ^ 1)
        mbarrier.expect(k_ready.index(stage), k_desc.block_type.nbytes)
        if PERMUTED_K:  # 16-key groups of the flattened rows: k_group0 = this head's first group (rows / 16)
            tma.async_copy_global_to_shared(k_desc, [k_group0 + j * (BLOCK_N // 16), 0, 0, 0, 0], k_ready.index(stage),
                                            k_smem.index(stage))
        else:
            tma.async_copy_global_to_shared(k_desc, [batch, head_kv, j * BLOCK_N, 0], k_ready.index(stage),
                                            k_smem.index(stage))
        mbarrier.expect(v_ready.index(stage), v_desc.block_type.nbytes)
        if FP8:  # V^T: (head_dim, keys) boxes
            tma.async_copy_global_to_shared(v_desc, [batch, head_kv, 0, j * BLOCK_N], v_ready.index(stage),
                                            v_smem.index(stage))
        else:
            tma.async_copy_global_to_shared(v_desc, [batch, head_kv, j * BLOCK_N, 0], v_ready.index(stage),
                                            v_smem.index(stage))


@gluon.jit
def _key_of_column(BLOCK_N: gl.constexpr, layout: gl.constexpr, PERMUTED_K: gl.constexpr):
    """The key (within the tile) whose score lands in each column of S. With PERMUTED_K the K tile's rows
    arrive in the order (16-key group, keys 2 apart, keys 4 apart, single keys) of the 5-D descriptor
    (fp8_ws.k_descriptor): column 16a + 8b + 2t + e holds key 16a + 4t + 2b + e, which puts in each thread the
    keys that the e4m3 A fragment of P V wants from it."""
    col = gl.arange(0, BLOCK_N, layout=layout)
    if PERMUTED_K:
        col = (col // 16) * 16 + ((col // 2) % 4) * 4 + ((col // 8) % 2) * 2 + col % 2
    return col


@gluon.jit
def _issue_scores(j, q, k_smem, k_ready, s_layout: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr,
                  STAGES: gl.constexpr):
    """Wait for K(j) and issue S = Q K(j)^T (asynchronous: the caller waits)."""
    stage = j % STAGES
    mbarrier.wait(k_ready.index(stage), (j // STAGES) & 1)
    k_tile = k_smem.index(stage).reshape([BLOCK_N, HEAD_DIM])
    return warpgroup_mma(q, k_tile.permute((1, 0)), gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout),
                         use_acc=False, is_async=True)


@gluon.jit
def _issue_pv(j, p_op, acc, v_smem, v_ready, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              FP8: gl.constexpr):
    """Wait for V(j) and issue P V(j) (asynchronous: the caller waits, then _retire_pv). 16-bit: O += P V(j)
    in O's registers. fp8: P V(j) into a fresh accumulator, since QGMMA adds its products with fewer bits
    than fp32, aligned to the accumulator: summed into O, a tile's products would be cut by O's magnitude,
    which grows with the keys (a one-signed error when V's mean is not zero)."""
    stage = j % STAGES
    mbarrier.wait(v_ready.index(stage), (j // STAGES) & 1)
    if FP8:  # fp8 wgmma reads B K-major only: the (head_dim, keys) tile of V^T, viewed as (keys, head_dim)
        v_tile = v_smem.index(stage).reshape([HEAD_DIM, BLOCK_N]).permute((1, 0))
        return warpgroup_mma(p_op, v_tile, gl.zeros_like(acc), use_acc=False, is_async=True)
    v_tile = v_smem.index(stage).reshape([BLOCK_N, HEAD_DIM])
    return warpgroup_mma(p_op, v_tile, acc, is_async=True)


@gluon.jit
def _retire_pv(acc, pv, FP8: gl.constexpr):
    """O after a retired _issue_pv: the product itself (16-bit) or O + P V(j) added in fp32 (fp8)."""
    if FP8:
        return acc + pv
    return pv


@gluon.jit
def _softmax(qk, j, m_i, l_i, qk_scale, offs_m, offs_n, seqlen_k, diagonal, o_layout: gl.constexpr,
             p_dtype: gl.constexpr, BLOCK_N: gl.constexpr, MASKED: gl.constexpr, CAUSAL: gl.constexpr,
             PERMUTED_K: gl.constexpr):
    """Online-softmax update for the raw scores of key tile j (offs_n: the key of each column). Returns P as
    the A operand of P V, the accumulator's rescale factor (in O's row layout) and the new running max and sum."""
    if MASKED:
        keys = gl.expand_dims(j * BLOCK_N + offs_n, 0)
        visible = keys < seqlen_k
        if CAUSAL:
            visible = visible & (keys <= gl.expand_dims(offs_m, 1) + diagonal)
        qk = gl.where(visible, qk * qk_scale, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(qk, 1))
        # a row that has seen no key yet keeps max -inf; subtracting 0 makes its p and alpha 0, not NaN
        m_shift = gl.where(m_new == float("-inf"), 0.0, m_new)
        p = gl.exp2(qk - gl.expand_dims(m_shift, 1))
        alpha = gl.exp2(m_i - m_shift)
    else:
        # qk_scale > 0 (checked on the host), so scaling commutes with the max
        m_new = gl.maximum(m_i, gl.max(qk, 1) * qk_scale)
        # one FFMA per score: Triton does not contract a separate multiply and subtract
        p = gl.exp2(gl.fma(qk, qk_scale, -gl.expand_dims(m_new, 1)))
        alpha = gl.exp2(m_i - m_new)
    l_new = l_i * alpha + gl.sum(p, 1)
    if PERMUTED_K:
        # columns back in key order: column 16a + 4t + 2b + e takes column 16a + 8b + 2t + e, a register of the
        # same thread, where e4m3's A fragment wants it (no shuffles; see _key_of_column)
        p = gl.reshape(gl.permute(gl.reshape(p, [ROWS, BLOCK_N // 16, 2, 4, 2]), (0, 1, 3, 2, 4)), [ROWS, BLOCK_N])
    # P in V's element type, in the register layout of wgmma's A operand (32 bits per k-step and thread);
    # fp8: e4m3 with no scale, round to nearest even (compare.formats.quantize_p), l keeps the fp32 sum
    p_op = gl.convert_layout(p.to(p_dtype),
                             gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=32 // p_dtype.primitive_bitwidth))
    alpha_o = gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    return p_op, alpha_o, m_new, l_new


@gluon.jit
def _tile(j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, m_i, l_i, acc, qk_scale, offs_m, offs_n,
          seqlen_k, diagonal, s_layout: gl.constexpr, o_layout: gl.constexpr,
          HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
          MASKED: gl.constexpr, CAUSAL: gl.constexpr, FP8: gl.constexpr, PERMUTED_K: gl.constexpr):
    """One key tile in sequence (OVERLAP off): S, wait, softmax, O *= alpha, P V, wait, release the stage."""
    qk = _issue_scores(j, q, k_smem, k_ready, s_layout, HEAD_DIM, BLOCK_N, STAGES)
    qk = warpgroup_mma_wait(0, deps=(qk, ))
    p_op, alpha_o, m_i, l_i = _softmax(qk, j, m_i, l_i, qk_scale, offs_m, offs_n, seqlen_k, diagonal, o_layout,
                                       v_smem.dtype, BLOCK_N, MASKED, CAUSAL, PERMUTED_K)
    acc = acc * alpha_o
    pv = warpgroup_mma_wait(0, deps=(_issue_pv(j, p_op, acc, v_smem, v_ready, HEAD_DIM, BLOCK_N, STAGES, FP8), ))
    acc = _retire_pv(acc, pv, FP8)
    mbarrier.arrive(kv_empty.index(j % STAGES))
    return m_i, l_i, acc


@gluon.jit
def _overlapped_tile(j, q, p_op, k_smem, v_smem, k_ready, v_ready, kv_empty, m_i, l_i, acc, qk_scale, offs_m,
                     offs_n, seqlen_k, diagonal, s_layout: gl.constexpr, o_layout: gl.constexpr,
                     HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                     MASKED: gl.constexpr, CAUSAL: gl.constexpr, FP8: gl.constexpr, PERMUTED_K: gl.constexpr):
    """Key tile j with the P V of tile j - 1 (OVERLAP on): S(j) and P(j-1) V(j-1) go to the tensor cores back
    to back, softmax(j) runs while P(j-1) V(j-1) may still be in flight; then O *= alpha(j), release j - 1."""
    qk = _issue_scores(j, q, k_smem, k_ready, s_layout, HEAD_DIM, BLOCK_N, STAGES)
    pv = _issue_pv(j - 1, p_op, acc, v_smem, v_ready, HEAD_DIM, BLOCK_N, STAGES, FP8)
    qk = warpgroup_mma_wait(1, deps=(qk, ))  # S(j) retired; P(j-1) V(j-1) may be pending
    p_op, alpha_o, m_i, l_i = _softmax(qk, j, m_i, l_i, qk_scale, offs_m, offs_n, seqlen_k, diagonal, o_layout,
                                       v_smem.dtype, BLOCK_N, MASKED, CAUSAL, PERMUTED_K)
    pv = warpgroup_mma_wait(0, deps=(pv, ))
    mbarrier.arrive(kv_empty.index((j - 1) % STAGES))
    return p_op, m_i, l_i, _retire_pv(acc, pv, FP8) * alpha_o


@gluon.jit
def _consumer(cid: gl.constexpr, args, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              CAUSAL: gl.constexpr, FP8: gl.constexpr, OVERLAP: gl.constexpr, PERMUTED_K: gl.constexpr):
    """Consumer `cid` (its 64 rows start cid * ROWS into the program's block); `args`: the runtime values
    _forward shares among the consumers (a tuple does not keep constexprs: those come one by one)."""
    (o_desc, q_smem, k_smem, v_smem, o_smem, q_ready, k_ready, v_ready, kv_empty, LSE, qk_scale, v_descale, batch, head,
     bh, q_row0, seqlen_q, seqlen_k, n_tiles) = args
    k_step: gl.constexpr = 256 // q_smem.dtype.primitive_bitwidth  # wgmma K: 16 for 16-bit, 32 for fp8
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, k_step])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, k_step])
    row0 = q_row0 + cid * ROWS
    offs_m = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    offs_n = _key_of_column(BLOCK_N, gl.SliceLayout(0, s_layout), PERMUTED_K)
    m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([ROWS], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, o_layout)

    # bottom-right causal alignment: row i sees keys j <= i + diagonal; tiles below full_tiles need no mask
    diagonal = seqlen_k - seqlen_q
    if CAUSAL:
        seen_by_all_rows = gl.minimum(seqlen_k, row0 + diagonal + 1)
    else:
        seen_by_all_rows = seqlen_k
    full_tiles = gl.minimum(gl.maximum(seen_by_all_rows, 0) // BLOCK_N, n_tiles)

    q_tile = q_smem.index(cid)
    q = q_tile.reshape([ROWS, HEAD_DIM])
    mbarrier.wait(q_ready, 0)
    if OVERLAP:
        if n_tiles > 0:
            # tile 0 alone (masked when it is not below full_tiles), then each step carries the previous P
            qk = warpgroup_mma_wait(0, deps=(_issue_scores(0, q, k_smem, k_ready, s_layout, HEAD_DIM, BLOCK_N,
                                                           STAGES), ))
            if full_tiles > 0:
                p_op, alpha_o, m_i, l_i = _softmax(qk, 0, m_i, l_i, qk_scale, offs_m, offs_n, seqlen_k, diagonal,
                                                   o_layout, v_smem.dtype, BLOCK_N, False, CAUSAL, PERMUTED_K)
            else:
                p_op, alpha_o, m_i, l_i = _softmax(qk, 0, m_i, l_i, qk_scale, offs_m, offs_n, seqlen_k, diagonal,
                                                   o_layout, v_smem.dtype, BLOCK_N, True, CAUSAL, PERMUTED_K)
            for j in range(1, full_tiles):
                p_op, m_i, l_i, acc = _overlapped_tile(j, q, p_op, k_smem, v_smem, k_ready, v_ready, kv_empty, m_i,
                                                       l_i, acc, qk_scale, offs_m, offs_n, seqlen_k, diagonal,
                                                       s_layout, o_layout, HEAD_DIM, BLOCK_N, STAGES, False,
                                                       CAUSAL, FP8, PERMUTED_K)
            for j in range(gl.maximum(full_tiles, 1), n_tiles):
                p_op, m_i, l_i, acc = _overlapped_tile(j, q, p_op, k_smem, v_smem, k_ready, v_ready, kv_empty, m_i,
                                                       l_i, acc, qk_scale, offs_m, offs_n, seqlen_k, diagonal,
                                                       s_layout, o_layout, HEAD_DIM, BLOCK_N, STAGES, True,
                                                       CAUSAL, FP8, PERMUTED_K)
            pv = warpgroup_mma_wait(0, deps=(_issue_pv(n_tiles - 1, p_op, acc, v_smem, v_ready, HEAD_DIM, BLOCK_N,
                                                       STAGES, FP8), ))
            acc = _retire_pv(acc, pv, FP8)
            mbarrier.arrive(kv_empty.index((n_tiles - 1) % STAGES))
    else:
        for j in range(0, full_tiles):
            m_i, l_i, acc = _tile(j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, m_i, l_i, acc, qk_scale,
                                  offs_m, offs_n, seqlen_k, diagonal, s_layout, o_layout,
                                  HEAD_DIM, BLOCK_N, STAGES, False, CAUSAL, FP8, PERMUTED_K)
        for j in range(full_tiles, n_tiles):
            m_i, l_i, acc = _tile(j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, m_i, l_i, acc, qk_scale,
                                  offs_m, offs_n, seqlen_k, diagonal, s_layout, o_layout,
                                  HEAD_DIM, BLOCK_N, STAGES, True, CAUSAL, FP8, PERMUTED_K)

    # rows that saw no key give 0 and LSE -inf
    empty = l_i == 0.0
    safe_l = gl.where(empty, 1.0, l_i)
    lse = gl.where(empty, float("-inf"), (m_i + gl.log2(safe_l)) * LN2)
    gl.store(LSE + bh.to(gl.int64) * seqlen_q + offs_m, lse, mask=offs_m < seqlen_q)
    out = acc * gl.expand_dims(gl.convert_layout(v_descale / safe_l, gl.SliceLayout(1, o_layout)), 1)
    # staged in shared memory (16-bit: Q's tile, dead after the last S), stored by TMA, which clips rows
    # past seqlen_q
    o_tile = o_smem.index(cid)
    o_tile.reshape([ROWS, HEAD_DIM]).store(out.to(o_smem.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [batch, head, row0, 0], o_tile)
    tma.store_wait(0)


@gluon.jit
def _forward(q_desc, k_desc, v_desc, o_desc, LSE, qk_scale, v_descale, seqlen_q, seqlen_k, pid_m, batch, head, head_kv,
             bh, k_group0, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
             FP8: gl.constexpr, OVERLAP: gl.constexpr, PERMUTED_K: gl.constexpr, CONSUMERS: gl.constexpr,
             CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    """One program (query block pid_m of one (batch, head)): shared memory and barriers, then the producer and
    the CONSUMERS (2 or 3) consumers."""
    q_row0 = pid_m * (CONSUMERS * ROWS)
    if CAUSAL:
        end = gl.minimum(seqlen_k, q_row0 + CONSUMERS * ROWS + seqlen_k - seqlen_q)
    else:
        end = seqlen_k
    n_tiles = gl.cdiv(gl.maximum(end, 0), BLOCK_N)

    q_smem = gl.allocate_shared_memory(q_desc.dtype, [CONSUMERS] + q_desc.block_type.shape, q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
    if FP8:  # the bf16 output does not fit fp8 Q's tiles
        o_smem = gl.allocate_shared_memory(o_desc.dtype, [CONSUMERS] + o_desc.block_type.shape, o_desc.layout)
    else:
        o_smem = q_smem
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(kv_empty.index(s), count=CONSUMERS)

    # the runtime values all consumers share in one tuple; ids and constexprs beside it, where they stay constexprs
    args = (o_desc, q_smem, k_smem, v_smem, o_smem, q_ready, k_ready, v_ready, kv_empty, LSE, qk_scale, v_descale, batch,
            head, bh, q_row0, seqlen_q, seqlen_k, n_tiles)
    loads = (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, k_ready, v_ready, kv_empty, batch, head, head_kv,
             k_group0, q_row0, n_tiles)
    if CONSUMERS == 3:  # (d64: three 64-row consumers, as cuda:hopper runs it)
        gl.warp_specialize([
            (_consumer, (0, args, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, FP8, OVERLAP, PERMUTED_K)),
            (_consumer, (1, args, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, FP8, OVERLAP, PERMUTED_K)),
            (_consumer, (2, args, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, FP8, OVERLAP, PERMUTED_K)),
            (_producer, (loads, CONSUMERS, BLOCK_N, STAGES, FP8, PERMUTED_K)),
        ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (0, args, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, FP8, OVERLAP, PERMUTED_K)),
            (_consumer, (1, args, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, FP8, OVERLAP, PERMUTED_K)),
            (_producer, (loads, CONSUMERS, BLOCK_N, STAGES, FP8, PERMUTED_K)),
        ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


@gluon.jit
def _program_tile(seqlen_q, CAUSAL: gl.constexpr, CONSUMERS: gl.constexpr):
    """(query block, batch * head) of this program in the flattened grid of launch_grid: program i is block
    i % m_tiles of slice i // m_tiles; causal grids start each head's last (heaviest) blocks first."""
    pid = gl.program_id(0)
    m_tiles = gl.cdiv(seqlen_q, CONSUMERS * ROWS)
    bh = pid // m_tiles
    pid_m = pid % m_tiles
    if CAUSAL:
        pid_m = m_tiles - 1 - pid_m
    return pid_m, bh


# integers that only bound loops or index heads: one binary for all their values
@gluon.jit(do_not_specialize=["seqlen_q", "seqlen_k", "heads_q", "group_size"])
def _fa2_fwd_ws(q_desc, k_desc, v_desc, o_desc, LSE,
                qk_scale, seqlen_q, seqlen_k, heads_q, group_size,
                HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                OVERLAP: gl.constexpr, CONSUMERS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                PRODUCER_REGS: gl.constexpr):
    pid_m, bh = _program_tile(seqlen_q, CAUSAL, CONSUMERS)
    head = bh % heads_q
    _forward(q_desc, k_desc, v_desc, o_desc, LSE, qk_scale, 1.0, seqlen_q, seqlen_k, pid_m, bh // heads_q, head,
             head // group_size, bh, 0, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, False, OVERLAP, False, CONSUMERS,
             CONSUMER_REGS, PRODUCER_REGS)


@gluon.jit(do_not_specialize=["seqlen_q", "seqlen_k", "heads_q", "heads_kv", "group_size"])
def _fp8_fwd_ws(q_desc, k_desc, vt_desc, o_desc, Q_DESCALE, K_DESCALE, V_DESCALE, LSE,
                softmax_scale_log2, seqlen_q, seqlen_k, heads_q, heads_kv, group_size,
                HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                OVERLAP: gl.constexpr, PERMUTED_K: gl.constexpr, CONSUMERS: gl.constexpr,
                CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    """e4m3 Q, K and V^T (B, Hkv, D, Sk) with one fp32 descale per (batch, head): Q's and K's fold into the
    softmax scale, V's into the final normalisation; bf16 output."""
    pid_m, bh = _program_tile(seqlen_q, CAUSAL, CONSUMERS)
    batch = bh // heads_q
    head = bh % heads_q
    head_kv = head // group_size
    bh_kv = batch * heads_kv + head_kv
    qk_scale = softmax_scale_log2 * gl.load(Q_DESCALE + bh) * gl.load(K_DESCALE + bh_kv)
    # the key-permuted K descriptor's first coordinate counts 16-row groups of K flattened over (batch, head)
    # (Sk % 16 == 0 there): bh_kv * (Sk / 16) stays in 32 bits where bh_kv * Sk rows may not
    _forward(q_desc, k_desc, vt_desc, o_desc, LSE, qk_scale, gl.load(V_DESCALE + bh_kv), seqlen_q, seqlen_k,
             pid_m, batch, head, head_kv, bh, bh_kv * (seqlen_k // 16), HEAD_DIM, BLOCK_N, STAGES, CAUSAL, True, OVERLAP, PERMUTED_K,
             CONSUMERS, CONSUMER_REGS, PRODUCER_REGS)


# per (head_dim, element bytes): BLOCK_N, STAGES, OVERLAP; shared memory = Q tiles + STAGES * (K + V) tiles (+ fp8's
# bf16 output tiles)
# OVERLAP: S(j) and P(j-1) V(j-1) issued back to back (_overlapped_tile) instead of one tile in sequence
# (measured: docs/design/triton.md, decisions). bf16 d128: three stages (224 KB) and OVERLAP, +8% over two
# stages in sequence; OVERLAP with two stages loses (the next K waits for both consumers' releases); d64 level
# either way; fp8 loses 17% with OVERLAP.
# d256: O alone takes 128 registers per consumer thread, so 64-key tiles; TMA splits each 512-byte row into
# 128-byte swizzled boxes; OVERLAP loses 17% there.
# d64: three consumers (192-row programs), +7-16% bf16 and +7-31% fp8 over two (session 12).
CONFIGS = {(64, 2): dict(BLOCK_N=128, STAGES=3, OVERLAP=False, CONSUMERS=3),
           (128, 2): dict(BLOCK_N=128, STAGES=3, OVERLAP=True),
           (256, 2): dict(BLOCK_N=64, STAGES=2, OVERLAP=False),
           (64, 1): dict(BLOCK_N=128, STAGES=4, OVERLAP=False, CONSUMERS=3),
           (128, 1): dict(BLOCK_N=128, STAGES=4, OVERLAP=False)}
# CONSUMERS (default 2): 64-row consumer warpgroups per program. setmaxnreg per role: the producer warp needs few
# registers, each consumer holds S, P and O; three consumers (13 warps) share the 64K registers at 160 each.
CONSUMER_REGS, PRODUCER_REGS = {2: 240, 3: 160}, 24
_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float8_e4m3fn: gl.float8e4nv}


_LAST_CONFIG = {}  # variant -> config_name of its latest launch (not autotuned: the table above decides)


# Causal rows up to this many queries keep two consumers where CONFIGS has three: their fewer, more masked
# 192-row programs lost 10-18% at 512 and 1k keys (d64, session 12); level at 2k.
SHORT_CAUSAL_ROWS = 1024


def config_for(head_dim, element_size, causal=False, seqlen_q=None):
    """The table's config for a launch; seqlen_q None: the table entry itself."""
    config = CONFIGS[(head_dim, element_size)]
    if consumers(config) == 3 and causal and seqlen_q is not None and seqlen_q <= SHORT_CAUSAL_ROWS:
        config = {**config, "CONSUMERS": 2}
    return config


def consumers(config):
    return config.get("CONSUMERS", 2)


def roles(config):
    """The kernel's role constexprs for `config`: consumer count and the registers of each role."""
    n = consumers(config)
    return dict(CONSUMERS=n, CONSUMER_REGS=CONSUMER_REGS[n], PRODUCER_REGS=PRODUCER_REGS)


def record_launch(variant, config, suffix=""):
    _LAST_CONFIG[variant] = config_name(config) + suffix


def last_config(variant):
    """The config of the latest launch of a Gluon variant, e.g. '128x128 ws s3 overlap'; None before one."""
    return _LAST_CONFIG.get(variant)


def config_name(config):
    name = "{}x{} ws s{}".format(consumers(config) * ROWS.value, config["BLOCK_N"], config["STAGES"])
    return name + (" overlap" if config["OVERLAP"] else "")


def box(box_rows, box_cols):
    """The block of the 4-D descriptors: one (box_rows, box_cols) tile of one (batch, head)."""
    return [1, 1, box_rows, box_cols]


def box_layout(block, dtype):
    """The shared-memory layout TMA writes a `block` of torch `dtype` in (the widest swizzle that fits)."""
    return gl.NVMMASharedLayout.get_default_for(block, _GL_DTYPES[dtype])


def descriptor(t, box_rows, box_cols, shape=None):
    """4-D TMA descriptor over t (batch, heads, rows, cols) with t's strides and a (box_rows, box_cols) box;
    `shape` overrides t's shape (a padded buffer whose extra columns must read as zeros)."""
    block = box(box_rows, box_cols)
    return TensorDescriptor(t, list(shape or t.shape), list(tuning.strides(t)), block, box_layout(block, t.dtype))


def grid(seqlen_q, batch, heads_q, config):
    """(query blocks per head, batch * heads): the programs of a launch; launch_grid flattens them."""
    return (triton.cdiv(seqlen_q, consumers(config) * ROWS.value), batch * heads_q)


def launch_grid(seqlen_q, batch, heads_q, config):
    """The one-dimensional grid the kernels run on (_program_tile takes it apart): gridDim.y's 65535 would
    bound batch * heads."""
    return tuning.flat_grid(*grid(seqlen_q, batch, heads_q, config))


def launch(q, k, v, out, lse, causal, scale, config=None):
    """Run the kernel; q/k/v need unit last stride and 16-byte aligned base and strides (checked by
    the caller), out/lse are fresh contiguous tensors."""
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    config = config or config_for(head_dim, q.element_size(), causal, seqlen_q)
    rows, block_n = ROWS.value, config["BLOCK_N"]
    record_launch("fa2-ws", config)
    return _fa2_fwd_ws[launch_grid(seqlen_q, batch, heads_q, config)](
        descriptor(q, rows, head_dim), descriptor(k, block_n, head_dim), descriptor(v, block_n, head_dim),
        descriptor(out, rows, head_dim), lse, scale * tuning.LOG2E, seqlen_q, seqlen_k, heads_q, heads_q // heads_kv,
        HEAD_DIM=head_dim, BLOCK_N=block_n, STAGES=config["STAGES"], CAUSAL=causal, OVERLAP=config["OVERLAP"],
        **roles(config), num_warps=4)
