"""Stand-ins for the tests of pksim.torch: tensors (shape, dtype, device, contiguity), a host
group of ranks run as threads, and CUDA IPC that hands out made-up addresses."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from math import prod


@dataclass
class Device:
    type: str = "cuda"
    index: int = 0

    def __str__(self) -> str:
        return f"{self.type}:{self.index}" if self.type == "cuda" else self.type


@dataclass
class Tensor:
    shape: tuple = (4,)
    dtype: str = "torch.bfloat16"
    device: Device = field(default_factory=Device)
    contiguous: bool = True
    itemsize: int = 2

    def is_contiguous(self) -> bool:
        return self.contiguous

    def numel(self) -> int:
        return prod(self.shape)

    def element_size(self) -> int:
        return self.itemsize

    def dim(self) -> int:
        return len(self.shape)


class Group:
    """``world`` ranks as threads; rank r's view is ``Group.of(shared, r)``."""

    def __init__(self, world: int):
        self.world = world
        self.slots: list = [None] * world
        self.meet = threading.Barrier(world)
        self.log: list[str] = []

    def member(self, rank: int) -> "Member":
        return Member(self, rank)


class Member:
    def __init__(self, group: Group, rank: int):
        self.g, self.rank, self.world = group, rank, group.world

    def all_gather_object(self, obj):
        self.g.slots[self.rank] = obj
        self.g.meet.wait()
        out = list(self.g.slots)
        self.g.meet.wait()
        return out

    def barrier(self) -> None:
        self.g.meet.wait()


def run_ranks(world: int, fn) -> list:
    """fn(member) on every rank at once (threads); the results in rank order, re-raising the
    first failure."""
    group = Group(world)
    out: list = [None] * world
    errors: list = []

    def body(r: int) -> None:
        try:
            out[r] = fn(group.member(r))
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
            group.meet.abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    if errors:
        raise errors[0]
    return out


class Ipc:
    """Rank ``rank``'s IPC: allocations at 0x1000_0000 * (rank + 1) + offsets; a handle names
    (rank, base); opening it maps that base at 0x9000_0000_0000 + 0x1000_0000 * rank."""

    def __init__(self, rank: int):
        self.rank = rank
        self.opened: list[bytes] = []

    def handle(self, ptr: int) -> tuple[bytes, int]:
        base = ptr & ~0xFFFFFFF
        return f"h{base:x}".encode().ljust(64, b"\0"), ptr - base

    def open(self, handle: bytes) -> int:
        if handle.startswith(f"h{0x10000000 * (self.rank + 1):x}".encode()):
            raise AssertionError("a process opened its own handle")
        self.opened.append(handle)
        base = int(handle.rstrip(b"\0")[1:], 16)
        return 0x900000000000 + base
