"""Launch limits (issue 7 item 4): the emulator refuses a launch a GPU's driver would refuse
(``cuLaunchKernel`` -> CUDA_ERROR_INVALID_VALUE), with the same check as the CUDA backend."""
import pytest

from cutedsl.runtime.backend import MAX_GRID, check_launch
from cutedsl.errors import LaunchError
from cutedsl.sim import Emulator

PTX = """
.version 8.3
.target sm_90a
.address_size 64
.visible .entry noop()
{
    ret;
}
"""


@pytest.mark.parametrize("grid,block,smem,match", [
    ((1, 65536, 1), 32, 0, r"gridDim.y = 65536 is outside the hardware range 1..65535"),
    ((1, 1, 65536), 32, 0, r"gridDim.z = 65536"),
    ((2 ** 31, 1, 1), 32, 0, r"gridDim.x = 2147483648 is outside the hardware range 1..2147483647"),
    ((1, 0, 1), 32, 0, r"gridDim.y = 0"),
    (1, (32, 1, 65), 0, r"blockDim.z = 65 is outside the hardware range 1..64"),
    (1, (64, 32, 1), 0, r"2048 threads, the limit is 1024"),
    (1, 32, 232449, r"232449 B of dynamic shared memory, the sm_90 limit is 0..232448 B"),
])
def test_emulator_refuses_launches_past_hardware_limits(grid, block, smem, match):
    emu = Emulator()
    prog = emu.load(PTX)
    with pytest.raises(LaunchError, match=match):
        emu.launch(prog, grid=grid, block=block, smem=smem)
    assert emu.launch(prog, grid=(3, 2, 1), block=32)["ctas"] == 6     # within limits: runs


def test_largest_grid_passes_the_check():
    check_launch(MAX_GRID, (1024, 1, 1), (1, 1, 1), 232448)
    with pytest.raises(LaunchError, match="clusterDim.x = 2 must be >= 1 and divide gridDim.x = 3"):
        check_launch((3, 1, 1), 128, (2, 1, 1))
