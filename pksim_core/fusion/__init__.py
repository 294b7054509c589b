"""Compute and communication together: the simulation of fused operations.

Tensor work is a fluid flow too: its amount is the bytes it streams through HBM, it
crosses the rank's tensor resource (capacity: the dtype's peak x the share of SMs
that compute; weight: FLOP per byte / shape efficiency) and the HBM, which it shares
with the communication's own traffic. Strategies:

- ``none``: the GEMM (all SMs, library efficiency) then NCCL's collective, two
  launches: the cuBLAS + NCCL baseline every other strategy is compared with.
- ``inter-sm``: ``comm_sms`` SMs move data while the rest compute, chunk by chunk
  (one chunk per peer): a chunk is sent once computed (produce) or computed once
  arrived (consume).
- ``intra-sm``: every SM computes; its communication warps send each finished wave of
  tiles (finer chunks), issuing from all SMs and competing with the tiles' traffic. The
  GEMM kernels whose epilogue store-adds its tiles (gemm-rs, gemm-ar) hold each wave's
  compute for the time the SMs' bulk engines take to read the staged tiles out
  (``epilogue_stall_s``: the consumers wait for it before they stage the next tile), put
  those stores on the issuing GPU's memory path (``mempath``), of which the main loops
  leave only ``tensor.epilogue_overlap`` while any rank computes, and their
  read-modify-writes run at ``hbm.tile_reduce_efficiency`` (all three measured by
  validation/microbench/gemm_store_add.cu).

What a search reuses (all exact: the same computation, not an approximation):
candidates whose plan and flows are the same (``plans.family``: the SM count, the overlap
strategy and a chunk size past the TMA message cap change neither) share the prepared
flows, and with the same SM split the whole run; the compute-alone reference is a
sum of idle per-chunk runs, cached per plan and compute SM count. ``bounds.lower_bounds``
gives the search (``pksim.search``) two lower bounds per candidate, a cheap one and a
tighter one, so that it need not simulate what cannot win.

Modules, in dependency order: ``plans`` (chunking, plan, family key), ``flows`` (tensor
and communication flows, symmetry classes), ``timeline``, ``des`` (the runs), ``setup``
(a candidate checked and planned), ``bounds`` (lower bounds for the search), ``predict``.
"""
from __future__ import annotations

from pksim_core.fusion.bounds import lower_bounds
from pksim_core.fusion.predict import clear_caches, predict_fused

__all__ = ["predict_fused", "lower_bounds", "clear_caches"]
