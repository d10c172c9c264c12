"""IR foundation: operators emit the right arith ops, constants stay Python, control flow verifies."""
import pytest

from cutedsl.errors import IRError
from cutedsl.ir import If, KernelBuilder, Loop, Param, const, select, thread_idx


def build(body, params=(Param("x", "i32"), Param("y", "f32"))):
    kb = KernelBuilder("k", list(params), block=(128,))
    with kb.build() as a:
        body(a)
    return str(kb.module)


def test_integer_operators_signedness():
    def body(a):
        x = a.x
        _ = x // 3, x % 5, x >> 1, x < 7          # signed
        u = x.unsigned()
        _ = u // 3, u % 5, u >> 1, u < 7          # unsigned
        _ = x & 1, x | 2, x ^ 3, x << 2, x + 1, 1 - x, x * x
    ir = build(body)
    for op in ("arith.floordivsi", "arith.remsi", "arith.shrsi", "arith.cmpi slt",
               "arith.divui", "arith.remui", "arith.shrui", "arith.cmpi ult",
               "arith.andi", "arith.ori", "arith.xori", "arith.shli", "arith.addi", "arith.subi", "arith.muli"):
        assert op in ir, op


def test_float_ops_and_conversions():
    def body(a):
        y = a.y
        _ = y * 2.0 + 1.0, y / 3.0, -y, y < 0.5
        _ = y.to("f16"), y.to("bf16"), a.x.to("f32"), a.x.unsigned().to("f32"), y.to("i32"), a.x.to("i64")
        _ = select(a.x < 0, y, 0.0)
    ir = build(body)
    for op in ("arith.mulf", "arith.addf", "arith.divf", "arith.negf", "arith.cmpf olt", "arith.truncf",
               "arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.extsi", "arith.select"):
        assert op in ir, op


def test_python_numbers_stay_compile_time():
    def body(a):
        n = 3 * 4 + 1                 # plain Python: no IR
        _ = a.x + n
    ir = build(body)
    assert ir.count("arith.constant") == 1 and "13 : i32" in ir


def test_type_mismatch_and_truthiness_raise():
    def body(a):
        with pytest.raises(TypeError, match="operand types differ"):
            _ = a.x + a.y
        with pytest.raises(TypeError, match="no Python truth value"):
            bool(a.x < 1)
        with pytest.raises(TypeError, match="plain Python `if`"):
            If(True)
        with pytest.raises(OverflowError):
            const(1 << 40, "i32")
    build(body)


def test_loop_with_carried_values_and_if_else():
    def body(a):
        loop = Loop(0, a.x, carry=[a.y, const(0, "i32")])
        for i, (acc, cnt) in loop:
            br = If(i < 10, results=["f32"])
            with br.then_():
                br.yield_(acc + 1.0)
            with br.else_():
                br.yield_(acc * 2.0)
            loop.next(br.results[0], cnt + 1)
        total, count = loop.results
        with If(thread_idx().eq(0)):
            _ = total + 1.0
    ir = build(body)
    assert "scf.for" in ir and "scf.if" in ir and "scf.yield" in ir


def test_loop_requires_next_for_carried_values():
    with pytest.raises(RuntimeError, match="loop.next"):
        def body(a):
            for i, (acc,) in Loop(0, 4, carry=[a.y]):
                pass
        build(body)


def test_kernel_attributes_and_params():
    kb = KernelBuilder("attrs", [Param("t", "tensormap"), Param("p", "ptr"), Param("n", "u32")],
                       block=(256,), cluster=(2, 1, 1), min_ctas_per_sm=1, max_registers=168)
    with kb.build():
        pass
    ir = str(kb.module)
    assert "nvvm.reqntid = array<i32: 256, 1, 1>" in ir
    assert "nvvm.cluster_dim = array<i32: 2, 1, 1>" in ir
    assert "nvvm.minctasm = 1" in ir and "nvvm.maxnreg = 168" in ir
    assert "!llvm.ptr, %arg1: !llvm.ptr<1>, %arg2: i32" in ir
    assert [p.kind for p in kb.param_specs] == ["tensormap", "ptr", "u32"]


def test_bad_kernel_definitions():
    with pytest.raises(ValueError, match="1..1024"):
        KernelBuilder("k", [], block=(2048,))
    with pytest.raises(ValueError, match="duplicate"):
        KernelBuilder("k", [Param("a", "i32"), Param("a", "i32")])


def test_verifier_error_names_op_and_python_line():
    from mlir.dialects import memref
    from cutedsl.ir import index

    def body(a):
        from mlir import ir
        view_t = ir.Type.parse("memref<4xf32, #gpu.address_space<workgroup>>")
        src = memref.alloca(ir.Type.parse("memref<4xf32>"), [], [])
        memref.view(view_t, src, index(0), [])       # wrong: view of a non-i8 memref
    with pytest.raises(IRError) as e:
        build(body)
    msg = str(e.value)
    assert "memref.view" in msg and "test_values_control.py" in msg
