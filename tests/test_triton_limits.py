"""Hardware limits of the Triton launches (issue 33).

* Grids: every kernel runs on a one-dimensional grid (gridDim.x up to 2**31 - 1), since batch x heads past
  gridDim.y's 65535 failed with 'invalid argument' (batch 600 x 128 heads). CPU tests launch every variant's
  `launch` at such a shape on meta tensors with the kernel replaced by a recorder and check the grid; GPU
  tests run the shape and hold it to compare.oracle.
* Autotuning never times the user's problem: a miss times the candidates on tuning.proxy_shape's bounded
  proxy and caches the choice per tune_key. CPU tests check both pure functions and that a tuning miss
  launches only the proxy; a GPU test times a first call at a long causal shape (a hang guard, generous).
"""
import math
import time

import pytest
import torch

pytest.importorskip("triton")

from triton_impl.kernels import tuning  # noqa: E402

BIG = (600, 128, 64, 64)        # batch, heads, seqlen, head_dim: batch x heads = 76,800 > 65535
DECODE_BATCH = 70000


class _Recorder:
    """Stands in for a jit kernel: records each launch's grid and arguments, runs nothing."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((grid, args, kwargs))
        return launch


def _within_limits(grid):
    return len(grid) == 1 and 1 <= grid[0] <= tuning.MAX_GRID_X or (
        len(grid) <= 3 and grid[0] <= tuning.MAX_GRID_X and all(d <= tuning.MAX_GRID_YZ for d in grid[1:]))


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, device="meta", dtype=dtype)


# ---------------------------------------------------------------- grid arithmetic (CPU)

def test_flat_grid_keeps_the_program_count_and_refuses_past_the_limit():
    assert tuning.flat_grid(1, 76800) == (76800,)
    assert tuning.forward_grid(64, 76800, 128) == (76800,)
    assert tuning.forward_grid(1000, 6, 128) == (8 * 6,)
    assert tuning.flat_grid(2 ** 16, 2 ** 15 - 1) == (2 ** 31 - 2 ** 16,)
    with pytest.raises(ValueError, match="grid limit"):
        tuning.flat_grid(2 ** 16, 2 ** 15)


def test_flat_grid_order_is_the_former_two_dimensional_order():
    """Program i is query block i % m_tiles of slice i // m_tiles (common.program_tile), as the former
    (query block, slice) grid ran them: x fastest. Mirrored here in Python."""
    m_tiles, slices = 3, 5
    seen = [(pid % m_tiles, pid // m_tiles) for pid in range(tuning.forward_grid(3 * 128 - 7, slices, 128)[0])]
    assert seen == [(m, s) for s in range(slices) for m in range(m_tiles)]


def test_int32_row_guard():
    tuning.check_int32_rows("k", 2 ** 23 - 1, 256)
    with pytest.raises(ValueError, match="32-bit"):
        tuning.check_int32_rows("k", 2 ** 23, 256)


def test_fa2_key_offsets_go_64_bit_only_where_they_can_overflow():
    from triton_impl.kernels import fa2_pointer
    assert not fa2_pointer.wide_offsets(2 ** 20, 128, 128)              # contiguous 1M keys, d128
    assert fa2_pointer.wide_offsets(2 ** 19, 32 * 128, 32 * 128)        # (B, S, H, D) view, 512k keys, 32 heads
    assert fa2_pointer.wide_offsets(2 ** 10, 128, 2 ** 21)


_WIDE_SCRIPT = """
import math, torch
from tests.test_triton_interpret import _inputs, assert_close, reference, TOLERANCE
from triton_impl.kernels import fa2_pointer
fa2_pointer.wide_offsets = lambda *args: True
q, k, v = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in _inputs((2, 4, 2, 45, 70, 64, True), torch.float16))
out = torch.full(q.shape, float("nan"), dtype=q.dtype)
lse = torch.full(q.shape[:3], float("nan"))
fa2_pointer.launch(q, k, v, out, lse, True, 0.125)
assert_close(out, lse, *reference(q, k, v, True, 0.125), *TOLERANCE[torch.float16])
print("wide ok")
"""


def test_fa2_wide_offsets_path_under_the_interpreter():
    """The WIDE_OFFSETS kernel (64-bit key offsets) on strided (B, S, H, D) views, TRITON_INTERPRET=1 in a
    subprocess of its own (the interpreter must be set before any kernel is defined)."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(repo), str(repo / "tests"), os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, "-c", _WIDE_SCRIPT], cwd=repo, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0 and "wide ok" in run.stdout, run.stdout[-4000:] + run.stderr[-4000:]


def _fwd_16bit(module, variant):
    batch, heads, seqlen, head_dim = BIG
    q, k, v, out = (_meta(*BIG) for _ in range(4))
    lse = _meta(batch, heads, seqlen, dtype=torch.float32)
    config = tuning.candidates(variant, head_dim, False, 2)[0] if variant in tuning._CANDIDATES else None
    module.launch(q, k, v, out, lse, False, 0.125, config=config)


def _fwd_fp8(module, variant):
    batch, heads, seqlen, head_dim = BIG
    e4m3 = torch.float8_e4m3fn
    q, k = _meta(*BIG, dtype=e4m3), _meta(*BIG, dtype=e4m3)
    vt = _meta(batch, heads, head_dim, seqlen, dtype=e4m3)
    descales = [_meta(batch, heads, dtype=torch.float32) for _ in range(3)]
    out, lse = _meta(*BIG), _meta(batch, heads, seqlen, dtype=torch.float32)
    config = tuning.candidates(variant, head_dim, False, 1)[0] if variant in tuning._CANDIDATES else None
    module.launch(q, k, vt, *descales, out, lse, False, 0.125, config=config)


def _fwd_blocked(module, variant):
    batch, heads, seqlen, head_dim = BIG
    fmt = variant.split("-")[0]
    data, scales, per_byte, block = {"mxfp8": (torch.float8_e4m3fn, torch.uint8, 1, 32),
                                     "nvfp4": (torch.uint8, torch.float8_e4m3fn, 2, 16)}[fmt]
    q, k = (_meta(batch, heads, seqlen, head_dim // per_byte, dtype=data) for _ in range(2))
    q_scale, k_scale = (_meta(batch, heads, seqlen, head_dim // block, dtype=scales) for _ in range(2))
    vt = _meta(batch, heads, head_dim, seqlen // per_byte, dtype=data)
    vt_scale = _meta(batch, heads, head_dim, seqlen // block, dtype=scales)
    tensor_scales = [_meta(dtype=torch.float32) if fmt == "nvfp4" else None for _ in range(3)]
    out, lse = _meta(batch, heads, seqlen, head_dim), _meta(batch, heads, seqlen, dtype=torch.float32)
    config = tuning.candidates(variant, head_dim, False, 1)[0]
    module.launch(fmt, q, q_scale, k, k_scale, vt, vt_scale, tensor_scales, out, lse, False, 0.125, config=config)


LAUNCHES = [  # (variant, kernel module, its kernel attributes, how to launch it)
    ("fa2", "fa2_pointer", ("_fa2_fwd_pointer",), _fwd_16bit),
    ("fa2-tma", "fa2_tma", ("_fa2_fwd_tma",), _fwd_16bit),
    ("fa2-ws", "fa2_ws", ("_fa2_fwd_ws",), _fwd_16bit),
    ("fp8", "fp8_tma", ("_fp8_fwd",), _fwd_fp8),
    ("fp8-ws", "fp8_ws", (), _fwd_fp8),  # fa2_ws._fp8_fwd_ws, patched below
    ("mxfp8-dequant", "mx_dequant", ("_blocked_dequant_fwd",), _fwd_blocked),
    ("nvfp4-dequant", "mx_dequant", ("_blocked_dequant_fwd",), _fwd_blocked),
    ("mxfp8-dot-scaled", "mx_dot_scaled", ("_mxfp8_dot_scaled_fwd",), _fwd_blocked),
]


@pytest.mark.parametrize("variant,module,kernels,call", LAUNCHES, ids=[row[0] for row in LAUNCHES])
def test_every_forward_launch_fits_the_grid_limits_at_76800_heads(variant, module, kernels, call, monkeypatch):
    import importlib
    if tuning.interpreting():
        pytest.skip("checks the GPU launch path")
    mod = importlib.import_module(f"triton_impl.kernels.{module}")
    recorder = _Recorder()
    for name in kernels:
        monkeypatch.setattr(mod, name, recorder)
    from triton_impl.kernels import fa2_ws
    monkeypatch.setattr(fa2_ws, "_fp8_fwd_ws", recorder)
    call(mod, variant)
    assert len(recorder.launches) == 1
    grid = recorder.launches[0][0]
    assert _within_limits(grid), grid
    block_m = recorder.launches[0][2].get("BLOCK_M") or fa2_ws.consumers(fa2_ws.config_for(BIG[3], 2)) * 64
    assert grid == (math.ceil(BIG[2] / block_m) * BIG[0] * BIG[1],), grid  # every (block, batch, head) once


def test_the_merge_of_wide_partials_runs_in_column_slices(monkeypatch):
    """Partials wider than 32 columns merge in 32-column slices (16 programs per row tile at MLA's 512), each
    storing its columns and the first the LSE; the row tile is the packed rows, not padded to 16; a block of
    splits no more than the chunks (rounded up to a power of two)."""
    from triton_impl.kernels import decode
    if tuning.interpreting():
        pytest.skip("checks the GPU launch path")
    assert [decode.merge_tile(16, d, 8)[1] for d in (16, 64, 128, 512)] == [16, 32, 32, 32]
    assert [decode.merge_tile(rows, 128, 8)[0] for rows in (1, 3, 8, 16, 64)] == [1, 4, 8, 16, 16]
    assert [decode.merge_tile(16, 128, n)[2] for n in (2, 3, 16, 100)] == [2, 4, 16, 16]
    split, merge = _Recorder(), _Recorder()
    monkeypatch.setattr(decode, "_decode_split", split)
    monkeypatch.setattr(decode, "_decode_merge", merge)
    batch, heads, n_splits = 2, 16, 5
    q = _meta(batch, 1, heads, 576)
    cache = _meta(batch, 1024, 1, 576)
    out, lse = _meta(batch, 1, heads, 512), _meta(batch, heads, 1, dtype=torch.float32)
    ws_o = _meta(batch, 1, n_splits, heads, 512, dtype=torch.float32)
    ws_lse = _meta(batch, 1, n_splits, heads, dtype=torch.float32)
    tile = decode.tiles(576, heads)
    decode.launch(q, cache, cache[..., :512], None, None, None, None, out, lse, ws_o, ws_lse, False, 0.05, 256,
                  n_splits, tile)
    row_tiles = -(-heads // decode.MERGE_BLOCK_M)
    ((grid, _, kwargs),) = merge.launches
    assert grid == (row_tiles * 16 * batch,) and kwargs["BLOCK_D"] == 32 and kwargs["HEAD_DIM"] == 512
    assert kwargs["BLOCK_S"] == 8  # 5 chunks


def test_decode_split_plan_on_a_gpu(monkeypatch):
    """The GPU split heuristic (bf16 d128, 32 query heads, 132 SMs): two programs per SM while chunks keep
    _MIN_SHARED_CHUNK keys, else one per SM, and none split when the batch fills the SMs."""
    from triton_impl import decode
    if tuning.interpreting():
        pytest.skip("checks the GPU plan")
    monkeypatch.setattr(decode, "_sm_count", lambda index: 132)
    gpu = torch.device("cuda", 0)

    def plan(batch, heads_kv, seqlen):
        return decode.plan(batch, heads_kv, 32 // heads_kv, seqlen, 128, device=gpu)[1:]

    assert plan(1, 4, 131072) == (2048, 64)  # two per SM: 2048-key chunks
    assert plan(1, 4, 32768) == (1024, 32)   # two per SM would leave 512 keys: one per SM
    assert plan(1, 8, 8192) == (512, 16)
    assert plan(32, 4, 1024) == (1024, 1)    # 128 programs already fill 80% of the SMs
    assert plan(32, 8, 8192) == (8192, 1)


@pytest.mark.parametrize("n_splits", [1, 3])
def test_decode_launch_fits_the_grid_limits_at_70000_sequences(n_splits, monkeypatch):
    from triton_impl.kernels import decode
    if tuning.interpreting():
        pytest.skip("checks the GPU launch path")
    split, merge = _Recorder(), _Recorder()
    monkeypatch.setattr(decode, "_decode_split", split)
    monkeypatch.setattr(decode, "_decode_merge", merge)
    batch, seqlen_k, head_dim = DECODE_BATCH, 64, 64
    q = _meta(batch, 1, 1, head_dim)
    cache = _meta(batch, seqlen_k, 1, head_dim)
    out, lse = _meta(batch, 1, 1, head_dim), _meta(batch, 1, 1, dtype=torch.float32)
    tile = decode.tiles(head_dim, 1)
    ws_o = _meta(batch, 1, n_splits, 1, head_dim, dtype=torch.float32) if n_splits > 1 else None
    ws_lse = _meta(batch, 1, n_splits, 1, dtype=torch.float32) if n_splits > 1 else None
    decode.launch(q, cache, cache, None, None, None, None, out, lse, ws_o, ws_lse, False, 0.125, 64, n_splits, tile)
    assert [g for g, _, _ in split.launches] == [(n_splits * batch,)]
    assert [g for g, _, _ in merge.launches] == ([(2 * batch,)] if n_splits > 1 else [])  # two 32-column slices
    assert decode.grid(2, 8, 70000) == (2 * 8 * 70000,)


def test_gluon_launch_grid_flattens_the_logical_grid():
    from triton_impl.kernels import fa2_ws
    config = fa2_ws.config_for(64, 2)
    assert fa2_ws.grid(64, 600, 128, config) == (1, 76800)
    assert fa2_ws.launch_grid(64, 600, 128, config) == (76800,)
    assert fa2_ws.launch_grid(1000, 2, 8, config) == (6 * 16,)


# ---------------------------------------------------------------- the proxy and the key (CPU)

def _work(proxy):
    slices, group, seqlen_q, seqlen_k = proxy
    return slices * group * max(seqlen_q, tuning.PADDED) * max(seqlen_k, tuning.PADDED)


SHAPES = [  # (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim)
    (1, 8, 8, 2 ** 20, 2 ** 20, 128), (1, 8, 8, 262144, 262144, 128), (600, 128, 128, 64, 64, 64),
    (1, 64, 1, 16384, 16384, 128), (8, 32, 8, 1, 32768, 256), (1, 1, 1, 300, 517, 256), (2, 24, 8, 1000, 1000, 64),
    (4, 16, 16, 16384, 16384, 128), (1, 128, 1, 2 ** 20, 2 ** 20, 64),
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_proxy_is_bounded_and_keeps_what_the_choice_depends_on(shape):
    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim = shape
    proxy = tuning.proxy_shape(*shape)
    slices, group, sq, sk = proxy
    assert group == heads_q // heads_kv                     # GQA kept
    assert _work(proxy) <= tuning.SCORE_BUDGET               # bounded work
    assert slices * sk * head_dim <= tuning.PROXY_KV_ELEMENTS  # bounded memory
    assert sq <= tuning.PROXY_MAX_LEN and sk <= tuning.PROXY_MAX_LEN
    assert all(n & (n - 1) == 0 for n in (slices, sq, sk))  # powers of two: a bucket, not the exact shape
    assert 1 <= slices <= max(1, 2 * batch * heads_kv - 1)  # never more slices than the next power of two
    assert sq <= max(1, 2 * seqlen_q - 1) and sk <= max(1, 2 * seqlen_k - 1)


def test_proxy_examples():
    assert tuning.proxy_shape(1, 8, 8, 2 ** 20, 2 ** 20, 128) == (4, 1, 16384, 16384)
    assert tuning.proxy_shape(1, 1, 1, 300, 517, 256) == (1, 1, 512, 1024)   # small problems: the problem, rounded
    assert tuning.proxy_shape(600, 128, 128, 64, 64, 64) == (16384, 1, 64, 64)
    assert tuning.proxy_shape(1, 64, 1, 16384, 16384, 128) == (1, 64, 4096, 4096)  # one big group: lengths halved


def test_tune_key_buckets():
    meta = dict(HEAD_DIM=128, CAUSAL=True)
    key = lambda *shape, meta=meta, dtypes=(torch.bfloat16,): tuning.tune_key("fa2-tma", shape, meta, dtypes)  # noqa
    assert key(1, 8, 8, 2 ** 20, 2 ** 20, 128) == key(1, 8, 8, 2 ** 19, 2 ** 19, 128) == key(2, 8, 8, 17000, 17000, 128)
    assert key(1, 8, 8, 9000, 9000, 128) == key(1, 8, 8, 16000, 16000, 128)
    assert key(1, 8, 8, 8192, 8192, 128) != key(1, 8, 8, 16384, 16384, 128)    # 8k and 16k tuned apart
    assert key(1, 8, 8, 4096, 4096, 128) != key(1, 8, 8, 4096, 4096, 128, meta=dict(HEAD_DIM=128, CAUSAL=False))
    assert key(1, 8, 8, 4096, 4096, 128) != key(1, 8, 8, 4096, 4096, 128, dtypes=(torch.float16,))
    assert key(1, 8, 8, 4096, 4096, 128) != key(1, 8, 2, 4096, 4096, 128)      # GQA group
    assert key(1, 8, 8, 4096, 4096, 128) != key(1, 1, 1, 4096, 4096, 128)      # fewer slices than the budget


def test_a_tuning_miss_times_only_the_proxy_and_caches_the_choice(monkeypatch):
    """fa2-tma at 1M causal tokens on meta tensors: each candidate is launched on the proxy, never on the
    user's tensors; the fastest (here the second) is cached, reported by last_config, and used for the user's
    launch; a second call in the same bucket does not tune again."""
    import triton.testing

    import triton_impl
    from triton_impl.kernels import fa2_tma
    if tuning.interpreting():
        pytest.skip("checks the GPU launch path")
    recorder = _Recorder()
    tuner = fa2_tma._fa2_fwd_tma_tuned
    monkeypatch.setattr(fa2_tma, "_fa2_fwd_tma", recorder)
    monkeypatch.setattr(tuner, "kernel", recorder)
    monkeypatch.setattr(tuner, "choices", {})
    monkeypatch.setattr(tuner, "best_config", None)
    entries = tuning._CANDIDATES["fa2-tma"][(128, True, 2)]
    slow, fast = tuning._launch_dict(entries[0]), tuning._launch_dict(entries[1])

    def fake_bench(fn, **kwargs):
        fn()
        launched = recorder.launches[-1][2]
        return 1.0 if all(launched[name] == value for name, value in fast.items()) else 2.0

    monkeypatch.setattr(triton.testing, "do_bench", fake_bench)

    def call(seqlen):
        q, k, v, out = (_meta(1, 8, seqlen, 128) for _ in range(4))
        fa2_tma.launch(q, k, v, out, _meta(1, 8, seqlen, dtype=torch.float32), True, 0.088)
        return q

    q = call(2 ** 20)
    *tuning_launches, user_launch = recorder.launches
    assert len(tuning_launches) == len(entries)
    for grid, args, kwargs in tuning_launches:
        assert tuple(args[0].shape) == (1, 4, 16384, 128) and args[0] is not q  # the proxy's q
        assert grid == tuning.forward_grid(16384, 4, kwargs["BLOCK_M"])
    assert user_launch[1][0] is q
    assert all(user_launch[2][name] == value for name, value in fast.items())
    assert triton_impl.last_config("fa2-tma") == tuning.last_config("fa2-tma")
    assert tuning._entry(tuner.best_config) == entries[1]
    (config, proxy, seconds), = tuner.choices.values()
    assert proxy == (4, 1, 16384, 16384) and seconds >= 0
    call(2 ** 19)  # same bucket: no tuning
    assert len(recorder.launches) == len(entries) + 2


# ---------------------------------------------------------------- on the GPU

def _gpu_runner(variant):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    import triton_impl
    if variant is not None and (reason := triton_impl.unavailable_reason(variant)):
        pytest.skip(reason)

    def run(q, k, v, **kw):
        return triton_impl.attention(q, k, v, variant=variant, **kw)
    return run


def _sliced(x, batches):
    """x (a tensor or a QuantTensor) restricted to the given batch entries."""
    from compare import formats
    if isinstance(x, formats.QuantTensor):
        return formats.QuantTensor(x.fmt, x.data[batches], x.scale[batches], x.tensor_scale,
                                   (len(batches), *x.shape[1:]), x.transposed, x.block)
    return x[batches]


def _judge_batches(run, case, batches):
    """Run `case` at full size, hold the given batch entries to the oracle (its reference loops over batch)."""
    from compare import oracle
    inputs = oracle.make_inputs(case, "cuda")
    out, lse = run(inputs.q, inputs.k, inputs.v, causal=case.causal, scale=case.scale, return_lse=True)
    assert bool(torch.isfinite(out).all()), "non-finite outputs"
    index = torch.tensor(batches, device="cuda")
    sub = oracle.Inputs(*(_sliced(x, index) for x in (inputs.q, inputs.k, inputs.v)),
                        *(m[index] for m in (inputs.q_master, inputs.k_master, inputs.v_master)))
    return oracle.judge(out[index], lse[index], sub, case.replace(batch=len(batches)))


# batch entries of a 600 x 128 launch around slice 65535 (batch 511, head 127) and at both ends
BIG_BATCHES = [0, 1, 510, 511, 512, 599]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["fa2", "fa2-tma", "fa2-ws"])
def test_16bit_variants_at_76800_heads_pass_the_oracle(variant):
    from compare import oracle
    case = oracle.Case(batch=BIG[0], heads_q=BIG[1], heads_kv=BIG[1], seqlen_q=BIG[2], seqlen_k=BIG[2],
                       head_dim=BIG[3], fmt="bf16")
    verdict = oracle.check(_gpu_runner(variant), case, device="cuda")
    assert verdict.passed, verdict.summary()


@pytest.mark.gpu
@pytest.mark.parametrize("variant,fmt", [("fp8", "fp8"), ("fp8-ws", "fp8"), ("mxfp8-dequant", "mxfp8"),
                                         ("nvfp4-dequant", "nvfp4"), ("mxfp8-dot-scaled", "mxfp8")])
def test_quantized_variants_at_76800_heads_pass_the_oracle(variant, fmt):
    """The same grid fix in the quantized kernels; the oracle on the batch entries around slice 65535."""
    from compare import oracle
    case = oracle.Case(batch=BIG[0], heads_q=BIG[1], heads_kv=BIG[1], seqlen_q=BIG[2], seqlen_k=BIG[2],
                       head_dim=BIG[3], fmt=fmt, scale=0.1 if fmt == "fp8" else None)
    verdict = _judge_batches(_gpu_runner(variant), case, BIG_BATCHES)
    assert verdict.passed, verdict.summary()


@pytest.mark.gpu
def test_decode_at_70000_sequences_passes_the_oracle():
    """Batch on the grid's third axis failed past 65535; the oracle on sequences around 65535 and both ends,
    every sequence against an fp32 reference."""
    from compare import oracle
    run = _gpu_runner("decode")
    case = oracle.Case(batch=DECODE_BATCH, heads_q=1, heads_kv=1, seqlen_q=1, seqlen_k=64, head_dim=64, fmt="bf16")
    verdict = _judge_batches(run, case, [0, 1, 65534, 65535, 65536, 65537, DECODE_BATCH - 1])
    assert verdict.passed, verdict.summary()
    inputs = oracle.make_inputs(case, "cuda")
    out = run(inputs.q, inputs.k, inputs.v)
    want = torch.nn.functional.scaled_dot_product_attention(*(x.float() for x in (inputs.q, inputs.k, inputs.v)))
    assert (out.float() - want).abs().max() <= 2e-2
    # two key chunks per sequence: the split kernel and the merge on the flattened grid
    import triton_impl
    gen = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (torch.randn(DECODE_BATCH, s, 1, 64, device="cuda", generator=gen, dtype=torch.bfloat16)
               for s in (1, 128, 128))
    seqlens = torch.full((DECODE_BATCH,), 128, dtype=torch.int32, device="cuda")
    out = triton_impl.attention_with_kvcache(q, k, v, cache_seqlens=seqlens, num_splits=2)
    want = torch.nn.functional.scaled_dot_product_attention(*(x.transpose(1, 2).float() for x in (q, k, v)))
    assert (out.float() - want.transpose(1, 2)).abs().max() <= 2e-2


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["fa2", "fa2-tma", None])
def test_first_call_at_a_long_causal_shape_does_not_tune_at_full_size(variant, monkeypatch):
    """b1 h8 s256k d128 causal: autotuning (on the proxy) and the call within 30 s (a hang guard; the former
    full-size tuning took minutes at 1M tokens). The proxy's work stays within the budget."""
    from compare import oracle
    from triton_impl.kernels import fa2_pointer, fa2_tma
    run = _gpu_runner(variant)
    tuner = {"fa2": fa2_pointer._fa2_fwd_pointer_tuned, "fa2-tma": fa2_tma._fa2_fwd_tma_tuned}.get(variant)
    if tuner is not None:
        monkeypatch.setattr(tuner, "choices", {})  # a first call for this process's tuner
    elapsed = []

    def timed(q, k, v, **kw):
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = run(q, k, v, **kw)
        torch.cuda.synchronize()
        elapsed.append(time.perf_counter() - start)
        return result

    case = oracle.Case(batch=1, heads_q=8, heads_kv=8, seqlen_q=262144, seqlen_k=262144, head_dim=128, causal=True,
                       fmt="bf16")
    verdict = oracle.check(timed, case, device="cuda", max_rows=16)
    assert verdict.passed, verdict.summary()
    assert elapsed[0] < 30.0, f"first call took {elapsed[0]:.1f} s"
    if tuner is not None:
        (config, proxy, seconds), = tuner.choices.values()
        assert _work(proxy) <= tuning.SCORE_BUDGET and seconds < elapsed[0], (proxy, seconds)
