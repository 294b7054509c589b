"""What ``pksim predict``, ``search`` and ``trace`` do with ``--program`` (``program=`` of
``pksim.predict`` and ``pksim.search``): a whole program's baseline, pksim's best and its
roofline; pk's ranked schedules for each of its collective calls."""
from __future__ import annotations

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError
from pksim_core.programs import load_program, predict_program
from pksim_core.programs.costs import calls, kernel_call
from pksim_core.programs.predict import ProgramPrediction
from pksim_core.search import search as run_search, space

DEFAULT_SYSTEM = "dgx-h100"
# predict / search / trace options that a program states itself
_PROGRAM_STATES = ("op", "size", "m", "n_", "k", "batch", "heads", "seq", "head_dim", "tokens",
                   "hidden", "experts", "topk", "expert_hidden", "world", "algorithm",
                   "mechanism", "comm_sms", "chunk_bytes", "peer_order", "label", "overlap",
                   "splits", "peers", "reduce_op", "epilogue", "launch", "nvls", "nccl_version")
# The options with a default that a program states too: given otherwise, an error.
_PROGRAM_DEFAULTS = {"dtype": "bf16", "skew": 0.0, "root": 0, "domains": 1, "cold": False,
                     "full": False}


def check_program_options(kw: dict) -> None:
    """A program says what runs: options that say it too are errors."""
    given = [k for k in _PROGRAM_STATES if kw.get(k) is not None]
    given += [k for k, v in _PROGRAM_DEFAULTS.items() if kw.get(k, v) != v]
    if given:
        flag = "--" + given[0].rstrip("_").replace("_", "-")
        flag = {"--size": "--bytes", "--label": "--schedule", "--cold": "--cold-l2"}.get(flag,
                                                                                      flag)
        raise ConfigError(f"--program states what runs: leave out {flag}")
    if kw.get("impl", "pk") != "pk":
        raise ConfigError("--program predicts both NCCL's baseline and pksim's best: leave out "
                          "--impl")


def program_prediction(kw: dict) -> ProgramPrediction:
    check_program_options(kw)
    system = load_system(kw["system_name"] or DEFAULT_SYSTEM, kw["overrides"])
    program = load_program(kw["program"])
    capacity = system.domain.gpus_per_domain
    if program.world > capacity:
        raise ConfigError(f"--program {program.name}: world {program.world} is larger than "
                          f"{system.name}'s {capacity} GPUs per domain")
    return predict_program(system, program)


def search_program(kw: dict, top: int) -> dict:
    """pk's ranked schedules for each distinct collective call of the program."""
    check_program_options(kw)
    system = load_system(kw["system_name"] or DEFAULT_SYSTEM, kw["overrides"])
    program = load_program(kw["program"])
    seen: dict = {}
    for op in program.comm_ops:
        kernel = kernel_call(program, op)      # the -v and send-recv kernels at their splits
        if op.kind == "sendrecv" and kernel is None:
            continue
        for call in [kernel] if kernel is not None else calls(program, op):
            if call.world < 2:
                continue
            seen.setdefault(call, []).append(op.name)
    out = []
    for call, ops in seen.items():
        cands = [c.with_(root=call.root, dtype=call.dtype)
                 for c in space(system, call.op, call.nbytes, call.world, extra=call.extra)
                 if call.in_switch or c.mechanism != "multimem"]
        result = run_search(system, cands, top=top)
        out.append({"ops": ops, "op": call.op, "size_bytes": call.nbytes, "world": call.world,
                    "ranked": [{"label": p.schedule.label(), "time_s": p.time_s,
                                "bound_s": p.bound_s} for p in result.ranked[:top]],
                    "candidates": result.candidates, "simulated": result.simulated,
                    "bytes": call.nbytes})       # the old name, for one release
    return {"program": program.name, "system": system.name, "calls": out}
