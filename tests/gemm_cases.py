"""GEMM configurations shared by the emulator and GPU numerical tests."""
from cutedsl import GemmConfig

TILES = [(64, 64), (64, 128), (64, 256), (128, 64), (128, 128), (128, 256)]


def feasible(tile, stages) -> bool:
    """Whether ``GemmConfig(tile, stages)`` fits shared memory."""
    try:
        GemmConfig(tile=(*tile, 64), stages=stages)
        return True
    except Exception:
        return False


#: every (tile, stages) that fits, and readable ids for them
CASES = [(t, s) for t in TILES for s in range(1, 8) if feasible(t, s)]
CASE_IDS = [f"{t[0]}x{t[1]}-s{s}" for t, s in CASES]
