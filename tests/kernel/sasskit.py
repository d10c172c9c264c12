"""SASS helpers for kernel tests: the instructions of the innermost loop around an opcode."""
import re

_INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?);")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_BRA = re.compile(r"\bBRA(?:\.[A-Z.]+)?\s+`\((\.L_x_\d+)\)")


def loop_bodies(sass: str) -> list:
    """Every backward branch's body: ``[(label, [instruction text, ...]), ...]`` in program
    order (the instructions from the label to the branch, both included)."""
    labels, ins = {}, []
    for line in sass.splitlines():
        m = _LABEL.match(line.strip())
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = _INS.search(line)
        if m:
            ins.append(m.group(2).strip())
    out = []
    for i, text in enumerate(ins):
        m = _BRA.search(text)
        if m and m.group(1) in labels and labels[m.group(1)] <= i:
            out.append((m.group(1), ins[labels[m.group(1)]:i + 1]))
    return out


def loop_instructions(sass: str, opcode: str = "HGMMA") -> int:
    """Instructions per iteration of the smallest loop that contains ``opcode`` (e.g. the
    consumer main loop per k-tile); raises ``ValueError`` when no loop contains it."""
    op = re.compile(rf"(^|\s){opcode}\b")
    sizes = [len(body) for _, body in loop_bodies(sass) if any(op.search(t) for t in body)]
    if not sizes:
        raise ValueError(f"no loop contains {opcode}")
    return min(sizes)
