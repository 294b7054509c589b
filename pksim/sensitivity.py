"""Which guessed figures move one prediction: each figure the prediction rests on that is
a guess (``System.assumed_keys``: roadmap, estimate, assumed) is set 20 % lower and 20 %
higher in turn, and the same schedule is simulated again on the changed system. The
schedule is not searched again, so the swing is the figure's own effect on this kernel.

It is deterministic (the simulator is) and costs two simulations per figure; ``predict``
prints the few largest swings and ``--explain`` every one."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError, PksimError
from hwmodels.system import System
from pksim.prediction import Prediction
from pksim.simulate import predict
from pksim.study import figure

STEP = 0.2          # each figure 20 % lower and 20 % higher


@dataclass(frozen=True)
class Swing:
    """One guessed figure: its value (in its file's unit), its provenance tag, and the
    predicted time with the figure 20 % lower and 20 % higher (None: that value is outside
    the figure's allowed range, or the figure is not a number)."""
    key: str
    value: float | bool | str
    tag: str
    low_s: float | None = None
    high_s: float | None = None

    def change(self, time_s: float) -> float:
        """The largest relative change of the time either way (0 when none was simulated)."""
        return max((abs(t - time_s) / time_s for t in (self.low_s, self.high_s)
                    if t is not None), default=0.0)

    def to_dict(self, time_s: float) -> dict:
        return {"key": self.key, "value": self.value, "provenance": self.tag,
                "minus_20pct_s": self.low_s, "plus_20pct_s": self.high_s,
                "max_change": self.change(time_s)}


def _scaled(value: float | int, factor: float) -> float | int:
    if isinstance(value, int):
        moved = int(round(value * factor))
        return moved if moved != value else value + (1 if factor > 1 else -1)
    return round(value * factor, 12)


def swings(system_ref: str, overrides: Iterable[str], p: Prediction, cold: bool = False
           ) -> list[Swing]:
    """Every guessed figure of ``p`` (``p.depends_on_assumed``) with the time at -20 % and
    +20 %, largest change first (ties by key)."""
    overrides = tuple(overrides)
    base = load_system(system_ref, overrides)
    out = []
    for key in p.depends_on_assumed:
        value = figure(base, key)
        tag = base.provenance[key].tag
        if isinstance(value, (bool, str)) or not value:
            out.append(Swing(key, value, tag))
            continue
        times = []
        for factor in (1 - STEP, 1 + STEP):
            try:
                changed = load_system(system_ref, overrides + (f"{key}={_scaled(value, factor)}",))
            except ConfigError:              # outside the figure's range: that side not tried
                times.append(None)
                continue
            times.append(_resimulate(changed, p, cold))
        out.append(Swing(key, value, tag, *times))
    return sorted(out, key=lambda s: (-s.change(p.time_s), s.key))


def _resimulate(system: System, p: Prediction, cold: bool) -> float | None:
    """The schedule's time on the changed system (None: it does not run there)."""
    try:
        return predict(system, p.schedule, reduced=p.reduced, cold=cold).time_s
    except PksimError:
        return None
