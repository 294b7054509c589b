"""Registers: 16-byte ld.global.cg loads and stores by the SMs, the routines every SM move that
is not TMA's runs; its costs are the base class's (``pksim_core.mechanisms.core``)."""
from __future__ import annotations

from pksim_core.mechanisms.core import Mechanism


class Register(Mechanism):
    name = "register"
