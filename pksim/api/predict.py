"""``pksim.predict`` and ``pksim.search``: one operation on one system, the functions that
``pksim predict`` and ``pksim search`` call (the CLI prints what they return). Keywords are
the CLI's options (``pksim.api.options.Options``); a result's ``to_dict()`` is the command's
``--json``; every error is a ``PksimError`` with the CLI's one-line message."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from hwmodels.catalog import load_system as _load_system
from hwmodels.errors import ConfigError, PksimNote
from hwmodels.system import System
from hwmodels.units import format_bytes, parse_bytes
from pksim.api.op_checks import check_applies, nccl_algo
from pksim.api.options import Options, check_kind, comm_extra, overrides_of
from pksim.api.programs import program_prediction, search_program
from pksim_core.cache import topology
from pksim_core.collective_model import as_run
from pksim_core.inputs import (check_bytes, check_comm_sms, check_dtype, check_elements,
                          check_operands, check_root, check_skew, check_world, even_bytes)
from pksim_core.kernel_contract import emittable_fields
from pksim_core.nccl import DEFAULT_LAUNCH, nccl_schedule, report as nccl_report
from pksim_core.prediction import Prediction
from pksim_core.programs.predict import ProgramPrediction
from pksim_core.schedule import Schedule
from pksim_core.search import SearchResult, fused_space, search as run_search, space
from pksim_core.simulate import predict as run_predict
from pksim_core.versus import versus_nccl
from pksim_core.workloads.collectives import COLLECTIVES
from pksim_core.schedule import DTYPES
from pksim_core.workloads.fused_ops import ALGORITHMS as FUSED_ALGORITHMS
from pksim_core.workloads.fused_ops import FUSED_OPS, SHAPE_KEYS, check_shape, operand_bytes


def load_system(system: str, set: tuple[str, ...] | list[str] | str | dict = ()) -> System:
    """A shipped system by name, or a system file by path, with ``set``'s ``KEY=VALUE``
    overrides (``--set``: ``gpu.nvlink.link_bandwidth_GBps=50``; or a dict
    ``{"gpu.nvlink.link_bandwidth_GBps": 50}``)."""
    check_kind("load_system", "system", system, "text", none=False)
    overrides = overrides_of("load_system", set)
    return _load_system(system, overrides)


@dataclass(frozen=True)
class Predicted:
    """One prediction: the time in seconds, its schedule, the bound and its resource, the busy
    time per resource (``prediction``: all of it); beside it what ``--json`` adds: whether
    pksim codegen can emit the schedule and NCCL's pick (``nccl``: the pick itself when
    ``impl="nccl"``; ``vs_nccl``: pk's schedule against it, computed when first asked for)."""
    prediction: Prediction
    system: System = field(repr=False, compare=False)
    launch: str = DEFAULT_LAUNCH

    @property
    def time_s(self) -> float:
        return self.prediction.time_s

    @property
    def schedule(self) -> Schedule:
        return self.prediction.schedule

    @property
    def bound_s(self) -> float:
        return self.prediction.bound_s

    @property
    def bound_resource(self) -> str:
        return self.prediction.bound_resource

    @property
    def breakdown(self) -> dict[str, float]:
        return dict(self.prediction.breakdown)

    @cached_property
    def emittable(self) -> dict[str, Any]:
        return emittable_fields(self.system, self.schedule)

    @cached_property
    def nccl(self) -> dict | None:
        """NCCL's pick (its algorithm, protocol and the tuner's table) of an ``impl="nccl"``
        collective; None otherwise."""
        s = self.schedule
        return nccl_report(self.system, s) if s.impl == "nccl" and s.op in COLLECTIVES else None

    @cached_property
    def vs_nccl(self) -> dict | None:
        """A pk collective on several GPUs against NCCL's own pick, both bindings and the
        difference itemised (pksim_core.versus); None where that does not apply."""
        s, p = self.schedule, self.prediction
        if s.impl == "nccl" or s.op not in COLLECTIVES or s.world <= 1 \
                or topology(self.system, s.world, s.domains).virtual:
            return None
        return versus_nccl(self.system, s.op, p.nbytes, s.world, s.domains, self.launch, pk=p)

    def to_dict(self) -> dict[str, Any]:
        """``pksim predict --json``."""
        out = self.prediction.to_dict() | self.emittable
        out["overridden"] = self.system.overridden_keys()
        if self.nccl is not None:
            out["nccl"] = self.nccl
        elif self.vs_nccl is not None:
            out["vs_nccl"] = self.vs_nccl
        return out


@dataclass(frozen=True)
class Ranking:
    """A search: the ``top`` best predictions (``ranked``), how many candidates there were,
    how many were simulated, those pruned by their lower bound and the infeasible ones."""
    ranked: tuple[Prediction, ...]
    result: SearchResult
    top: int
    system: System = field(repr=False, compare=False)

    @property
    def candidates(self) -> int:
        return self.result.candidates

    @property
    def simulated(self) -> int:
        return self.result.simulated

    @property
    def pruned(self) -> tuple[tuple[str, float], ...]:
        return self.result.pruned

    @property
    def infeasible(self) -> tuple[tuple[str, str], ...]:
        return self.result.infeasible

    @cached_property
    def emittable(self) -> dict[Schedule, dict[str, Any]]:
        return {p.schedule: emittable_fields(self.system, p.schedule) for p in self.ranked}

    def to_dict(self) -> dict[str, Any]:
        """``pksim search --json``."""
        return {"ranked": [p.to_dict() | self.emittable[p.schedule] for p in self.ranked],
                "system": self.system.name, "profile": self.system.profile.name,
                "candidates": self.candidates, "simulated": self.simulated,
                "pruned": [{"label": s, "bound_s": b} for s, b in self.pruned],
                "infeasible": [{"label": s, "reason": r} for s, r in self.infeasible]}


@dataclass(frozen=True)
class ProgramRanking:
    """``search(program=...)``: pk's ranked schedules for each distinct collective call."""
    program: str
    system: str
    calls: tuple[dict, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"program": self.program, "system": self.system, "calls": list(self.calls)}


def predict(**options) -> Predicted | ProgramPrediction:
    """The best schedule's prediction (or the one the options fix); ``program=``: a whole
    program's baseline, pksim's best and roofline. Keywords: ``pksim.api.options.Options``."""
    return predict_options(Options.of("predict", options))


def search(top: int = 10, **options) -> Ranking | ProgramRanking:
    """The ``top`` best candidate schedules, by branch and bound."""
    return search_options(Options.of("search", options), top)


def predict_options(opts: Options) -> Predicted | ProgramPrediction:
    kw = opts.cli()
    if kw["program"]:
        return program_prediction(kw)
    system, ranked, _ = candidates_searched(kw, top=1)
    return Predicted(ranked[0], system, kw["launch"] or DEFAULT_LAUNCH)


def search_options(opts: Options, top: int = 10) -> Ranking | ProgramRanking:
    if top < 1:
        raise ConfigError(f"--top must be at least 1, got {top}")
    kw = opts.cli()
    if kw["program"]:
        found = search_program(kw, top)
        return ProgramRanking(found["program"], found["system"], tuple(found["calls"]))
    system, ranked, result = candidates_searched(kw, top=top)
    return Ranking(tuple(ranked[:top]), result, top, system)


def need_op(kw) -> None:
    """Without a program, a system and an op are required."""
    for key, flag in (("system_name", "--system"), ("op", "--op")):
        if kw.get(key) is None:
            raise ConfigError(f"Missing option '{flag}' (or give --program).")


def candidates_searched(kw, top: int = 1):
    """The ranked predictions (the first ``top`` are the best of every candidate; the
    search prunes by lower bound what cannot be among them) and the search result."""
    need_op(kw)
    system = load_system(kw["system_name"], kw["overrides"])
    cands = candidates(system, kw)
    if len(cands) == 1:                    # a fixed schedule: --full simulates every rank
        p = run_predict(system, cands[0], reduced=not kw["full"], cold=kw["cold"])
        return system, [p], SearchResult((p,), (), 1)
    if kw["full"]:
        raise ConfigError(f"--full simulates every rank of one schedule, and these options "
                          f"leave {len(cands)}: fix it (--schedule LABEL, or --algorithm, "
                          f"--mechanism, --comm-sms, ...)")
    result = run_search(system, cands, top=top, cold=kw["cold"])
    return system, list(result.ranked), result


def _fused_candidates(system, kw, world: int) -> list[Schedule]:
    values = dict(kw, n=kw["n_"])
    shape = {}
    for key in SHAPE_KEYS[kw["op"]]:
        if values.get(key) is None:
            raise ConfigError(f"--op {kw['op']} needs --{key.replace('_', '-')}")
        shape[key] = values[key]
    check_shape(kw["op"], shape, world)
    check_operands(system, kw["op"], shape, kw["dtype"], world, "the shape options")
    check_skew(kw["skew"])
    if kw["skew"] and not kw["op"].startswith("moe"):
        raise ConfigError(f"--skew {kw['skew']:g}: only the MoE ops route tokens, not {kw['op']}")
    if kw["overlap"] == "none":
        fixed = [f for f, k in (("--algorithm", "algorithm"), ("--mechanism", "mechanism"),
                                ("--comm-sms", "comm_sms"), ("--chunk-bytes", "chunk_bytes"))
                 if kw[k] is not None]
        if fixed:
            raise ConfigError(f"{fixed[0]}: --overlap none is the library kernel, then NCCL: "
                              f"it has no {fixed[0][2:]} to fix")
    if kw["algorithm"] and kw["algorithm"] not in FUSED_ALGORITHMS[kw["op"]]:
        raise ConfigError(f"--algorithm {kw['algorithm']}: {kw['op']} communicates by "
                          f"{', '.join(FUSED_ALGORITHMS[kw['op']])}")
    chunk = _chunk(kw) if kw["chunk_bytes"] is not None else 0
    if chunk:
        check_elements(chunk, kw["dtype"], "--chunk-bytes")
        whole = operand_bytes(kw["op"], shape, world, DTYPES[kw["dtype"]])
        if chunk > whole:
            raise ConfigError(f"--chunk-bytes {kw['chunk_bytes']}: larger than all of a rank's "
                              f"operands ({format_bytes(whole)}); 0: one chunk per peer")
    if kw["impl"] == "nccl":
        overlaps = ("none",)
    else:
        overlaps = (kw["overlap"],) if kw["overlap"] else ()
    return fused_space(system, kw["op"], shape, kw["world"], kw["domains"], kw["dtype"],
                       overlaps=overlaps,
                       algorithms=(kw["algorithm"],) if kw["algorithm"] else (),
                       mechanisms=(kw["mechanism"],) if kw["mechanism"] else (),
                       comm_sms=(kw["comm_sms"],) if kw["comm_sms"] else (),
                       skew=kw["skew"], chunks=(_chunk(kw),) if kw["chunk_bytes"] else ())


def _chunk(kw) -> int:
    return 0 if kw["chunk_bytes"] in ("0", 0) else parse_bytes(kw["chunk_bytes"], "--chunk-bytes")


def candidates(system, kw) -> list[Schedule]:
    cands = _space(system, kw)
    if kw.get("label") is None:
        return cands
    # a label names the schedule as it runs (a streamed in-network kernel's chunk included)
    chosen = list(dict.fromkeys(c for c in cands
                                if kw["label"] in (c.label(), as_run(c).label())))
    if not chosen:
        labels = sorted({c.label() for c in cands})
        raise ConfigError(f"--schedule {kw['label']!r} is not a candidate here "
                          f"({len(labels)} are, e.g. {', '.join(labels[:3])}; "
                          f"pksim search lists them)")
    return chosen


def _space(system, kw) -> list[Schedule]:
    world = check_world(system, kw["world"], kw["domains"])
    check_comm_sms(system, kw["comm_sms"], world, kw["domains"])
    check_root(kw["root"], world)
    check_dtype(system, kw["dtype"])
    check_applies(kw)
    if kw["op"] in FUSED_OPS:
        return _fused_candidates(system, kw, world)
    extra, implied = comm_extra(kw, kw["op"], world)
    if kw["size"] is None and implied is None:
        raise ConfigError(f"--op {kw['op']} needs --bytes")
    nbytes = implied if implied is not None else parse_bytes(kw["size"])
    check_bytes(system, kw["op"], nbytes, kw["dtype"], world)
    nbytes, note = even_bytes(kw["op"], nbytes, kw["dtype"], world)
    if note:
        warnings.warn(note, PksimNote, stacklevel=2)
    if kw["impl"] == "nccl":
        sched = nccl_schedule(system, kw["op"], nbytes, kw["world"], kw["domains"],
                              kw.get("nccl_version"), kw.get("launch") or DEFAULT_LAUNCH,
                              nvls=kw.get("nvls") != "off", algo=nccl_algo(kw, kw["op"]))
        return [sched.with_(root=kw["root"], dtype=kw["dtype"],
                            extra=tuple(sorted(dict(sched.extra, **dict(extra)).items())))]
    chunk = None if kw["chunk_bytes"] is None else _chunk(kw)
    if chunk:
        check_elements(chunk, kw["dtype"], "--chunk-bytes")
        if chunk >= nbytes:
            raise ConfigError(f"--chunk-bytes {kw['chunk_bytes']}: a pipeline chunk must be "
                              f"smaller than the buffer ({format_bytes(nbytes)}); 0: none")
    cands = space(system, kw["op"], nbytes, kw["world"], kw["domains"],
                  algorithms=(kw["algorithm"],) if kw["algorithm"] else (),
                  mechanisms=(kw["mechanism"],) if kw["mechanism"] else (),
                  comm_sms=(kw["comm_sms"],) if kw["comm_sms"] else (),
                  chunks=(chunk,) if chunk is not None else (), extra=extra)
    if kw["peer_order"]:
        cands = list({c.with_(peer_order=kw["peer_order"]) for c in cands})
    if kw["algorithm"] and kw["mechanism"] is None and kw["algorithm"] == "in-network":
        cands = [c for c in cands if c.mechanism == "multimem"]
    return [c.with_(root=kw["root"], dtype=kw["dtype"]) for c in cands]
