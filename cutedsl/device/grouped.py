"""``GroupedGemm``: G GEMMs of different M, N, K (one dtype) in one persistent launch (CUTLASS's
grouped GEMM; the expert layers of mixture-of-experts models)::

    from cutedsl import GemmConfig, GroupedGemm
    gg = GroupedGemm(GemmConfig(schedule="cooperative", tile=(128, 128, 64)))
    ds = gg([a0, a1, a2], [b0, b1, b2])     # a_g: (M_g, K_g), b_g: (K_g, N_g) -> d_g: (M_g, N_g)

Operands are numpy arrays (copied to the device, results returned as numpy) or device arrays
(used in place, results as device arrays of the same framework), per group. The host checks
every group, encodes each group's A, B and D tensor maps into one global table and lays the
problems out (:mod:`cutedsl.collective.grouped`); the kernel's persistent CTAs walk the tiles
of all groups. A group with M = 0 or N = 0 has an empty result; one with K = 0 a zero result
(neither enters the launch).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import dtype as _dtype, same_storage
from ..errors import ArgumentError, ArgumentTypeError, ConfigError, checked_arguments
from ..runtime import arrays
from . import extras
from .config import GemmConfig, _MAX_I32
from ..runtime.dlpack import wrap_like
from ..runtime.binding import Binding
from ..runtime.params import check_tma_layout
from .gemm import Gemm


class GroupedGemm:
    """A compiled grouped GEMM for one config (sm_90a: schedule ``cooperative`` or ``pingpong``;
    sm_100a: ``warp_specialized``, the persistent tcgen05 kernel, ``mma_sm`` 1 or 2; the
    config's tile, stages, cluster, raster, dtypes, majors and epilogue apply to every group;
    fused nodes with scalar arguments only). ``backend`` and ``cache`` as for :class:`Gemm`.
    ``ConfigError`` for a config a grouped kernel cannot run."""

    @checked_arguments()
    def __init__(self, config: GemmConfig, backend="auto", *, cache=None):
        from ..collective.grouped import MAX_GROUPS
        from ..kernel.grouped import grouped_kernels
        if not isinstance(config, GemmConfig):
            raise ArgumentTypeError(f"config must be a GemmConfig, got {type(config).__name__}")
        kinds = grouped_kernels(config.arch)
        if config.schedule not in kinds:
            raise ConfigError(f"GroupedGemm runs the persistent schedules ({', '.join(kinds)}), "
                              f"got schedule {config.schedule!r}")
        self.config = config
        self._gemm = Gemm(config, backend, kernel=kinds[config.schedule], cache=cache)
        self.kernel = self._gemm.kernel
        self.max_groups = MAX_GROUPS

    @property
    def compiled(self):
        return self._gemm.compiled

    @property
    def backend(self):
        return self._gemm.backend

    # -- validation -----------------------------------------------------------------------
    def _views(self, a_list, b_list) -> list:
        """``[(view a, view b, (m, n, k))]`` per group, checked (``ArgumentError`` /
        ``ArgumentTypeError`` naming the group)."""
        for name, xs in (("a_list", a_list), ("b_list", b_list)):
            if isinstance(xs, (str, bytes, np.ndarray)) or not hasattr(xs, "__len__"):
                raise ArgumentTypeError(f"{name} must be a list of arrays (one per group), got {type(xs).__name__}")
        if len(a_list) != len(b_list):
            raise ArgumentError(f"a_list has {len(a_list)} groups, b_list {len(b_list)}: one A and one B per group")
        if not 1 <= len(a_list) <= self.max_groups:
            raise ArgumentError(f"a grouped GEMM takes 1..{self.max_groups} groups, got {len(a_list)}")
        cfg, out = self.config, []
        for g, (a, b) in enumerate(zip(a_list, b_list)):
            va, vb = arrays.TensorView.of(a, f"a_list[{g}]"), arrays.TensorView.of(b, f"b_list[{g}]")
            for v, want in ((va, cfg.dtype), (vb, cfg.b_dtype or cfg.dtype)):
                if len(v.shape) != 2:
                    raise ArgumentError(f"{v.name} must be 2-D, got shape {tuple(v.shape)}")
                if v.dtype is None or not same_storage(v.dtype.name, want):
                    raise ArgumentTypeError(f"{v.name} has dtype {v.raw_dtype}, the config expects {want} "
                                            f"(numpy: {_dtype(want).numpy})")
            (m, k), (k2, n) = va.shape, vb.shape
            if k != k2:
                raise ArgumentError(f"group {g}: a.shape[1] ({k}) != b.shape[0] ({k2}): inner dimensions must match")
            for nm, v in (("M", m), ("N", n), ("K", k)):
                if v > _MAX_I32:
                    raise ArgumentError(f"group {g}: {nm} = {v} exceeds the kernel's 32-bit size limit {_MAX_I32}")
            out.append((va, vb, (m, n, k)))
        return out

    # -- call -----------------------------------------------------------------------------
    def __call__(self, a_list, b_list, **extra) -> list:
        """``[a_list[g] @ b_list[g] for g]`` in one launch; see the module docstring. Keyword
        arguments: the fused nodes' scalars (e.g. ``alpha=``)."""
        launch, result = self.prepare(a_list, b_list, **extra)
        try:
            launch()
            return result()
        finally:
            launch.release()

    def prepare(self, a_list, b_list, **extra):
        """Validate, move operands, encode the tensor maps and tables; returns ``launch()`` and
        ``result()`` (the list of results) as :meth:`Gemm.prepare` does -- for timing repeated
        launches. What the call allocated is released by ``launch.release()`` (or with both
        callables)."""
        from ..collective.grouped import group_table
        groups = self._views(a_list, b_list)
        kern_obj = self.kernel
        declared = extras.check_names(kern_obj.params(), extra, kern_obj.host_params())
        extras.check_scalars(declared, extra)
        be = self.backend
        for va, vb, _ in groups:
            arrays.check_backend_of(va.owner, be, va.name)
            arrays.check_backend_of(vb.owner, be, vb.name)
        out_dt = _dtype(self.config.out_dtype)
        results = [None] * len(groups)
        live = []                        # groups that enter the launch
        for g, (va, vb, (m, n, k)) in enumerate(groups):
            if m == 0 or n == 0 or k == 0:       # nothing to compute: an empty or a zero result
                z = np.zeros((m, n), out_dt.numpy)
                results[g] = z if (va.on_host or vb.on_host) else arrays.to_device(be, z)
            else:
                live.append(g)
        # a launch binding when some group enters the launch (the kernel is compiled then only)
        bind = Binding(be, self.compiled, self._gemm._module(be, self.compiled)) if live else None
        scratch = bind.scratch if bind is not None else arrays.CallScratch(be)
        try:
            run, devs = self._prepare(bind, groups, live, out_dt, extra, declared, group_table) \
                if live else (None, [])
        except BaseException:
            scratch.release()
            raise

        def launch():
            if not scratch.alive:
                from ..errors import LaunchError
                raise LaunchError("this launch was released (launch.release()); call prepare() again")
            if run is not None:
                run()

        def result():
            be.synchronize()
            for g, (dd, host, fw) in zip(live, devs):
                results[g] = arrays.to_host(dd) if host else wrap_like(dd, fw)
            return list(results)
        launch.release = result.release = scratch.release
        launch.keep = result.keep = scratch
        return launch, result

    def _prepare(self, bind, groups, live, out_dt, extra, declared, group_table):
        """The launch of the ``live`` groups: ``(launch, [(D device array, host result?, framework)])``."""
        from ..kernel.grouped import MAP_BYTES, MAP_ORDER
        cfg, kern_obj, be = self.config, self.kernel, bind.backend
        tma_d = kern_obj.d_by_tensor_map()
        specs = kern_obj.map_specs()
        table = np.zeros((len(live), len(MAP_ORDER), MAP_BYTES), np.uint8)
        devs = []
        for row, g in enumerate(live):
            va, vb, (m, n, k) = groups[g]
            da, a_copy = extras.operand_array(be, va, cfg.a_major == "K")
            db, b_copy = extras.operand_array(be, vb, cfg.b_major == "MN")
            for arr, copied in ((da, a_copy), (db, b_copy)):
                if copied:
                    bind.own(arr)
            check_tma_layout(va.name, da)
            check_tma_layout(vb.name, db)
            dd = arrays.empty(be, (m, n), out_dt, pitch_align=16 if tma_d else 1,
                              label=f"GroupedGemm output d of group {g}")
            devs.append((dd, va.on_host or vb.on_host, va.framework))
            bind.keep += [da, db, dd, va.owner, vb.owner]
            for slot, (name, arr) in enumerate((("a", da), ("b", db), ("d", dd))):
                if name in specs:      # the group's map goes into the table, not a parameter
                    table[row, slot] = np.frombuffer(bytes(bind.encode(specs[name], arr)), np.uint8)[:MAP_BYTES]
        problems, units = group_table([groups[g][2] for g in live], kern_obj.tile_m, kern_obj.tile_n,
                                      kern_obj.cluster)
        maps = bind.own(arrays.to_device(be, table.reshape(-1)))
        probs = bind.own(arrays.to_device(be, problems.reshape(-1)))
        bind.values.update(maps=maps.ptr, problems=probs.ptr, groups=len(live), units=units)
        if not tma_d:
            ptrs = bind.own(arrays.to_device(be, np.array([d.ptr for d, _, _ in devs], np.uint64)))
            bind.values["d_ptrs"] = ptrs.ptr
        for p in declared:
            bind.argument(p, extra[p.name])
        if cfg.sm_count is None and kern_obj.needs_sm_count():
            kern_obj.set_sm_count(self._gemm._device_sm_count())
        grid = kern_obj.units_grid(units)
        run = bind.launcher(grid)
        run.grid = grid
        return run, devs


__all__ = ["GroupedGemm"]
