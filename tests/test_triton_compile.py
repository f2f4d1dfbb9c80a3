"""Every autotuning candidate compiles for sm_90a on this (GPU-less) machine and uses the instructions
it is meant to: wgmma (HGMMA / QGMMA for fp8), TMA loads (UTMALDG) or cp.async (LDGSTS), no register
spills, shared memory within the per-block limit."""
import pytest

pytest.importorskip("triton")

from triton_impl.kernels import offline, tuning  # noqa: E402

EXPECTED = {
    "fa2": ("bf16", 2, {"HGMMA", "LDGSTS"}),
    "fa2-tma": ("bf16", 2, {"HGMMA", "UTMALDG"}),
    "fp8": ("fp8", 1, {"QGMMA", "UTMALDG"}),
}
CANDIDATES = [(variant, head_dim, causal, config)
              for variant, (_, size, _) in EXPECTED.items()
              for head_dim in (64, 128, 256) for causal in (False, True)
              for config in tuning.candidates(variant, head_dim, causal, size)]


@pytest.mark.parametrize("variant,head_dim,causal,config", CANDIDATES,
                         ids=["{}-d{}{}-".format(v, d, "c" * c) + "-".join(f"{k}{x}" for k, x in cfg.items())
                              for v, d, c, cfg in CANDIDATES])
def test_candidate_compiles_for_sm90(variant, head_dim, causal, config):
    dtype, _, wanted = EXPECTED[variant]
    usage = offline.report(offline.compile_for(variant, head_dim, causal, config, dtype=dtype))
    missing = [op for op in wanted if usage[op] == 0]
    assert not missing, f"no {missing} in the SASS: {usage}"
    assert usage["HMMA"] == 0, f"mma.sync instead of wgmma: {usage}"
    assert usage["stack"] == 0 and usage["STL"] == 0, f"register spills: {usage}"
    assert usage["smem"] <= offline.SM90_SMEM_LIMIT, f"shared memory over the sm_90 limit: {usage}"
