"""Emulator rank 1, the checkers: the happens-before race detector (shared memory, inside one
warp, global memory between clusters), its per-word shadow sets, and the deadlock report. Imports
only the front end (its errors); the machine and the instructions call into it."""
