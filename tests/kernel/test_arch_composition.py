"""Architectures share pieces by composition, not by subclassing each other: no sm_100a kernel class
has an sm_90a kernel class in its MRO (and vice versa), so an edit to one architecture's kernel
cannot change the other's; what both use lives in arch-neutral bases that name no MMA atom."""
import importlib
import pkgutil

import cutedsl.kernel as kernel_pkg
from cutedsl.kernel.gemm import GemmKernel
from cutedsl.kernel.skeleton import SkeletonKernel


def _kernel_classes() -> set:
    """Every GemmKernel subclass defined in a cutedsl.kernel module (grouped kernels included)."""
    found = set()
    for mod in pkgutil.iter_modules(kernel_pkg.__path__):
        m = importlib.import_module(f"cutedsl.kernel.{mod.name}")
        found |= {c for c in vars(m).values()
                  if isinstance(c, type) and issubclass(c, GemmKernel) and c.__module__ == m.__name__}
    return found


def _by_atom():
    classes = _kernel_classes()
    sm90 = {c for c in classes if c.mma_atom == "wgmma"}
    sm100 = {c for c in classes if c.mma_atom == "tcgen05"}
    return classes, sm90, sm100


def test_every_gemm_kernel_is_one_architectures_or_arch_neutral():
    classes, sm90, sm100 = _by_atom()
    neutral = classes - sm90 - sm100
    assert {c.__name__ for c in neutral} == {"GemmKernel", "WarpSpecializedGemmBase", "SingleTileGemmBase"}
    # both architectures' kernels are there: the sets below are not vacuous
    assert {"MultistageGemmKernel", "SingleTileGemmKernel", "WarpSpecializedGemmKernel", "CooperativeGemmKernel",
            "PingpongGemmKernel", "GroupedCooperativeGemmKernel", "GroupedPingpongGemmKernel"} <= {c.__name__ for c in sm90}
    assert {"Sm100SingleTileGemmKernel", "Sm100WarpSpecializedGemmKernel",
            "Sm100GroupedGemmKernel"} <= {c.__name__ for c in sm100}
    assert all(issubclass(c, SkeletonKernel) for c in classes)


def test_no_sm100_kernel_derives_from_an_sm90_kernel_and_vice_versa():
    _, sm90, sm100 = _by_atom()
    for c in sm100:
        wrong = [b.__name__ for b in c.__mro__[1:] if b in sm90]
        assert not wrong, f"{c.__name__} (sm_100a) inherits from the sm_90a kernel classes {wrong}"
    for c in sm90:
        wrong = [b.__name__ for b in c.__mro__[1:] if b in sm100]
        assert not wrong, f"{c.__name__} (sm_90a) inherits from the sm_100a kernel classes {wrong}"


def test_the_check_catches_a_cross_architecture_subclass():
    """The rule the test above applies fails for a class built the old way (sm_100 on sm_90)."""
    from cutedsl.kernel.warp_specialized import WarpSpecializedGemmKernel

    class Blackwell(WarpSpecializedGemmKernel):
        mma_atom = "tcgen05"
    _, sm90, _ = _by_atom()
    assert [b for b in Blackwell.__mro__[1:] if b in sm90] == [WarpSpecializedGemmKernel]
