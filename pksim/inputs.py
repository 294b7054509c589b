"""Checks of a user's request against the system, before any work: whole elements,
buffers that fit in the GPU's memory, ranks and communication SMs in range.

Every check raises ``ConfigError`` with the option and the value it names, so each
command (predict, search, trace, sweep, whatif, codegen) fails the same way, in one
line, with exit code 2.
"""
from __future__ import annotations

from hwmodels.errors import ConfigError
from hwmodels.system import System
from hwmodels.units import format_bytes
from pksim.cache import topology
from pksim.schedule import DTYPES
from pksim.workloads.collectives import COLLECTIVES

# nccl-tests' size of these is the whole (gathered or reduced) buffer; each rank holds
# one share of it on the other side.
_SHARED = ("all-gather", "reduce-scatter", "gather", "scatter")


def check_world(system: System, world: int | None, domains: int = 1,
                what: str = "--world") -> int:
    """The ranks (default: every GPU of ``domains`` domains), at least 2 and no more than
    the cluster holds."""
    if domains < 1:
        raise ConfigError(f"--domains must be at least 1, got {domains}")
    capacity = system.domain.gpus_per_domain * domains
    n = capacity if world is None else world
    if n < 2:
        told = f"{what} {n}" if world is not None else f"{system.name} has {capacity} GPU"
        raise ConfigError(f"{told}: a multi-GPU operation needs at least 2 ranks")
    if n > capacity:
        raise ConfigError(f"{what} {n} is larger than the cluster: {system.name} has "
                          f"{system.domain.gpus_per_domain} GPUs per domain x {domains}")
    return n


def check_elements(nbytes: int, dtype: str, what: str = "--bytes") -> None:
    """``nbytes`` holds a whole number of ``dtype`` elements."""
    elem = DTYPES[dtype]
    if nbytes * 8 % int(elem * 8):
        raise ConfigError(f"{what} {nbytes}: not a whole number of {dtype} elements "
                          f"({elem:g} bytes each)")


def check_root(root: int, world: int, what: str = "--root") -> None:
    """A root rank: one of the ``world`` ranks."""
    if not 0 <= root < world:
        raise ConfigError(f"{what} {root} is not a rank of {world} (0..{world - 1})")


def check_bytes(system: System, op: str, nbytes: int, dtype: str, world: int,
                what: str = "--bytes") -> None:
    """A collective's size: whole elements of ``dtype``, split evenly where the op splits
    it, and input + output buffers within one GPU's memory."""
    check_elements(nbytes, dtype, what)
    if op not in COLLECTIVES:
        return
    per_rank = nbytes + nbytes / world if op in _SHARED else 2 * nbytes
    virtual = system.domain.fabric == "shared-memory"     # every rank on one GPU
    per_gpu = per_rank * (world if virtual else 1)
    capacity = system.gpu.hbm.capacity_B
    if per_gpu > capacity:
        whose = f"{world} virtual ranks" if virtual else "one rank"
        raise ConfigError(f"{what} {nbytes} ({format_bytes(nbytes)}): {op} needs "
                          f"{format_bytes(per_gpu)} of buffers for {whose}, more than the "
                          f"{capacity / 1e9:g} GB of one {system.gpu.model}")


def check_comm_sms(system: System, comm_sms: int | None, world: int, domains: int = 1,
                   what: str = "--comm-sms") -> None:
    """Communication SMs: at least 1, at most the SMs of one rank."""
    if comm_sms is None:
        return
    sms = topology(system, world, domains).sms_per_rank()
    if not 1 <= comm_sms <= sms:
        raise ConfigError(f"{what} {comm_sms}: must be between 1 and the {sms} SMs of "
                          f"one rank of {system.name}")


def check_positive(value: int | None, what: str, least: int = 1) -> None:
    if value is not None and value < least:
        raise ConfigError(f"{what} must be at least {least}, got {value}")
