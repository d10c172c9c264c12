"""Compile Triton matmul kernels for sm_90a and sm_100a ahead of time and save their PTX as
emulator fixtures (PTX this project did not write; issue 12 "Fidelity on foreign PTX", issue 23
for the Blackwell ones).

Triton is NOT a dependency of cutedsl. Run it from its own virtual environment (no GPU needed):

    python3 -m venv /tmp/tritonvenv
    /tmp/tritonvenv/bin/pip install triton==3.9.0 numpy
    TRITON_DEFAULT_FP_FUSION=1 /tmp/tritonvenv/bin/python tests/sim/triton_ptx/generate_fixtures.py

Made with Triton 3.9.0 (the version is recorded in every JSON file). Each fixture is
``NAME.ptx`` (Triton's PTX, unchanged) plus ``NAME.json``: entry name, num_warps, block
size, dynamic shared memory, global scratch size/alignment, the PTX parameter list in order
(what each ``.param`` holds: a pointer, an i32 scalar, a host tensor map or its shape/stride
words, Triton's trailing global/profile scratch pointers), the grid rule, and for host tensor
descriptors the box and swizzle Triton chose. ``tests/sim/test_triton_fixtures.py`` runs them. The attention and softmax fixtures beside them
come from ``generate_attention_fixtures.py`` (same venv), which reuses this file's helpers.

The kernels are written here in the style of Triton's tutorials (03 matrix multiplication,
09 persistent matmul), not copied from them:

* ``triton_mm_ptr``: pointer loads with masks -> ``cp.async`` (zero-fill through
  ``src-size`` 0) multistage pipeline + ``wgmma``; A is M x K row-major, B is given as
  N x K row-major (K-major), C is f32 M x N.
* ``triton_mm_ptr_small``: the same kernel on 32 x 32 tiles, which Triton lowers to the Ampere
  path (``ldmatrix`` + ``mma.sync.m16n8k16``) since a warpgroup's wgmma needs 64 rows.
* ``triton_mm_tma``: host-side tensor descriptors (``TensorDescriptor`` on the host)
  -> TMA loads with mbarriers, ``wgmma``, TMA store of an f16 C.
* ``triton_mm_ptr_sm100`` / ``triton_mm_tma_sm100``: the pointer and TMA kernels compiled for
  sm_100a on 128-row tiles: ``tcgen05.mma`` into tensor memory, ``tcgen05.commit`` to an
  mbarrier, ``tcgen05.ld`` of the accumulator (no GPU needed to compile them).
* ``triton_mm_ws``: persistent, warp-specialized (``tl.range(..., warp_specialize=True)``)
  with device-side descriptors (``tl.make_tensor_descriptor``), 384 threads: tensor maps are written to the
  global scratch with ``tensormap.replace``, a producer warp issues TMA, ``setmaxnreg``
  rebalances registers, named barriers hand tiles between partitions.
"""
from __future__ import annotations

import json
import os
import pathlib

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

HERE = pathlib.Path(__file__).parent
TARGET = GPUTarget("cuda", 90, 32)
TARGET_SM100 = GPUTarget("cuda", 100, 32)       #: Blackwell: tcgen05.mma with the accumulator in TMEM
DIV16 = [["tt.divisibility", 16]]


@triton.jit
def triton_mm_ptr(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bn, stride_cm,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # One output tile per program; rows/cols past M/N and the K tail are masked (zero fill).
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        k = kt * BLOCK_K + ks
        a = tl.load(a_ptr + rows[:, None] * stride_am + k[None, :],
                    mask=(rows[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + cols[None, :] * stride_bn + k[:, None],
                    mask=(k[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def triton_mm_tma(a_desc, b_desc, c_desc, M, N, K,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # Tiles in column-major order of a 2-D launch; TMA zero-fills the ragged edges and clips the store.
    off_m = tl.program_id(0) * BLOCK_M
    off_n = tl.program_id(1) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([off_m, kt * BLOCK_K])
        b = b_desc.load([off_n, kt * BLOCK_K])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.float16))


@triton.jit
def _tile_origin(tile, num_m, num_n, GROUP_M: tl.constexpr):
    # Grouped rasterization: GROUP_M row-tiles sweep all column tiles before moving down.
    per_group = GROUP_M * num_n
    group = tile // per_group
    first_m = group * GROUP_M
    rows_in_group = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (tile % per_group) % rows_in_group
    pid_n = (tile % per_group) // rows_in_group
    return pid_m, pid_n


@triton.jit
def triton_mm_ws(a_ptr, b_ptr, c_ptr, M, N, K, num_programs,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 GROUP_M: tl.constexpr):
    # Device-side tensor maps over row-major A (M x K), K-major B (N x K) and f32 C (M x N).
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), num_m * num_n, num_programs, warp_specialize=True):
        pid_m, pid_n = _tile_origin(tile, num_m, num_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k_tiles):
            a = a_desc.load([off_m, kt * BLOCK_K])
            b = b_desc.load([off_n, kt * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([off_m, off_n], acc)


def _compile(fn, signature, constexprs, div16, num_warps, num_stages, target=TARGET):
    attrs = {(list(signature).index(n),): DIV16 for n in div16}
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=target, options={"num_warps": num_warps, "num_stages": num_stages})


def _param_layout(signature, tensordesc_meta):
    """What each PTX ``.param`` holds, in order (Triton's kernel ABI for sm_90)."""
    out, di = [], 0
    for name, ty in signature.items():
        if ty == "constexpr":
            continue
        if ty.startswith("tensordesc"):
            rank = ty.count(",") + 1
            if tensordesc_meta:   # host descriptor lowered to a TMA tensor map: map, shape, strides
                out.append([name, "tensormap", di])
                out += [[f"{name}.shape{i}", "i32", None] for i in range(rank)]
                out += [[f"{name}.stride{i}", "i64", None] for i in range(rank)]
            di += 1
        elif ty.startswith("*"):
            out.append([name, "ptr", ty[1:]])
        else:
            out.append([name, ty, None])
    out.append(["global_scratch", "ptr", None])
    out.append(["profile_scratch", "ptr", None])
    return out


def save(name, ck, signature, constexprs, grid, shape, **extra):
    """Write ``NAME.ptx`` and ``NAME.json``; ``extra`` adds keys to the JSON (e.g. how to check it)."""
    md = ck.metadata
    meta = {
        "triton_version": triton.__version__,
        "target": f"sm_{ck.metadata.target.arch}",
        "entry": md.name,
        "num_warps": md.num_warps,
        "num_stages": md.num_stages,
        "block": [32 * md.num_warps, 1, 1],
        "shared": md.shared,
        "global_scratch_size": md.global_scratch_size,
        "global_scratch_align": md.global_scratch_align,
        "constexprs": constexprs,
        "params": _param_layout(signature, md.tensordesc_meta),
        "tensordesc_meta": list(md.tensordesc_meta or []),
        "grid": grid,
        "shape": shape,
        **extra,
    }
    (HERE / f"{name}.ptx").write_text(ck.asm["ptx"])
    (HERE / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"{name}: {len(ck.asm['ptx'].splitlines())} PTX lines, smem {md.shared} B, "
          f"scratch {md.global_scratch_size} B, {md.num_warps} warps")


def main():
    # 8 warps = two consumer warpgroups (m64 each) that both copy with cp.async: the wgmma of one
    # warpgroup reads rows the other warpgroup's cp.async wrote, ordered by cp.async.wait_group,
    # bar.sync and a fence.proxy.async executed by the reading threads only.
    tile = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32",
           "stride_am": "i32", "stride_bn": "i32", "stride_cm": "i32",
           "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"}
    ck = _compile(triton_mm_ptr, sig, tile, ["a_ptr", "b_ptr", "c_ptr", "K", "stride_am", "stride_bn",
                                             "stride_cm"], num_warps=8, num_stages=3)
    save("triton_mm_ptr", ck, sig, tile, ["cdiv(M, BLOCK_M)", "cdiv(N, BLOCK_N)", "1"],
         {"K": "multiple of 16 (16-byte vector loads); M, N any", "strides": "K, K, N (elements)"})

    # The same kernel with a tile too small for a warpgroup's wgmma: Triton falls back to the
    # Ampere path (ldmatrix + mma.sync.m16n8k16), still with cp.async.
    tile = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}
    ck = _compile(triton_mm_ptr, sig, tile, ["a_ptr", "b_ptr", "c_ptr", "K", "stride_am", "stride_bn",
                                             "stride_cm"], num_warps=4, num_stages=3)
    save("triton_mm_ptr_small", ck, sig, tile, ["cdiv(M, BLOCK_M)", "cdiv(N, BLOCK_N)", "1"],
         {"K": "multiple of 16 (16-byte vector loads); M, N any", "strides": "K, K, N (elements)"})

    tile = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}
    sig = {"a_desc": "tensordesc<fp16[64, 64]>", "b_desc": "tensordesc<fp16[64, 64]>",
           "c_desc": "tensordesc<fp16[64, 64]>", "M": "i32", "N": "i32", "K": "i32",
           "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"}
    ck = _compile(triton_mm_tma, sig, tile, [], num_warps=4, num_stages=3)
    save("triton_mm_tma", ck, sig, tile, ["cdiv(M, BLOCK_M)", "cdiv(N, BLOCK_N)", "1"],
         {"K": "multiple of 8 (16-byte row pitch); M, N any",
          "descriptors": "a: M x K, b: N x K, c: M x N, all row-major f16, box [64, 64]"})

    # Blackwell (sm_100): the same pointer and TMA-descriptor kernels on 128-row tiles, which
    # Triton lowers to tcgen05.mma with the accumulator in tensor memory (alloc, commit to an
    # mbarrier, tcgen05.ld of the result, dealloc)
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32",
           "stride_am": "i32", "stride_bn": "i32", "stride_cm": "i32",
           "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"}
    tile = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}
    ck = _compile(triton_mm_ptr, sig, tile, ["a_ptr", "b_ptr", "c_ptr", "K", "stride_am", "stride_bn",
                                             "stride_cm"], num_warps=4, num_stages=3, target=TARGET_SM100)
    save("triton_mm_ptr_sm100", ck, sig, tile, ["cdiv(M, BLOCK_M)", "cdiv(N, BLOCK_N)", "1"],
         {"K": "multiple of 16 (16-byte vector loads); M, N any", "strides": "K, K, N (elements)"})
    tile = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64}
    sig = {"a_desc": "tensordesc<fp16[128, 64]>", "b_desc": "tensordesc<fp16[64, 64]>",
           "c_desc": "tensordesc<fp16[128, 64]>", "M": "i32", "N": "i32", "K": "i32",
           "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"}
    ck = _compile(triton_mm_tma, sig, tile, [], num_warps=4, num_stages=3, target=TARGET_SM100)
    save("triton_mm_tma_sm100", ck, sig, tile, ["cdiv(M, BLOCK_M)", "cdiv(N, BLOCK_N)", "1"],
         {"K": "multiple of 8 (16-byte row pitch); M, N any",
          "descriptors": "a: M x K (box 128 x 64), b: N x K (box 64 x 64), c: M x N (box 128 x 64), row-major f16"})

    tile = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 2}
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32",
           "num_programs": "i32",
           "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr", "GROUP_M": "constexpr"}
    ck = _compile(triton_mm_ws, sig, tile, ["a_ptr", "b_ptr", "c_ptr", "K", "N"], num_warps=4, num_stages=3)
    save("triton_mm_ws", ck, sig, tile, ["num_programs", "1", "1"],
         {"K": "multiple of 16; N multiple of 16 (16-byte pitch of C, hinted); M any",
          "grid": "num_programs <= cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) persistent programs",
          "global_scratch": "global_scratch_size bytes per program, base aligned to global_scratch_align"})


if __name__ == "__main__":
    main()
