"""Block-scaled MX GEMMs on a CTA pair (issue 24; CUTLASS's 2SM block-scaled kernel, 256 x 128
per pair): each CTA loads its 128 rows of A with their factor atoms, half of B's N rows and all
of B's factor atoms (the MMA reads B's factors from the issuing CTA's tensor memory, so both
hold them); every load completes on the even CTA's barrier, whose thread copies the factors
with ``tcgen05.cp.cta_group::2`` (each CTA from its shared memory into its own TMEM) and issues
``tcgen05.mma.cta_group::2 ... .block_scale`` with M = 256. Real compiled PTX on the emulator,
ragged shapes, values and factors on their exact grids."""
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.errors import ConfigError

from test_sm100 import mx_operands

K_TILE = {"mxfp8": 128, "mxfp6": 128, "mxfp4": 256, "nvfp4": 256}


@pytest.mark.parametrize("dtype,b_dtype", [("mxfp8", None), ("mxfp8", "mxfp6"), ("mxfp4", None), ("nvfp4", None)])
def test_mx_pair_exact(dtype, b_dtype, rng, sim):
    """Two pairs (4 SMs) over 3 x 2 pair tiles or more, M, N and K ragged (K odd for the 4-bit
    types); e4m3 times e2m3 mixes kinds in one kind::mxf8f6f4 MMA."""
    from cutedsl.device import mx
    k_tile = K_TILE[dtype]
    m = 2 * 256 + int(rng.integers(1, 256))
    n = 128 + int(rng.integers(1, 16)) * 8
    k = 2 * k_tile + 2 * int(rng.integers(1, 50)) + 1
    qa, _, sa, _ = mx_operands(rng, m, n, k, dtype)
    _, qb, _, sb = mx_operands(rng, m, n, k, b_dtype or dtype)
    cfg = GemmConfig(arch="sm_100a", dtype=dtype, b_dtype=b_dtype, mma_sm=2, cluster=(2, 1), stages=2, sm_count=4)
    assert cfg.tile == (128, 128, k_tile)
    d = Gemm(cfg, sim)(qa, qb.T, a_scales=mx.pack_scales(sa, dtype), b_scales=mx.pack_scales(sb, b_dtype or dtype))
    ref = mx.dequantize(qa, sa, dtype) @ mx.dequantize(qb, sb, b_dtype or dtype).T
    assert np.array_equal(d.astype(np.float64), ref), rng.seed_value


@pytest.mark.parametrize("dtype,mma,cps,anchor", [("mxfp8", "UTCQMMA.2CTA", 2, (67, 49)),
                                                   ("mxfp4", "UTCOMMA.2CTA", 4, (58, 51)),
                                                   ("nvfp4", "UTCOMMA.2CTA.4X", 8, (70, 51))])
def test_mx_pair_sass(dtype, mma, cps, anchor):
    """The even CTA's MMA loop per k-tile: the factor copies as UTCCP.2CTA, four pair MMAs and
    the multicast release, no branch; the producer's 4 UTMALDG (A, B and their factors); both
    loops within 10 % of CuTe DSL's 2SM block-scaled GEMM of the same 256 x 128 pair tile
    (``anchor``: MMA / producer, docs/measurements.md); the tx count of the even CTA's barrier
    covers both CTAs' factor atoms; no spills."""
    from cutedsl.compiler import toolchain
    from cutedsl.compiler.sass_loops import kernel_hot_loop
    cfg = GemmConfig(arch="sm_100a", dtype=dtype, mma_sm=2, cluster=(2, 1), stages=4)
    kern = cfg.kernel()
    ml = kern.mainloop
    assert ml.pair_stage_bytes == ml.traits.tile_bytes(2 * 128 + 128) + 2 * 2 * ml.sf_atoms * 512
    k = kern.compile()
    assert k.resources.spill_stores == k.resources.spill_loads == 0
    sass = toolchain.sass(k.cubin)
    ops = [ln.split()[1] for ln in sass.splitlines() if "UTC" in ln and len(ln.split()) > 1]
    assert "UTCCP.T.S.2CTA.4x32dp128bit" in ops and mma in ops and "UTCBAR.2CTA.MULTICAST" in ops, set(ops)
    loop = kernel_hot_loop(k, mma.split(".")[0])
    h = loop["histogram"]
    assert (h.get("UTCCP"), h.get(mma.split(".")[0]), h.get("UTCBAR")) == (cps, 4, 1), h
    assert not {"R2UR", "BSSY", "ELECT"} & set(h) and loop["instructions"] <= 1.1 * anchor[0], loop
    prod = kernel_hot_loop(k, "UTMALDG")
    assert prod["histogram"]["UTMALDG"] == 4 and prod["instructions"] <= 1.1 * anchor[1], prod


def test_mx_pair_config_errors():
    with pytest.raises(ConfigError, match=r"block-scaled \(MX\) GEMMs are built for tile 128 x 128 \(per CTA; a CTA "
                                          r"pair with mma_sm=2: 256 x 128\) so far; got tile \(64, 128\)"):
        GemmConfig(arch="sm_100a", dtype="mxfp8", mma_sm=2, cluster=(2, 1), tile=(64, 128, 128))
