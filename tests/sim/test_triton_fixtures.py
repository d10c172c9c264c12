"""Fidelity on PTX this project did not write: Triton 3.9's sm_90a and sm_100a matmul kernels on
the emulator.

The PTX under ``tests/sim/triton_ptx/`` was produced by ``tests/sim/triton_ptx/generate_fixtures.py``
(Triton is not needed here). Each test builds the kernel's parameters the way Triton's
launcher does (pointers, i32 scalars, host tensor maps followed by their shape and strides,
the trailing global/profile scratch pointers), runs the kernel with race checks on, on
shapes that are not tile multiples, with small-integer inputs, and checks the result bit
for bit against numpy in float64.
"""
import json
import pathlib
import re

import numpy as np
import pytest

from cutedsl.sim import Emulator, MemoryAccessError, RaceError

HERE = pathlib.Path(__file__).parent / "triton_ptx"
SWIZZLE_BYTES = {0: 0, 1: 32, 2: 64, 3: 128}     # Triton's tensordesc_meta swizzle enum


def fixture(name):
    return (HERE / f"{name}.ptx").read_text(), json.loads((HERE / f"{name}.json").read_text())


def cdiv(a, b):
    return -(-a // b)


def operands(rng, m, n, k):
    """A (m x k) and B^T (n x k), both row-major f16 small integers (exact partial sums)."""
    a = rng.integers(-3, 4, (m, k)).astype(np.float16)
    bt = rng.integers(-3, 4, (n, k)).astype(np.float16)
    return a, bt, a.astype(np.float64) @ bt.astype(np.float64).T


def launch(emu, name, grid, values, meta, ptx=None):
    """Pack ``values`` (name -> value) in the fixture's parameter order and launch (``ptx``: edited text)."""
    ptx = ptx or fixture(name)[0]
    prog = emu.load(ptx, meta["entry"])
    args = [values[p[0]] for p in meta["params"]]
    return emu.launch(prog, grid=grid, block=tuple(meta["block"]), args=args, smem=meta["shared"])


def test_fixture_metadata_matches_ptx():
    # The JSON describes the PTX it sits next to: entry, parameter count, thread count.
    for name in ("triton_mm_ptr", "triton_mm_ptr_small", "triton_mm_tma", "triton_mm_ws", "triton_mm_ptr_sm100",
                 "triton_mm_tma_sm100"):
        ptx, meta = fixture(name)
        assert f".visible .entry {meta['entry']}(" in ptx, name
        decls = re.findall(rf"^\s*\.param (.*) {meta['entry']}_param_\d+(\[128\])?,?$", ptx, re.M)
        assert len(decls) == len(meta["params"]), name
        for (ptype, byval), (pname, kind, _) in zip(decls, meta["params"]):
            # host tensor maps are 128-byte byval params, 64-byte aligned (CUtensorMap); the rest scalars
            assert (kind == "tensormap") == (byval == "[128]" and ".align 64" in ptype), (name, pname)
        assert f".reqntid {meta['block'][0]}" in ptx, name
        assert meta["triton_version"].startswith("3.9"), name
        assert f".target {meta['target']}" in ptx, name


def run_pointer_matmul(emu, rng, ptx=None, name="triton_mm_ptr", shape=(200, 72, 80)):
    _, meta = fixture(name)
    c = meta["constexprs"]
    m, n, k = shape
    a, bt, ref = operands(rng, m, n, k)
    out = emu.alloc(m * n * 4)
    vals = {"a_ptr": emu.to_device(a), "b_ptr": emu.to_device(bt), "c_ptr": out, "M": m, "N": n, "K": k,
            "stride_am": k, "stride_bn": k, "stride_cm": n, "global_scratch": 0, "profile_scratch": 0}
    launch(emu, name, (cdiv(m, c["BLOCK_M"]), cdiv(n, c["BLOCK_N"]), 1), vals, meta, ptx)
    return emu.to_host(out, (m, n), np.float32), ref


@pytest.mark.sim_kernel
def test_pointer_matmul_cp_async_bit_exact(rng, sim_seed):
    # cp.async by other warps -> cp.async.wait_group -> bar.sync -> fence.proxy.async by the
    # wgmma-issuing threads -> wgmma: race-free under the happens-before rules, in eager mode
    # and under adversarial interleavings (--sim-seeds)
    ptx, meta = fixture("triton_mm_ptr")
    assert ptx.count("cp.async.cg.shared.global") and "wgmma.mma_async" in ptx and meta["block"][0] == 256
    out, ref = run_pointer_matmul(Emulator(), rng)   # 200 x 72 x 80: ragged M and N tiles, K tail of 16
    assert np.array_equal(out, ref), f"input seed {rng.seed_value}, chaos seed {sim_seed}"


@pytest.mark.sim_kernel
def test_pointer_matmul_without_its_proxy_fence_is_a_race(rng):
    # The same PTX with Triton's only fence.proxy.async removed: wgmma (async proxy) then reads
    # what cp.async wrote through the generic proxy with nothing ordering the two proxies.
    ptx, _ = fixture("triton_mm_ptr")
    assert ptx.count("fence.proxy.async.shared::cta;") == 1
    with pytest.raises(RaceError, match="fence.proxy.async"):
        run_pointer_matmul(Emulator(), rng, ptx.replace("fence.proxy.async.shared::cta;", ""))


@pytest.mark.sim_kernel
def test_small_tile_matmul_mma_sync_bit_exact(rng):
    # 32 x 32 tiles: Triton uses ldmatrix + mma.sync.m16n8k16 instead of wgmma
    ptx, _ = fixture("triton_mm_ptr_small")
    assert "mma.sync.aligned.m16n8k16" in ptx and "ldmatrix" in ptx and "wgmma" not in ptx
    out, ref = run_pointer_matmul(Emulator(), rng, name="triton_mm_ptr_small", shape=(72, 40, 48))
    assert np.array_equal(out, ref), f"seed {rng.seed_value}"


def host_descriptor(emu, meta, index, buf, shape, dtype):
    """Triton's host TensorDescriptor: the tensor map, then its shape (i32) and strides (i64, elements)."""
    d = meta["tensordesc_meta"][index]
    tmap = emu.tensor_map(buf, shape, dtype, tuple(d["block_size"]), swizzle=SWIZZLE_BYTES[d["swizzle"]])
    return tmap, list(shape), [shape[1], 1]


@pytest.mark.sim_kernel
def test_blackwell_pointer_matmul_bit_exact(rng, sim_seed):
    """Triton's sm_100a lowering: cp.async into shared memory, tcgen05.mma into tensor memory
    (alloc, commit -> mbarrier, tcgen05.ld, dealloc), race checks on, eager and adversarial."""
    ptx, meta = fixture("triton_mm_ptr_sm100")
    for needle in ("tcgen05.alloc", "tcgen05.mma.cta_group::1.kind::f16", "tcgen05.commit", "tcgen05.ld",
                   "tcgen05.dealloc", ".target sm_100a"):
        assert needle in ptx, needle
    out, ref = run_pointer_matmul(Emulator(), rng, name="triton_mm_ptr_sm100", shape=(200, 72, 80))
    assert np.array_equal(out, ref), f"input seed {rng.seed_value}, chaos seed {sim_seed}"


@pytest.mark.sim_kernel
@pytest.mark.parametrize("fx", ["triton_mm_tma", "triton_mm_tma_sm100"])
def test_tma_descriptor_matmul_bit_exact(fx, rng):
    ptx, meta = fixture(fx)
    assert "cp.async.bulk.tensor.2d.shared::cluster.global" in ptx or "cp.async.bulk.tensor.2d.shared" in ptx
    c = meta["constexprs"]
    m, n, k = 100, 72, 88            # K tail of 24 zero-filled by TMA, C store clipped
    a, bt, ref = operands(rng, m, n, k)
    emu = Emulator()
    out = emu.alloc(m * n * 2)
    vals = {"M": m, "N": n, "K": k, "global_scratch": 0, "profile_scratch": 0}
    for i, (name, buf, shape) in enumerate((("a_desc", emu.to_device(a), (m, k)),
                                            ("b_desc", emu.to_device(bt), (n, k)),
                                            ("c_desc", out, (m, n)))):
        tmap, sh, st = host_descriptor(emu, meta, i, buf, shape, "f16")
        vals[name] = tmap
        vals.update({f"{name}.shape{j}": sh[j] for j in range(2)})
        vals.update({f"{name}.stride{j}": st[j] for j in range(2)})
    launch(emu, fx, (cdiv(m, c["BLOCK_M"]), cdiv(n, c["BLOCK_N"]), 1), vals, meta)
    assert np.array_equal(emu.to_host(out, (m, n), np.float16).astype(np.float64), ref), f"seed {rng.seed_value}"


@pytest.mark.sim_kernel
@pytest.mark.parametrize("programs", [3, 1])
def test_warp_specialized_persistent_device_descriptors_bit_exact(programs, rng):
    # 3 programs for 4 tiles: one program runs two; 1 program: every tile, the stage ring wraps
    ptx, meta = fixture("triton_mm_ws")
    for needle in ("setmaxnreg", "tensormap.replace", "barrier.sync", "wgmma.mma_async"):
        assert needle in ptx, needle
    assert meta["block"][0] == 384
    c = meta["constexprs"]
    m, n, k = 200, 80, 96            # 2 x 2 tiles (ragged), K tail of 32
    a, bt, ref = operands(rng, m, n, k)
    assert cdiv(m, c["BLOCK_M"]) * cdiv(n, c["BLOCK_N"]) == 4
    emu = Emulator()
    out = emu.alloc(m * n * 4)
    scratch = emu.alloc(programs * meta["global_scratch_size"])
    assert scratch.ptr % meta["global_scratch_align"] == 0
    vals = {"a_ptr": emu.to_device(a), "b_ptr": emu.to_device(bt), "c_ptr": out, "M": m, "N": n, "K": k,
            "num_programs": programs, "global_scratch": scratch, "profile_scratch": 0}
    launch(emu, "triton_mm_ws", (programs, 1, 1), vals, meta)
    assert np.array_equal(emu.to_host(out, (m, n), np.float32), ref), f"seed {rng.seed_value}"


@pytest.mark.parametrize("name", ["triton_mm_ptr", "triton_mm_ptr_small", "triton_mm_tma", "triton_mm_ws"])
def test_fixture_parses_and_decodes(name):
    ptx, meta = fixture(name)
    prog = Emulator().load(ptx, meta["entry"])
    assert prog.name == meta["entry"]


@pytest.mark.sim_kernel
def test_warp_specialized_short_global_scratch_is_reported():
    # Triton's launcher gives every program global_scratch_size bytes for its tensor maps; one
    # program's worth too little is caught at the copy of the last program's map.
    _, meta = fixture("triton_mm_ws")
    emu = Emulator()
    m, n, k = 128, 64, 64
    # A and B defined (zeros): the emulator's initcheck would stop at their first TMA load otherwise
    vals = {"a_ptr": emu.to_device(np.zeros(m * k, np.float16)), "b_ptr": emu.to_device(np.zeros(n * k, np.float16)),
            "c_ptr": emu.alloc(m * n * 4), "M": m,
            "N": n, "K": k, "num_programs": 2, "global_scratch": emu.alloc(meta["global_scratch_size"]),
            "profile_scratch": 0}
    with pytest.raises(MemoryAccessError, match=r"past the end(.|\n)*tensormap.cp_fenceproxy(.|\n)*CTA \(1, 0, 0\)"):
        launch(emu, "triton_mm_ws", (2, 1, 1), vals, meta)
