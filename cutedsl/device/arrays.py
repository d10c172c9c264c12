"""Kept so that ``cutedsl.device.arrays`` (the path documented before the runtime layer
existed) keeps working: the device arrays live in :mod:`cutedsl.runtime.arrays`, and this
module is that module (``cutedsl.device.arrays.DeviceArray is
cutedsl.runtime.arrays.DeviceArray``). New code imports ``cutedsl.runtime.arrays``."""
import sys

from ..runtime import arrays as _arrays

sys.modules[__name__] = _arrays     # one module object: its functions, classes and monkeypatches are shared
