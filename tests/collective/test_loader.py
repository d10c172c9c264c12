"""The operand loader (issue 38): named TMA operands in stage rings or loaded once. An
attention-shaped loader -- Q once, a K ring and a V ring, each with its own full/empty barriers
and transaction bytes -- runs in a small kernel on the emulator (eager and adversarial), and
every shared-memory slot it fills is compared byte for byte with the boxes it should hold
(ragged shapes: zero fill past the sequence and the head dimension, TMA swizzle applied)."""
import numpy as np
import pytest

from cutedsl.collective.loader import OperandLoader, TmaOperand, TmaRing
from cutedsl.errors import ConfigError

# heads, query rows, key rows, head dim of Q/K and of V: none a multiple of the blocks
H, SQ, SK, D, DV = 3, 100, 77, 80, 40
BLOCK_M, BLOCK_N, STAGES = 64, 32, 2


def _run(kern, args, grid=1, cluster=None, emu=None):
    """Launch on the emulator with numpy arguments as device buffers; returns them and the emulator."""
    from cutedsl.sim import Emulator
    from cutedsl.testing import run_kernel
    emu = emu or Emulator()
    dev = [emu.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    run_kernel(kern, dev, grid=grid, cluster=cluster, emu=emu)
    return dev, emu


def attention_loader(k_tiles=False):
    """Q: 64 x 128 (D = 80 padded by zero fill), two 64-column boxes, 128-B swizzle; K: 32 x 128,
    the same boxes; V: 32 x 64 in two 32-column boxes of a 64-B swizzle. A head coordinate leads.
    ``k_tiles``: the buffers hold one tile per MMA k-tile, as the attention forward's: Q and K one
    per column box, V in row blocks of 16 keys (one tile each, two boxes side by side)."""
    t = dict(tiles=2) if k_tiles else {}
    q = TmaOperand("q", "f16", BLOCK_M, 128, box_cols=64, swizzle=128, major="K", lead=1, **t)
    k = TmaOperand("k", "f16", BLOCK_N, 128, box_cols=64, swizzle=128, major="K", lead=1, **t)
    v = TmaOperand("v", "f16", BLOCK_N, 64, box_cols=32, swizzle=64, major="MN", lead=1,
                   **(dict(box_rows=16, tiles=2) if k_tiles else {}))
    return OperandLoader(TmaRing("q", (q,)), TmaRing("k", (k,), stages=STAGES), TmaRing("v", (v,), stages=STAGES))


def test_static_description():
    ld = attention_loader()
    q, k, v = (ld.operands[n] for n in "qkv")
    assert (q.boxes, q.box, q.stage_shape, q.stage_bytes) == (2, (64, 64), (128, 64), 64 * 128 * 2)
    assert (v.boxes, v.box, v.stage_shape, v.stage_bytes) == (2, (32, 32), (64, 32), 32 * 64 * 2)
    assert [r.tx_bytes for r in ld.rings.values()] == [16384, 8192, 4096]
    assert [(s.param, s.box, s.swizzle) for s in ld.tensor_maps()] == [
        ("q", (1, 64, 64), 128), ("k", (1, 32, 64), 128), ("v", (1, 32, 32), 64)]
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    ld.plan(plan, stages=3)          # an int resizes the rings, not the load-once slot
    bufs = plan.buffers
    assert [(n, b.stages, b.shape) for n, b in bufs.items()] == [("q", 1, (128, 64)), ("k", 3, (64, 64)),
                                                                 ("v", 3, (64, 32))]
    assert list(plan._barriers) == ["q_full", "k_full", "k_empty", "v_full", "v_empty"]
    # a sliced operand: slice r's rows sit r slices into every box, and its coordinates move with it
    a = TmaOperand("a", "f16", 64, 128, box_cols=64, swizzle=128, slices=2)
    assert a.box == (32, 64) and a.placement(1, 1000, 7, 1) == (32 * 128 + 64 * 128, (1032, 71))


def test_row_blocks_and_k_tiles():
    """V in row blocks of 16 keys: box j = (block j // 2, column box j % 2), each block's boxes
    stacked before the next block's; two buffer tiles per slot (one per block) -- the layout the
    attention forward's MN-major V ring needs (one MMA k-tile of keys per tile)."""
    ld = attention_loader(k_tiles=True)
    q, k, v = (ld.operands[n] for n in "qkv")
    assert (v.boxes, v.box, v.stage_shape, v.tile_shape, v.stage_bytes) == (4, (16, 32), (64, 32), (32, 32),
                                                                          32 * 64 * 2)
    box = 16 * 32 * 2
    assert [v.placement(j, 100, 0) for j in range(4)] == [
        (0, (100, 0)), (box, (100, 32)), (2 * box, (116, 0)), (3 * box, (116, 32))]
    assert [v.in_tile(j) for j in range(4)] == [(0, 0), (0, box), (1, 0), (1, box)]
    assert [k.in_tile(j) for j in range(2)] == [(0, 0), (1, 0)] and k.tile_shape == (32, 64)
    assert [(s.param, s.box) for s in ld.tensor_maps()] == [("q", (1, 64, 64)), ("k", (1, 32, 64)),
                                                           ("v", (1, 16, 32))]
    assert [r.tx_bytes for r in ld.rings.values()] == [16384, 8192, 4096]       # the bytes do not change
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    ld.plan(plan)                    # slot s is tiles 2s, 2s + 1
    assert [(n, b.stages, b.shape) for n, b in plan.buffers.items()] == [("q", 2, (64, 64)), ("k", 4, (32, 64)),
                                                                        ("v", 4, (32, 32))]


@pytest.mark.parametrize("kw,msg", [
    (dict(rows=64, cols=100, box_cols=64), "box_cols 64 must divide cols 100"),
    (dict(rows=64, cols=64, slices=3), "3 slices must divide rows 64"),
    (dict(rows=0, cols=64), "rows must be a positive int, got 0"),
    (dict(rows=64, cols=64, box_rows=24), "box_rows 24 must divide rows 64"),
    (dict(rows=64, cols=64, box_rows=32, slices=2), r"row blocks \(box_rows 32 < rows 64\) of an operand sliced"),
    (dict(rows=64, cols=128, box_cols=64, tiles=3), "tiles 3 must divide its 2 boxes"),
    (dict(rows=64, cols=64, tiles=0), "tiles must be a positive int, got 0"),
])
def test_operand_errors(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        TmaOperand("x", "f16", **kw)


def test_ring_and_loader_errors():
    op = TmaOperand("x", "f16", 64, 64)
    with pytest.raises(ConfigError, match="has no operands"):
        TmaRing("r", ())
    with pytest.raises(ConfigError, match="stages must be None .* got 0"):
        TmaRing("r", (op,), stages=0)
    with pytest.raises(ConfigError, match="names must be unique"):
        OperandLoader(TmaRing("r", (op,)), TmaRing("s", (op,)))
    # checked while the kernel is built, before any IR is emitted for the fill
    with pytest.raises(ConfigError, match=r"fill of ring 'k': no origin for operand\(s\) \['k'\]"):
        attention_loader().fill(None, None, None, "k", {"v": (0, 0)})
    with pytest.raises(ConfigError, match="operand 'q' has 1 leading tensor-map coordinates, got 0"):
        attention_loader().load(None, None, 0, "q", (0, 0))


def _kernel(ld):
    """Warp 0's elected lane loads Q once and ``n_blocks`` K and V blocks through the rings; warp 1
    copies every slot it is handed, word by word, to ``out_q`` / ``out_k[i]`` / ``out_v[i]``, then
    releases it (so the third block refills a slot the copy finished reading)."""
    from mlir.dialects import gpu, memref
    import cutedsl.ir as cir
    from cutedsl.atom.sync import elect_one
    from cutedsl.collective.pipeline import PipelineState
    from cutedsl.ir import SmemPlan
    from cutedsl.testing import build_kernel as build
    plan = SmemPlan()
    ld.plan(plan)

    def copy(smem, name, stage, out, base):
        op = ld.operands[name]
        words = op.stage_bytes // 4
        view = smem[name].view(stage * op.tiles if op.tiles > 1 else stage, shape=(words,), dtype="i32")
        lane = cir.lane_id()
        loop = cir.Loop(0, words // 32)
        for w in loop:
            idx = w * 32 + lane
            out.store(base + idx, cir.Scalar(memref.load(view, [cir.index(idx)])))

    def body(args, smem):
        leader = cir.thread_idx().eq(0)
        pipes = {r: ld.pipeline(smem, r, consumers=1) for r in "qkv"}
        for p in pipes.values():
            p.init(leader)
        gpu.barrier()
        bound = ld.bind(smem, args)
        head = (args.head,)
        warp = cir.warp_idx()
        with cir.If(warp.eq(0)):
            one = elect_one()
            q0 = PipelineState(1)
            ld.fill(bound, pipes["q"], q0, "q", {"q": (args.q_block * BLOCK_M, 0)}, {"q": head}, predicate=one)
            loop = cir.Loop(0, args.n_blocks, carry=PipelineState(STAGES).carry())
            for i, carried in loop:
                st = PipelineState.from_carry(STAGES, carried)
                row = cir.i32(i) * BLOCK_N
                ld.fill(bound, pipes["k"], st, "k", {"k": (row, 0)}, {"k": head}, predicate=one)
                ld.fill(bound, pipes["v"], st, "v", {"v": (row, 0)}, {"v": head}, predicate=one)
                loop.next(*st.advance().carry())
        with cir.If(warp.eq(1)):
            pipes["q"].consumer_wait(PipelineState(1))
            copy(smem, "q", 0, cir.GlobalPtr(args.out_q, "i32"), cir.i32(0))
            loop = cir.Loop(0, args.n_blocks, carry=PipelineState(STAGES).carry())
            for i, carried in loop:
                st = PipelineState.from_carry(STAGES, carried)
                for name, out in (("k", args.out_k), ("v", args.out_v)):
                    pipes[name].consumer_wait(st)
                    base = cir.i32(i) * (ld.operands[name].stage_bytes // 4)
                    copy(smem, name, st.index, cir.GlobalPtr(out, "i32"), base)
                    pipes[name].consumer_release_warp(st)
                loop.next(*st.advance().carry())
    params = [("q", "tensormap"), ("k", "tensormap"), ("v", "tensormap"), ("out_q", "ptr"), ("out_k", "ptr"),
              ("out_v", "ptr"), ("q_block", "i32"), ("head", "i32"), ("n_blocks", "i32")]
    return build(body, params=params, plan=plan, block=(64, 1, 1))


def swizzled(tile: np.ndarray, swizzle: int) -> np.ndarray:
    """The bytes of ``tile`` (rows of ``swizzle`` bytes) as a TMA swizzle mode writes them: the
    16-byte chunk index XOR bits 7.. of the byte offset (PTX ISA 5.5.8, tensor swizzling modes;
    CuTe Swizzle<3,4,3> for 128 B, <2,4,3> for 64 B)."""
    raw = np.ascontiguousarray(tile).view(np.uint8).reshape(-1)
    out = np.empty_like(raw)
    mask = swizzle // 16 - 1
    for o in range(0, raw.size, 16):
        p = o ^ (((o >> 7) & mask) << 4)
        out[p:p + 16] = raw[o:o + 16]
    return out


def expected_slot(src: np.ndarray, row0: int, op) -> np.ndarray:
    """The bytes of one slot of ``op``: its boxes, each ``box_rows x box_cols`` of ``src`` (one head,
    zero past its edges), swizzled, stacked row block by row block."""
    parts = []
    for j in range(op.boxes):
        blk, c = divmod(j, op.cols // op.box_cols)
        box = np.zeros((op.box_rows, op.box_cols), np.float16)
        r = row0 + blk * op.box_rows
        part = src[r:r + op.box_rows, c * op.box_cols:(c + 1) * op.box_cols]
        box[:part.shape[0], :part.shape[1]] = part
        parts.append(swizzled(box, op.swizzle))
    return np.concatenate(parts)


@pytest.mark.sim_kernel
@pytest.mark.parametrize("k_tiles", [False, True])
def test_q_once_k_and_v_rings_fill_the_right_boxes(k_tiles, rng, sim_seed):
    from cutedsl.sim import Emulator
    ld = attention_loader(k_tiles)
    kern = _kernel(ld)
    arrays = {n: rng.integers(1, 1000, (H, s, d)).astype(np.float16) for n, s, d in
              (("q", SQ, D), ("k", SK, D), ("v", SK, DV))}
    emu = Emulator()
    maps = [emu.tensor_map(emu.to_device(arrays[n]), arrays[n].shape, "f16", ld.operands[n].spec().box,
                           swizzle=ld.operands[n].swizzle) for n in "qkv"]
    q_block, head = 1, int(rng.integers(0, H))
    n_blocks = -(-SK // BLOCK_N)                     # 3 blocks through 2 slots: the first slot is reused
    outs = [np.zeros(16384 // 4, np.int32), np.zeros(n_blocks * 8192 // 4, np.int32),
            np.zeros(n_blocks * 4096 // 4, np.int32)]
    dev, emu = _run(kern, maps + outs + [q_block, head, n_blocks], emu=emu)
    got_q = emu.to_host(dev[3], (16384,), np.uint8)
    got_k = emu.to_host(dev[4], (n_blocks, 8192), np.uint8)
    got_v = emu.to_host(dev[5], (n_blocks, 4096), np.uint8)
    assert np.array_equal(got_q, expected_slot(arrays["q"][head], q_block * BLOCK_M, ld.operands["q"]))
    for i in range(n_blocks):
        assert np.array_equal(got_k[i], expected_slot(arrays["k"][head], i * BLOCK_N, ld.operands["k"])), i
        assert np.array_equal(got_v[i], expected_slot(arrays["v"][head], i * BLOCK_N, ld.operands["v"])), i
    # the edges are real: Q's rows past 100 and K's columns past 80 arrived as zeros
    assert not got_q[-128:].any() and got_k[-1].any()
