"""What an algorithm does, as data: steps of concurrent transfers between ranks.

A Transfer moves some blocks of a buffer from one rank to another. ``kind``:
- ``copy``: the destination's blocks become the source's;
- ``reduce``: the destination accumulates the source's blocks (store-add / add on arrival);
- ``switch-reduce``: ``dst`` loads its blocks reduced over every rank through the
  switch (multimem.ld_reduce); ``src`` is ``dst``;
- ``multicast``: ``src`` stores its blocks to every rank through the switch (multimem.st).

A Step's ``key`` names its traffic pattern (who sends how much to whom): steps with
equal keys cost the same, so the simulator prepares each pattern once.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

KINDS = ("copy", "reduce", "switch-reduce", "multicast")


@dataclass(frozen=True)
class Transfer:
    src: int
    dst: int
    nbytes: float
    kind: str = "copy"
    blocks: Sequence[Hashable] = ()     # a tuple, or a range of block numbers


@dataclass(frozen=True)
class Move:
    """What one rank's engine physically does in a step of a generated kernel: read
    ``payload`` bytes from each of ``sources`` (ranks, repeated when one rank holds several
    of the buffers), sum them when ``reduce``, and write the result to each of ``dests``.
    ``engine``: "" for the schedule's mechanism, "sm" for the SM reduction kernels that
    copy-engine schedules launch between their copies. ``serial``: the issuer runs its
    moves of the step one after another, so each waits ``serial`` round trips before its
    data flows. ``readers``: how many moves of the step read the same source bytes; on one
    GPU those reads meet in L2 and reach HBM once. ``dealt``: the kernel deals the payload's
    TMA stage chunks round-robin over the rank's blocks (collective.cuh copy_range), so with
    TMA at most payload / stage of its blocks work. ``warm``: how many of ``sources`` (the
    last ones) the previous phase wrote on this GPU (a ring's received chunk), which the
    step reads from L2 when that phase's writes fit in it (pksim_core.mechanisms.flow.warm_sources).
    ``load_rounds``: a register sum that loads its sources in that many rounds waits
    ``transfer.load_round_ns`` more per further round before its first store (the two-shot
    all-reduce in fp32 loads 4 of 8 at a time); TMA and copy-engine moves ignore it.
    ``routine``: "" for the collectives' routines (kernels/collectives/collective.cuh),
    "pull" for the inter-SM fused kernels' pull-reduce (kernels/fused/comm.cuh), which moves
    at its own rate (pksim_core.mechanisms.move_time_per_B). ``active``: how many ranks of the issuer's
    GPU move in this phase (0: every rank on it); on one GPU their SMs share the memory's knee
    (pksim_core.mechanisms.flow.move_issue_weight), so a phase only the root works in (the direct reduce)
    gives its SMs the knee alone. ``epilogue``: a sum through the epilogue routines ("op": a
    reduce op or a scale, "bias": with a bias vector; kernels/collectives/epilogue.cuh), of
    ``elem_bytes`` elements (pksim_core.mechanisms.epilogue_time_per_B). ``shifts``: each source's
    shift off the destinations' 16-byte grid, in bytes (pksim_core.shifts; () when none is shifted):
    what it costs, pksim_core.mechanisms.shift_time_per_B (docs/decisions/D63.md). ``crossed``: a
    sum whose issuers each read their own part of every source (the direct reduce-scatter,
    the two-shot all-reduce), which a TMA sum pays for (docs/decisions/D83.md)."""
    issuer: int
    payload: float
    sources: tuple[int, ...]
    dests: tuple[int, ...]
    reduce: bool = False
    engine: str = ""
    serial: int = 1      # the issuer's moves of this step run one after another (latency x serial)
    readers: int = 1     # moves of this step reading the same source bytes (served once from HBM)
    dealt: bool = False  # TMA stage chunks dealt over the blocks: ceil(payload / stage) work
    warm: int = 0        # the last `warm` sources were written by the previous phase
    load_rounds: int = 1  # register sums: rounds in which the sources are loaded
    routine: str = ""    # "pull": the fused kernels' pull-reduce
    active: int = 0      # ranks of the issuer's GPU moving in this phase (0: all of them)
    epilogue: str = ""   # "op" / "bias": a sum through the epilogue routines
    elem_bytes: float = 2.0  # its element size (a bias is read per element by registers)
    shifts: tuple[int, ...] = ()  # bytes each source sits off the destinations' grid (D63)
    crossed: bool = False  # every issuer sums its own part of each source (D83)


@dataclass
class Step:
    """One phase: its transfers (what data ends where: checked symbolically) and, for the
    generated kernels, the moves that do it (what the hardware is asked to do: costed).
    Without moves, each transfer is costed as one copy or store-add by its source."""
    key: Hashable
    build: Callable[[], list[Transfer]]
    build_moves: Callable[[], list[Move]] | None = None
    # copy-engine schedules: the ranks' streams wait on each other's events after this phase
    # (False: the next phase goes on in the same streams, as a ring's copy after its sum)
    joins: bool = True
    # the kinds of its transfers, where its builder names them: Program.kinds reads them
    # instead of building the transfers (a direct all-reduce on 576 ranks has 331 k of them)
    kinds: tuple[str, ...] | None = None
    # copy-engine phases: the most copies one rank queues on its stream in this phase, where
    # its builder says (the search's floor reads it instead of building the moves: a direct
    # all-gather on 576 ranks queues 576 copies a rank, 331 k in all); None: at least one
    queued: int | None = None
    _cache: list[Transfer] | None = field(default=None, repr=False)
    _moves: list[Move] | None = field(default=None, repr=False)
    _largest: float | None = field(default=None, repr=False)

    def transfers(self) -> list[Transfer]:
        if self._cache is None:
            self._cache = self.build()
        return self._cache

    def moves(self) -> list[Move] | None:
        if self.build_moves is None:
            return None
        if self._moves is None:
            self._moves = self.build_moves()
        return self._moves

    def largest(self) -> float:
        """The bytes of its largest transfer or move (0 without any)."""
        if self._largest is None:
            self._largest = max([0.0] + [t.nbytes for t in self.transfers()]
                                + [m.payload for m in self.moves() or ()])
        return self._largest


@dataclass
class StepProgram:
    """An algorithm instance: its steps in order (what data ends where) and, for a
    generated kernel, its ``phases`` (the moves that do it; pksim_core.workloads.phases).
    The simulator costs the phases where there are any, else the steps."""
    steps: list[Step]
    world: int
    phases: list[Step] | None = None

    def costed(self) -> list[Step]:
        return self.steps if self.phases is None else self.phases

    def patterns(self) -> dict[Hashable, Step]:
        """One costed step per distinct traffic pattern."""
        return _first_per_key(self.costed())

    def kinds(self) -> set[str]:
        """Transfer kinds of the steps (what the algorithm needs of the hardware): one step
        per distinct pattern is enough (steps with equal keys move the same way)."""
        hit = _KINDS.get(id(self.steps))
        if hit is not None and hit[0] is self.steps:
            return set(hit[1])
        out: set[str] = set()
        for step in _first_per_key(self.steps).values():
            out.update(step.kinds if step.kinds is not None
                       else (t.kind for t in step.transfers()))
        while len(_KINDS) >= 8:
            _KINDS.pop(next(iter(_KINDS)))
        _KINDS[id(self.steps)] = (self.steps, frozenset(out))
        return out


# the kinds of a list of steps (Program.kinds), by the list, which a search's candidates and
# the guessed-figure swings share (pksim_core.workloads.collectives keeps it): the entry holds the
# list, so its id is not reused while it is here
_KINDS: dict[int, tuple[list, frozenset]] = {}


def digest(table) -> str:
    """A step key's stand-in for a table of sizes as large as world x world: the key is
    hashed at every look-up, and hashing the table itself (331 k numbers on 576 ranks)
    costs milliseconds each time (as pksim_core.programs.p2p names its batches)."""
    return hashlib.sha256(repr(table).encode()).hexdigest()[:16]


def _first_per_key(steps: list[Step]) -> dict[Hashable, Step]:
    out: dict[Hashable, Step] = {}
    for step in steps:
        out.setdefault(step.key, step)
    return out


def execute_symbolic(program: StepProgram, initial: dict[tuple[int, Hashable], frozenset]
                     ) -> dict[tuple[int, Hashable], frozenset]:
    """Run the program on sets of contributing ranks instead of numbers.

    ``state[(rank, block)]`` is the set of ranks whose data that block holds. A
    reduce that would add a contribution twice raises ValueError: that is a wrong
    algorithm, not a rounding matter. Transfers of one step read the state as it
    was before the step.
    """
    state = dict(initial)
    for step in program.steps:
        before = dict(state)
        for t in step.transfers():
            for block in t.blocks:
                if t.kind == "copy":
                    state[(t.dst, block)] = before[(t.src, block)]
                elif t.kind == "reduce":
                    mine = state.get((t.dst, block), frozenset())
                    theirs = before[(t.src, block)]
                    if mine & theirs:
                        raise ValueError(f"step {step.key}: block {block!r} of rank {t.dst} "
                                         f"would count ranks {sorted(mine & theirs)} twice")
                    state[(t.dst, block)] = mine | theirs
                elif t.kind == "switch-reduce":
                    total: frozenset = frozenset()
                    for rank in range(program.world):
                        part = before[(rank, block)]
                        if total & part:
                            raise ValueError(f"switch-reduce of block {block!r} counts "
                                             f"ranks {sorted(total & part)} twice")
                        total |= part
                    state[(t.dst, block)] = total
                elif t.kind == "multicast":
                    for rank in range(program.world):
                        state[(rank, block)] = before[(t.src, block)]
                else:
                    raise ValueError(f"unknown transfer kind {t.kind!r}")
    return state
