"""Initcheck: reads of memory nothing has written (as compute-sanitizer's ``--tool initcheck``).

PTX leaves the contents of shared memory at CTA start undefined (PTX ISA, State Spaces: the
shared state space has no initializers; the runtime does not initialize it), and so is device
memory the host allocated but never wrote; a kernel that reads them computes
with garbage on the GPU even when the emulator's zeros make the result look right. Each report
names the read (CTA, warp, PTX and source line) and where the memory comes from (its
declaration or allocation).

* **Shared memory**: a read (``ld``, wgmma/tcgen05 operand, TMA-store source, ``ldmatrix``) of a
  4-byte word that no write reached since the CTA started -- decided by the race detector's
  shadow (:class:`cutedsl.sim.checks.hb.Shadow`: a word's last-write agent is -1 until the first
  write; every write is recorded there, the TMA's zero-filled out-of-bounds bytes included,
  since they are written), so it needs ``race_check``. Granularity is the shadow's 4-byte word.
* **Tensor memory** (sm_100a): the same shadow per (lane, column) cell
  (:class:`cutedsl.sim.machine.tensor_memory.TmemShadow`), for the tensor core's reads only: an
  accumulating ``tcgen05.mma``'s D, its A operand and scale factors (``tcgen05.ld`` reads whole
  lane quarters into registers the kernel may discard, so it is not judged).
* **Global memory**: a device read (``ld``, an atomic's old value, ``cp.async`` / bulk-copy
  sources, the in-bounds elements of a TMA load, a tensor map or ``printf`` string) of a byte of a
  ``SimBackend.alloc`` allocation that no host copy and no device write defined since it was
  allocated (CUDA driver API ``cuMemAlloc``: the memory is not cleared) -- decided by the
  allocation's defined-byte bitmap (:class:`cutedsl.sim.machine.memory.Allocation`), which every
  writer marks at issue; reported by :func:`report_global` with the Python line that allocated
  it. Module variables are defined (PTX ISA 5.1, State Spaces, Table 7: ``.global`` variables
  are zero-initialised by default). Granularity is the byte; no race detector needed.
* **Not checked**: registers. Correct PTX reads registers nothing wrote -- a ``wgmma`` whose
  scale-d is 0 names accumulator registers it does not read (Triton's attention), LLVM's
  ``undef`` (a phi with an undefined input, a vector with undefined lanes) lowers to registers
  with no write on some path whose value is then discarded, masked, or used under a false
  predicate -- so only a definedness tracking of every value to the use that matters (what
  compute-sanitizer does not do for registers either) could judge them (docs/emulator.md,
  Initcheck).

Off with ``SimBackend(initcheck=False)`` or ``CUTEDSL_SIM_INITCHECK=0``.
"""
from __future__ import annotations

from ..frontend.errors import UninitializedReadError


def shared_declaration(cta, off: int) -> str:
    """Where the shared-memory byte ``off`` of ``cta`` comes from: the ``.shared`` declaration
    (name and PTX line) or the launch's dynamic shared memory."""
    prog = cta.launch.program
    for name, (o, size, _a) in prog.shared_vars.items():
        if o <= off < o + max(size, 1):
            ln = prog.shared_lines.get(name, 0)
            return f"static shared variable {name} ({size} B, declared at PTX line {ln})"
    if off >= cta.dyn_base:
        return (f"dynamic shared memory ({cta.launch.dyn_smem} B given by the launch; "
                f"offset {off - cta.dyn_base} of it)")
    return "shared memory outside every declaration (alignment padding)"


def report_global(al, byte: int, ins, reader: str, what: str, seed=None):
    """Raise the report of a device read (``what``: the instruction kind) by ``reader`` (CTA, warp,
    lane) of byte ``byte`` of global allocation ``al`` that nothing defined since it was
    allocated (:attr:`cutedsl.sim.machine.memory.Allocation.defined`)."""
    who = al.origin or al.tag or "an allocation"
    seed_note = (f"\n    (adversarial mode, seed {seed}; replay with CUTEDSL_SIM_CHAOS={seed})"
                 if seed is not None else "")
    raise UninitializedReadError(
        f"uninitialized read of global memory 0x{al.base + byte:x} (byte offset {byte} of the "
        f"{al.nbytes}-byte allocation at 0x{al.base:x}):\n"
        f"    read by {reader} ({what}) at {ins.where()}\n"
        f"    no write defined it since it was allocated: {who} (device memory is not "
        f"initialized by its allocation, CUDA driver API cuMemAlloc; a host copy, a store, an atomic, a "
        f"TMA store or a bulk copy defines it)\n"
        f"    (initcheck: SimBackend(initcheck=False) / CUTEDSL_SIM_INITCHECK=0 turns it off)" + seed_note)


def report_shared(shadow, word: int, agent: int, pc: int, what: str):
    """Raise the report of a read of shadow ``word`` (shared memory, or a tensor-memory cell of
    a :class:`~cutedsl.sim.machine.tensor_memory.TmemShadow`) that no write reached."""
    cta = shadow.cta
    hb = shadow.hb
    origin = getattr(shadow, "origin", None)
    where = (origin(word) if origin is not None else
             f"{shared_declaration(cta, 4 * word)} (PTX ISA, State Spaces: shared memory is not initialized)")
    raise UninitializedReadError(
        f"uninitialized read of {shadow.place(word)}:\n"
        f"    read by {hb.describe(agent, pc, cta.launch)} ({what})\n"
        f"    no write reached it since the CTA started; it is {where}\n"
        f"    (initcheck: SimBackend(initcheck=False) / CUTEDSL_SIM_INITCHECK=0 turns it off)"
        + hb.seed_note())
