"""The oracle must pass a correct kernel and fail each kind of wrong one."""

import math

import pytest
import torch

from compare import formats, oracle


def plain_kernel(q, k, v, *, causal=False, scale=None, return_lse=False, mask_shift=0, lse_shift=0.0):
    """A correct float32 attention (bottom-right causal, GQA), with knobs to break it on purpose."""
    sq, sk, d = q.shape[2], k.shape[2], q.shape[3]
    scale = 1 / math.sqrt(d) if scale is None else scale
    rep = q.shape[1] // k.shape[1]
    kf, vf = (x.float().repeat_interleave(rep, dim=1) for x in (k, v))
    s = q.float() @ kf.transpose(-1, -2) * scale
    if causal:
        keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + sk - sq + mask_shift
        s = s.masked_fill(~keep, -math.inf)
    lse = torch.logsumexp(s, -1)
    out = (torch.softmax(s, -1).nan_to_num(0.0) @ vf).to(q.dtype)
    return (out, lse + lse_shift) if return_lse else out


CASES = [
    oracle.Case(1, 2, 2, 97, 203, 64, causal=True, fmt="fp32"),
    oracle.Case(1, 4, 2, 300, 100, 64, causal=True, fmt="bf16", dist="shifted"),
    oracle.Case(2, 4, 1, 64, 64, 128, causal=False, fmt="fp16", dist="large"),
    oracle.Case(1, 2, 2, 33, 70, 64, causal=False, fmt="bf16", scale=0.3),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.shape_str())
def test_correct_kernel_passes(case):
    verdict = oracle.check(plain_kernel, case)
    assert verdict.passed, verdict.summary()
    assert verdict.max_abs_err <= verdict.bound
    assert verdict.lse_err is not None and verdict.lse_err <= verdict.lse_bound


def _broken(**knobs):
    def fn(q, k, v, **kw):
        return plain_kernel(q, k, v, **kw, **knobs)
    return fn


def test_missing_scale_fails():
    case = oracle.Case(1, 2, 2, 64, 80, 64, fmt="bf16")

    def no_scale(q, k, v, *, causal, scale, return_lse):
        return plain_kernel(q, k, v, causal=causal, scale=1.0, return_lse=return_lse)
    verdict = oracle.check(no_scale, case)
    assert not verdict.passed and "max abs err" in verdict.reason


def test_ignored_custom_scale_fails():
    case = oracle.Case(1, 2, 2, 64, 80, 64, fmt="bf16", scale=0.05)

    def default_scale(q, k, v, *, causal, scale, return_lse):
        return plain_kernel(q, k, v, causal=causal, scale=None, return_lse=return_lse)
    assert not oracle.check(default_scale, case).passed


@pytest.mark.parametrize("shift", [1, -1])
def test_off_by_one_causal_mask_fails(shift):
    case = oracle.Case(1, 2, 2, 100, 100, 64, causal=True, fmt="bf16")
    assert not oracle.check(_broken(mask_shift=shift), case).passed


def test_top_left_causal_fails_when_lengths_differ():
    case = oracle.Case(1, 2, 2, 50, 120, 64, causal=True, fmt="bf16")
    assert not oracle.check(_broken(mask_shift=-(120 - 50)), case).passed


def test_unwritten_tail_fails():
    case = oracle.Case(1, 2, 2, 70, 70, 64, fmt="bf16")

    def tail_unwritten(q, k, v, **kw):
        out = plain_kernel(q, k, v, **kw)
        full, lse = out if kw["return_lse"] else (out, None)
        # As a kernel that forgets the last partial tile would: rows past 64 keep what memory held.
        full = full.clone()
        full[:, :, 64:] = float("nan")
        return (full, lse) if lse is not None else full
    verdict = oracle.check(tail_unwritten, case)
    assert not verdict.passed and "NaN" in verdict.reason


def test_zero_tail_fails_on_magnitude():
    case = oracle.Case(1, 2, 2, 70, 70, 64, fmt="bf16")

    def tail_zero(q, k, v, **kw):
        out, lse = plain_kernel(q, k, v, **kw)
        out = out.clone()
        out[:, :, 64:] = 0
        return out, lse
    assert not oracle.check(tail_zero, case).passed


def test_wrong_gqa_head_mapping_fails():
    case = oracle.Case(1, 4, 2, 64, 64, 64, fmt="bf16")

    def interleaved(q, k, v, **kw):  # head h reads kv head h % Hkv instead of h // (Hq / Hkv)
        rep = q.shape[1] // k.shape[1]
        return plain_kernel(q, k.repeat(1, rep, 1, 1), v.repeat(1, rep, 1, 1), **kw)
    assert not oracle.check(interleaved, case).passed


def test_wrong_lse_fails():
    case = oracle.Case(1, 2, 2, 64, 64, 64, fmt="bf16")
    verdict = oracle.check(_broken(lse_shift=0.02), case)
    assert not verdict.passed and "LSE" in verdict.reason


def test_log2_lse_fails():
    case = oracle.Case(1, 2, 2, 64, 64, 64, fmt="bf16")

    def base2(q, k, v, **kw):
        out, lse = plain_kernel(q, k, v, **kw)
        return out, lse / math.log(2)
    assert not oracle.check(base2, case).passed


def test_rows_that_see_no_key_must_be_zero_and_minus_inf():
    case = oracle.Case(1, 2, 2, 90, 30, 64, causal=True, fmt="bf16")

    def nonzero_empty_rows(q, k, v, **kw):
        out, lse = plain_kernel(q, k, v, **kw)
        out = out.clone()
        out[:, :, :60] = 1e-3  # rows 0..59 see no key
        return out, lse

    def finite_lse(q, k, v, **kw):
        out, lse = plain_kernel(q, k, v, **kw)
        return out, lse.clamp_min(-1e30)
    assert oracle.check(plain_kernel, case).passed
    assert "exactly 0" in oracle.check(nonzero_empty_rows, case).reason
    assert "-inf pattern" in oracle.check(finite_lse, case).reason


def test_nan_never_passes():
    case = oracle.Case(1, 2, 2, 64, 64, 64, fmt="bf16")

    def one_nan(q, k, v, **kw):
        out, lse = plain_kernel(q, k, v, **kw)
        out = out.clone()
        out[0, 1, 5, 7] = float("nan")
        return out, lse
    assert not oracle.check(one_nan, case).passed


def test_wrong_output_shape_raises():
    case = oracle.Case(1, 2, 2, 64, 64, 64, fmt="bf16")
    with pytest.raises(ValueError, match="shape"):
        oracle.check(lambda q, k, v, **kw: plain_kernel(q[:, :, :10], k, v, **kw), case)


def test_reference_matches_closed_form():
    # One key: softmax is 1, so out = v and lse = q.k * scale.
    q, k, v = torch.randn(1, 1, 3, 8), torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    out, lse = oracle.reference(q, k, v, causal=False, scale=0.5)
    torch.testing.assert_close(out, v.double().expand(1, 1, 3, 8))
    torch.testing.assert_close(lse, (q.double() @ k.double().transpose(-1, -2))[..., 0] * 0.5)


def test_reference_bottom_right_causal():
    # Sq=2, Sk=4: row 0 sees keys 0..2, row 1 sees all four.
    q, k = torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 4, 4)
    v = torch.arange(4.0).reshape(1, 1, 4, 1).expand(1, 1, 4, 4)
    out, lse = oracle.reference(q, k, v, causal=True, scale=1.0)
    torch.testing.assert_close(out[0, 0, :, 0], torch.tensor([1.0, 1.5], dtype=torch.float64))
    torch.testing.assert_close(lse[0, 0], torch.log(torch.tensor([3.0, 4.0], dtype=torch.float64)))


def test_row_sampled_mode_matches_full():
    case = oracle.Case(1, 2, 2, 300, 64, 64, causal=True, fmt="fp32")
    inputs = oracle.make_inputs(case)
    full = oracle.reference(*inputs.dequantized(), causal=True, scale=case.softmax_scale)
    rows = torch.tensor([0, 5, 299])
    part = oracle.reference(*inputs.dequantized(), causal=True, scale=case.softmax_scale, rows=rows)
    torch.testing.assert_close(part[0], full[0][:, :, rows])
    torch.testing.assert_close(part[1], full[1][:, :, rows])
    verdict = oracle.check(plain_kernel, case, max_rows=16)
    assert verdict.passed and verdict.rows_checked <= 18


def test_sampled_mode_still_catches_a_bad_row():
    case = oracle.Case(1, 2, 2, 200, 64, 64, fmt="bf16")

    def last_row_wrong(q, k, v, **kw):
        out, lse = plain_kernel(q, k, v, **kw)
        out = out.clone()
        out[:, :, -1] += 1.0
        return out, lse
    assert not oracle.check(last_row_wrong, case, max_rows=8).passed


def test_inputs_are_fresh_per_seed_and_never_zero():
    a = oracle.make_inputs(oracle.Case(1, 1, 1, 16, 16, 64, seed=1))
    b = oracle.make_inputs(oracle.Case(1, 1, 1, 16, 16, 64, seed=2))
    assert not torch.equal(a.q, b.q)
    for dist in oracle.DISTRIBUTIONS:
        for fmt in ("bf16", "fp8"):
            inputs = oracle.make_inputs(oracle.Case(1, 1, 1, 16, 16, 64, fmt=fmt, dist=dist))
            for name, x in zip("qkv", inputs.dequantized()):
                # no element is exactly zero (a zero row or tile would hide an unread or unscaled input)
                assert int((x == 0).sum()) == 0, (dist, fmt, name, int((x == 0).sum()))
                assert float(x.abs().mean()) > 0.5, (dist, fmt, name)
            for name, x in zip("qkv", (inputs.q_master, inputs.k_master, inputs.v_master)):
                assert float(x.abs().min()) > 0, (dist, name)


def _sdpa_reference(q, k, v, *, causal, scale):
    """torch's own scaled_dot_product_attention in float64 on CPU, an implementation independent of
    oracle.reference: GQA by repeating K/V heads, the bottom-right causal mask built here as an explicit
    boolean mask (query i sees key j iff j <= i + Sk - Sq); LSE from torch.logsumexp of the scores."""
    q, k, v = (x.double() for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    sq, sk = q.shape[2], k.shape[2]
    mask = None
    if causal:
        mask = torch.ones(sq, sk, dtype=torch.bool).tril(diagonal=sk - sq)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    if mask is not None and not mask.any(dim=-1).all():  # SDPA gives NaN for rows that see no key
        seen = mask.any(dim=-1)
        out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=torch.float64)
        out[:, :, seen] = torch.nn.functional.scaled_dot_product_attention(
            q[:, :, seen], k, v, attn_mask=mask[seen], scale=scale)
        return out, lse
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out, lse


# (b1 h8/1: query heads grouped onto one KV head, as MLA's latent head; the reference never repeats K/V per head)
@pytest.mark.parametrize("shape", [(2, 4, 2, 37, 53, 64, True), (1, 6, 3, 50, 20, 32, True),
                                   (2, 2, 1, 17, 17, 128, True), (1, 4, 4, 29, 71, 96, False),
                                   (1, 8, 1, 5, 40, 16, True)],
                         ids=lambda s: "b{}h{}/{}q{}k{}d{}{}".format(*s[:6], "c" if s[6] else ""))
def test_reference_matches_torch_sdpa_on_random_inputs(shape):
    batch, hq, hkv, sq, sk, d, causal = shape
    g = torch.Generator().manual_seed(sq * 1000 + sk)
    q = torch.randn(batch, hq, sq, d, generator=g, dtype=torch.float64) * 2
    k = torch.randn(batch, hkv, sk, d, generator=g, dtype=torch.float64) + 0.5
    v = torch.randn(batch, hkv, sk, d, generator=g, dtype=torch.float64)
    scale = 0.7 / math.sqrt(d)
    out, lse = oracle.reference(q, k, v, causal=causal, scale=scale)
    want_out, want_lse = _sdpa_reference(q, k, v, causal=causal, scale=scale)
    torch.testing.assert_close(out, want_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, want_lse, rtol=1e-12, atol=1e-12)
    if causal and sq > sk:  # rows that see no key: exactly 0 and -inf
        assert torch.equal(out[:, :, : sq - sk], torch.zeros_like(out[:, :, : sq - sk]))
        assert torch.isneginf(lse[:, :, : sq - sk]).all()


def test_v_takes_a_head_dim_of_its_own():
    """Case.head_dim_v: V and the output 128 wide under Q/K 192. The reference matches SDPA (which takes V's own
    width), a correct kernel passes, one that drops V's last column fails, and the output must be V's width."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 4, 21, 192, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, 30, 192, generator=g, dtype=torch.float64)
    v = torch.randn(1, 2, 30, 128, generator=g, dtype=torch.float64)
    out, lse = oracle.reference(q, k, v, causal=True, scale=0.1)
    want_out, want_lse = _sdpa_reference(q, k, v, causal=True, scale=0.1)
    assert out.shape == (1, 4, 21, 128)
    torch.testing.assert_close(out, want_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, want_lse, rtol=1e-12, atol=1e-12)

    case = oracle.Case(1, 4, 2, 33, 45, 192, causal=True, fmt="bf16", head_dim_v=128)
    inputs = oracle.make_inputs(case)
    assert (inputs.q.shape[-1], inputs.k.shape[-1], inputs.v.shape[-1]) == (192, 192, 128)
    assert case.v_dim == 128 and case.softmax_scale == 1 / math.sqrt(192) and "d192v128" in case.shape_str()
    verdict = oracle.check(plain_kernel, case)
    assert verdict.passed, verdict.summary()

    def drops_a_column(q, k, v, **kw):
        out, lse = plain_kernel(q, k, v, **kw)
        out = out.clone()
        out[..., -1] = 0
        return out, lse
    verdict = oracle.check(drops_a_column, case)
    assert not verdict.passed and "max abs err" in verdict.reason
    with pytest.raises(ValueError, match="shape"):
        oracle.check(lambda q, k, v, **kw: plain_kernel(q, k, v[..., :64], **kw), case)


@pytest.mark.parametrize("bad", [dict(heads_q=3, heads_kv=2), dict(fmt="int8"), dict(seqlen_q=0), dict(dist="zeros"),
                                 dict(head_dim_v=0)])
def test_case_validation(bad):
    kw = dict(batch=1, heads_q=2, heads_kv=2, seqlen_q=8, seqlen_k=8, head_dim=64) | bad
    with pytest.raises(ValueError):
        oracle.Case(**kw)


@pytest.mark.parametrize("fmt", ["fp8", "mxfp8", "nvfp4"])
def test_quantized_formats_emulated_kernel_passes_and_missing_descale_fails(fmt):
    case = oracle.Case(1, 2, 2, 64, 96, 64, causal=True, fmt=fmt)

    def emulated(q, k, v, *, causal, scale, return_lse, q_scale=1.0):
        """What a quantized kernel computes: dequantized S in fp32, P quantized as the format says."""
        qd, kd, vd = (x.dequantize() for x in (q, k, v))
        s = (qd * q_scale) @ kd.transpose(-1, -2) * case.softmax_scale
        keep = torch.arange(96)[None, :] <= torch.arange(64)[:, None] + 96 - 64
        s = s.masked_fill(~keep, -math.inf)
        m = s.amax(-1, keepdim=True)
        p = torch.exp(s - m)
        out = formats.quantize_p(p, fmt) @ vd / p.sum(-1, keepdim=True)
        return out.to(torch.bfloat16), (m + p.sum(-1, keepdim=True).log()).squeeze(-1)

    good = oracle.check(emulated, case)
    assert good.passed, good.summary()
    # A kernel that forgets a descale (here: Q's, a factor far from 1) must fail.
    assert not oracle.check(lambda *a, **kw: emulated(*a, **kw, q_scale=3.0), case).passed


def test_the_floor_is_one_ulp_for_16_bit_and_four_times_the_largest_score_for_fp32():
    """With a plain implementation that is exact, the bound is the floor alone: bf16 outputs 1 ulp of the output's
    magnitude; fp32 outputs 4 ulps times the largest |scaled score| (the rounding a score's scaling carries)."""
    for fmt in ("fp32", "bf16"):
        case = oracle.Case(1, 2, 2, 5, 9, 64, fmt=fmt, dist="shifted")
        inputs = oracle.make_inputs(case)
        q, k, v = inputs.dequantized()
        ref, ref_lse = oracle.reference(q, k, v, causal=False, scale=case.softmax_scale)
        scores = (q.double() @ k.double().transpose(-1, -2) * case.softmax_scale).abs().max().item()
        ulps = 4 * max(1.0, scores) if fmt == "fp32" else 1
        assert fmt == "bf16" or scores > 2  # shifted inputs: the score factor matters
        unit = torch.finfo(case.out_dtype).eps * float(ref.abs().max())
        for off, passes in ((ulps * 0.9, True), (ulps * 1.1, False)):
            out = ref.clone()
            out[0, 0, 0, 0] += off * unit
            verdict = oracle.judge(out, None, inputs, case, plain=(ref, ref_lse))
            assert verdict.passed == passes, (fmt, off, verdict.summary())


# ---------------------------------------------------------------- local attention and softcap

def _brute_visible(sq, sk, causal, window):
    """FlashAttention's definition, key by key: query i sees key j iff i + sk - sq - left <= j <= i + sk - sq + right
    (a side of -1 unbounded; causal: right = 0)."""
    left, right = window
    right = 0 if causal else right
    out = torch.zeros(sq, sk, dtype=torch.bool)
    for i in range(sq):
        for j in range(sk):
            d = i + sk - sq
            out[i, j] = (left < 0 or j >= d - left) and (right < 0 or j <= d + right)
    return out


WINDOWS = [(sq, sk, causal, window) for sq, sk in ((1, 9), (7, 7), (9, 4), (5, 13))
           for causal in (False, True) for window in ((-1, -1), (0, 0), (2, -1), (-1, 3), (3, 1), (0, 5))]


@pytest.mark.parametrize("sq,sk,causal,window", WINDOWS)
def test_visible_keys_and_pair_counts_follow_the_definition(sq, sk, causal, window):
    from compare import bench
    want = _brute_visible(sq, sk, causal, window)
    got = oracle._visible(torch.arange(sq), sq, sk, causal, "cpu", window)
    assert torch.equal(got if got is not None else torch.ones(sq, sk, dtype=torch.bool), want)
    assert bench.attention_pairs(sq, sk, causal, window) == int(want.sum())


@pytest.mark.parametrize("window,causal", [((3, 1), False), ((2, -1), True), ((0, 0), False), ((-1, 2), False)])
def test_windowed_reference_matches_masked_sdpa(window, causal):
    """The float64 reference with a window against torch SDPA (math, float64) given the brute-force mask; rows whose
    window holds no key give 0 and LSE -inf."""
    case = oracle.Case(2, 4, 2, 9, 6, 32, causal=causal, fmt="fp32", window=window)
    q, k, v = oracle.make_inputs(case).dequantized()
    out, lse = oracle.reference(q, k, v, causal=causal, scale=case.softmax_scale, window=window)
    mask = _brute_visible(9, 6, causal, window)
    kk, vv = (x.repeat_interleave(2, dim=1) for x in (k, v))
    s = q @ kk.transpose(-1, -2) * case.softmax_scale
    want = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, scale=case.softmax_scale)
    empty = ~mask.any(-1)
    assert torch.allclose(out[..., ~empty, :], want[..., ~empty, :], atol=1e-12)
    assert (out[..., empty, :] == 0).all() and torch.isneginf(lse[..., empty]).all()
    want_lse = torch.logsumexp(s.masked_fill(~mask, float("-inf")), -1)
    assert torch.allclose(lse[..., ~empty], want_lse[..., ~empty], atol=1e-12)
    # Sq > Sk: the first rows' windows end before key 0 (i + Sk - Sq + right < 0), and only those
    right = 0 if causal else window[1]
    assert torch.equal(empty, torch.arange(9) < 9 - 6 - (right if right >= 0 else 10 ** 6))


def test_softcap_reference_and_plain_cap_the_scaled_scores():
    case = oracle.Case(1, 2, 1, 5, 11, 64, fmt="fp32", dist="large", softcap=3.0)
    inputs = oracle.make_inputs(case)
    q, k, v = inputs.dequantized()
    out, lse = oracle.reference(q, k, v, causal=False, scale=case.softmax_scale, softcap=3.0)
    kk, vv = (x.repeat_interleave(2, dim=1) for x in (k, v))
    s = 3.0 * torch.tanh(q @ kk.transpose(-1, -2) * case.softmax_scale / 3.0)
    assert torch.allclose(out, torch.softmax(s, -1) @ vv, atol=1e-12)
    assert torch.allclose(lse, torch.logsumexp(s, -1), atol=1e-12)
    uncapped, _ = oracle.reference(q, k, v, causal=False, scale=case.softmax_scale)
    assert (out - uncapped).abs().max() > 1e-3  # large inputs: the cap changes the answer
    plain, _ = oracle.plain_attention(inputs, case)
    assert (plain - out).abs().max() < 1e-5


def test_check_passes_window_and_softcap_only_where_set():
    seen = []

    def backend(q, k, v, **kw):
        seen.append(sorted(kw))
        case = oracle.Case(1, 2, 2, 6, 6, 32, fmt="fp32", **{n: kw[n] for n in ("window", "softcap") if n in kw})
        qq, kk, vv = (x.double() for x in (q, k, v))
        out, lse = oracle.reference(qq, kk, vv, causal=kw["causal"], scale=case.softmax_scale, window=case.window,
                                    softcap=case.softcap)
        return out.float(), lse.float()
    for extra in ({}, {"window": (2, 0)}, {"softcap": 5.0}):
        case = oracle.Case(1, 2, 2, 6, 6, 32, fmt="fp32", **extra)
        assert oracle.check(backend, case).passed
    assert seen == [["causal", "return_lse", "scale"], ["causal", "return_lse", "scale", "window"],
                    ["causal", "return_lse", "scale", "softcap"]]
    with pytest.raises(ValueError, match="window"):
        oracle.Case(1, 1, 1, 4, 4, 32, window=(-2, 0))
    with pytest.raises(ValueError, match="softcap"):
        oracle.Case(1, 1, 1, 4, 4, 32, softcap=-1.0)
    assert "win2,0" in oracle.Case(1, 1, 1, 4, 4, 32, window=(2, 0)).shape_str()


def test_the_lse_floor_follows_the_largest_score_under_a_softcap():
    """A cap squeezes the LSE to about softcap + log(Sk) but not the fp32 rounding of the scores it is computed
    from: the LSE floor is 4 ulps of the largest |scaled score| (or LSE, or 1)."""
    case = oracle.Case(1, 1, 1, 4, 6, 64, fmt="fp32", dist="large", softcap=1.0)
    inputs = oracle.make_inputs(case)
    q, k, v = inputs.dequantized()
    ref, ref_lse = oracle.reference(q, k, v, causal=False, scale=case.softmax_scale, softcap=1.0)
    largest = float((q @ k.transpose(-1, -2) * case.softmax_scale).abs().max())
    assert largest > 10 * float(ref_lse.abs().max())  # large inputs: the scores dwarf the capped LSE
    unit = 4 * torch.finfo(torch.float32).eps * largest
    for off, passes in ((0.9, True), (1.1, False)):
        lse = ref_lse.clone()
        lse[0, 0, 0] += off * unit
        verdict = oracle.judge(ref.clone(), lse, inputs, case, plain=(ref, ref_lse))
        assert verdict.passed == passes, (off, verdict.summary())
