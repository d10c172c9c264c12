"""The ``wave`` bench set (few tiles, long K): every persistent config timed data-parallel and
stream-K, and the SM-utilisation model printed for the set's real shapes on any backend."""
from cutedsl import GemmConfig
from cutedsl.bench import configs as C, report, runner
from cutedsl.bench.shapes import SETS, utilisation_model


def test_wave_configs_pair_each_persistent_schedule_with_stream_k():
    cfgs = C.sweep_configs("wave", tiles=[(128, 128, 64)], schedules=["multistage", "cooperative", "pingpong"])
    got = [(c.schedule, c.decomposition) for c in cfgs]
    assert got == [("multistage", "data-parallel"), ("cooperative", "data-parallel"), ("cooperative", "stream-k"),
                   ("pingpong", "data-parallel"), ("pingpong", "stream-k")]
    assert C.label(cfgs[2]) == "cooperative 128x128x64 s6 stream-k f16->f32"
    assert C.sweep_configs("square", tiles=[(128, 128, 64)], schedules=["cooperative"])[0].decomposition == \
        "data-parallel"


def test_utilisation_model_shows_the_stream_k_balance():
    """1536 x 1536 with 128 x 128 tiles is 144 tiles on 132 SMs: data-parallel runs a second
    wave of 12 tiles (54.5% busy); stream-K evens the k-iterations out."""
    assert (1536, 1536, 16384) in SETS["wave"]
    dp = utilisation_model(GemmConfig(schedule="cooperative", tile=(128, 128, 64)), 1536, 1536, 16384)
    sk = utilisation_model(GemmConfig(schedule="cooperative", tile=(128, 128, 64), decomposition="stream-k"),
                           1536, 1536, 16384)
    assert dp == {"mode": "data-parallel", "clusters": 132, "busy_max": 512, "utilisation": 144 / 264}
    assert sk["mode"] == "stream-k" and sk["busy_max"] == 280 and sk["utilisation"] > 0.99
    assert utilisation_model(GemmConfig(schedule="multistage"), 1536, 1536, 16384) is None


def test_model_rows_in_the_report():
    cfgs = [GemmConfig(schedule="pingpong", tile=(128, 128, 64), decomposition=d, out_dtype="f16")
            for d in ("data-parallel", "stream-k")]
    rows = runner.model_rows(cfgs, 132)
    assert len(rows) == 2 * len(SETS["wave"]) and {r["mode"] for r in rows} == {"data-parallel", "stream-k"}
    result = {"header": {"date_utc": "-", "backend": "sim", "reference": "-"},
              "sets": [{"set": "wave", "x_label": "M", "rows": [], "model": rows,
                        "summary": {"configs": {}, "reference_geomean_tflops": None}}]}
    text = report.text(result)
    assert "SM-utilisation model (132 SMs" in text
    assert "1024   1024  16384  pingpong 128x128x64 s6 stream-k    stream-k" in text


def test_moe_set_runs_grouped_on_the_emulator():
    """The ``moe`` set: each problem a list of expert GEMMs (shared N, K; an idle expert), one
    GroupedGemm launch per config, checked group by group; only the persistent schedules."""
    from cutedsl.bench import libs
    from cutedsl.bench.shapes import GROUPED_SETS, TINY_GROUPS
    from cutedsl.bench.timing import WallTimer
    from cutedsl.device import Gemm
    from cutedsl.device.grouped import GroupedGemm
    from cutedsl.sim import SimBackend
    assert all(len({(n, k) for _, n, k in p}) == 1 for p in GROUPED_SETS["moe"])     # an expert layer
    assert sum(m for m, _, _ in GROUPED_SETS["moe"][0]) == 8192 and GROUPED_SETS["moe"][2][-1][0] == 0
    cfgs = C.sweep_configs("moe", tiles=[(128, 128, 64)], base={"out_dtype": "f16"})
    assert [c.schedule for c in cfgs] == ["cooperative", "pingpong"]
    be = SimBackend()
    lib, _ = libs.pick("sim", "numpy", 0)
    s = runner.Sweep(be, lib, WallTimer(be.synchronize), lambda c: Gemm(c, be), iters=1, warmup=0,
                     make_grouped=lambda c: GroupedGemm(c, be))
    out = s.run_set("moe", cfgs)
    assert [r["groups"] for r in out["rows"]] == [len(TINY_GROUPS[0])] * 2
    assert all(r["check"] == "pass" for r in out["rows"]), out["rows"]
    assert out["rows"][0]["m"] == sum(m for m, _, _ in TINY_GROUPS[0])
