"""attention_with_kvcache's contract on the CPU: the shared checks (compare.kvcache) and the in-place append, in
both backends, and the oracle's KV-cache mode (that it passes a correct implementation and catches the faults it
names). The Triton kernel behind the entry point runs under the interpreter in tests/test_triton_decode.py."""


import pytest
import torch

import cuda_impl
import triton_impl
from compare import kvcache, oracle
from kv_reference import kv_reference

CASES = [
    oracle.KVCase(3, 8, 2, 1, (5, 0, 33), 64, page_size=16, hostile=True, fmt="fp16"),
    oracle.KVCase(2, 4, 4, 3, (7, 2), 32, causal=True, fmt="fp32"),
    oracle.KVCase(2, 8, 1, 2, (40, 17), 64, page_size=16, kv_fmt="fp8", capacity=64),
    oracle.KVCase(2, 4, 2, 3, (40, 2), 32, page_size=16, causal=True, fmt="fp32", window=(5, -1)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.shape_str())
def test_oracle_kvcache_passes_a_correct_gather(case):
    verdict = oracle.check_kvcache(kv_reference, case)
    assert verdict.passed, verdict.summary()
    assert verdict.rows_checked == case.seqlen_q


def test_oracle_kvcache_catches_faults():
    case = oracle.KVCase(2, 4, 2, 2, (9, 20), 32, page_size=16, fmt="fp32")

    def off_by_a_bit(*args, **kw):
        out, lse = kv_reference(*args, **kw)
        return out * 1.01, lse

    def reads_past_the_length(q, k_cache, v_cache, *, cache_seqlens, **kw):  # NaN rows beyond each length
        return kv_reference(q, k_cache, v_cache, cache_seqlens=torch.full_like(cache_seqlens, 32), **kw)

    def writes_the_cache(q, k_cache, v_cache, **kw):
        result = kv_reference(q, k_cache, v_cache, **kw)
        k_cache[0, 0, 0, 0] = 7.0
        return result

    def wrong_lse(*args, **kw):
        out, lse = kv_reference(*args, **kw)
        return out, lse + 1e-3

    for fn, words in ((off_by_a_bit, "max abs err"), (reads_past_the_length, "NaN"),
                      (writes_the_cache, "cache was modified"), (wrong_lse, "LSE err")):
        verdict = oracle.check_kvcache(fn, case)
        assert not verdict.passed and words in verdict.reason, (fn.__name__, verdict.reason)


def test_oracle_kvcache_inputs_hide_nothing_readable():
    """Pages no entry names and rows past a length hold NaN; hostile entries past a sequence's pages are -1 or
    past the cache; the pages in use are a permutation (no two sequences share one)."""
    case = oracle.KVCase(3, 4, 2, 1, (5, 0, 40), 16, page_size=16, hostile=True, fmt="fp16", capacity=64)
    inputs = oracle.make_kvcache_inputs(case)
    table, blocks = inputs.block_table, inputs.k_cache.shape[0]
    used = [table[b, : -(-n // 16)] for b, n in enumerate(case.cache_seqlens)]
    flat = torch.cat(used)
    assert flat.unique().numel() == flat.numel() and bool(((flat >= 0) & (flat < blocks)).all())
    assert table[1, 0] == -1 and table[1, 1] == blocks + 7 and table[0, 1] == -1
    assert torch.isnan(inputs.k_cache[table[0, 0].long(), 5:]).all()
    assert not torch.isnan(inputs.k_cache[table[0, 0].long(), :5]).any()
    spare = sorted(set(range(blocks)) - set(flat.tolist()))
    assert spare and torch.isnan(inputs.v_cache[spare]).all()


def _args(batch=2, seqlen_q=1, heads_q=8, heads_kv=2, dim=64, page=16, pages=4, blocks=9, dtype=torch.float16):
    q = torch.randn(batch, seqlen_q, heads_q, dim, dtype=dtype)
    k = torch.randn(blocks, page, heads_kv, dim, dtype=dtype)
    v = torch.randn(blocks, page, heads_kv, dim, dtype=dtype)
    table = torch.arange(batch * pages, dtype=torch.int32).reshape(batch, pages) % blocks
    return q, k, v, dict(cache_seqlens=torch.tensor([5, 17][:batch], dtype=torch.int32), block_table=table)


BAD_INPUTS = [
    ("q must be 4-D", lambda q, k, v, kw: ((q[0], k, v), kw), ValueError),
    ("Sq = 65", lambda q, k, v, kw: ((q.expand(2, 65, 8, 64), k, v), kw), ValueError),
    ("head_dim 48", lambda q, k, v, kw: ((q[..., :48], k[..., :48], v[..., :48]), kw), ValueError),
    ("must be int32", lambda q, k, v, kw: ((q, k, v), {**kw, "cache_seqlens": kw["cache_seqlens"].long()}), TypeError),
    ("block_table must be int32", lambda q, k, v, kw: ((q, k, v), {**kw, "block_table": kw["block_table"].long()}),
     TypeError),
    ("page_size 12", lambda q, k, v, kw: ((q, k[:, :12], v[:, :12]), kw), ValueError),
    ("multiple of Hkv", lambda q, k, v, kw: ((q[:, :, :7], k, v), kw), ValueError),
    ("same shape", lambda q, k, v, kw: ((q, k, v[:8]), kw), ValueError),
    ("q's dtype", lambda q, k, v, kw: ((q, k.double(), v.double()), kw), TypeError),
    ("k_descale is required", lambda q, k, v, kw: ((q, k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)), kw),
     ValueError),
    ("for an e4m3 cache only", lambda q, k, v, kw: ((q, k, v), {**kw, "k_descale": torch.ones(2, 2)}), ValueError),
    ("contiguous cache", lambda q, k, v, kw: ((q, k, v), {**kw, "block_table": None}), ValueError),
    ("(B,) = (2,)", lambda q, k, v, kw: ((q, k, v), {**kw, "cache_seqlens": kw["cache_seqlens"][:1]}), ValueError),
    ("give k_new and v_new together", lambda q, k, v, kw: ((q, k, v), {**kw, "k_new": torch.zeros(2, 1, 2, 64)}),
     ValueError),
    ("multiples of 8 elements", lambda q, k, v, kw: ((torch.randn(2, 1, 8, 68, dtype=torch.float16)[..., :64], k, v),
                                                     kw), ValueError),
    ("not both", lambda q, k, v, kw: ((q, k, v), {**kw, "num_splits": 2, "split_size": 64}), ValueError),
    ("multiple of 64", lambda q, k, v, kw: ((q, k, v), {**kw, "split_size": 100}), ValueError),
    ("positive finite", lambda q, k, v, kw: ((q, k, v), {**kw, "scale": float("nan")}), ValueError),
    ("window must be a tuple", lambda q, k, v, kw: ((q, k, v), {**kw, "window": (-2, 0)}), ValueError),
]


@pytest.mark.parametrize("module", [cuda_impl, triton_impl], ids=["cuda", "triton"])
@pytest.mark.parametrize("words,make,error", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_named(module, words, make, error):
    (q, k, v), kw = make(*_args())
    with pytest.raises(error, match=__import__("re").escape(words)):
        module.attention_with_kvcache(q, k, v, **kw)


def test_cuda_takes_a_window_up_to_the_device():
    """cuda_impl's decode kernel takes a window: the checks pass it, and on the CPU the call stops only at the
    device check (the kernel's window: tests/test_cuda_decode.py on the GPU)."""
    q, k, v, kw = _args()
    with pytest.raises(ValueError, match="device: tensors must be on a CUDA device"):
        cuda_impl.attention_with_kvcache(q, k, v, **kw, window=(16, -1))


def test_check_values_and_append():
    q, k, v, kw = _args()
    layout = kvcache.check_inputs(q, k, v, k_new=None, v_new=None, k_descale=None, v_descale=None,
                                  dtypes=(torch.float16,), head_dims=(64,), backend="test", **kw)
    assert (layout.page_size, layout.capacity, layout.heads_kv) == (16, 64, 2)
    kvcache.check_values(layout, k, kw["cache_seqlens"], kw["block_table"])
    for lengths, words in (([5, 65], "beyond the cache's capacity of 64"), ([-1, 3], "negative")):
        with pytest.raises(ValueError, match=words):
            kvcache.check_values(layout, k, torch.tensor(lengths, dtype=torch.int32), kw["block_table"])
    table = kw["block_table"].clone()
    table[1, 1] = 9  # sequence 1 holds 17 keys: its second page is in use
    with pytest.raises(ValueError, match=r"block_table\[1, 1\] = 9"):
        kvcache.check_values(layout, k, kw["cache_seqlens"], table)
    table[1, 1], table[1, 3] = 5, -1  # an entry no key uses may be anything
    kvcache.check_values(layout, k, kw["cache_seqlens"], table)

    before_k, before_v = k.clone(), v.clone()
    k_new, v_new = torch.randn(2, 3, 2, 64, dtype=torch.float16), torch.randn(2, 3, 2, 64, dtype=torch.float16)
    lengths = kvcache.append(layout, k, v, k_new, v_new, kw["cache_seqlens"], kw["block_table"])
    assert lengths.tolist() == [8, 20] and kw["cache_seqlens"].tolist() == [5, 17]
    for b, start in enumerate((5, 17)):
        for t in range(3):
            page, row = kw["block_table"][b, (start + t) // 16], (start + t) % 16
            assert torch.equal(k[page, row], k_new[b, t]) and torch.equal(v[page, row], v_new[b, t])
            before_k[page, row], before_v[page, row] = k_new[b, t], v_new[b, t]
    assert torch.equal(k, before_k) and torch.equal(v, before_v)  # nothing else was written
    with pytest.raises(ValueError, match="beyond the cache's capacity"):
        kvcache.append(layout, k, v, torch.zeros(2, 50, 2, 64, dtype=torch.float16),
                       torch.zeros(2, 50, 2, 64, dtype=torch.float16), kw["cache_seqlens"], kw["block_table"])


def test_append_contiguous_cache():
    q = torch.randn(2, 1, 4, 64, dtype=torch.float16)
    k, v = torch.zeros(2, 10, 2, 64, dtype=torch.float16), torch.zeros(2, 10, 2, 64, dtype=torch.float16)
    seqlens = torch.tensor([0, 9], dtype=torch.int32)
    layout = kvcache.check_inputs(q, k, v, cache_seqlens=seqlens, block_table=None, k_new=None, v_new=None,
                                  k_descale=None, v_descale=None, dtypes=(torch.float16,), head_dims=(64,),
                                  backend="test")
    new = torch.ones(2, 1, 2, 64, dtype=torch.float16)
    assert kvcache.append(layout, k, v, new, new, seqlens, None).tolist() == [1, 10]
    assert k[0, 0].eq(1).all() and k[1, 9].eq(1).all() and k.sum() == 2 * 2 * 64
