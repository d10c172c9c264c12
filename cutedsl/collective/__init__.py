"""Collectives: one phase of the algorithm each, with its shared-memory slice and barriers.

* :mod:`pipeline` — pipeline state (stage index + phase) and the TMA pipeline (full barriers
  armed with transaction bytes; empty barriers for warp-specialized producers/consumers).
* :mod:`mainloop` — the multistage (software-pipelined) TMA + WGMMA mainloop.
* :mod:`warp_specialized` — the warp-specialized mainloop (``producer_loop`` /
  ``consumer_loop``), clusters with TMA multicast; :class:`OrderedSequenceBarrier` (in
  :mod:`pipeline`) for ping-pong turn-taking.
* :mod:`persistent_scheduler` — static persistent tile scheduler with rasterization.
* :mod:`epilogue` — accumulator -> global (bounds-checked) and accumulator -> smem -> TMA store,
  with an elementwise ``visit`` hook subclasses override.
"""
from .pipeline import OrderedSequenceBarrier, PipelineState, TmaPipeline
from .mainloop import MultistageMainloop
from .warp_specialized import WarpSpecializedMainloop
from .persistent_scheduler import PersistentTileScheduler
from .epilogue import Epilogue, GlobalEpilogue, TmaStoreEpilogue, EpilogueContext

__all__ = ["PipelineState", "TmaPipeline", "OrderedSequenceBarrier", "MultistageMainloop",
           "WarpSpecializedMainloop", "PersistentTileScheduler", "Epilogue", "GlobalEpilogue",
           "TmaStoreEpilogue", "EpilogueContext"]
