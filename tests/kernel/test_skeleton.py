"""The warp-specialized kernel skeleton (``cutedsl.kernel.skeleton``): role layout and register
budgets (pure), and a non-GEMM kernel on it -- the TMA scale-copy, a producer warp or warpgroup
feeding a stage ring and consumer warpgroups storing through TMA -- run on the emulator (eager
and adversarial, ``sim_seed``) on shapes that are not box multiples, bit-exact against numpy."""
import re

import numpy as np
import pytest

from cutedsl.arch import SM90A, SM100A
from cutedsl.errors import ConfigError, SharedMemoryError
from cutedsl.kernel.scale_copy import ScaleCopyKernel
from cutedsl.kernel.skeleton import Role, RoleLayout, SkeletonKernel
from cutedsl.runtime import launch


def _reference(x, alpha):
    """``alpha * x`` rounded once to f32 (the f64 product of two f32 values is exact)."""
    return (np.float64(np.float32(alpha)) * x.astype(np.float64)).astype(np.float32)


@pytest.mark.parametrize("kw, shape", [
    (dict(box=(32, 32), stages=2), (70, 100)),                        # 4 boxes per strip through 2 slots
    (dict(box=(16, 64), stages=3), (33, 129)),                        # a 1-column last box
    (dict(box=(64, 32), stages=2, consumers=2, producer="warpgroup"), (100, 70)),
], ids=["warp-producer", "partial-boxes", "warpgroup-producer-2-consumers"])
def test_scale_copy_runs_on_the_emulator(kw, shape, rng, sim, sim_seed):
    k = ScaleCopyKernel(**kw)
    rows, cols = shape
    x = rng.standard_normal(shape).astype(np.float32)
    y = np.full(shape, np.nan, np.float32)             # every element must be written
    launch(k, k.grid(rows, cols), x=x, y=y, cols=cols, alpha=-1.75, backend=sim)
    assert np.array_equal(y, _reference(x, -1.75)), f"seed {rng.seed_value}"
    assert sim.live_allocations() == 0


def _ptx(kernel):
    return " ".join(kernel.compile(use_cache=False).ptx.split())


def test_registers_move_only_where_budgets_differ():
    """A producer warpgroup gives registers back (setmaxnreg.dec to the arch's producer budget),
    two consumer warpgroups take them (.inc); a producer warp has no budget: no setmaxnreg."""
    wg = ScaleCopyKernel(box=(64, 32), consumers=2, producer="warpgroup")
    assert wg.threads == 3 * SM90A.warpgroup_threads and wg.launch_registers == SM90A.launch_regs(384) == 168
    ptx = _ptx(wg)
    assert re.findall(r"setmaxnreg\.(\w+)\.sync\.aligned\.u32 (\d+);", ptx) == [
        ("inc", str(SM90A.consumer_regs)), ("dec", str(SM90A.producer_regs))]
    assert ".maxnreg 168" in ptx
    warp = ScaleCopyKernel()
    assert warp.threads == SM90A.warpgroup_threads + SM90A.warp_threads
    assert "setmaxnreg" not in _ptx(warp) and ".maxnreg" not in _ptx(warp)


def test_smem_plan_and_stage_count_are_pure():
    """The plan is a function of the declared buffers and the stage count: no IR, and
    max_stages takes the most that fit beside the staging tile."""
    k = ScaleCopyKernel(box=(64, 128), stages=1)
    box = 64 * 128 * 4
    assert k.smem_plan(3).buffers["x"].nbytes == 3 * box and k.smem_plan(3).buffers["y"].nbytes == box
    best = k.max_stages(range(1, 32))
    k.smem_plan(best)
    with pytest.raises(SharedMemoryError):
        k.smem_plan(best + 1)
    assert (best + 1) * box <= SM90A.smem_per_cta < (best + 2) * box     # x's ring + the staging tile
    assert k.max_stages([40, 50]) is None


def test_role_layout_places_roles_in_thread_order():
    lay = RoleLayout([Role.warpgroups("mma", 2, regs=232), Role.warpgroups("load", regs=40)], SM90A, 168)
    assert lay.threads == 384 and lay.unit == "warpgroup"
    assert lay.span("mma") == (0, 2) and lay.span("load") == (2, 1)
    assert lay.setmaxnreg("mma") == (232, True) and lay.setmaxnreg("load") == (40, False)
    mixed = RoleLayout([Role.warps("tma"), Role.warps("mma"), Role.warpgroups("epilogue")], SM100A)
    assert mixed.unit == "warp" and mixed.threads == 192 and mixed.span("epilogue") == (2, 4)
    assert mixed.setmaxnreg("tma") is None
    same = RoleLayout([Role.warpgroups("a", regs=168), Role.warpgroups("b", regs=168)], SM90A, 168)
    assert not same.budgeted and same.setmaxnreg("a") is None


@pytest.mark.parametrize("roles, launch, match", [
    ([Role.warpgroups("a"), Role.warpgroups("a")], None, r"role names must differ, got \['a', 'a'\]"),
    ([Role.warps("p"), Role.warpgroups("c", regs=232)], 168,
     r"role 'c' sets registers but starts at warp 1, not on a warpgroup boundary"),
    ([Role.warpgroups("p", regs=40), Role.warpgroups("c", regs=232)], None,
     r"roles set register budgets \[40, 232\] but the kernel has no launch budget"),
    ([Role.warpgroups("p", regs=40), Role.warpgroups("c", 3, regs=232)], 128,
     r"role register budgets need 94208 registers, past the 65536 of an sm_90a SM"),
    ([Role.warpgroups("c", 9)], None, r"roles \['c'\] need 1152 threads, past the 1024 a CTA may have"),
    ([Role.threads("t", 8), Role.warps("w")], None, r"roles counted in threads are for single-role kernels"),
], ids=["duplicate", "unaligned-budget", "no-launch-budget", "register-file", "too-many-threads", "thread-unit"])
def test_role_layout_refuses(roles, launch, match):
    with pytest.raises(ConfigError, match=match):
        RoleLayout(roles, SM90A, launch)


@pytest.mark.parametrize("make, match", [
    (lambda: Role.warps("p", regs=40), r"role 'p': a register budget needs whole warpgroups"),
    (lambda: Role.warpgroups("p", regs=44), r"role 'p': regs 44 must be a multiple of 8 in 24..256"),
    (lambda: Role.warpgroups("p", 0), r"role 'p': count must be a positive int, got 0"),
    (lambda: Role("my role"), r"role name must be a Python identifier"),
])
def test_role_refuses(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


def test_scale_copy_refuses_bad_configs():
    with pytest.raises(ConfigError, match=r"box \(8, 8\) has 64 elements, not a multiple of the 128 consumer"):
        ScaleCopyKernel(box=(8, 8))
    with pytest.raises(ConfigError, match=r"producer must be one of \('warp', 'warpgroup'\), got 'thread'"):
        ScaleCopyKernel(producer="thread")
    with pytest.raises(ConfigError, match=r"box \(32, 30\): each side 1..256 elements and rows of a multiple of 16"):
        ScaleCopyKernel(box=(32, 30))


def test_a_non_gemm_kernel_needs_no_gemm_fields():
    """The skeleton's kernel carries only its own fields (no tile_n / b_major / epilogue)."""
    k = ScaleCopyKernel()
    assert isinstance(k, SkeletonKernel)
    for gemm_field in ("tile_n", "b_major", "epilogue_cls", "mainloop", "scheduler"):
        assert not hasattr(k, gemm_field)
    assert [p.name for p in k.params()] == ["x", "y", "cols", "alpha"]


class _EvenStripsOnly(ScaleCopyKernel):
    """The scale-copy whose roles run only in even CTAs (strips): every role skips an odd strip
    inside ``roles_scope``, so no producer waits for a release nor consumer for a fill."""
    name = "scale_copy_even_strips"

    def roles_scope(self, b):
        import contextlib
        from cutedsl.ir import If, block_idx

        @contextlib.contextmanager
        def even():
            with If((block_idx() % 2).eq(0)):
                b.even = True                    # what the roles share is set inside the scope
                yield
        return even()

    def role_consumer(self, b, index):
        assert b.even
        super().role_consumer(b, index)


def test_roles_scope_wraps_every_role(rng, sim, sim_seed):
    """``roles_scope`` is one context around every role's branch: odd strips are never loaded or
    stored (y keeps its NaNs there), even strips are scaled, and nothing waits forever."""
    k = _EvenStripsOnly(box=(16, 32), stages=2, consumers=1, producer="warpgroup")
    x = rng.standard_normal((70, 100)).astype(np.float32)
    y = np.full(x.shape, np.nan, np.float32)
    launch(k, k.grid(70), x=x, y=y, cols=100, alpha=3.0, backend=sim)
    even = np.zeros(70, bool)
    for s in range(0, k.grid(70)[0], 2):
        even[16 * s:16 * (s + 1)] = True
    assert np.array_equal(y[even], _reference(x[even], 3.0)) and np.isnan(y[~even]).all()


@pytest.mark.parametrize("threads, want", [(1024, 64), (384, 168), (288, 224), (256, 248), (128, 248), (32, 248)])
def test_launch_regs_stays_within_what_ptxas_honours(threads, want):
    """``.maxnreg`` for one resident CTA: 65536 / threads rounded down to 8, but never past the
    255 registers a thread can hold (rounded to 248): 256 threads would ask for 256, which ptxas
    ignores entirely."""
    for arch in (SM90A, SM100A):
        assert arch.launch_regs(threads) == want
        assert arch.launch_regs(threads) <= arch.max_regs_per_thread and want % 8 == 0


def _ptxas_on_maxnreg(ptx: str, maxnreg: int) -> list:
    from cutedsl.compiler.toolchain import ptxas
    text = re.sub(r"\.maxnreg \d+", f".maxnreg {maxnreg}", ptx)
    assert f".maxnreg {maxnreg}" in text
    return [m for m in ptxas(text)[2] if "maxnreg" in m]


def test_256_thread_kernel_gets_a_maxnreg_ptxas_honours():
    """A producer warpgroup and one consumer warpgroup (256 threads): the kernel asks for 248
    registers (not 256), and ptxas takes it without the "Too many maxnreg ... will be ignored"
    warning it gives the same PTX with 256 (the control: the check can fail)."""
    pytest.importorskip("mlir")
    k = ScaleCopyKernel(box=(64, 32), consumers=1, producer="warpgroup")
    assert k.threads == 2 * SM90A.warpgroup_threads and k.launch_registers == 248
    ck = k.compile(use_cache=False)
    assert re.search(r"\.maxnreg 248\b", ck.ptx)
    assert not [m for m in ck.resources.ptxas_messages if "maxnreg" in m]
    assert 0 < ck.resources.registers <= 248
    assert _ptxas_on_maxnreg(ck.ptx, 248) == []
    ignored = _ptxas_on_maxnreg(ck.ptx, 256)
    assert ignored and "will be ignored" in ignored[0]
