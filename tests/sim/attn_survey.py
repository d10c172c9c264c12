"""Survey of what the emulator lacks for the attention / softmax fixtures (issue 39), the source
of ``docs/attention-ptx-survey.md``. Not a test; run it from the repository root::

    PYTHONPATH=$PWD .venv/bin/python tests/sim/attn_survey.py [FIXTURE ...]

For each fixture it loads the PTX, and each time the loader stops at a form it does not know, it
records the form (count, first line) and rewrites every occurrence into an equivalent sequence of
forms the emulator runs today -- only so the survey can see past it: three-input ``max/min.f32``
into two two-input ones, packed ``.f32x2`` arithmetic into two scalar ops on the unpacked halves
(element 0 in the low 32 bits), ``redux.sync.{max,min}.f32`` into a butterfly of ``shfl.sync.bfly``,
``brx.idx`` over a ``.branchtargets`` list into a chain of compare-and-branch. Then it launches the
rewritten kernel (``attnkit``) and records how the run ends: the numbers against float64, or the
emulator's verdict. Nothing here changes the emulator.
"""
from __future__ import annotations

import re
import sys
import time

import numpy as np

import attnkit
from cutedsl.sim import Emulator, PTXParseError

_n = [0]


def _tmp(k):
    _n[0] += 1
    return [f"%svy{_n[0]}_{i}" for i in range(k)]


def _max3(m):
    guard, op, mods, d, a, b, c = m.group("g") or "", m.group("op"), m.group("mods"), *m.group("d", "a", "b", "c")
    (t,) = _tmp(1)
    return (f"{{ .reg .b32 {t}; {guard}{op}{mods}.f32 {t}, {a}, {b}; {guard}{op}{mods}.f32 {d}, {t}, {c}; }}")


def _packed(m):
    guard, op, mods, d = m.group("g") or "", m.group("op"), m.group("mods"), m.group("d")
    srcs = [s.strip() for s in m.group("srcs").split(",")]
    t = _tmp(2 * len(srcs) + 2)
    body = [f"mov.b64 {{{t[2 * i]}, {t[2 * i + 1]}}}, {s};" for i, s in enumerate(srcs)]
    for half in (0, 1):
        body.append(f"{op}{mods}.f32 {t[-2 + half]}, " + ", ".join(t[2 * i + half] for i in range(len(srcs))) + ";")
    body.append(f"mov.b64 {d}, {{{t[-2]}, {t[-1]}}};")
    decl = f".reg .b32 {', '.join(t)};"
    return "{ " + decl + " " + " ".join(f"{guard}{x}" for x in body) + " }"


def _redux(m):
    op, mods, d, a, mask = m.group("op"), m.group("mods"), m.group("d"), m.group("a"), m.group("mask")
    x, y = _tmp(2)
    body = [f"mov.b32 {x}, {a};"]
    if ".abs" in mods:
        body.append(f"abs.f32 {x}, {x};")
    nan = ".NaN" if ".NaN" in mods else ""
    for lane in (16, 8, 4, 2, 1):
        body += [f"shfl.sync.bfly.b32 {y}, {x}, {lane}, 31, {mask};", f"{op}{nan}.f32 {x}, {x}, {y};"]
    body.append(f"mov.b32 {d}, {x};")
    return "{ .reg .b32 " + f"{x}, {y}; " + " ".join(body) + " }"


def _brx(ptx):
    tables = {}

    def table(m):
        tables[m.group(1)] = [t.strip() for t in m.group(2).split(",")]
        return ""
    ptx = re.sub(r"^(\w+):\s*\n\s*\.branchtargets\s+([^;]*);", table, ptx, flags=re.M)

    def brx(m):
        (p,) = _tmp(1)
        chain = " ".join(f"setp.eq.u32 {p}, {m.group('idx')}, {i}; @{p} bra {t};"
                         for i, t in enumerate(tables[m.group("tab")]))
        return f"{{ .reg .pred {p}; {chain} }}"
    return re.sub(r"^\s*brx\.idx(\.uni)?\s+(?P<idx>%\w+),\s*(?P<tab>\w+);", brx, ptx, flags=re.M)


REG = r"%\w+"
#: (form, PTX ISA section, pattern of one instruction line, rewrite)
REWRITES = [
    ("max/min.f32 with three inputs (sm_100, PTX 8.8)", "9.7.3.12 max / 9.7.3.11 min",
     rf"(?P<g>@!?%p\d+\s+)?(?P<op>max|min)(?P<mods>(\.ftz|\.NaN|\.abs)*)\.f32\s+(?P<d>{REG}),\s*"
     rf"(?P<a>{REG}),\s*(?P<b>{REG}),\s*(?P<c>{REG});", _max3),
    ("packed add/sub/mul/fma .f32x2 (sm_100, PTX 8.6)", "9.7.3 (add, sub, mul, fma .f32x2)",
     rf"(?P<g>@!?%p\d+\s+)?(?P<op>add|sub|mul|fma)(?P<mods>(\.rn|\.rz|\.rm|\.rp|\.ftz|\.sat)*)\.f32x2\s+"
     rf"(?P<d>{REG}),\s*(?P<srcs>[^;]*);", _packed),
    ("redux.sync.{max,min}.f32 (sm_100a, PTX 8.6)", "9.7.13.12 redux.sync",
     rf"redux\.sync\.(?P<op>max|min)(?P<mods>(\.abs|\.NaN)*)\.f32\s+(?P<d>{REG}),\s*(?P<a>{REG}),\s*"
     rf"(?P<mask>{REG}|-?\w+);", _redux),
]
BRX = ("brx.idx with a .branchtargets label list", "9.7.12.4 brx.idx; 11.3.1 .branchtargets")


def rewrite_all(ptx: str) -> tuple[str, list]:
    """Load-and-rewrite until the PTX loads: ``(rewritten PTX, [(form, ISA, count, example) ...,
    or a final ('unhandled', error, 0, line)])``."""
    found, entry = [], re.search(r"\.entry (\w+)\(", ptx).group(1)
    original = ptx.splitlines()
    for _ in range(10):
        try:
            Emulator().load(ptx, entry)
            return ptx, found
        except PTXParseError as e:
            line = ptx.splitlines()[e.line - 1] if e.line else ""
            if ".branchtargets" in line or "brx.idx" in line:
                ex = next(f"{i + 1}: {s.strip()}" for i, s in enumerate(original) if "brx.idx" in s)
                found.append((*BRX, ptx.count("brx.idx"), ex))
                ptx = _brx(ptx)
                continue
            for form, isa, pat, fn in REWRITES:
                if re.search(pat, line):
                    n = len(re.findall(pat, ptx))
                    ex = next(f"{i + 1}: {s.strip()}" for i, s in enumerate(original) if re.search(pat, s))
                    found.append((form, isa, n, ex))
                    ptx = re.sub(pat, fn, ptx)
                    break
            else:
                found.append(("unhandled", f"{type(e).__name__}: {e}", 0, line.strip()))
                return ptx, found
    return ptx, found


RUNNERS = {"softmax": attnkit.run_triton_softmax, "mm_ws": attnkit.run_triton_mm_ws, "fa4": attnkit.run_fa4_forward,
           "attn": attnkit.run_triton_attention}
FIXTURES = ["triton_softmax_sm90", "triton_softmax_sm100", "triton_attn_fwd_sm90", "triton_attn_fwd_sm90_causal",
            "triton_attn_fwd_sm100", "triton_attn_fwd_sm100_causal", "triton_attn_fwd_ws_sm100", "triton_mm_ws_sm100",
            "fa4_fwd_sm90_hdim128", "fa4_fwd_sm100_hdim128"]


def wait_after_tmem_loads(ptx: str) -> str:
    """Insert ``tcgen05.wait::ld`` after every ``tcgen05.ld`` (FA4 has none; ISA 9.7.16.8.5)."""
    return re.sub(r"^(\s*tcgen05\.ld\.[^;]*;)", r"\1\n\ttcgen05.wait::ld.sync.aligned;", ptx, flags=re.M)


def survey(name: str, wait_ld: bool = False) -> None:
    text, _ = attnkit.fixture(name)
    ptx, found = rewrite_all(text)
    if wait_ld:
        ptx = wait_after_tmem_loads(ptx)
        found.append(("tcgen05.wait::ld inserted after each tcgen05.ld", "", ptx.count("tcgen05.wait::ld"), ""))
    print(f"## {name}")
    for form, isa, n, ex in found:
        print(f"- {form} [{isa}] x{n}: {ex}")
    if found and found[-1][0] == "unhandled":
        return
    run = next(f for k, f in RUNNERS.items() if k in name)
    t = time.time()
    try:
        got, ref = run(Emulator(), name, np.random.default_rng(0), ptx=ptx)
        pairs = zip(got, ref) if isinstance(got, tuple) else [(got, ref)]
        errs = ", ".join(f"{np.abs(g - r).max():.3g}" for g, r in pairs)
        print(f"- runs after the rewrites: max |error| vs float64 {errs} ({time.time() - t:.1f} s)")
    except Exception as e:     # the survey reports any verdict
        print(f"- verdict after the rewrites ({time.time() - t:.1f} s): {type(e).__name__}: {e}")


if __name__ == "__main__":
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or FIXTURES
    for fx in names:
        survey(fx, wait_ld="--wait-ld" in sys.argv)
