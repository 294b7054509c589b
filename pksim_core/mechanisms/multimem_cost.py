"""Multimem: multimem.ld_reduce / multimem.st through a multicast address, the switch summing
or fanning out (in-network). Inside one GPU it never runs; its SMs' other moves are the
register routines' (``pksim_core.mechanisms.core``)."""
from __future__ import annotations

from pksim_core.mechanisms.core import Mechanism


class Multimem(Mechanism):
    name = "multimem"
