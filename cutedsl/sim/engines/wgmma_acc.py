"""wgmma accumulator fragments: the f32 fragment <-> tile transposes, and the tiles a warpgroup
holds between chained MMAs.

``wgmma.mma_async`` chains on one accumulator (the k-loop issues 4-16 of them before a
``wait_group``) would each scatter the (64, N) result into the 128 threads' registers and
gather it back for the next one. In eager mode the emulator instead keeps the rounded f32 tile
(:class:`HeldTiles`) and writes the registers only when an instruction other than a wgmma names
one of them -- the scheduler checks ``Instr.rbits`` against ``Warp.lazy_bits`` before every
instruction, so every observer (including code that reads the accumulator before its
``wait_group``, which the race detector reports first) sees exactly what the eager register
writes would have produced.

The MMAs a warpgroup issues in one lockstep run (:mod:`cutedsl.sim.machine.lockstep`: the k-steps
of a stage, both m64 halves) are **chained** (:meth:`HeldTiles.queue`): their operands are
gathered at once and multiplied as one stack, then each is added to its accumulator and rounded
to f32 in issue order, as before -- bit for bit the per-instruction result (each slice of the
stacked ``matmul`` is the same BLAS product as the instruction's own). The chain runs before
anything could observe it: a register read of a held tile (``settle``), a shared-memory store
of the run, and the run's end.
"""
from __future__ import annotations

import numpy as np

from .wgmma_layout import gather, gather_plan, load_operand, widen


def frag_to_tile(regs, n: int):
    """The (64, n) f32 tile held by f32 accumulator fragments ``regs`` (128 threads, n/2): thread
    t = 32 q + 4 g + j holds rows 16 q + g (+ 8 h) and columns 8 c + 2 j + e -- :func:`d_map`
    as a transpose: regs axes (q, g, j, c, h, e) -> tile axes (q, h, g, c, j, e). The pair
    (e = 0, 1) moves as one 8-byte element (a third of the cost of moving floats)."""
    pairs = np.ascontiguousarray(regs, np.float32).view(np.uint64)
    return pairs.reshape(4, 8, 4, n // 8, 2).transpose(0, 4, 1, 3, 2).reshape(64, n // 2).view(np.float32)


def tile_to_frag(tile, n: int):
    """Inverse of :func:`frag_to_tile`: (64, n) f32 -> (128 threads, n/2 registers)."""
    pairs = np.ascontiguousarray(tile, np.float32).view(np.uint64)
    return pairs.reshape(4, 2, 8, n // 8, 4).transpose(0, 2, 4, 3, 1).reshape(128, n // 4).view(np.float32)


def rounded(prod, sign: float, c):
    """The f32 tile ``fl32(sign * prod + c)`` of an MMA (``prod``: the float64 product A B, ``c``:
    the f32 accumulator tile or None): one rounding per instruction ("exact" mode, wgmma.py).
    Overflow to infinity raises no warning: a launch runs under ``np.errstate(all="ignore")``."""
    if sign != 1.0:
        prod = -prod
    if c is not None:
        prod += c
    return prod.astype(np.float32)


class MmaOp:
    """One queued ``wgmma.mma_async`` with an f32 accumulator: the D registers (``key``: their
    tuple, ``didx``, ``dbits``; ``rbits``: every register it names), N, scale-d, the product's sign,
    and its operands -- A as a float64 tile (from registers) or element indices in shared memory
    (``a_ei``, size ``ea``, type ``dta``), B as element indices (``b_ei``, ``eb``, ``dtb``).
    ``form``: None, or a token (hashed by identity) that stands for everything of the operands but
    A's values -- the instruction and its descriptors: a chain's product plan is cached by them."""
    __slots__ = ("key", "didx", "dbits", "rbits", "n", "scale_d", "sign", "A", "a_ei", "ea", "dta", "b_ei", "eb",
                 "dtb", "form")

    def __init__(self, key, didx, dbits, rbits, n, scale_d, sign, A, a_ei, ea, dta, b_ei, eb, dtb, form=None):
        self.key, self.didx, self.dbits, self.rbits, self.n = key, didx, dbits, rbits, n
        self.scale_d, self.sign, self.A, self.a_ei, self.ea, self.dta = scale_d, sign, A, a_ei, ea, dta
        self.b_ei, self.eb, self.dtb, self.form = b_ei, eb, dtb, form


def _chain_index(a_arrays, b_arrays, esize):
    """How to gather A operand element indices ``a_arrays`` ((64, K) each) and B operand ones
    ``b_arrays`` ((N, K) each) as one vector (:func:`wgmma_layout.gather_plan`), each B in (K, N)
    order: its gather is then the (K, N) matrix itself, which BLAS multiplies without a transpose."""
    parts = [np.concatenate([a.reshape(-1) for a in a_arrays])] if a_arrays else []
    return gather_plan(parts + [np.concatenate([b.T.reshape(-1) for b in b_arrays])], esize)


def _b_repeat(ops) -> int:
    """How many consecutive MMAs of ``ops`` share each B operand (the same cached index array:
    ``wgmma_layout.operand_addrs``; the two m64 halves of a k-step), when every B is shared by
    that many; else 1."""
    n = len(ops)
    r = 1
    while r < n and ops[r].b_ei is ops[0].b_ei:
        r += 1
    if r == 1 or n % r or any(ops[i].b_ei is not ops[i - i % r].b_ei for i in range(n)):
        return 1
    return r


def _plan(ops):
    """How :func:`products` computes ``ops``: ``(r, gather plan, k)`` -- A and B from shared
    memory, gathered as one vector, each B shared by ``r`` consecutive MMAs; ``(0, gather plan,
    k)`` -- A from registers, the Bs gathered as one vector; or None -- one MMA at a time. It
    depends only on the operands' forms (MmaOp.form)."""
    o = ops[0]
    n = len(ops)
    same_b = n > 1 and np.dtype(o.dtb).kind not in "iu" and all(
        x.eb == o.eb and x.dtb is o.dtb and x.n == o.n and x.b_ei.shape == o.b_ei.shape for x in ops)
    if same_b and all(x.a_ei is not None and x.ea == o.eb and x.dta is o.dtb and x.a_ei.shape == o.a_ei.shape
                      for x in ops):
        r = _b_repeat(ops)
        return r, _chain_index(tuple(x.a_ei for x in ops), tuple(x.b_ei for x in ops[::r]), o.ea), o.a_ei.shape[1]
    if same_b and all(x.A is not None and x.A.shape == o.A.shape for x in ops):
        return 0, _chain_index((), tuple(x.b_ei for x in ops), o.eb), o.A.shape[1]
    return None


def products(cta, ops):
    """The float64 products A B (64, N) of ``ops`` in order: operands from shared memory of one
    8/16-bit float type and one shape are gathered as one vector (a B that consecutive MMAs
    share, once; by 16-byte chunk where they are contiguous) and multiplied as one stack. Each
    slice is the product the instruction's own ``A @ B`` gives, bit for bit: the same k-ordered
    sums of exact float64 products (OpenBLAS's dgemm gives the same bits for a B stored (K, N)
    or transposed; ``tests/sim/test_sim_chain_products.py`` compares them on random f16 values
    of every exponent). The plan (:func:`_plan`) is cached by the MMAs' forms: a pipeline's
    stages repeat the same chains."""
    key = ("chain",) + tuple(x.form for x in ops)
    plans = cta.launch.plans        # (the key keeps the forms alive; the plans go with the launch)
    plan = plans.get(key)
    if plan is None:
        plan = _plan(ops)
        if None not in key:
            plans[key] = plan
    o = ops[0]
    n = len(ops)
    if plan is None:
        return [(x.A if x.A is not None else load_operand(cta, x.a_ei, x.ea, x.dta))
                @ load_operand(cta, x.b_ei, x.eb, x.dtb).T for x in ops]
    r, index, k = plan
    if r:
        v = widen(gather(cta.sv[o.ea], index), o.dta)
        A = v[:n * 64 * k].reshape(n // r, r, 64, k)
        B = v[n * 64 * k:].reshape(n // r, 1, k, o.n)        # broadcast over the r MMAs sharing it
        return np.matmul(A, B).reshape(n, 64, o.n)
    # A from registers (FlashAttention's P V): the tiles stacked, the Bs gathered as one vector
    B = widen(gather(cta.sv[o.eb], index), o.dtb).reshape(n, k, o.n)
    return np.matmul(np.stack([x.A for x in ops]), B)


def _independent(group, op) -> bool:
    """``op`` may be rounded with the MMAs ``group`` before it: another accumulator, the same
    sign, and no register of it written or read by them (or of them by it), so neither the
    write-backs before it nor its addend depend on their results."""
    for g in group:
        if g.key == op.key or g.sign != op.sign or g.dbits & op.rbits or op.dbits & g.rbits:
            return False
    return True


class HeldTiles:
    """The f32 accumulator tiles warpgroup ``warps`` holds, by D-register tuple: (D register
    indices, (64, N) f32 tile, N, register bit mask); ``chain``: the MMAs queued for it."""
    __slots__ = ("cta", "warps", "tiles", "chain")

    def __init__(self, cta, warps):
        self.cta, self.warps, self.tiles, self.chain = cta, warps, {}, []

    def put(self, key, didx, tile, n, bits):
        self.tiles[key] = (didx, tile, n, bits)
        for w in self.warps:
            w.lazy_bits |= bits
            w.held = self

    def queue(self, op: MmaOp):
        """Queue ``op`` (module docstring); its D registers count as held from now on."""
        if not self.chain:
            self.cta.mma_chains.append(self)
        self.chain.append(op)
        for w in self.warps:
            w.lazy_bits |= op.dbits
            w.held = self

    def run_chain(self):
        """Compute the queued MMAs, in issue order. Consecutive MMAs on different accumulators
        that share no register (the two m64 halves of a k-step) are rounded to f32 with one cast:
        each element's value is the one its own ``rounded`` gives; the groups that repeat such a
        group or a lone MMA (the next k-steps) skip the per-MMA bookkeeping (:meth:`_repeats`)."""
        ops, self.chain = self.chain, []
        self.cta.mma_chains.remove(self)
        prods = products(self.cta, ops)
        stacked = isinstance(prods, np.ndarray)
        n = len(ops)
        i = 0
        while i < n:
            j = i + 1
            while stacked and j < n and _independent(ops[i:j], ops[j]):
                j += 1
            cs = [self._addend(op) for op in ops[i:j]]
            if j == i + 1:
                op = ops[i]
                r = rounded(prods[i], op.sign, cs[0])
                if not stacked:
                    self.put(op.key, op.didx, r, op.n, op.dbits)
                    i = j
                    continue
                r = r[None]
            else:
                p = prods[i:j]
                if ops[i].sign != 1.0:
                    p = -p
                for q, c in enumerate(cs):
                    if c is not None:
                        p[q] += c
                r = p.astype(np.float32)
            j, r = self._repeats(ops, i, j, prods, r)
            for q, op in enumerate(ops[j - len(r):j]):
                self.put(op.key, op.didx, r[q], op.n, op.dbits)
            i = j

    def _repeats(self, ops, i, j, prods, r):
        """``ops[i:j]`` (g MMAs on g accumulators, rounded together to ``r``) followed by groups that
        repeat it -- the next k-steps of a chain: the same accumulators, D registers and sign,
        scale-d set -- run here as one add and one cast per group, each MMA accumulating onto its
        predecessor's tile. Returns the end of the last group run and its (g, 64, N) tiles. What
        each group's own pass through ``run_chain`` would do: its ``_addend`` writes nothing back
        (no register an MMA reads -- its D, its register A, which may change from group to group
        -- is owned by another held tile or by another accumulator of the group: checked per
        group; the other tiles do not change here) and returns that tile, and its ``put`` of the
        same keys and bits leaves the ``lazy_bits`` the last group's leaves. (An independent MMA
        after the last group is then rounded on its own, not with it: each element's rounding is
        its own, so the grouping changes no bit.)"""
        g, n = j - i, len(ops)
        group = ops[i:j]
        if j + g > n or not all(x.scale_d for x in ops[j:j + g]):
            return j, r
        keys = {x.key for x in group}
        other = 0           # the registers of the other held tiles
        for k, t in self.tiles.items():
            if k not in keys:
                other |= t[3]
        dbits = 0
        for x in group:
            dbits |= x.dbits
        # per MMA: its accumulator's tile is its own addend; any other register it reads, if
        # owned by a held tile, would first be written back (_addend)
        owned = [other | (dbits & ~x.dbits) for x in group]
        sign = group[0].sign
        while j + g <= n:
            nxt = ops[j:j + g]
            if not all(y.key == x.key and y.dbits == x.dbits and y.sign == sign and y.scale_d and y.n == x.n
                       and not y.rbits & o for x, y, o in zip(group, nxt, owned)):
                break
            p = prods[j:j + g]
            if sign != 1.0:
                p = -p
            p += r
            r = p.astype(np.float32)
            j += g
        return j, r

    def _addend(self, op):
        """The f32 tile ``op`` accumulates onto (None without scale-d), after writing back the held
        tiles of other accumulators that own one of its registers."""
        other = 0
        for k, t in self.tiles.items():
            if k != op.key:
                other |= t[3]
        if other & op.rbits:        # registers another held tile owns: write it back first
            self.settle(other & op.rbits)
        if not op.scale_d:
            return None
        t = self.tiles.get(op.key)
        if t is not None:
            return t[1]
        lanes = slice(32 * self.warps[0].wid, 32 * self.warps[-1].wid + 32)
        return frag_to_tile(self.cta.files["r"][op.didx, lanes].T.view(np.float32), op.n)

    def settle(self, bits):
        """Write back (to the registers) every held tile using a register of ``bits``."""
        if self.chain:
            self.run_chain()
        lanes = slice(32 * self.warps[0].wid, 32 * self.warps[-1].wid + 32)
        rest = 0
        for key, (didx, tile, n, b) in list(self.tiles.items()):
            if b & bits:
                self.cta.files["r"][didx, lanes] = tile_to_frag(tile, n).view(np.uint32).T
                del self.tiles[key]
            else:
                rest |= b
        for w in self.warps:
            w.lazy_bits = rest
