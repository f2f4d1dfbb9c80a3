"""triton:decode e4m3 tiles: (BLOCK_N, num_warps, num_stages) candidates against CONFIGS' (64, 4, 4) at d128, Hq32 /
Hkv8, Sq 1, paged 64, in interleaved rounds of graph replays; each candidate's output compared with the default's
(the same kernel at another tile: equal to fp32 rounding). Candidates compile spill-free for sm_90 (64 x 8 warps:
194 registers; 32 x 4: 220; the default 255); 128 keys spill.

    PYTHONPATH=. python docs/journal/2026-12-06_headdims-tiles/fp8_tiles.py
"""
import torch

from compare import bench, oracle
from triton_impl import decode

CANDIDATES = [None, dict(BLOCK_N=64, num_warps=8, num_stages=4), dict(BLOCK_N=32, num_warps=4, num_stages=4),
              dict(BLOCK_N=32, num_warps=4, num_stages=6)]
SHAPES = ((32, 8192), (8, 32768), (1, 131072))


def main():
    print(f"{'B':>3} {'Sk':>7} {'candidate':>16} {'us':>8} {'x default':>9}  max|diff|")
    for batch, length in SHAPES:
        case = oracle.KVCase(batch, 32, 8, 1, (length,) * batch, 128, page_size=64, kv_fmt="fp8", seed=batch)
        x = oracle.make_kvcache_inputs(case, "cuda")
        kw = x.kwargs(case)
        scale = 128 ** -0.5

        def call(config):
            return decode._decode_impl(x.q, x.k_cache, x.v_cache, kw["cache_seqlens"], kw["block_table"],
                                       kw["k_descale"], kw["v_descale"], False, scale, None, None, config=config)

        reference = call(None)[0]
        times = {i: [] for i in range(len(CANDIDATES))}
        for round_ in range(3):
            order = range(len(CANDIDATES)) if round_ % 2 == 0 else reversed(range(len(CANDIDATES)))
            for i in order:
                times[i].append(bench.time_call(lambda: call(CANDIDATES[i]), "cuda", graph=True)[1])
        base = sorted(times[0])[1]
        for i, config in enumerate(CANDIDATES):
            ms = sorted(times[i])[1]
            diff = (call(config)[0].float() - reference.float()).abs().max().item()
            label = "default" if config is None else f"{config['BLOCK_N']}x{config['num_warps']}w{config['num_stages']}s"
            print(f"{batch:3} {length:7} {label:>16} {ms * 1e3:8.1f} {base / ms:9.3f}  {diff:.2e}", flush=True)
        del x
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
