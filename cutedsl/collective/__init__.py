"""Collectives: one phase of the algorithm each, with its shared-memory slice and barriers.

* :mod:`pipeline` — pipeline state (stage index + phase) and the TMA pipeline (full barriers
  armed with transaction bytes; empty barriers for warp-specialized producers/consumers).
* :mod:`loader` — the operand loader: named TMA operands (:class:`TmaOperand`: box, boxes
  per stage, cluster slices with multicast, leading coordinates), grouped in stage rings or
  loaded once (:class:`TmaRing`: its buffers, full/empty barriers and transaction bytes), planned,
  bound and issued by :class:`OperandLoader` -- the GEMM's A/B ring is one configuration,
  attention's Q once + K ring + V ring another.
* :mod:`gemm_operands` — the GEMM's A/B ring (block-scaled: with the factor atoms) as one loader
  configuration: boxes, cluster slices and multicast, stage bytes, the stage loads, the producer
  loop; held (composed) by the sm_90a and the sm_100a mainloops alike.
* :mod:`tma_wgmma` — what every TMA + WGMMA mainloop shares: the GEMM ring plus the WGMMA step
  (bound operands and descriptors, ``mma``).
* :mod:`tcgen05_mainloop` — the sm_100a mainloop: the GEMM ring plus the tcgen05 MMA-warp loop
  (CTA pairs, block-scale factors); no sm_90a class in its MRO.
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
* :mod:`work_unit` — the work-unit protocol for any problem: a unit space (linear unit index ->
  the problem's coordinates, a record with ``valid``), schedulers that hand units out (one per
  CTA, persistent with clusters) and the walk every role runs (``work_loop`` / ``work_unit``);
  attention's units (query block, head, sequence, split), longest first for causal masks.
* :mod:`tile_scheduler` — the GEMM instances: which output tile(s) a CTA computes (a
  :class:`~cutedsl.collective.tile_scheduler.WorkTile` per unit), and the launch grid: one tile
  per CTA, or static persistent with rasterization and clusters.
"""
from .pipeline import OrderedSequenceBarrier, PipelineState, TmaPipeline
from .loader import BoundOperands, OperandLoader, TmaOperand, TmaRing
from .tma_wgmma import MainloopOperands, TmaWgmmaMainloop
from .mainloop import MultistageMainloop
from .warp_specialized import WarpSpecializedMainloop
from .epilogue import AtomicAddEpilogue, Epilogue, EpilogueContext, GlobalEpilogue, TmaStoreEpilogue
from .tile_scheduler import PersistentTileScheduler, TileScheduler
from .work_unit import AttentionUnit, AttentionUnits, PersistentScheduler, UnitScheduler, UnitSpace
from .tmem_epilogue_tma import TmemTmaStoreEpilogue

__all__ = ["PipelineState", "TmaPipeline", "OrderedSequenceBarrier", "TmaOperand", "TmaRing", "OperandLoader",
           "BoundOperands", "TmaWgmmaMainloop", "MainloopOperands",
           "MultistageMainloop",
           "WarpSpecializedMainloop", "Epilogue", "GlobalEpilogue", "TmaStoreEpilogue", "EpilogueContext",
           "AtomicAddEpilogue", "TileScheduler", "PersistentTileScheduler", "UnitSpace", "UnitScheduler",
           "PersistentScheduler", "AttentionUnit", "AttentionUnits", "TmemTmaStoreEpilogue"]
