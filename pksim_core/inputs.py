"""Checks of a user's request against the system, before any work: whole elements,
buffers that fit in the GPU's memory (a fused op's operands too), ranks that fill the domains
asked for, element types the GPU has, communication SMs and the MoE skew in range.

Every check raises ``ConfigError`` with the option and the value it names, so each
command (predict, search, trace, sweep, whatif, codegen) fails the same way, in one
line, with exit code 2.
"""
from __future__ import annotations

from hwmodels.errors import ConfigError
from hwmodels.system import System
from hwmodels.units import format_bytes
from pksim_core.cache import topology
from pksim_core.schedule import DTYPES
from pksim_core.workloads.collectives import COLLECTIVES
from pksim_core.workloads.fused_ops import operand_bytes

# nccl-tests' size of these is the whole (gathered or reduced) buffer; each rank holds
# one share of it on the other side.
_SHARED = ("all-gather", "reduce-scatter", "gather", "scatter")
# The ops whose buffer is cut into one equal share per rank (all-to-all: one per peer).
SPLIT_EVENLY = _SHARED + ("all-to-all",)
# The most ranks pksim simulates: 9216 (16 x gb200-nvl576) took 145 s and 3.2 GB, 36864 ran
# past 8 GB (docs/decisions/D67.md); past this a request is refused instead of exhausting memory.
MAX_RANKS = 16384
# The MoE routing skew (a Zipf exponent): beyond this every token already goes to one expert.
MAX_SKEW = 100.0


def check_world(system: System, world: int | None, domains: int = 1,
                what: str = "--world") -> int:
    """The ranks (default: every GPU of ``domains`` domains), at least 2 and no more than
    the cluster holds."""
    if domains < 1:
        raise ConfigError(f"--domains must be at least 1, got {domains}")
    per_domain = system.domain.gpus_per_domain
    capacity = per_domain * domains
    n = capacity if world is None else world
    if n > MAX_RANKS:
        told = f"{what} {n}" if world is not None else \
            f"--domains {domains} ({domains} x {per_domain} GPUs of {system.name})"
        raise ConfigError(f"{told}: more ranks than pksim simulates (at most {MAX_RANKS})")
    if n < 2:
        told = f"{what} {n}" if world is not None else f"{system.name} has {capacity} GPU"
        raise ConfigError(f"{told}: a multi-GPU operation needs at least 2 ranks")
    if n > capacity:
        raise ConfigError(f"{what} {n} is larger than the cluster: {system.name} has "
                          f"{per_domain} GPUs per domain x {domains}")
    if domains > 1 and system.scaleout.nic_bandwidth_Bps <= 0:
        raise ConfigError(f"--domains {domains}: {system.name} has no scale-out network "
                          f"(scaleout.nic_bandwidth_Gbps = 0) to join domains")
    if n <= per_domain * (domains - 1):
        raise ConfigError(f"{what} {n} with --domains {domains}: ranks fill the domains in "
                          f"order ({per_domain} GPUs each on {system.name}), so "
                          f"{domains - 1 - (n - 1) // per_domain} would hold none; give "
                          f"{what} {per_domain * (domains - 1) + 1} to {capacity}, or fewer "
                          f"--domains")
    return n


def check_dtype(system: System, dtype: str, what: str = "--dtype") -> None:
    """The GPU holds and computes ``dtype``: a tensor (or, fp32, vector) rate above 0 in its
    file (fp8 arrived with Hopper, fp4 with Blackwell; NCCL reduces no type its GPU lacks)."""
    if system.gpu.tensor.flops(dtype) <= 0:
        raise ConfigError(f"{what} {dtype}: the {system.gpu.model} of {system.name} "
                          f"({system.gpu.architecture}) has no {dtype} "
                          f"(gpu.tensor.tflops_{dtype} = 0)")


def check_skew(skew: float, what: str = "--skew") -> None:
    """An MoE routing skew: a finite Zipf exponent from 0 (uniform) to MAX_SKEW."""
    if not 0 <= skew <= MAX_SKEW:            # also refuses nan
        raise ConfigError(f"{what} {skew:g}: must be a Zipf exponent from 0 (uniform) to "
                          f"{MAX_SKEW:g}")


def even_bytes(op: str, nbytes: int, dtype: str, world: int,
               what: str = "--bytes") -> tuple[int, str]:
    """A buffer ``op`` cuts into one share per rank, as nccl-tests runs it: each share whole
    elements (whole bytes for fp4), what does not divide left out (nccl-tests' count =
    elements / ranks), and a note saying so ("" when it divides). Less than one element per
    rank is a ConfigError naming the divisor. docs/decisions/D68.md."""
    if op not in SPLIT_EVENLY:
        return nbytes, ""
    unit = max(1, int(DTYPES[dtype]))            # bytes of a share's smallest step
    share = nbytes // world // unit * unit
    if share == 0:
        raise ConfigError(f"{what} {nbytes}: {op} cuts it into {world} shares, one per rank; "
                          f"{nbytes} bytes is less than one {dtype} element per rank (needs "
                          f"at least {world * unit} bytes)")
    if share * world == nbytes:
        return nbytes, ""
    return share * world, (f"{op} cuts {what} {nbytes} into {world} shares of whole {dtype} "
                           f"elements: each rank's share is {share} bytes, {share * world} "
                           f"bytes in all (the {nbytes - share * world} left over are left "
                           f"out, as nccl-tests does)")


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


def check_operands(system: System, op: str, shape: dict[str, int], dtype: str, world: int,
                   what: str = "the shape") -> None:
    """A fused op's operands and results within one GPU's memory (every rank's on the one
    GPU of virtual ranks)."""
    per_rank = operand_bytes(op, shape, world, DTYPES[dtype])
    virtual = system.domain.fabric == "shared-memory"
    per_gpu = per_rank * (world if virtual else 1)
    capacity = system.gpu.hbm.capacity_B
    if per_gpu > capacity:
        given = " ".join(f"{k}={v}" for k, v in shape.items())
        raise ConfigError(f"{what} ({op} {given}): its operands take "
                          f"{format_bytes(per_gpu)} of one GPU, more than the "
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


def check_unique_systems(systems: list[tuple[str, System]], what: str) -> None:
    """Each system given once, and no two of one name: rows name their system, so two of a
    name could not be told apart (a user's file named like a shipped one, or one listed
    twice). ``systems``: (reference as given, loaded system)."""
    seen: dict[str, str] = {}
    for ref, system in systems:
        if ref in seen.values():
            raise ConfigError(f"{what}: {ref} is listed twice")
        if system.name in seen:
            raise ConfigError(f"{what}: {seen[system.name]} and {ref} are both named "
                              f"{system.name!r}, so their results could not be told apart; "
                              f"give one file another name = \"...\"")
        seen[system.name] = ref

