"""Which guessed figures move one prediction: each figure the prediction rests on that is
a guess (``System.assumed_keys``: roadmap, estimate, assumed) is set 20 % lower and 20 %
higher in turn, and the same schedule is simulated again on the changed system. The
schedule is not searched again, so the swing is the figure's own effect on this kernel.

It is deterministic (the simulator is). ``--explain`` costs two simulations a figure and lists
every one; ``predict`` screens (one side for every figure, the other for the few it prints)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError, PksimError
from hwmodels.system import System
from pksim_core.prediction import Prediction
from pksim_core.simulate import predicted_time
from pksim_core.study import figure

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


def swings(system_ref: str, overrides: Iterable[str], p: Prediction, cold: bool = False,
           screen: int | None = None) -> list[Swing]:
    """Every guessed figure of ``p`` (``p.depends_on_assumed``) with the time at -20 % and
    +20 %, largest change first (ties by key). ``screen`` = k: every figure at +20 % only,
    then -20 % for the k that moved it most (what ``predict`` prints: one simulation a figure
    and k more, not two a figure); the others keep ``low_s`` None."""
    overrides = tuple(overrides)
    base = load_system(system_ref, overrides)
    out = []
    for key in p.depends_on_assumed:
        value = figure(base, key)
        tag = base.provenance[key].tag
        if isinstance(value, (bool, str)) or not value:
            out.append(Swing(key, value, tag))
            continue
        high = _time_at(system_ref, overrides, key, value, 1 + STEP, p, cold)
        # screening: the other side only where this one could not be simulated (a figure at
        # the top of its range), or later for the few that move the time most
        low = (_time_at(system_ref, overrides, key, value, 1 - STEP, p, cold)
               if screen is None or high is None else None)
        out.append(Swing(key, value, tag, low, high))
    out.sort(key=lambda s: (-s.change(p.time_s), s.key))
    if screen is not None:
        out[:screen] = [replace(s, low_s=_time_at(system_ref, overrides, s.key, s.value,
                                                  1 - STEP, p, cold))
                        if s.low_s is None and s.high_s is not None else s
                        for s in out[:screen]]
        out.sort(key=lambda s: (-s.change(p.time_s), s.key))
    return out


def _time_at(system_ref: str, overrides: tuple[str, ...], key: str, value, factor: float,
             p: Prediction, cold: bool) -> float | None:
    """The schedule's time with ``key`` at ``factor`` x its value (None: that value is
    outside the figure's range, or the schedule does not run there)."""
    try:
        changed = load_system(system_ref, overrides + (f"{key}={_scaled(value, factor)}",))
    except ConfigError:
        return None
    return _resimulate(changed, p, cold)


def _resimulate(system: System, p: Prediction, cold: bool) -> float | None:
    """The schedule's time on the changed system (None: it does not run there)."""
    try:
        return predicted_time(system, p.schedule, reduced=p.reduced, cold=cold)
    except PksimError:
        return None
