"""Chapter 0: the smallest kernel — every thread calls printf (vprintf in PTX).

Compiles for sm_90a and prints the compile report; runs on a GPU or the emulator.
"""
from cutedsl.runtime import get_backend, launch
from cutedsl.kernel import HelloKernel

kern = HelloKernel(block=4)
ck = kern.compile()
print(f"compiled {ck.entry}: {ck.resources.registers} registers, SASS {ck.resources.sass.get('CALL', 0)} CALL")
backend = get_backend("auto")
launch(ck, kern.grid(blocks=2), backend=backend)
print(f"checked: launched 2 x 4 threads on backend {backend.name!r} (one line per thread above)")
