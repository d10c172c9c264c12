"""Emulator rank 0, the front end: PTX text -> a decoded :class:`~cutedsl.sim.frontend.program.Program`
(parser, operand decoding, PTX types, the loader and its cache), the instruction-handler registry
the decoder looks opcodes up in, the resource limits checked while loading, and the emulator's
error types. Imports nothing else of :mod:`cutedsl.sim` (docs/emulator.md, "Architecture")."""
