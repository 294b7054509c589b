"""Which system a communicator runs on, and which generated kernel serves each call.

System: the GPU's name (``torch.cuda.get_device_name``, what ``pksim env`` reports) matched
against the shipped systems' GPU models; among those of that GPU, the smallest NVLink domain
that holds the communicator's world, leaving out the one-GPU, virtual and calibrated files
(they describe a measurement set-up, not a machine). A system name given by the user wins.

Schedule: the fastest the model predicts among those codegen emits (kernel_contract's
``emit_reason``), as ``pksim codegen`` picks; NVLink multicast never runs, so when the fastest is
a multimem (in-network) schedule, the fastest runnable one is used and ``Choice.note`` says so.
Choices are made per size bucket (the next power of two of the call's bytes), so ranks that
pass equal sizes pick equal kernels.

Kernel: one generated library serves every world, size, element type (bf16 or fp32) and block
count of a schedule's algorithm, mechanism, peer order and reduce op (they are run-time
arguments of kernels/collectives/abi.h and kernels/fused/abi.h); ``kernel_schedule`` is that
schedule with those fields set to fixed values, so that its content hash names one binary.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from codegen.plan import algorithms as codegen_algorithms
from hwmodels.catalog import list_systems, load_system
from hwmodels.errors import InfeasibleError
from hwmodels.system import System
from pksim_core.kernel_contract import RUNNABLE_MECHANISMS, emit_reason
from pksim_core.schedule import Schedule
from pksim_core.search import fused_space, search, space
from pksim.torch.errors import CommError

NOT_A_MACHINE = ("-single", "-virtual", "-calibrated")
KERNEL_WORLD = 8                # the world the canonical kernel schedule names (any would do)
KERNEL_BYTES = 1 << 20
KERNEL_SHAPE = {"m": 1024, "n": 1024, "k": 1024}
KERNEL_EXTRA = ("reduce_op", "epilogue")   # the extra keys that change the generated code


@dataclass(frozen=True)
class KernelChoice:
    """A call's schedule (what the model picked), the kernel built for it, and a note when
    the model's fastest could not run here."""
    schedule: Schedule
    kernel: Schedule
    predicted_s: float | None
    note: str = ""

    @property
    def blocks(self) -> int:
        """Blocks per rank (collectives) or communication blocks (inter-SM fused)."""
        return self.schedule.comm_sms


def _gpu_word(model: str) -> str:
    return model.split()[0].upper()


def system_for_device(device_name: str, world: int) -> str:
    """The shipped system of this GPU whose NVLink domain is the smallest that holds
    ``world`` ranks (the largest when none does)."""
    words = {w.upper() for w in device_name.replace("-", " ").split()}
    found = []
    for name in list_systems():
        if name.endswith(NOT_A_MACHINE):
            continue
        s = load_system(name)
        if _gpu_word(s.gpu.model) in words:
            found.append((s.domain.gpus_per_domain, name))
    if not found:
        raise CommError(f"no shipped system has the GPU {device_name!r}; pass system=NAME "
                        f"(`pksim systems` lists them)")
    fits = sorted(f for f in found if f[0] >= world)
    return (fits[0] if fits else max(found))[1]


def kernel_schedule(s: Schedule) -> Schedule:
    """The schedule that names the binary serving ``s`` (see the module)."""
    extra = tuple((k, v) for k, v in s.extra if k in KERNEL_EXTRA)
    if any(k == "bytes" for k, _ in s.shape):
        shape = (("bytes", KERNEL_BYTES),)
    else:
        shape = tuple(sorted(KERNEL_SHAPE.items()))
    return s.with_(world=KERNEL_WORLD, shape=shape, comm_sms=16, dtype="bf16", root=0,
                   extra=extra)


def bucket(nbytes: int) -> int:
    """The size a choice is made at: the next power of two, at least 16 bytes."""
    return 1 << max(4, (max(1, int(nbytes)) - 1).bit_length())


def runnable(s: Schedule) -> bool:
    return s.mechanism in RUNNABLE_MECHANISMS and s.algorithm != "in-network"


def _pick(system: System, cands: list[Schedule], what: str) -> KernelChoice:
    cands = [c for c in dict.fromkeys(cands) if emit_reason(system, c) is None]
    if not cands:
        raise CommError(f"{what}: codegen emits no schedule for it on {system.name}")
    run = [c for c in cands if runnable(c)]
    if not run:
        raise CommError(f"{what}: every schedule codegen emits needs NVLink multicast, which stays off")
    try:
        best = search(system, run, top=1).ranked[0]
    except InfeasibleError as exc:
        raise CommError(f"{what}: the model predicts none of its schedules ({exc})") from None
    note = ""
    if len(run) < len(cands):
        try:
            fastest = search(system, cands, top=1).ranked[0]
        except InfeasibleError:
            fastest = best
        if not runnable(fastest.schedule):
            note = (f"{what}: the fastest schedule, {fastest.schedule.label()} "
                    f"({fastest.time_s * 1e6:.1f} us), needs NVLink multicast, which stays off; "
                    f"using {best.schedule.label()} ({best.time_s * 1e6:.1f} us)")
    chosen = best.schedule
    kernel = kernel_schedule(chosen)
    if emit_reason(system, kernel) is not None:
        kernel = chosen
    return KernelChoice(chosen, kernel, best.time_s, note)


@lru_cache(maxsize=None)
def choose(system_name: str, op: str, nbytes: int, world: int, dtype: str,
           reduce_op: str = "sum") -> KernelChoice:
    """The kernel of one collective call (``nbytes`` as nccl-tests counts the op) on a
    system named as ``load_system`` takes it."""
    system = system_named(system_name)
    extra = (("reduce_op", reduce_op),) if reduce_op != "sum" else ()
    size = bucket(nbytes)
    cands = space(system, op, size, world, 1, algorithms=codegen_algorithms(op), chunks=(0,),
                  extra=extra)
    cands = [c.with_(dtype=dtype) for c in cands]
    return _pick(system, cands, f"{op} of {size} bytes at world {world}")


@lru_cache(maxsize=None)
def choose_fused(system_name: str, op: str, m: int, n: int, k: int, world: int) -> KernelChoice:
    """The kernel of one fused GEMM + communication call."""
    system = system_named(system_name)
    cands = fused_space(system, op, {"m": m, "n": n, "k": k}, world, 1, "bf16")
    cands = [c for c in cands if c.chunk_bytes == 0 and c.overlap != "none"]
    return _pick(system, cands, f"{op} {m}x{n}x{k} at world {world}")


@lru_cache(maxsize=None)
def system_named(name: str) -> System:
    return load_system(name)


KERNEL_OPS = ("all-reduce", "reduce-scatter", "reduce", "all-gather", "all-gather-v", "all-to-all",
              "all-to-all-v", "send-recv", "broadcast", "gather", "scatter")
REDUCING_OPS = ("all-reduce", "reduce-scatter", "reduce")
KERNEL_REDUCE_OPS = ("sum", "avg", "min", "max")     # product is gathered and reduced by torch


def likely_kernels(system_name: str, op: str, world: int, max_bytes: int = 1 << 32) -> list[Schedule]:
    """The kernels ``choose`` picks for ``op`` at ``world`` over every size bucket from 16 bytes
    to ``max_bytes``, both element types and (reductions) every reduce op the kernels run: what
    a communicator of that world may build, so that a caller can build it all beforehand."""
    found: dict[str, Schedule] = {}
    for rop in KERNEL_REDUCE_OPS if op in REDUCING_OPS else ("sum",):
        for dtype in ("bf16", "fp32"):
            for bits in range(4, max(5, max_bytes.bit_length())):
                try:
                    k = choose(system_name, op, 1 << bits, world, dtype, rop).kernel
                except CommError:
                    break
                found.setdefault(k.key(), k)
    return list(found.values())
