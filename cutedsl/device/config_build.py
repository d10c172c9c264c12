"""How a :class:`~cutedsl.device.config.GemmConfig` becomes a kernel: the kernel class of its
schedule on its architecture, the epilogue class of its kind, the constructor keywords its
fields give (:func:`~cutedsl.device.config_protocol.kernel_keywords`: each field's metadata
against the class's ``CONFIG_FIELDS``; a class without a field the config sets refuses it by
name), and the stage count (explicit, or the most that fit in shared memory). Imports no MLIR."""
from __future__ import annotations

from ..collective.tma_wgmma import TmaWgmmaMainloop
from ..errors import ArgumentTypeError, ConfigError, CuteDSLError, one_of
from .config_protocol import kernel_fields, kernel_keywords
from .kernels import kernel_classes


def kernel_class(cfg):
    """The kernel class of ``cfg.schedule`` on ``cfg.arch`` (:func:`kernel_classes`);
    ``ConfigError`` for a schedule the architecture has no kernel for."""
    kinds = kernel_classes(cfg.arch)
    if cfg.schedule not in kinds:
        raise ConfigError(f"schedule {cfg.schedule!r} has no {cfg.arch} kernel (yet); {cfg.arch} has "
                          f"{one_of(tuple(kinds))}")
    return kinds[cfg.schedule]


def epilogue_class(cfg, epilogue_cls=None, kernel_cls=None):
    """The epilogue class: ``epilogue_cls``, else a user ``kernel_cls.epilogue_cls``, else the
    config's. A class of the other kind than ``cfg.epilogue`` is a ``ConfigError`` (the config
    decides the output's layout and pointer-vs-tensor-map argument)."""
    from ..collective.epilogue import GlobalEpilogue, TmaStoreEpilogue
    default = TmaStoreEpilogue if cfg.epilogue == "tma" else GlobalEpilogue
    where = "epilogue"
    if epilogue_cls is None:
        epilogue_cls = getattr(kernel_cls, "epilogue_cls", None)
        where = f"{getattr(kernel_cls, '__name__', '?')}.epilogue_cls"
        if epilogue_cls in (None, GlobalEpilogue, TmaStoreEpilogue):
            return default
    kind = getattr(epilogue_cls, "kind", None)
    if kind is not None and kind != cfg.epilogue:
        raise ConfigError(f"{where} {epilogue_cls.__name__} is a {kind!r} epilogue but "
                          f"GemmConfig.epilogue is {cfg.epilogue!r}: use GemmConfig(epilogue={kind!r})")
    return epilogue_cls


def make_kernel(cfg, cls, stages=None, epilogue_cls=None):
    """``cls(**keywords)`` for ``cfg`` (``stages``: the ring depth, None for the class's own):
    the keywords of ``cfg``'s fields (:func:`kernel_keywords`), the epilogue class and the
    stages; a ``ValueError`` of the kernel or a collective becomes a ``ConfigError`` naming the
    class. ``ConfigTypeError`` / ``ConfigError`` for a field ``cls`` does not take."""
    kw = kernel_keywords(cfg, cls)
    kw["epilogue"] = epilogue_cls or epilogue_class(cfg)
    if stages is not None:
        kw["stages"] = stages
    try:
        return cls(**kw)
    except ValueError as e:         # a kernel or collective refusing this config (ConfigError for users)
        if isinstance(e, CuteDSLError):
            raise
        raise ConfigError(f"{cls.__name__}: {e}") from None


def resolved_stages(cfg, kernel_cls=None, epilogue_cls=None) -> int:
    """The stage count used: explicit, or the most that fit in shared memory (with
    ``kernel_cls``'s shared-memory plan, default the schedule's kernel)."""
    if cfg.schedule == "single_tile" and kernel_cls is None:
        return 1
    if cfg.stages != "auto":
        return cfg.stages
    cls = kernel_cls or kernel_class(cfg)
    candidates = getattr(cls, "STAGES", TmaWgmmaMainloop.STAGES)
    # one kernel sizes every candidate ring (its smem plan is a function of the stage count)
    s = make_kernel(cfg, cls, max(candidates), epilogue_cls).max_stages(candidates)
    if s is None:
        raise ConfigError(f"tile {cfg.tile} does not fit shared memory even with {min(candidates)} stage(s)")
    return s


def build_kernel(cfg, epilogue_cls=None, kernel_cls=None):
    """``GemmConfig.kernel``: the kernel object ``cfg`` names (``SharedMemoryError`` if it cannot
    fit); ``kernel_cls`` any ``GemmKernel`` subclass, ``epilogue_cls`` an ``Epilogue`` subclass
    of the config's kind (``ArgumentTypeError`` / ``ConfigError`` otherwise)."""
    from ..collective.epilogue import Epilogue
    from ..kernel.gemm import GemmKernel
    if kernel_cls is not None and not (isinstance(kernel_cls, type) and issubclass(kernel_cls, GemmKernel)):
        raise ArgumentTypeError(f"kernel must be a GemmKernel subclass, got {kernel_cls!r}")
    if epilogue_cls is not None and not (isinstance(epilogue_cls, type) and issubclass(epilogue_cls, Epilogue)):
        raise ArgumentTypeError(f"epilogue must be an Epilogue subclass, got {epilogue_cls!r}")
    epi = epilogue_class(cfg, epilogue_cls, kernel_cls)
    if kernel_cls is None:
        kernel_cls = kernel_class(cfg)
    if "stages" not in kernel_fields(kernel_cls):
        if cfg.stages not in ("auto", 1):
            raise ConfigError(f"{kernel_cls.__name__} has no pipeline stages (its constructor takes no "
                              f"'stages'), got GemmConfig(stages={cfg.stages!r}): use 'auto' or 1")
        return make_kernel(cfg, kernel_cls, epilogue_cls=epi)
    k = make_kernel(cfg, kernel_cls, resolved_stages(cfg, kernel_cls, epi), epi)
    if hasattr(k, "smem_plan"):
        k.smem_plan()
    return k


__all__ = ["kernel_fields", "kernel_class", "epilogue_class", "make_kernel", "resolved_stages", "build_kernel"]
