"""One decode call per case between cudaProfilerStart / Stop, for `ncu --profile-from-start off`: where the CUDA
decode kernels lose to cuDNN on long caches, why e4m3 is short of 2x bf16, and what bounds the MLA kernels.
Each case is held to the oracle first (same inputs), then warmed, then called once under the profiler.
GPU machine: ncu --clock-control none --profile-from-start off --set full -o F python3 <this file> CASE"""

from __future__ import annotations

import sys

import torch

from compare import oracle

MLA = dict(head_dim=576, head_dim_v=512, latent=True)
CASES = {  # name -> (module, KVCase); "sdpa" runs cuDNN through SDPA on the same contiguous cache
    "mla128": ("cuda_impl", oracle.KVCase(32, 128, 1, 1, (8192,) * 32, page_size=64, **MLA)),
    "mla16": ("cuda_impl", oracle.KVCase(32, 16, 1, 1, (65536,) * 32, page_size=64, **MLA)),
    "gqa_bf16": ("cuda_impl", oracle.KVCase(8, 32, 8, 1, (32768,) * 8, 128)),
    "gqa_e4m3": ("cuda_impl", oracle.KVCase(8, 32, 8, 1, (32768,) * 8, 128, kv_fmt="fp8")),
    "triton_e4m3": ("triton_impl", oracle.KVCase(8, 32, 8, 1, (32768,) * 8, 128, kv_fmt="fp8")),
    "cudnn_bf16": ("sdpa", oracle.KVCase(8, 32, 8, 1, (32768,) * 8, 128)),
}


def call(module_name: str, case: oracle.KVCase, inputs: oracle.KVInputs):
    if module_name == "sdpa":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F
        q = inputs.q.transpose(1, 2)  # (B, H, Sq, D)
        k, v = inputs.k_cache.transpose(1, 2), inputs.v_cache.transpose(1, 2)

        def run():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        return run
    import importlib
    module = importlib.import_module(module_name)
    kwargs = inputs.kwargs(case)
    if case.latent:
        return lambda: module.attention_mla_decode(inputs.q, inputs.k_cache, **kwargs)
    return lambda: module.attention_with_kvcache(inputs.q, inputs.k_cache, inputs.v_cache, **kwargs)


def main(name: str) -> int:
    module_name, case = CASES[name]
    inputs = oracle.make_kvcache_inputs(case, "cuda")
    if module_name != "sdpa":
        module = __import__(module_name)
        run = (lambda q, k, v, *, return_lse, **kw: module.attention_mla_decode(q, k, return_lse=return_lse, **kw)
               ) if case.latent else module.attention_with_kvcache
        verdict = oracle.check_kvcache(run, case, device="cuda", inputs=inputs)
        print(name, "PASS" if verdict.passed else "FAIL", verdict.summary(), flush=True)
        if not verdict.passed:
            return 1
    run = call(module_name, case, inputs)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
