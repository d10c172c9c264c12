"""Compile FlashAttention-4's forward kernels for sm_100a and sm_90a without a GPU and save their
PTX as emulator fixtures (issue 39). FlashAttention-4 (pip ``flash-attn-4``) is written in
NVIDIA's CuTe DSL; it is not a dependency of cutedsl. Its venv is the CuTe DSL venv of
``scripts/cute_dsl_anchor.py`` plus FA4 without its dependency pins (this project is not imported)::

    python3.11 -m venv /tmp/cdv
    /tmp/cdv/bin/pip install nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-cu12==4.8.1 \\
        einops==0.8.2 "apache-tvm-ffi==0.1.15.post2" torch-c-dlpack-ext==0.1.5
    /tmp/cdv/bin/pip install torch==2.13.0 triton==3.8.0    # the CPU torch this machine kind keeps
    /tmp/cdv/bin/pip install --no-deps quack-kernels==0.6.5 flash-attn-4==4.0.0b36
    /tmp/cdv/bin/python tests/sim/fa4_ptx/generate_fixtures.py

How it compiles without a GPU: FA4's own cross-compile switches (``FLASH_ATTENTION_ARCH`` picks the
kernel class, ``CUTE_DSL_ARCH`` the target, ``FLASH_ATTENTION_NUM_SMS`` the SM count it bakes into
the persistent grid), ``flash_attn.cute.interface._flash_attn_fwd`` called under torch's
``FakeTensorMode`` (FA4 then compiles and skips the launch), and ``cutlass.utils.HardwareInfo``
replaced by the target's SM count (the persistent scheduler asks the driver for it at trace time).
``CUTE_DSL_KEEP=ptx,ir`` keeps the PTX and the module's IR, whose host function is what
FA4's launcher does; each JSON transcribes it (asserted against the IR here):

* ``params``: the kernel's ``.param`` list in order: per Q, K, V, O the TMA coordinate tensor's
  4 i32 extents (``coord`` modes, e.g. ``(S, D, H, B)``), the LSE view (pointer, 3 i32 extents, pad,
  2 i64 strides, 40 bytes), the four tensor maps, ``softmax_scale * log2(e)`` (f32), the TiledMMAs'
  runtime state (all clear), and the scheduler's integers (FastDivmod triples are
  ``(d, m, s1 u8, s2 u8)``: ``t = mulhi(x, m); q = (t + ((x - t) >> s1)) >> s2``).
* ``tma``: each map's element type, numpy-order box over the (B, H, S, D) view of the
  ``(B, S, H, D)`` torch tensor, and swizzle; ``block``, ``grid`` rule, ``cluster``, ``smem``.

``tests/sim/test_attention_fixtures.py`` runs them; ``docs/attention-ptx-survey.md`` records
where each stops on today's emulator.
"""
import glob
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).parent
#: name: (arch, seqlen compiled for (picks q_stage on sm_100), head dim, causal)
FIXTURES = {
    # two Q tiles of 128 rows per CTA (q_stage 2): two softmax warpgroups, a correction warpgroup,
    # MMA and load warps, S/P/O in tensor memory; the static persistent scheduler
    "fa4_fwd_sm100_hdim128": ("sm_100a", 256, 128, False),
    # FA3-style: producer warpgroup (TMA) + two consumer warpgroups (wgmma, P from registers)
    "fa4_fwd_sm90_hdim128": ("sm_90a", 256, 128, False),
}
NUM_SMS = {"sm_100a": 148, "sm_90a": 132}


def compile_one(arch: str, seqlen: int, hdim: int, causal: bool) -> None:
    """Runs in a child process (FA4 caches the arch): compile one forward under FakeTensorMode."""
    os.environ.update(FLASH_ATTENTION_ARCH=arch, CUTE_DSL_ARCH=arch, FLASH_ATTENTION_NUM_SMS=str(NUM_SMS[arch]),
                      CUTE_DSL_NO_CACHE="1")
    import cutlass.utils
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    class TargetHardware:
        """The cross-compile target's SM count (there is no driver to ask)."""

        def get_device_multiprocessor_count(self):
            return NUM_SMS[arch]

        def get_max_active_clusters(self, cluster_size=1):
            return NUM_SMS[arch] // cluster_size

    cutlass.utils.HardwareInfo = TargetHardware
    from flash_attn.cute import interface
    with FakeTensorMode():
        q, k, v = (torch.empty(1, seqlen, 1, hdim, dtype=torch.bfloat16, device="cuda") for _ in range(3))
        interface._flash_attn_fwd(q, k, v, causal=causal, return_lse=True)


def host_function(ir: str) -> str:
    return ir[ir.index("func.func @cutlass"):]


def sm100_meta(ir: str) -> dict:
    host = host_function(ir)
    assert 'cute.tile<"256:1">' in host and "minsi" in host and "blockDim = (%c512_i32" in host, "FA4 sm100 host changed"
    return {
        "block": [512, 1, 1], "cluster": [1, 1, 1], "q_stage": 2, "tile": [256, 128],
        "grid": ["min(m_blocks * H * B, 148)", "1", "1"],
        "params": [["q_coord", "i32x4", "(S_q, D, H, B)"], ["k_coord", "i32x4", "(S_k, D, H_k, B)"],
                   ["v_coord", "i32x4", "(D_v, S_k, H_k, B)"], ["o_coord", "i32x4", "(S_q, D_v, H, B)"],
                   ["lse", "view40", "ptr, (S_q, H, B), pad, strides (S_q, H*S_q) elements"],
                   ["q_map", "tensormap", 0], ["k_map", "tensormap", 1], ["v_map", "tensormap", 2],
                   ["o_map", "tensormap", 3], ["scale_log2", "f32", "softmax_scale * log2(e)"],
                   ["mma_qk_state", "zeros", 32], ["mma_pv_state", "zeros", 32],
                   ["m_blocks_divmod", "fastdivmod", "m_blocks = cdiv(S_q, 256)"], ["m_blocks", "u32", None],
                   ["heads_divmod", "fastdivmod", "H"], ["heads", "u32", None],
                   ["total_blocks", "u32", "m_blocks * H * B"], ["one", "u32", 1]],
    }


def sm90_meta(ir: str) -> dict:
    host = host_function(ir)
    assert 'cute.tile<"128:1">' in host and "gridDim = (%48, %49, %46)" in host and "blockDim = (%c384_i32" in host, \
        "FA4 sm90 host changed"
    return {
        "block": [384, 1, 1], "cluster": [1, 1, 1], "tile": [128, 128],
        "grid": ["cdiv(S_q, 128)", "H", "B"],
        "params": [["q_coord", "i32x4", "(S_q, D, H, B)"], ["k_coord", "i32x4", "(S_k, D, H_k, B)"],
                   ["v_coord", "i32x4", "(S_k, D_v, H_k, B)"], ["o_coord", "i32x4", "(S_q, D_v, H, B)"],
                   ["lse", "view40", "ptr, (S_q, H, B), pad, strides (S_q, H*S_q) elements"],
                   ["q_map", "tensormap", 0], ["k_map", "tensormap", 1], ["v_map", "tensormap", 2],
                   ["o_map", "tensormap", 3], ["scale_log2", "f32", "softmax_scale * log2(e)"],
                   ["mma_qk_state", "zeros", 1], ["mma_pv_state", "zeros", 1],
                   ["m_blocks", "u32", "cdiv(S_q, 128)"], ["heads", "u32", "H"], ["batch", "u32", "B"],
                   ["one_divmod", "fastdivmod", 1], ["one", "u32", 1]],
    }


def tma_facts(ir: str) -> list:
    """Each tensor map (Q, K, V, O in launch order): gbasis, and the swizzle of its smem layout."""
    host = host_function(ir)
    gb = re.findall(r'make_non_exec_tiled_tma_(?:load|store)\(.*?tma_gbasis = <"([^"]*)">', host)
    assert len(gb) == 4 and all(g.startswith("(64,128,1,1)") for g in gb), gb
    assert host.count('S<3,4,3>') > 0
    # box over the numpy-order (B, H, S, D) view: 128 rows of 64 bf16 (128 bytes: 128-byte swizzle)
    return [{"gbasis": g, "box": [1, 1, 128, 64], "swizzle": 128, "dtype": "bf16"} for g in gb]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--compile-one":
        arch, seqlen, hdim, causal = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
        compile_one(arch, seqlen, hdim, causal)
        return
    from importlib.metadata import version
    for name, (arch, seqlen, hdim, causal) in FIXTURES.items():
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, CUTE_DSL_KEEP="ptx,ir", CUTE_DSL_DUMP_DIR=tmp)
            subprocess.run([sys.executable, __file__, "--compile-one", arch, str(seqlen), str(hdim),
                            "1" if causal else "0"], check=True, env=env, cwd=tmp, capture_output=True)
            ptx = open(glob.glob(f"{tmp}/*.ptx")[0]).read()
            ir = open(glob.glob(f"{tmp}/*_clean.mlir")[0]).read()
        meta = {"entry": re.search(r"\.visible \.entry (\w+)\(", ptx).group(1), "target": arch, "kind": "attention",
                "head_dim": hdim, "causal": causal, "dtype": "bf16", "compiled_for_seqlen": seqlen,
                **(sm100_meta(ir) if arch == "sm_100a" else sm90_meta(ir)), "tma": tma_facts(ir),
                "smem": 232448,
                "check": {"inputs": "Q, K, V: (B, S, H, D) bf16 contiguous; O the same; LSE: (B, H, S_q) f32",
                          "expect": "O = softmax(Q K^T * softmax_scale) V in float64 (P rounded to bf16: atol ~1e-2 "
                                    "for unit-normal inputs); LSE natural-log sum-exp of the scaled scores"},
                "flash_attn_version": version("flash-attn-4"), "cute_dsl_version": version("nvidia-cutlass-dsl"),
                "generated_by": "tests/sim/fa4_ptx/generate_fixtures.py"}
        n_params = len(re.findall(rf"\.param .* {meta['entry']}_param_\d+", ptx))
        assert n_params == len(meta["params"]), (name, n_params)
        (HERE / f"{name}.ptx").write_text(ptx)
        (HERE / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
        print(name, len(ptx.splitlines()), "PTX lines", meta["block"], meta["grid"])


if __name__ == "__main__":
    main()
