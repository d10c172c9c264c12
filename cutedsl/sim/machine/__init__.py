"""Emulator rank 2, the machine: the address map and memories (global, shared, tensor memory),
warps, CTAs and clusters, the scheduler (residency, lockstep batches, the adversarial mode),
named-barrier state and the warp-convergence rule. Imports the front end and the checks only."""
