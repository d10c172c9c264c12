"""Warp-specialized schedules compile for sm_90a the way they are meant to: no spills and no
ptxas-injected waits; the producer/consumer register budgets (USETMAXREG 40 / 232); the HGMMA
count of the tile; TMA multicast exactly where the cluster shares a tile; a short consumer
loop per k-tile; configurations that cannot run are refused with a ConfigError naming the
limit."""
import pytest

from cutedsl import GemmConfig
from cutedsl.compiler.sass_loops import hot_loop
from cutedsl.compiler.toolchain import sass, sass_histogram
from cutedsl.errors import ConfigError, SharedMemoryError
from cutedsl.kernel.warp_specialized import (CONSUMER_REGS, PRODUCER_REGS, CooperativeGemmKernel,
                                             PingpongGemmKernel, WarpSpecializedGemmKernel)

CASES = [  # kernel, tile, cluster, consumer-loop instructions per k-tile at most (measured + ~10%)
    (WarpSpecializedGemmKernel, (128, 128), (1, 1), 60),
    (WarpSpecializedGemmKernel, (128, 256), (2, 1), 56),
    (CooperativeGemmKernel, (128, 128), (1, 2), 56),
    (CooperativeGemmKernel, (128, 256), (1, 1), 49),
    (PingpongGemmKernel, (128, 128), (2, 1), 67),
    (PingpongGemmKernel, (64, 256), (1, 1), 48),
    # clusters of four: multicast on both operands (2x2) or one operand to four CTAs
    (CooperativeGemmKernel, (128, 128), (2, 2), 55),
    (CooperativeGemmKernel, (128, 256), (4, 1), 55),
    (PingpongGemmKernel, (128, 128), (1, 4), 67),
]


@pytest.mark.parametrize("cls,tile,cluster,max_loop", CASES,
                         ids=[f"{c.name}-{t[0]}x{t[1]}-{cl[0]}x{cl[1]}" for c, t, cl, _ in CASES])
def test_schedule_sass(cls, tile, cluster, max_loop):
    kern = cls(*tile, stages=3, cluster=cluster)
    k = kern.compile()
    r = k.resources
    assert r.spill_stores == r.spill_loads == r.stack == 0, r
    assert not [m for m in r.ptxas_messages if any(c in m for c in ("C7517", "C7519", "C7508"))], r.ptxas_messages
    assert r.registers == kern.launch_registers == 168
    assert k.block == (kern.threads, 1, 1) and kern.threads == 128 * (kern.consumer_warpgroups + 1)
    assert k.cluster == ((cluster[0] * cluster[1], 1, 1) if cluster != (1, 1) else (1, 1, 1))
    # register reconfiguration: the producer warpgroup gives back to 40, consumers take 232
    ptx = " ".join(k.ptx.split())
    assert f"setmaxnreg.dec.sync.aligned.u32 {PRODUCER_REGS};" in ptx
    assert f"setmaxnreg.inc.sync.aligned.u32 {CONSUMER_REGS};" in ptx
    text = sass(k.cubin)
    h = sass_histogram(text, detailed=True)
    assert h.get("USETMAXREG.DEALLOC.CTAPOOL") == 1 and h.get("USETMAXREG.TRY_ALLOC.CTAPOOL") == 1, h
    # ... and the SASS carries the intended budgets as its immediates (40 = 0x28, 232 = 0xe8)
    setmax = {line.split()[1]: line.split()[-2] for line in text.splitlines() if "USETMAXREG" in line}
    assert setmax == {"USETMAXREG.DEALLOC.CTAPOOL": f"{PRODUCER_REGS:#x}",
                      "USETMAXREG.TRY_ALLOC.CTAPOOL": f"{CONSUMER_REGS:#x}"}, setmax
    # HGMMA: m64nNk16 x (rows per consumer warpgroup / 64) x 4 k-steps, first k-tile peeled
    wg_rows = tile[0] // kern.split_warpgroups
    assert h.get(f"HGMMA.64x{tile[1]}x16.F32") == 2 * (wg_rows // 64) * 4, h
    # TMA: one A box + B boxes per stage, from the one producer site; multicast where shared
    b_boxes = tile[1] // 64
    mc_a = 1 if cluster[1] > 1 else 0
    mc_b = b_boxes if cluster[0] > 1 else 0
    assert h.get("UTMALDG.2D.MULTICAST", 0) == mc_a + mc_b, h
    assert h.get("UTMALDG.2D", 0) == 1 + b_boxes - mc_a - mc_b, h
    assert k.ptx.count(".multicast::cluster") == mc_a + mc_b
    assert hot_loop(text)["instructions"] <= max_loop


def test_config_refusals():
    with pytest.raises(ConfigError, match="too small to split"):
        GemmConfig(tile=(64, 128, 64), schedule="cooperative")
    with pytest.raises(ConfigError, match=r"256 f32 accumulator registers.*128"):
        GemmConfig(tile=(128, 256, 64), schedule="pingpong")
    with pytest.raises(ConfigError, match=r"cluster must be one of \(1, 1\), \(2, 1\), \(1, 2\), \(2, 2\), "
                                          r"\(4, 1\), \(1, 4\)"):
        GemmConfig(schedule="pingpong", cluster=(2, 4))
    with pytest.raises(ConfigError, match="needs a warp-specialized schedule"):
        GemmConfig(schedule="multistage", cluster=(2, 1))
    with pytest.raises(ConfigError, match="raster must be 'M', 'N' or 'auto'"):
        GemmConfig(schedule="cooperative", raster="K")
    with pytest.raises(ConfigError, match="swizzle must be 1, 2, 4 or 8"):
        GemmConfig(schedule="cooperative", swizzle=3)
    with pytest.raises(ConfigError, match="sm_count must be None or an int"):
        GemmConfig(schedule="cooperative", sm_count=0)
    with pytest.raises(ConfigError, match="schedule must be one of"):
        GemmConfig(schedule="persistent")
    with pytest.raises(SharedMemoryError, match="232448 B limit"):
        GemmConfig(tile=(128, 256, 64), schedule="warp_specialized", stages=6)


@pytest.mark.parametrize("schedule,tile,stages", [("warp_specialized", (128, 128), 7),
                                                  ("cooperative", (128, 256), 4), ("pingpong", (64, 128), 7)])
def test_auto_stages_fill_shared_memory(schedule, tile, stages):
    cfg = GemmConfig(tile=(*tile, 64), schedule=schedule)
    assert cfg.resolved_stages() == stages
    assert cfg.kernel().smem_plan().total_bytes <= 232448


@pytest.mark.parametrize("cls", [WarpSpecializedGemmKernel, CooperativeGemmKernel, PingpongGemmKernel])
def test_16_bit_epilogue_uses_stmatrix(cls):
    """The shared epilogue writes 16-bit sub-tiles with stmatrix (STSM), not st.shared."""
    k = cls(128, 128, stages=3, out_dtype="bf16").compile()
    h = k.resources.sass
    assert h.get("STSM", 0) > 0 and h.get("STS", 0) == 0, h
    assert k.resources.spill_stores == 0
