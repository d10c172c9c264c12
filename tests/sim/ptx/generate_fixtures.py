"""Regenerate the PTX fixtures of tests/sim from the library's kernels (needs MLIR).

Run: ``.venv/bin/python tests/sim/ptx/generate_fixtures.py``. Each fixture is ``NAME.ptx``
plus ``NAME.json`` (entry, block, cluster, dynamic smem, params, tensor-map specs, and the
launch grid for the problem shape recorded in ``shape``), so the emulator tests run without
MLIR. The PTX is the compiler's output at the time of generation.
"""
import json
import pathlib

import attrs

HERE = pathlib.Path(__file__).parent


def save(name, ck, grid, shape):
    (HERE / f"{name}.ptx").write_text(ck.ptx)
    meta = {"entry": ck.entry, "block": list(ck.block), "cluster": list(ck.cluster),
            "dynamic_smem": ck.dynamic_smem, "params": [[p.name, p.kind] for p in ck.params],
            "tensor_maps": [attrs.asdict(t) for t in ck.tensor_maps], "grid": list(grid), "shape": shape}
    (HERE / f"{name}.json").write_text(json.dumps(meta, indent=1))


def main():
    from cutedsl.device.gemm import GemmConfig
    from cutedsl.kernel import SaxpyKernel, TmaSaxpyKernel
    k = SaxpyKernel()
    save("saxpy", k.compile(), k.grid(1000), {"n": 1000})
    k = TmaSaxpyKernel()
    save("tma_saxpy", k.compile(), k.grid(1000), {"n": 1000})
    M, N, K = 256, 256, 512
    cfgs = {"gemm_ms_128x128_f16_tma": GemmConfig(),
            "gemm_ms_128x256_f16_tma": GemmConfig(tile=(128, 256, 64)),
            "gemm_ms_128x128_bf16_kmajor_bf16out": GemmConfig(dtype="bf16", out_dtype="bf16", b_major="K"),
            "gemm_ms_64x64_f16_global_s2": GemmConfig(tile=(64, 64, 64), stages=2, epilogue="global")}
    for name, cfg in cfgs.items():
        kern = cfg.kernel()
        ck = kern.compile()
        save(name, ck, kern.grid(m=M, n=N, k=K),
             {"m": M, "n": N, "k": K, "dtype": cfg.dtype, "out_dtype": cfg.out_dtype,
              "b_major": cfg.b_major, "epilogue": cfg.epilogue})


if __name__ == "__main__":
    main()
