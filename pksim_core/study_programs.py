"""Programs in a study: ``programs = ["gemm-reducescatter", "my-step.toml"]`` names whole
multi-GPU programs (``pksim_core.programs``: shipped names, or program files relative to the study
file) beside the ``[[workload]]`` ops. ``pksim whatif`` predicts each on every system and
variant three ways, as ``pksim predict --program`` does: the baseline as PyTorch + NCCL run
it (the ``nccl`` row), pksim's best (the ``pk`` row) and the communication-aware roofline.

Each program is read and checked when the study loads, and its world against every system
before any work: a wrong name, a wrong file or a world larger than a system's domain stops
the study with one line naming the study file, the key and the value (docs/decisions/D60.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwmodels.errors import ConfigError
from hwmodels.system import System
from pksim_core.programs.load import load_program

PROGRAM_OP = "program"           # a program row's op (its workload is the program's name)


@dataclass(frozen=True)
class ProgramEntry:
    """One entry of a study's ``programs``: what the user wrote, and the program it names."""
    given: str                   # as written in the study file
    ref: str                     # a shipped name, or the program file's absolute path
    name: str                    # the program's own name: its rows' workload
    world: int
    dtype: str
    covers: tuple[int, ...] = ()
    description: str = ""


def _resolve(given: str, base: Path) -> str:
    """A program file named relative to the study file (or the working folder) becomes an
    absolute path; a shipped name stays a name."""
    if not (given.endswith(".toml") or "/" in given):
        return given
    candidate = Path(given)
    if not candidate.is_absolute() and (base / candidate).exists():
        candidate = base / candidate
    return str(candidate.resolve()) if candidate.exists() else given


def load_entries(raw: dict[str, Any], where: str, base: Path) -> tuple[ProgramEntry, ...]:
    """The study's ``programs``, each loaded and checked (pksim_core.programs.load_program)."""
    value = raw.get("programs", [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: programs must be a list of program names or files "
                          f"(pksim programs list), got {value!r}")
    out = []
    for given in value:
        ref = _resolve(given, base)
        try:
            program = load_program(ref)
        except ConfigError as exc:
            message = str(exc) if given in str(exc) else f"{given!r}: {exc}"
            raise ConfigError(f"{where}: programs: {message}") from None
        out.append(ProgramEntry(given, ref, program.name, program.world, program.dtype,
                                program.covers, program.description))
    names = [e.name for e in out]
    for entry in out:
        if names.count(entry.name) > 1:
            raise ConfigError(f"{where}: programs: {entry.given!r}: the program "
                              f"{entry.name!r} is named twice")
    return tuple(out)


def check_fits(entry: ProgramEntry, system: System, where: str, variant: str = "base") -> None:
    """A program runs on its own world: a system whose NVLink domain is smaller cannot run
    it (an error, not a skipped row: the program states its world, D60)."""
    capacity = system.domain.gpus_per_domain
    if entry.world > capacity:
        what = "" if variant == "base" else f" ({variant})"
        raise ConfigError(f"{where}: programs: {entry.given!r} runs on {entry.world} ranks, "
                          f"more than the {capacity} GPUs per domain of {system.name}{what}")


__all__ = ["PROGRAM_OP", "ProgramEntry", "load_entries", "check_fits"]
