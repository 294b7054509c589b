"""Helpers the collective model's tests share: dgx-h100 and a collective schedule."""
from __future__ import annotations

from hwmodels.catalog import load_system
from pksim_core.schedule import Schedule

GiB = 1 << 30
H100 = load_system("dgx-h100")


def sched(op="all-reduce", nbytes=GiB, world=8, **kw):
    kw.setdefault("mechanism", "tma")
    kw.setdefault("comm_sms", 132)
    return Schedule(op=op, shape=(("bytes", nbytes),), world=world, **kw)
