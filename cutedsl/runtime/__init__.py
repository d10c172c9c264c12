"""Runtime: what every kernel needs on the host, whatever its family (GEMM, grouped, SAXPY,
a user's atom-composed kernel).

* backends: :class:`~cutedsl.runtime.backend.Backend` (memory, tensor maps, module load,
  launch), :mod:`~cutedsl.runtime.cuda` (a GPU through cuda-python), the emulator
  (``cutedsl.sim.SimBackend``), chosen by :func:`get_backend` / :func:`resolve`
  (:mod:`~cutedsl.runtime.selection`);
* device arrays and operand views (:mod:`~cutedsl.runtime.arrays`,
  :mod:`~cutedsl.runtime.tensor_view`), DLPack (:mod:`~cutedsl.runtime.dlpack`);
* zeroed workspaces kept between calls (:mod:`~cutedsl.runtime.workspace`);
* one launch binding (:mod:`~cutedsl.runtime.binding`): from a compiled kernel's declared
  parameters and the caller's values to host copies, tensor maps, workspace, packed
  parameters, launch, results and release -- :class:`Binding` for front ends, :func:`launch`
  for a kernel composed from atoms (arrays and scalars by parameter name).

Layering: the runtime sits above the compiler artifact (``CompiledKernel``) and below the
Device layer; it never imports ``cutedsl.device``, ``cutedsl.kernel`` or
``cutedsl.collective`` (``tests/test_layering_runtime.py``). Importing it needs numpy
(+ cuda-python for the CUDA backend), never MLIR.
"""
from .backend import Backend, DeviceBuffer, SMEM_LIMIT, check_tensor_map
from .selection import get_backend, resolve
from .binding import Binding, launch

__all__ = ["Backend", "DeviceBuffer", "SMEM_LIMIT", "check_tensor_map", "get_backend", "resolve", "Binding",
           "launch"]
