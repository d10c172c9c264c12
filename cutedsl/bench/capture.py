"""Compile-only execution: find out which kernels a GPU test needs by running it against a
backend that validates and compiles like the CUDA backend but launches nothing.

Used by the bundle as a pytest plugin (``pytest -p cutedsl.bench.capture``): it replaces
``cutedsl.runtime.cuda.CudaBackend`` with :class:`CompileOnlyBackend`, so the ``gpu`` tests are
not skipped, every kernel they build is compiled into the cache, and each test stops at its
first launch (reported as skipped "compiled"). A test failing for any other reason fails, so a
kernel that cannot be compiled stops the bundle.
"""
from __future__ import annotations

import numpy as np
import pytest

from ..runtime.backend import Backend, DeviceBuffer, check_tensor_map


class CompileOnly(Exception):
    """Raised at the first launch: everything up to it (compile, validation) has happened."""


class CompileOnlyBackend(Backend):
    """A stand-in GPU: fake 256-byte-aligned addresses, validated tensor maps, no execution."""

    name = "compile-only"

    @classmethod
    def available(cls) -> tuple:
        return True, ""

    def __init__(self):
        self._next = 1 << 32
        self._live = set()

    def alloc(self, nbytes: int) -> DeviceBuffer:
        ptr = self._next
        self._next += -(-max(int(nbytes), 1) // 256) * 256
        self._live.add(ptr)
        return DeviceBuffer(ptr, int(nbytes), self)

    def free(self, buf) -> None:
        self._live.discard(int(buf.ptr))

    def live_allocations(self) -> int:
        return len(self._live)

    def copy_to_device(self, dst, src, offset: int = 0) -> None:
        pass

    def copy_to_host(self, dst, src, offset: int = 0) -> None:
        np.asarray(dst).fill(0)

    def encode_tensor_map(self, spec, address, shape, strides) -> bytes:
        check_tensor_map(spec, address, shape, strides)
        return bytes(128)

    def load(self, kernel):
        return kernel.entry

    def launch(self, handle, grid, params, *, block, cluster=(1, 1, 1), smem=0, stream=None) -> None:
        raise CompileOnly(f"compiled {handle}; compile-only backend launches nothing")

    def memset(self, dst, value, nbytes, offset=0, *, width=1) -> None:
        """Device work, like a launch: a test (or a launch's zero fill) stops here."""
        raise CompileOnly("compile-only backend runs no device fill")

    def synchronize(self) -> None:
        pass


def pytest_configure(config):
    from ..runtime import cuda
    cuda.CudaBackend = CompileOnlyBackend


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if call.excinfo is not None and call.excinfo.errisinstance(CompileOnly):
        rep.outcome = "skipped"
        rep.longrepr = (str(item.path), item.location[1] or 0, "compiled (compile-only backend)")
