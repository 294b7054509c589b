"""``pksim pkb check``: every solution against PKB's reference, at world 8, in one launch.

The ranks are ``world`` processes (torch.multiprocessing, spawn) on the GPUs at hand, one gloo
group (one GPU: they share it, and pksim.torch runs host-synchronised). Each rank takes its
inputs from PKB's own ``create_input_tensor(rank, world, id, (1024, 1024), bfloat16, trial,
device)`` (the user's checkout, imported at run time), for ``trials`` trials (fresh random
inputs each; data-dependent routing differs per rank and trial), runs the reference with its
collectives on gloo (``harness.GlooCuda``), makes the inputs again, runs the solution with
torch.distributed's data calls forbidden on CUDA tensors (``harness.forbid_cuda_collectives``),
and compares by PKB's rule (``harness.match``, atol = rtol = 1e-2). With ``time``, a problem
that passed is then timed as PKB's harness times it (``utils/performance.py``
measure_solution_performance: warm-up, back-to-back iterations between CUDA events, input
copies rotated against the L2), reference and solution, and the slowest rank's mean kept.

Resumable: every finished problem is one line of the results file (JSON), skipped by the next
run. Each rank writes its outcome of a problem to a folder of the temporary directory; the
parent merges them once every rank has. A problem that fails on every rank (pksim.torch tells
every rank of a failure on one) lets the ranks go on to the next; one where only some ranks
fail, or that outlasts ``deadline_s``, ends the launch (its other ranks may wait inside a
collective): the parent records it and starts the ranks again from the next problem.

Before the ranks start, the parent builds every generated kernel the ranks may ask for
(``pksim.torch.choice.likely_kernels`` at the world and its halvings, nvcc on every core, the
content-hash cache), so that no problem waits for a build.
"""
from __future__ import annotations

import datetime
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from pksim.pkb.harness import GlooCuda, forbid_cuda_collectives, match
from pksim.pkb.problems import BACKEND
from pksim.pkb.runtime import load_reference
from pksim.pkb.shim import replace_dist
from pksim.torch.kernels import prebuild_for

SHAPE = (1024, 1024)
ATOL = RTOL = 1e-2
COPY_LIMIT = 1 << 30       # a rank's inputs up to this many bytes are copied, larger made again
# Problems whose inputs PKB makes in Python loops of single-element GPU operations (torch
# operations per rank and trial, counted by a TorchDispatchMode around create_input_tensor at
# world 8: 28 15,373, 29 46,093, 62 18,441; every other problem under 50): on one GPU time-sliced
# by the eight ranks those take most of a minute, so they are made by the same code on the host
# and moved to the GPU (the report lists it among the adaptations)
HOST_INPUTS = {28: 15373, 29: 46093, 62: 18441}


def done_ids(results: Path) -> set[int]:
    if not results.is_file():
        return set()
    return {json.loads(line)["id"] for line in results.read_text().splitlines() if line.strip()}


def _first_tensor_runner(fn, args):
    """(the first tensor argument, a call with it replaced), as PKB's worker times a solution."""
    import torch
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            return a, lambda t, i=i: fn(*args[:i], t, *args[i + 1:])
    for i, a in enumerate(args):
        if isinstance(a, (list, tuple)):
            for j, b in enumerate(a):
                if isinstance(b, torch.Tensor):
                    def run(t, i=i, j=j, a=a):
                        inner = list(a)
                        inner[j] = t
                        return fn(*args[:i], type(a)(inner), *args[i + 1:])
                    return b, run
    return None, None


def _one_problem(cfg: dict, rank: int, world: int, prob: dict, make_inputs) -> dict:
    try:
        return _checked(cfg, rank, world, prob, make_inputs)
    finally:       # a failed problem's modules too: what they hold (buffers, inputs) is freed
        for name in (f"pkb_reference_{prob['stem']}", f"pkb_solution_{prob['stem']}",
                     f"pksim_pkb_reference_{prob['stem']}"):
            sys.modules.pop(name, None)


def _checked(cfg: dict, rank: int, world: int, prob: dict, make_inputs) -> dict:
    import torch
    import torch.distributed as dist
    dev = torch.device("cuda", torch.cuda.current_device()) if cfg.get("device") != "cpu" \
        else torch.device("cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    ref_mod = load_reference(Path(prob["reference"]), f"pkb_reference_{prob['stem']}")
    gloo = GlooCuda(dist)
    replace_dist(ref_mod, gloo)
    sol_mod = load_reference(Path(prob["solution"]), f"pkb_solution_{prob['stem']}")
    trials = []
    t0 = time.time()
    for trial in range(cfg["trials"]):
        _progress(cfg, rank, prob["id"], trial)
        x = make(make_inputs, rank, world, prob["id"], trial, dev)
        # made once a trial (PKB's input loops are most of a problem's time on a shared GPU):
        # the reference runs on a copy, and the solution starts from the same random state;
        # inputs too large to hold twice (every rank's on one GPU) are made again instead
        twice = tensor_bytes(x) <= COPY_LIMIT
        state = _rng_state(torch, dev)
        ref = ref_mod.solution(*(copied(x) if twice else x))
        sync()
        if twice:
            _rng_state(torch, dev, state)
        else:
            del x
            x = make(make_inputs, rank, world, prob["id"], trial, dev)
        with forbid_cuda_collectives(dist):
            sol = sol_mod.solution(*x)
            sync()
        ok, diff, why = match(ref, sol, ATOL, RTOL)
        trials.append({"trial": trial, "ok": ok, "max_abs_diff": diff if diff != float("inf") else None,
                       "why": why})
    out = {"trials": trials, "seconds": round(time.time() - t0, 2),
           "reference_adaptations": dict(gloo.used), "inputs_on_host": prob["id"] in HOST_INPUTS}
    shim = getattr(getattr(sol_mod, "_solution", None), "shim", None)
    if shim is not None:
        out.update(tally=dict(shim.tally), notes=shim.notes(),
                   schedules=sorted({f"{op}: {label}" for op, label in shim.calls()}))
    if cfg["time"] and all(t["ok"] for t in trials):
        out["time"] = _time(cfg, rank, world, prob, ref_mod, sol_mod, make_inputs, dev)
    if shim is not None:
        shim.close()
    return out


def _rng_state(torch, dev, state=None):
    """The random state of the host and of ``dev`` (set to ``state`` when given)."""
    if state is None:
        return torch.get_rng_state(), torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], dev)
    return state


def tensor_bytes(x: Any) -> int:
    """Bytes of every tensor in ``x`` (tuples, lists and dicts looked into)."""
    if hasattr(x, "element_size") and hasattr(x, "numel"):
        return int(x.numel()) * int(x.element_size())
    if isinstance(x, (list, tuple)):
        return sum(tensor_bytes(v) for v in x)
    if isinstance(x, dict):
        return sum(tensor_bytes(v) for v in x.values())
    return 0


def mapped(x: Any, fn) -> Any:
    """``x`` with ``fn`` applied to every tensor in it (tuples, lists and dicts made anew
    around them; anything else kept)."""
    import torch
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, torch.Size):
        return x
    if isinstance(x, tuple) and hasattr(x, "_fields"):          # a named tuple
        return type(x)(*(mapped(v, fn) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(mapped(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: mapped(v, fn) for k, v in x.items()}
    return x


def copied(x: Any) -> Any:
    """``x`` with every tensor in it cloned, so a reference that writes into its inputs leaves
    the solution's untouched."""
    return mapped(x, lambda t: t.clone())


def make(make_inputs, rank: int, world: int, pid: int, trial: int, dev):
    """PKB's inputs of a rank and trial on ``dev``; those of ``HOST_INPUTS`` made on the host
    and moved."""
    import torch
    where = torch.device("cpu") if pid in HOST_INPUTS else dev
    x = make_inputs(rank, world, pid, SHAPE, torch.bfloat16, trial=trial, device=where)
    return mapped(x, lambda t: t.to(dev)) if where != dev else x


def _time(cfg, rank, world, prob, ref_mod, sol_mod, make_inputs, dev) -> dict:
    import torch
    import torch.distributed as dist
    measure = pkb_module(cfg["pkb"], "utils/performance.py").measure_solution_performance
    got = {}
    for name, mod in (("reference", ref_mod), ("solution", sol_mod)):
        x = make(make_inputs, rank, world, prob["id"], 0, dev)
        first, run = _first_tensor_runner(mod.solution, tuple(x))
        if first is None:
            got[name] = None
            continue
        dist.barrier()
        guard = forbid_cuda_collectives(dist) if name == "solution" else _null()
        with guard:
            m = measure(run, first, warmup_iters=cfg["warmup"],
                                             measure_iters=cfg["iters"])
        got[name] = m["wall_time_ms"]
    return got


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def pkb_module(pkb: str, relative: str):
    """A module of the user's PKB checkout, loaded from its file (PKB's code is not ours to
    import by name: it is found at run time, in the checkout given)."""
    name = "pkb_" + relative.removesuffix(".py").replace("/", "_")
    return sys.modules.get(name) or load_reference(Path(pkb) / relative, name)


def _progress(cfg: dict, rank: int, pid: int, trial: int) -> None:
    (Path(cfg["work"]) / f"progress-{rank}.json").write_text(json.dumps({"id": pid, "trial": trial,
                                                                         "t": time.time()}))


def worker(rank: int, world: int, cfg: dict, port: int) -> None:
    os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
    import torch
    import torch.distributed as dist
    if cfg.get("device") != "cpu":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=cfg["deadline_s"]))
    sys.path.insert(0, cfg["pkb"])
    create_input_tensor = pkb_module(cfg["pkb"], "utils/input_output_tensors.py").create_input_tensor
    work = Path(cfg["work"])
    for prob in cfg["problems"]:
        try:
            out = _one_problem(cfg, rank, world, prob, create_input_tensor)
        except BaseException as exc:  # noqa: BLE001 - a failed rank is a finding; the parent restarts
            out = {"error": f"{type(exc).__name__}: {exc}"[:600],
                   "where": traceback.format_exc(limit=-3)[-1200:]}
        tmp = work / f"r{rank}-{prob['id']}.tmp"
        tmp.write_text(json.dumps(out))
        os.replace(tmp, work / f"r{rank}-{prob['id']}.json")
        if "error" in out:
            _wait_for_go(work, prob["id"])
    dist.destroy_process_group()


def _wait_for_go(work: Path, pid: int) -> None:
    """After a failure: the other ranks may wait in a collective. The parent, once every rank
    has reported the problem, writes ``go-<id>`` (all failed together: go on); otherwise it
    ends the ranks and starts them again."""
    while not (work / f"go-{pid}").exists():
        time.sleep(0.1)


def merge(prob: dict, per_rank: list[dict | None], world: int) -> dict:
    """One results line from every rank's outcome (None: the rank never reported)."""
    row: dict[str, Any] = {"id": prob["id"], "stem": prob["stem"]}
    errors = sorted({f"rank {r}: {o['error']}" for r, o in enumerate(per_rank) if o and "error" in o})
    missing = [r for r, o in enumerate(per_rank) if o is None]
    if errors or missing:
        where = next((o["where"] for o in per_rank if o and o.get("where")), "")
        row.update(ok=False, errors=errors[:3], silent_ranks=missing, where=where[-600:])
        return row
    trials = []
    for t in range(len(per_rank[0]["trials"])):
        ranks = [o["trials"][t] for o in per_rank]
        diffs = [x["max_abs_diff"] for x in ranks]
        trials.append({"trial": t, "ok": all(x["ok"] for x in ranks),
                       "max_abs_diff": None if None in diffs else max(diffs),
                       "why": next((f"rank {r}: {x['why']}" for r, x in enumerate(ranks) if x["why"]), "")})
    first = per_rank[0]
    row.update(ok=all(t["ok"] for t in trials), trials=trials, seconds=max(o["seconds"] for o in per_rank),
               tally=first.get("tally", {}), schedules=first.get("schedules", []),
               notes=first.get("notes", []), reference_adaptations=first.get("reference_adaptations", {}),
               inputs_on_host=first.get("inputs_on_host", False))
    if all("time" in o for o in per_rank):
        for name in ("reference", "solution"):
            vals = [o["time"].get(name) for o in per_rank]
            row[f"{name}_ms"] = None if None in vals else max(vals)     # the slowest rank
    return row


def pksim_commit() -> str:
    """The code's commit: $PKSIM_COMMIT (a copy without git), else git's."""
    if os.environ.get("PKSIM_COMMIT"):
        return os.environ["PKSIM_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=30, cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"


def device_info() -> dict:
    out: dict[str, Any] = {"host": socket.gethostname()}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,uuid", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        rows = [[f.strip() for f in x.split(",")] for x in q.stdout.splitlines() if x.strip()]
        out["gpus"] = [", ".join(r[:2]) for r in rows]
        out["gpu_uuids"] = [r[2] for r in rows if len(r) > 2]
    except (OSError, subprocess.TimeoutExpired):
        out["gpus"] = []
    return out


def run(problems: list[dict], results: Path, pkb: str, world: int = 8, trials: int = 5,
        deadline_s: float = 120.0, time_it: bool = False, warmup: int = 500, iters: int = 100,
        budget_s: float | None = None, say=print, prebuild: bool = True, device: str = "cuda",
        worker_fn=None) -> list[dict]:
    """Check ``problems`` (dicts: id, stem, reference, solution), appending to ``results``;
    returns the rows written now. ``device`` "cpu" and ``worker_fn``: pksim.pkb.dryrun's."""
    import torch.multiprocessing as mp
    os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    work = Path(tempfile.gettempdir()) / f"pksim-pkb-{abs(hash(str(results.resolve()))):x}"
    work.mkdir(parents=True, exist_ok=True)
    results.parent.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    todo = [p for p in problems if p["id"] not in done_ids(results)]
    written: list[dict] = []
    commit = pksim_commit()
    if todo and prebuild:
        _prebuild(world, say)
    ctx = mp.get_context("spawn")
    while todo:
        cfg = {"problems": todo, "trials": trials, "pkb": pkb, "work": str(work),
               "deadline_s": deadline_s, "time": time_it, "warmup": warmup, "iters": iters,
               "device": device}
        for f in work.glob("*"):
            f.unlink()
        port = 20000 + random.randrange(20000)
        procs = [ctx.Process(target=worker_fn or worker, args=(r, world, cfg, port)) for r in range(world)]
        for p in procs:
            p.start()
        restart = False
        for prob in todo:
            t0 = time.time()
            while True:
                outs = [_read(work / f"r{r}-{prob['id']}.json") for r in range(world)]
                failed = any(o is not None and "error" in o for o in outs)
                complete = all(o is not None for o in outs)
                late = time.time() - t0 > deadline_s
                dead = all(not p.is_alive() for p in procs)
                if complete or failed or late or dead:
                    if failed and not complete:
                        time.sleep(min(5.0, deadline_s))     # let the other ranks report
                        outs = [_read(work / f"r{r}-{prob['id']}.json") for r in range(world)]
                    break
                time.sleep(0.2)
            row = merge(prob, outs, world)
            if late and not complete:
                row.setdefault("errors", []).append(f"past the {deadline_s:.0f} s deadline")
            row.update(world=world, trials_asked=trials, device=device_info(), pksim_commit=commit,
                       date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
            with open(results, "a") as fh:
                fh.write(json.dumps(row) + "\n")
            written.append(row)
            say(f"pkb {prob['id']:3d} {prob['stem']:45s} {'ok' if row['ok'] else 'FAILED'} "
                f"({time.time() - t0:.1f} s){'' if row['ok'] else ': ' + str(row.get('errors') or row.get('trials'))[:200]}")
            errors = [o for o in outs if o and "error" in o]
            if not complete or 0 < len(errors) < world:
                restart = True
                break
            if errors:             # every rank failed, at the same point (pksim.torch tells all)
                (work / f"go-{prob['id']}").write_text("")
            if budget_s is not None and time.time() - t_start > budget_s:
                say(f"pkb: stopping after {time.time() - t_start:.0f} s (budget {budget_s:.0f} s); run again to resume")
                todo = []
                restart = True
                break
        for p in procs:
            if restart and p.is_alive():
                p.kill()
            p.join(10)
        todo = [p for p in todo if p["id"] not in done_ids(results)]
    return written


def _prebuild(world: int, say) -> None:
    gpus = device_info()["gpus"]
    if not gpus:
        say("pkb: no GPU (nvidia-smi): the kernels are not built beforehand")
        return
    t0 = time.time()
    worlds = [w for w in range(2, world + 1) if world % w == 0]
    n, failures = prebuild_for(gpus[0].split(",")[0].strip(), worlds)
    say(f"pkb: {n} kernels built beforehand for worlds {worlds} in {time.time() - t0:.0f} s"
        + "".join(f"\n  failed: {f}" for f in failures))


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def problem_dicts(problems, solutions_dir: Path) -> list[dict]:
    """The problems whose solution file exists, as the workers take them."""
    out = []
    for p in problems:
        sol = solutions_dir / f"{p.stem}_{BACKEND}.py"
        if sol.is_file():
            out.append({"id": p.id, "stem": p.stem, "reference": str(p.path), "solution": str(sol)})
    return out
