"""Collectives: one phase of the algorithm each, with its shared-memory slice and barriers.

* :mod:`pipeline` — pipeline state (stage index + phase) and the TMA pipeline (full barriers
  armed with transaction bytes; empty barriers for warp-specialized producers/consumers).
* :mod:`mainloop` — the multistage (software-pipelined) TMA + WGMMA mainloop.
* :mod:`epilogue` — accumulator -> global (bounds-checked) and accumulator -> smem -> TMA store,
  with an elementwise ``visit`` hook subclasses override; an atomic-add epilogue for split-K.
* :mod:`tile_scheduler` — which output tile a CTA computes, and the launch grid.
"""
from .pipeline import PipelineState, TmaPipeline
from .mainloop import MultistageMainloop
from .epilogue import AtomicAddEpilogue, Epilogue, EpilogueContext, GlobalEpilogue, TmaStoreEpilogue
from .tile_scheduler import TileScheduler

__all__ = ["PipelineState", "TmaPipeline", "MultistageMainloop", "Epilogue", "GlobalEpilogue",
           "TmaStoreEpilogue", "EpilogueContext", "AtomicAddEpilogue", "TileScheduler"]
