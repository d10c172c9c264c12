"""Adversarial mode: seeded warp interleavings and late completion of asynchronous operations.

``Emulator(chaos=SEED)`` / ``SimBackend(chaos=SEED)`` / ``CUTEDSL_SIM_CHAOS=SEED``. With a seed,
reproducibly:

* the scheduler visits the live warps of a cluster (all its CTAs) in a random order each
  round and runs each for a random number of instructions (1 to 64, or up to 2,000);
* every asynchronous operation is *deferred*: TMA / bulk loads land in shared memory and
  ``complete_tx`` their mbarrier at a random later scheduling point, in random order (half of
  the operations are *lazy*: they complete only when a wait needs them or nothing else can
  run, the latest point the ISA allows); TMA
  stores read their shared-memory source at a random point up to the ``wait_group.read``
  that covers them and write global memory up to the ``wait_group``; a wgmma operation reads
  its shared-memory operands and writes its accumulator at a random point up to the first
  ``wgmma.wait_group`` of its warpgroup that covers it (operations of one warpgroup, and the
  read and write stage of one store, stay in order); mbarrier arrivals on another CTA of the
  cluster land later likewise, and Ampere ``cp.async`` copies write shared memory late.

All of this is inside what the PTX ISA guarantees (an operation completes between issue and
the wait that observes it), so a correct kernel gives bit-identical integer results under
every seed. A wait that needs a deferred operation forces it; when every warp is blocked
or spinning, pending operations run before a deadlock or livelock is reported.
"""
from __future__ import annotations

import random

from ... import envvars
from ..frontend.errors import SimLaunchError

ENV = "CUTEDSL_SIM_CHAOS"


def env_seed():
    """The seed from ``CUTEDSL_SIM_CHAOS`` (None when unset or empty); SimLaunchError if it is not
    an integer."""
    try:
        return envvars.get(ENV)
    except envvars.EnvVarError as e:
        raise SimLaunchError(str(e)) from None


class Chaos:
    """Random choices and the queue of deferred asynchronous operations of one launch."""

    #: probability that a scheduling point completes one pending operation
    P_COMPLETE = 0.35

    def __init__(self, seed: int):
        self.seed = int(seed)
        self.rng = random.Random(self.seed)
        self.pending = []          # [fn, tag, chain, lazy], in issue order
        self._heads = None         # cached _eager_heads()

    # -- scheduling --------------------------------------------------------------------------
    def order(self, warps):
        ws = list(warps)
        self.rng.shuffle(ws)
        return ws

    def quantum(self):
        r = self.rng.random()
        return self.rng.randint(1, 64) if r < 0.7 else self.rng.randint(65, 2000)

    def step(self):
        """A scheduling point: maybe complete one pending operation that is not *lazy*."""
        if self.pending and self.rng.random() < self.P_COMPLETE:
            eager = self._eager_heads()
            if eager:
                self._run(self.rng.choice(eager))

    def _eager_heads(self):
        """Indices of the oldest operation of each chain that is not lazy (a lazy one also holds
        back the later operations of its chain); one pass, cached until the queue changes --
        it holds hundreds of operations when 64 CTAs are live, and most scheduling points visit
        a blocked warp and change nothing."""
        if self._heads is None:
            chains = set()
            eager = []
            for i, (_fn, _tag, chain, lazy) in enumerate(self.pending):
                if chain is not None:
                    if chain in chains:
                        continue
                    chains.add(chain)
                if not lazy:
                    eager.append(i)
            self._heads = eager
        return self._heads

    # -- deferred operations -----------------------------------------------------------------
    def defer(self, fn, tag=None, chain=None):
        # half of the operations are lazy: they complete only when a wait (or a stall) forces them
        self.pending.append([fn, tag, chain, self.rng.random() < 0.5])
        self._heads = None

    def _first_of_chain(self, i):
        chain = self.pending[i][2]
        if chain is None:
            return i
        for j in range(i):
            if self.pending[j][2] == chain:
                return j
        return i

    def _run(self, i):
        fn = self.pending.pop(i)[0]
        self._heads = None
        fn()

    def run_one(self):
        """Complete one random pending operation (the oldest of its chain)."""
        if not self.pending:
            return False
        i = self.rng.randrange(len(self.pending))
        self._run(self._first_of_chain(i))
        return True

    def flush(self, pred):
        """Complete every pending operation whose tag satisfies ``pred`` (and, first, the older
        operations of the same chain); operations they enqueue are considered too."""
        while True:
            for i, (_fn, tag, _c, _lazy) in enumerate(self.pending):
                if pred(tag):
                    self._run(self._first_of_chain(i))
                    break
            else:
                return

    def drain(self):
        while self.pending:
            self._run(0)
