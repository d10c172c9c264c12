"""The config protocol (issue 38, device/config_protocol.py): GemmConfig as one family of
KernelConfig -- JSON round trip, identity, report view, can_implement with a problem, the family
registry the export / precompile / tuning record use, and config fields reaching the kernel
through their metadata (a field the kernel class does not take is refused by name)."""
import json

import attrs
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.device import config_build, config_protocol as P
from cutedsl.errors import ArgumentError, CacheError, ConfigError, ConfigTypeError
from cutedsl.kernel import MultistageGemmKernel, PingpongGemmKernel
from cutedsl.problem import GemmProblem

CONFIGS = [GemmConfig(), GemmConfig(schedule="pingpong", tile=(64, 128, 64), cluster=(2, 1), raster="N", swizzle=2),
           GemmConfig(dtype="e4m3", b_dtype="e5m2", out_dtype="bf16"),
           GemmConfig(epilogue=["scale_a:row", "bias:col", "gelu", "global"], a_major="MN"),
           GemmConfig(schedule="cooperative", decomposition="split-k", splits=3, sm_count=8),
           GemmConfig(arch="sm_100a", tile=(128, 256, 64), cluster=(2, 1), mma_sm=2, tile_scheduler="clc")]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.schedule)
def test_to_dict_round_trips_through_json(cfg):
    d = cfg.to_dict()
    assert json.loads(json.dumps(d)) == d                      # plain JSON: lists, strings, ints, None
    assert GemmConfig.from_dict(json.loads(json.dumps(d))) == cfg
    ident = cfg.identity()
    assert ident == {"family": "gemm", "fields": d} and P.config_from_identity(ident) == cfg
    assert json.dumps(ident, sort_keys=True) == json.dumps(GemmConfig(**cfg.fields()).identity(), sort_keys=True)


def test_from_dict_refuses_what_is_not_a_config():
    with pytest.raises(ConfigTypeError, match=r"GemmConfig.from_dict: expected a dict of fields, got list"):
        GemmConfig.from_dict([["dtype", "f16"]])
    with pytest.raises(ConfigTypeError, match=r"unexpected keyword argument 'colour'"):
        GemmConfig.from_dict({"colour": "red"})
    with pytest.raises(ConfigError, match=r"BLOCK_N must be 64, 128 or 256, got 96"):
        GemmConfig.from_dict({"tile": [128, 96, 64]})


def test_a_user_epilogue_node_is_not_data():
    """A node without a string spec is code: to_dict refuses it by name; save() says so too."""
    from cutedsl.collective.fusion import EpilogueNode

    class Halve(EpilogueNode):
        def apply(self, x, ctx):
            return x * 0.5
    cfg = GemmConfig(fusion=(Halve(),), epilogue="global")
    assert cfg.fields()["fusion"][0].__class__ is Halve           # a worker process gets it pickled
    with pytest.raises(ConfigError, match=r"a user EpilogueNode \(Halve, no string spec\) is code"):
        cfg.to_dict()
    with pytest.raises(ArgumentError, match=r"^save\(\): a user EpilogueNode \(Halve"):
        Gemm(cfg, "none").save("unused")


def test_describe_is_the_report_view():
    d = GemmConfig(tile=(128, 256, 64)).describe()
    assert d["stages"] == 4 and d["b_dtype"] == "f16" and d["tile"] == [128, 256, 64]
    assert "chosen" not in d and "decomposition" not in d and "splits" not in d
    d = GemmConfig(schedule="cooperative", decomposition="split-k", splits=3).describe()
    assert (d["decomposition"], d["splits"]) == ("split-k", 3)
    cfg = GemmConfig.for_problem(4096, 4096, 1024)
    assert cfg.describe()["chosen"] == cfg.reasons and set(cfg.reasons) >= {"tile", "schedule", "stages"}
    assert cfg.explain().splitlines()[0] == f"tile: {cfg.reasons['tile']}"


def test_for_problem_takes_a_problem():
    a = GemmConfig.for_problem(GemmProblem(3000, 500, 256, 4), out_dtype="bf16")
    b = GemmConfig.for_problem(3000, 500, 256, l=4, out_dtype="bf16")
    assert a == b and a.reasons == b.reasons and a.batched and a.out_dtype == "bf16"
    with pytest.raises(ConfigError, match="for_problem: give a GemmProblem or m, n, k, not both"):
        GemmConfig.for_problem(GemmProblem(1, 2, 3), 2, 3)
    with pytest.raises(ConfigError, match="for_problem: k must be a positive int, got 0"):
        GemmConfig.for_problem(GemmProblem(1, 2, 0))


def test_can_implement_with_a_problem():
    """The kernel's rules (construction already enforced them) and the grid limits Gemm.grid
    raises, as a sentence instead of an exception."""
    cfg = GemmConfig()
    assert cfg.can_implement() is None and cfg.can_implement(GemmProblem(300, 200, 100)) is None
    why = cfg.can_implement((10_000_000, 64, 64))
    assert why == ("M=10000000, N=64, K=64 with 128x128 tiles needs gridDim.y = 78125 CTAs; the hardware "
                   "allows 1..65535 on y: split the problem into smaller GEMMs")
    with pytest.raises(ArgumentError) as e:
        Gemm(cfg, "none").grid(10_000_000, 64, 64)
    assert str(e.value) == why
    assert cfg.can_implement((64, 64, 64, 70000)).startswith("M=64, N=64, K=64 with 128x128 tiles needs gridDim.z")
    assert cfg.can_implement((64, -1, 64)) == "can_implement: n must be a positive int, got -1"
    assert GemmConfig(schedule="pingpong").can_implement((10_000_000, 64, 64)) is None   # persistent: SMs bound it


def test_registry():
    assert P.config_family("gemm") is GemmConfig and "gemm" in P.family_names()
    assert GemmConfig.front_end() is Gemm
    with pytest.raises(ConfigError, match=r"config family must be 'gemm' or 'attention', got 'conv'"):
        P.config_family("conv")
    with pytest.raises(ConfigError, match=r"family 'gemm' is already cutedsl.device.config.GemmConfig"):
        P.register_family(type("Other", (P.KernelConfig,), {"FAMILY": "gemm", "__slots__": ()}))
    with pytest.raises(ConfigError, match="must be a KernelConfig subclass with a FAMILY name"):
        P.register_family(type("Nameless", (P.KernelConfig,), {"__slots__": ()}))


def test_a_second_family_plugs_in(monkeypatch):
    """What an AttentionConfig does: an attrs config on KernelConfig, registered by name; the
    shared code finds it by its family and reads it back from its dict."""
    monkeypatch.setattr(P, "_FAMILIES", dict(P._FAMILIES))         # leave the real registry as it was

    @P.register_family
    @attrs.frozen
    class ToyConfig(P.KernelConfig):
        FAMILY = "toy"
        block: tuple = attrs.field(default=(128, 64), converter=tuple)
        head_dim: int = 64
        reasons: object = attrs.field(default=None, init=False, eq=False)

        def can_implement(self, problem=None):
            return None if self.head_dim in (64, 128) else f"head_dim must be 64 or 128, got {self.head_dim}"

    cfg = ToyConfig(block=[64, 64], head_dim=96)
    assert P.config_family("toy") is ToyConfig and P.family_names() == ("gemm", "attention", "toy")
    assert P.config_from_identity(json.loads(json.dumps(cfg.identity()))) == cfg
    assert cfg.describe() == {"block": [64, 64], "head_dim": 96} and cfg.can_implement() == "head_dim must be 64 or 128, got 96"
    assert cfg.explain() == "set by hand (not chosen by ToyConfig.for_problem)"


def test_export_of_an_unknown_family_is_refused(tmp_path):
    (tmp_path / "cutedsl.json").write_text(json.dumps({"format": 2, "kind": "conv"}))
    import cutedsl
    with pytest.raises(CacheError, match=r"not a cutedsl GEMM export \(kind 'conv'; this cutedsl reads 'gemm', "
                                         r"'attention'\)"):
        cutedsl.load(tmp_path)


def test_attention_config_is_a_family():
    """AttentionConfig (issue 41) is the registry's "attention": the shared code reads it back
    from its identity and reports it like a GEMM config."""
    from cutedsl.device.attention import Attention
    from cutedsl.device.attention_config import AttentionConfig
    from cutedsl.problem import AttentionProblem
    cfg = AttentionConfig(head_dim=64, dtype="f16", pingpong=False)
    assert P.config_family("attention") is AttentionConfig and AttentionConfig.front_end() is Attention
    ident = json.loads(json.dumps(cfg.identity()))
    assert ident == {"family": "attention", "fields": {"head_dim": 64, "dtype": "f16", "overlap": True,
                                                       "pingpong": False, "arch": "sm_90a"}}
    assert P.config_from_identity(ident) == cfg and cfg.describe() == ident["fields"]
    assert cfg.can_implement() is None
    assert "multiple of kv_heads 3" in cfg.can_implement(AttentionProblem(1, 10, 10, 8, 3, 64))


# -- config fields -> kernel keywords ----------------------------------------------------------

def test_fields_give_the_keywords_their_kernel_takes():
    """always: every GEMM kernel's; if_taken: only to a kernel that takes it (raster and swizzle
    mean nothing to one tile per CTA); if_set: only when not neutral."""
    cfg = GemmConfig(schedule="multistage", raster="N", swizzle=2, b_dtype="f16")
    assert P.kernel_keywords(cfg, MultistageGemmKernel) == {
        "dtype": "f16", "out_dtype": "f32", "tile_m": 128, "tile_n": 128, "b_major": "MN", "arch": "sm_90a"}
    cfg = GemmConfig(schedule="pingpong", tile=(64, 128, 128), dtype="e4m3", b_dtype="e5m2", batched=True)
    kw = P.kernel_keywords(cfg, PingpongGemmKernel)
    assert kw["raster"] == "M" and kw["cluster"] == (1, 1) and kw["swizzle"] == 1 and kw["sm_count"] is None
    assert kw["b_dtype"] == "e5m2" and kw["batched"] is True and "decomposition" not in kw and "fusion" not in kw


def test_a_field_the_kernel_class_does_not_take_is_refused_by_name():
    """A multistage kernel class has no 'decomposition' keyword: a config asking for stream-K
    is refused naming the field, the class and the keyword (a TypeError, as the unexpected
    keyword argument it used to be)."""
    cfg = GemmConfig(schedule="pingpong", decomposition="stream-k")
    with pytest.raises(ConfigTypeError, match=r"^GemmConfig.decomposition='stream-k' needs a kernel that takes "
                                              r"'decomposition'; MultistageGemmKernel does not \(it takes tile_m, "):
        Gemm(cfg, "none", kernel=MultistageGemmKernel)
    assert issubclass(ConfigTypeError, TypeError)
    with pytest.raises(ConfigError, match=r"^mma_sm=2 \(a CTA-pair MMA\) needs arch='sm_100a' and "
                                          r"schedule='warp_specialized', got sm_90a 'multistage'"):
        GemmConfig(mma_sm=2)
    with pytest.raises(ConfigError, match=r"^tile_scheduler='clc' \(cluster launch control\) needs arch='sm_100a'"):
        GemmConfig(schedule="pingpong", tile_scheduler="clc")


@attrs.frozen
class UnrollConfig(GemmConfig):
    """A new knob: one field, with the keyword it gives a kernel that takes it."""
    unroll: int = attrs.field(default=1, metadata=P.kernel_args(P.if_set("unroll", 1)))


class UnrolledKernel(MultistageGemmKernel):
    """...and the kernel that reads it: it lists the field and takes the keyword."""
    CONFIG_FIELDS = MultistageGemmKernel.CONFIG_FIELDS + ("unroll",)

    def __init__(self, *args, unroll=1, **kw):
        self.unroll = unroll
        super().__init__(*args, **kw)


def test_a_new_knob_is_the_config_field_and_the_kernel(monkeypatch):
    """No edit in config_build: the field's metadata and the kernel's CONFIG_FIELDS suffice; a
    schedule whose kernel lacks the knob refuses it by name when it is set."""
    real = config_build.kernel_classes
    monkeypatch.setattr(config_build, "kernel_classes",
                        lambda arch: {**real(arch), "multistage": UnrolledKernel} if arch == "sm_90a" else real(arch))
    k = UnrollConfig(unroll=4, tile=(64, 64, 64)).kernel()
    assert type(k) is UnrolledKernel and k.unroll == 4 and k.tile_m == 64
    assert UnrollConfig(tile=(64, 64, 64)).kernel().unroll == 1
    assert UnrollConfig(schedule="pingpong").kernel().__class__ is PingpongGemmKernel     # neutral: not passed
    with pytest.raises(ConfigTypeError, match=r"UnrollConfig.unroll=4 needs a kernel that takes 'unroll'; "
                                              r"PingpongGemmKernel does not"):
        UnrollConfig(schedule="pingpong", unroll=4)
