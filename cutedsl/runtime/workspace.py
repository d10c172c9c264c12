"""Kernel workspaces: zeroed global scratch a front end (``Gemm``) keeps between calls (CUTLASS's
``get_workspace_size`` / ``initialize_workspace``, owned by the adapter here).

A kernel declares workspace parameters (``ParamSpec(..., workspace=True)``) and sizes them
per problem (``Kernel.workspace(problem)``: bytes by name). A launch binding
(:meth:`cutedsl.runtime.binding.Binding.workspace`) takes a buffer at least that large from the
front end's :class:`WorkspacePool` (allocating and zero-filling one when
none is free), carves the parameters out of it at :data:`ALIGN`-byte offsets, and gives it
back when the launch is released. Kernels that use a workspace leave it as they found it
(the stream-K semaphores return to 0), so a buffer is zeroed once, when allocated; a buffer
whose launch raised is not reused. Concurrent calls get different buffers.
"""
from __future__ import annotations

import threading

from . import arrays

ALIGN = 256     #: byte alignment of each workspace parameter (coalesced 16-byte vectors and more)


def layout(sizes: dict) -> tuple:
    """``({name: byte offset}, total bytes)`` of the workspace parameters ``sizes`` (bytes by name)."""
    offsets, at = {}, 0
    for name, n in sizes.items():
        offsets[name] = at
        at += -(-max(int(n), 1) // ALIGN) * ALIGN
    return offsets, at


class WorkspacePool:
    """Free workspace buffers of one ``Gemm`` (thread-safe)."""

    def __init__(self):
        self._free, self._lock = [], threading.Lock()

    def acquire(self, backend, nbytes: int):
        """A zeroed 1-D u8 ``DeviceArray`` of at least ``nbytes`` bytes on ``backend``."""
        with self._lock:
            for i, ws in enumerate(self._free):
                if ws.backend is backend and ws.shape[0] >= nbytes:
                    return self._free.pop(i)
        ws = arrays.empty(backend, (max(nbytes, 1),), "u8", label="workspace")
        arrays.zero_fill(ws)
        return ws

    def give_back(self, ws) -> None:
        """Return ``ws`` for reuse (only after a launch that completed: its kernel reset it)."""
        with self._lock:
            self._free.append(ws)

    def clear(self) -> None:
        """Drop every free buffer (their memory is freed with the last reference)."""
        with self._lock:
            self._free.clear()

    def __len__(self) -> int:
        return len(self._free)


def provide(pool: WorkspacePool, sizes: dict, backend, scratch, values: dict):
    """Fill ``values`` with the workspace parameters ``sizes`` (bytes by name: what the kernel's
    ``workspace(problem)`` asks) from ``pool``; returns ``[buffer, reusable]`` -- handed back to
    the pool when the call's ``scratch`` is released, unless the launch marked it not reusable
    (it raised) -- or None when ``sizes`` is empty."""
    if not sizes:
        return None
    offsets, total = layout(sizes)
    buf = pool.acquire(backend, total)
    for name, off in offsets.items():
        values[name] = buf.ptr + off
    ws = [buf, True]

    def give_back(_ws=ws):
        if _ws[1] and _ws[0] is not None:
            pool.give_back(_ws[0])
        _ws[0] = None
    scratch.on_release(give_back)
    return ws


__all__ = ["WorkspacePool", "layout", "provide", "ALIGN"]
