"""Rendering MLIR diagnostics (verifier and pass errors) with their source locations."""


def format_diagnostics(e) -> str:
    """Render an ``MLIRError`` with every diagnostic, its location and notes."""
    lines = [str(getattr(e, "message", e))]
    for d in getattr(e, "error_diagnostics", []) or []:
        lines.append(f"  {d.location}: {d.message}")
        for n in d.notes:
            lines.append(f"    note: {n.location}: {n.message}")
    return "\n".join(lines)
