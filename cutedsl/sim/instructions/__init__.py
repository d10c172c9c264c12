"""Emulator rank 4, the instructions: one module per PTX instruction family, each registering its
decoders with :func:`~cutedsl.sim.frontend.registry.handler` (or
:func:`~cutedsl.sim.frontend.registry.subhandler` for operations of an opcode another module owns).
An instruction module imports ranks 0-3 and never another instruction module; the package's
``handlers`` module imports them all once."""
