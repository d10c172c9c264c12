"""Chapter 1: SAXPY, y <- alpha * x + y, one element per thread with a bounds check."""
import numpy as np

from cutedsl.device.saxpy import saxpy

rng = np.random.default_rng()
n = 1000                                   # not a multiple of the 128-thread block
x = rng.standard_normal(n, dtype=np.float32)
y = rng.standard_normal(n, dtype=np.float32)
out = saxpy(2.5, x, y)
ref = np.float32(2.5) * x + y
assert np.array_equal(out, ref), np.max(np.abs(out - ref))
print(f"checked: saxpy on {n} elements equals numpy bit for bit")
