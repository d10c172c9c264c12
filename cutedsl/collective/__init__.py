"""Collectives: one phase of the algorithm each, with its shared-memory slice and barriers.

* :mod:`pipeline` — pipeline state (stage index + phase) and the TMA pipeline (full barriers
  armed with transaction bytes; empty barriers for warp-specialized producers/consumers).
* :mod:`tma_wgmma` — what every TMA + WGMMA mainloop shares: the operand ring (boxes,
  buffers, stage bytes), bound operands, the stage loads (with cluster multicast), the MMA step.
* :mod:`mainloop` — the multistage (software-pipelined) TMA + WGMMA mainloop.
* :mod:`warp_specialized` — the warp-specialized mainloop (``producer_loop`` /
  ``consumer_loop``), clusters with TMA multicast; :class:`OrderedSequenceBarrier` (in
  :mod:`pipeline`) for ping-pong turn-taking.
* :mod:`epilogue` — accumulator -> global (bounds-checked) and accumulator -> smem -> TMA store,
  with an elementwise ``visit`` hook subclasses override; an atomic-add epilogue for split-K.
* :mod:`tmem_epilogue_tma` — the sm_100a TMA-store epilogue (tensor memory -> registers ->
  swizzled shared sub-tiles -> TMA store, warp by warp); a ``TmaStoreEpilogue`` subclass that
  only overrides ``visit`` / ``extra_params`` is rebased onto it for sm_100a kernels.
* :mod:`attention_hooks` — FlexAttention-style ``score_mod`` / ``mask_mod`` hooks of the attention
  kernel (one body for the kernel's IR and the numpy reference, :mod:`attention_hook_ops`),
  built-ins in :mod:`attention_hook_builtins`, block masks in :mod:`attention_block_mask`.
* :mod:`tile_scheduler` — which output tile(s) a CTA computes, and the launch grid: one tile
  per CTA, or static persistent with rasterization and clusters.
"""
from .pipeline import OrderedSequenceBarrier, PipelineState, TmaPipeline
from .tma_wgmma import MainloopOperands, TmaWgmmaMainloop
from .mainloop import MultistageMainloop
from .warp_specialized import WarpSpecializedMainloop
from .epilogue import AtomicAddEpilogue, Epilogue, EpilogueContext, GlobalEpilogue, TmaStoreEpilogue
from .tile_scheduler import PersistentTileScheduler, TileScheduler
from .tmem_epilogue_tma import TmemTmaStoreEpilogue

__all__ = ["PipelineState", "TmaPipeline", "OrderedSequenceBarrier", "TmaWgmmaMainloop", "MainloopOperands",
           "MultistageMainloop",
           "WarpSpecializedMainloop", "Epilogue", "GlobalEpilogue", "TmaStoreEpilogue", "EpilogueContext",
           "AtomicAddEpilogue", "TileScheduler", "PersistentTileScheduler", "TmemTmaStoreEpilogue"]
