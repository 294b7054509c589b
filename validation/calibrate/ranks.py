"""``pksim calibrate --ranks N``: the remote-path figures (``gpu.transfer_remote``) from N
processes that read, write and reduce into each other's buffers (validation/run/peers.py,
started by a torchrun-style launcher; CUDA IPC as the real-rank runtime maps peers).

``plan`` lists the points (mechanism x operation x pattern x SMs x size x TMA message),
``build`` compiles validation/microbench/peers/peer_moves.cu, ``launch`` runs the N
processes, ``fit`` fits the per-SM rates, the TMA message half size and the copy-engine
setup to the one-direction points (docs/decisions/D50.md) and judges the both-directions
and all-pairs points with them, and ``render`` writes the calibrated system file: every
key it writes names how it was measured, and where all ranks shared one device the path
was local (a check of the machinery, not of NVLink): the file says so and tags the
figures ``assumed`` for NVLink (``calibrated`` when the ranks were distinct devices).
"""
from __future__ import annotations

import json
import math
import os
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from codegen.build import BuildOptions, compile_source
from hwmodels.errors import ConfigError, ValidationError
from hwmodels.resources import microbench_dir
from validation.calibrate.file import _num, _pct, _q, identity_lines

FORMAT = "pksim peers v1"
SM_SWEEP = (1, 2, 4, 8, 16, 32, 66, 132)
MESSAGES = (1024, 2048, 4096, 8192, 16384, 32768)
MSG = 16384                       # the SM sweep's TMA message
BIG = 64 << 20                    # bytes per peer of the SM sweeps
CE_SIZES = tuple(64 << 10 << (2 * i) for i in range(7))      # 64 KiB .. 256 MiB
ROBUST_SCALE = 0.05
# (mechanism, op) -> the key its per-SM rate sets; register reductions (the pull-reduce:
# peer loads, local sum) are judged with ldst_read_per_sm_GBps, the rate the model gives
# them (docs/decisions/D38.md), not fitted.
RATE_KEYS = {("tma", "write"): "tma_write_per_sm_GBps", ("tma", "read"): "tma_read_per_sm_GBps",
             ("tma", "reduce"): "tma_reduce_per_sm_GBps",
             ("register", "write"): "ldst_write_per_sm_GBps",
             ("register", "read"): "ldst_read_per_sm_GBps"}
WRITTEN = tuple(RATE_KEYS.values()) + ("tma_message_half_bytes", "copy_engine_setup_us")
NOT_MEASURED = {"multimem_per_sm_GBps": "multimem needs NVLink multicast, which stays off "
                                        "(never cuMulticastCreate): not run"}
DEFAULT_LAUNCHER = "{python} -m torch.distributed.run --standalone --nproc_per_node={n}"


# ---- the points ------------------------------------------------------------------------------
def plan(world: int, sms: int, quick: bool = False) -> list[dict]:
    """The points, one-direction sweeps first (they are fitted), then both directions and
    all pairs at once (judged)."""
    if world < 2:
        raise ConfigError(f"--ranks {world}: peers need at least 2 ranks")
    sweep = sorted({min(s, sms) for s in (SM_SWEEP[::2] if quick else SM_SWEEP)})
    messages = MESSAGES[::2] if quick else MESSAGES
    big = BIG // 4 if quick else BIG
    points: list[dict] = []
    for op in ("write", "read", "reduce"):
        for s in sweep:
            points.append({"mechanism": "tma", "op": op, "pattern": "one", "sms": s,
                           "bytes": big, "msg_bytes": MSG})
        for m in messages:
            for s in (1, min(8, sms)):
                if m != MSG:
                    points.append({"mechanism": "tma", "op": op, "pattern": "one", "sms": s,
                                   "bytes": big // 4, "msg_bytes": m})
        for s in sweep:
            points.append({"mechanism": "register", "op": op, "pattern": "one", "sms": s,
                           "bytes": big})
    for op in ("write", "read"):
        for b in (CE_SIZES[::2] if quick else CE_SIZES):
            points.append({"mechanism": "copy-engine", "op": op, "pattern": "one", "sms": 1,
                           "bytes": b})
    for pattern in ("both", "all"):
        per_peer = big if pattern == "both" else big // 4
        for mech, ops in (("tma", ("write", "read", "reduce")),
                          ("register", ("write", "read", "reduce"))):
            for op in ops:
                for s in sorted({min(8, sms), min(32, sms), sms}):
                    s = max(s, world - 1)                # a block for every peer at least
                    points.append({"mechanism": mech, "op": op, "pattern": pattern, "sms": s,
                                   "bytes": per_peer, "msg_bytes": MSG})
        for op in ("write", "read"):
            points.append({"mechanism": "copy-engine", "op": op, "pattern": pattern, "sms": 1,
                           "bytes": per_peer})
    return points


# ---- building and launching ------------------------------------------------------------------
def source() -> Path:
    return microbench_dir() / "peers" / "peer_moves.cu"


def build(cache: Path | None = None) -> Path:
    """libpeer_moves.so for sm_90a, through codegen's content-hash cache."""
    return compile_source(source(), BuildOptions(lineinfo=False), cache)


def launcher_command(launcher: str | None, n: int) -> list[str]:
    text = launcher or DEFAULT_LAUNCHER
    try:
        return shlex.split(text.format(python=sys.executable, n=n))
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(f"--launcher {text!r}: {exc} (use {{python}} and {{n}})") from None


def launch(n: int, lib: Path, points: list[dict], run_dir: Path, launcher: str | None,
           echo: Callable[[str], None], timeout_s: float = 1800) -> Path:
    """Run validation/run/peers.py as ``n`` processes under ``launcher`` (a command that
    starts N copies of what follows it, torchrun-style); returns the results file."""
    run_dir.mkdir(parents=True, exist_ok=True)
    points_path, out = run_dir / "points.json", run_dir / "peers.json"
    points_path.write_text(json.dumps(points, indent=1))
    if out.exists():
        out.unlink()
    cmd = launcher_command(launcher, n) + ["-m", "validation.run.peers", "--lib", str(lib),
                                           "--points", str(points_path), "--out", str(out)]
    env = dict(os.environ, CUDA_MODULE_LOADING="EAGER", NCCL_NVLS_ENABLE="0",
               PYTHONUNBUFFERED="1")
    echo("running: " + " ".join(cmd))
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, bufsize=1)
    except OSError as exc:
        raise ValidationError(f"--launcher: cannot start {cmd[0]} ({exc.strerror})") from None
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        echo(line.rstrip("\n"))
        tail = (tail + [line.rstrip("\n")])[-5:]
    status = proc.wait(timeout=timeout_s)
    if not out.exists():
        raise ValidationError(f"the {n} ranks wrote no results (exit status {status}): "
                              f"{' | '.join(tail)[-400:]}")
    return out


def load(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConfigError(f"{path}: not a results file of pksim calibrate --ranks "
                          f"(format {FORMAT!r})")
    bad = [c for c in doc.get("checks", []) if not c.get("ok")]
    if bad:
        listed = "; ".join(f"{c['mechanism']} {c['op']}: {c.get('wrong_values')} wrong values, "
                           f"{c.get('timeouts')} timeouts" for c in bad)
        raise ValidationError(f"{path}: the moved values are wrong ({listed}): nothing fitted")
    return doc


# ---- the model and the fit (docs/decisions/D50.md) -------------------------------------------
def rate_Bps(point: dict, r: float, half: float, cap: float) -> float:
    """One rank's rate: its SMs at ``r`` per SM (a TMA message of m bytes at m / (m + half)
    of it), at most the path's ``cap``: the hard minimum pksim_core.mechanisms.flow takes over NVLink."""
    issue = point["sms"] * r
    if point["mechanism"] == "tma":
        m = point["msg_bytes"]
        issue *= m / (m + half)
    return min(issue, cap)


def model_s(point: dict, p: dict, local: bool) -> float:
    """Predicted time of one rank: a fixed start, then its bytes (per peer x peers) at its
    rate; a copy-engine transfer (timed alone) pays its setup, then its bytes. The path's
    cap is the rank's (its NVLink egress or ingress). ``local`` (all ranks on one device)
    changes nothing here: the processes take turns on the device (time slices), so each
    rank's events time its own work alone, and both directions or all pairs at once only
    check that the ranks' transfers run, not how they share a link."""
    total = point["bytes"] * point["npeers"]
    if point["mechanism"] == "copy-engine":
        key = ("copy-engine", point["op"])
        return point["npeers"] * (p["ce_setup_s"] + point["bytes"] / p["cap"][key])
    key = (point["mechanism"], point["op"])
    r = p["rate"][key if key in p["rate"] else ("register", "read")]
    return p["start_s"] + total / rate_Bps(point, r, p["half"], p["cap"][key])


@dataclass
class ResidualGroup:
    name: str
    points: int
    median_abs_error: float
    max_abs_error: float
    fitted: tuple[str, ...] = ()
    note: str = ""


@dataclass
class RanksFit:
    values: dict[str, float]                     # gpu.transfer_remote key -> value (key units)
    groups: list[ResidualGroup]
    nuisance: dict[str, float] = field(default_factory=dict)


def _errors(points: list[dict], p: dict, local: bool) -> list[float]:
    return [model_s(q, p, local) / q["time_s"] - 1 for q in points]


def fit(doc: dict) -> RanksFit:
    """Fit the one-direction points: per (mechanism, op) a per-SM rate and the path's cap
    (a nuisance: the link, or on one device its memory), one TMA message half size for the
    three TMA operations, one start time, and the copy engines' setup and rate; then judge
    the both-directions and all-pairs points (and register reductions) with the result."""
    local = doc.get("path") == "local"
    points = [q for q in doc["points"] if q.get("time_s")]
    one = [q for q in points if q["pattern"] == "one"]
    sm_keys = [k for k in RATE_KEYS if any((q["mechanism"], q["op"]) == k for q in one)]
    ce_ops = sorted({q["op"] for q in one if q["mechanism"] == "copy-engine"})
    if not sm_keys:
        raise ValidationError("no one-direction TMA or register points to fit")
    names = ([f"rate {k}" for k in sm_keys] + [f"cap {k}" for k in sm_keys] +
             [f"cap ce {op}" for op in ce_ops] + ["half", "start", "ce_setup"])

    def unpack(x: np.ndarray) -> dict:
        v = dict(zip(names, np.exp(x)))
        cap = {k: v[f"cap {k}"] for k in sm_keys}
        cap.update({("copy-engine", op): v[f"cap ce {op}"] for op in ce_ops})
        cap.setdefault(("register", "reduce"), cap.get(("register", "read"), 1e12))
        return {"rate": {k: v[f"rate {k}"] for k in sm_keys}, "cap": cap, "half": v["half"],
                "start_s": v["start"], "ce_setup_s": v["ce_setup"]}

    fitted = [q for q in one if (q["mechanism"], q["op"]) in RATE_KEYS
              or q["mechanism"] == "copy-engine"]

    def residuals(x: np.ndarray) -> np.ndarray:
        p = unpack(x)
        return np.array([math.log(model_s(q, p, local) / q["time_s"]) for q in fitted])

    starts = {"rate": 20e9, "cap": 1e12, "half": 512.0, "start": 3e-6, "ce_setup": 5e-6}
    x0 = np.log([starts[n.split()[0]] if n.split()[0] in starts else 1e12 for n in names])
    lo = np.log([1e7 if n.startswith("rate") else 1e8 if n.startswith("cap") else
                 1.0 if n == "half" else 1e-8 for n in names])
    hi = np.log([2e12 if n.startswith("rate") else 1e13 if n.startswith("cap") else
                 1e6 if n == "half" else 1e-3
                 for n in names])
    from scipy.optimize import least_squares   # scipy loads only for a fit
    sols = []
    for scale in (1.0, 0.25, 4.0):                  # min(issue, cap) has flat regions
        start = np.clip(x0 + np.log(scale) * np.array([n.startswith("rate") for n in names]),
                        lo + 1e-9, hi - 1e-9)
        sols.append(least_squares(residuals, start, bounds=(lo, hi), loss="soft_l1",
                                  f_scale=ROBUST_SCALE, xtol=1e-10, ftol=1e-10))
    best = min(sols, key=lambda s: s.cost)
    p = unpack(best.x)
    values = {RATE_KEYS[k]: p["rate"][k] / 1e9 for k in sm_keys}
    if any(k[0] == "tma" for k in sm_keys):
        values["tma_message_half_bytes"] = p["half"]
    if ce_ops:
        values["copy_engine_setup_us"] = p["ce_setup_s"] * 1e6
    groups = []
    for key in sm_keys:
        mine = [q for q in fitted if (q["mechanism"], q["op"]) == key]
        fitted_keys = (RATE_KEYS[key],) + (("tma_message_half_bytes",) if key[0] == "tma" else ())
        groups.append(_group(f"{key[0]} {key[1]}, one direction", mine, p, local, fitted_keys))
    for op in ce_ops:
        mine = [q for q in fitted if q["mechanism"] == "copy-engine" and q["op"] == op]
        groups.append(_group(f"copy-engine {op}, one direction", mine, p, local,
                             ("copy_engine_setup_us",)))
    judged = [q for q in one if (q["mechanism"], q["op"]) == ("register", "reduce")]
    if judged and ("register", "read") in p["rate"]:
        groups.append(_group("register reduce (pull), one direction", judged, p, local, (),
                             "judged with ldst_read_per_sm_GBps, not fitted"))
    for pattern in ("both", "all"):
        for mech in ("tma", "register", "copy-engine"):
            mine = [q for q in points if q["pattern"] == pattern and q["mechanism"] == mech
                    and ((mech, q["op"]) in p["rate"] or (mech, q["op"]) in p["cap"])]
            if mine:
                groups.append(_group(f"{mech}, {'both directions' if pattern == 'both' else 'all pairs'} at once",
                                     mine, p, local, (), "judged, not fitted"))
    nuisance = {f"cap {k[0]} {k[1]} GBps": c / 1e9 for k, c in p["cap"].items()}
    nuisance["start_us"] = p["start_s"] * 1e6
    return RanksFit(values, groups, nuisance)


def _group(name: str, points: list[dict], p: dict, local: bool, fitted: tuple[str, ...],
           note: str = "") -> ResidualGroup:
    errors = [abs(e) for e in _errors(points, p, local)]
    return ResidualGroup(name, len(points), statistics.median(errors), max(errors), fitted, note)


# ---- the file --------------------------------------------------------------------------------
def how_measured(doc: dict, key: str) -> str:
    """The source of a fitted key: the command, device, date and what was measured."""
    n, dev, day = doc["world"], doc["device"], doc["date"][:10]
    what = {"tma_write_per_sm_GBps": "TMA bulk stores into a peer's buffer",
            "tma_read_per_sm_GBps": "TMA bulk loads from a peer's buffer",
            "tma_reduce_per_sm_GBps": "TMA bulk store-adds (fp32) into a peer's buffer",
            "tma_message_half_bytes": "TMA stores, loads and store-adds with 1-32 KiB messages",
            "ldst_write_per_sm_GBps": "16-byte register stores into a peer's buffer",
            "ldst_read_per_sm_GBps": "16-byte register loads from a peer's buffer",
            "copy_engine_setup_us": "copy-engine copies to and from a peer, 64 KiB-256 MiB"}[key]
    path = (f"{n} processes on ONE device, so the peer's buffer is in the same HBM: the LOCAL "
            f"path, a check of the machinery, not of NVLink" if doc["path"] == "local" else
            f"{n} processes on {doc['devices']} devices (peer path between devices)")
    return (f"pksim calibrate --ranks {n} on {dev}, driver {doc.get('driver') or '?'}, {day}: "
            f"{what}, one direction, 1-{doc.get('sms', '?')} SMs (CUDA IPC, "
            f"validation/microbench/peers/peer_moves.cu); {path}")


def render(doc: dict, result: RanksFit, inherits: str, name: str, command: str,
           results_ref: str) -> str:
    local = doc["path"] == "local"
    dev, drv, day = doc["device"], doc.get("driver") or "?", doc["date"][:10]
    tag = "assumed" if local else "calibrated"
    path_note = (f"{doc['world']} processes on one device: every peer buffer is in the same "
                 f"HBM, so these are the local path's figures; they check the machinery and "
                 f"stand in for NVLink (provenance assumed)" if local else
                 f"{doc['world']} processes on {doc['devices']} devices: the peer path "
                 f"between devices (provenance calibrated)")
    description = (f"{inherits} with its remote-path figures from pksim calibrate --ranks "
                   f"{doc['world']} on {dev}, {day}")
    lines = [
        f"# Remote-path figures measured by pksim calibrate --ranks {doc['world']} on {dev} "
        f"(driver {drv}) on {day}, written by:",
        f"#   {command}",
        f"# gpu.transfer_remote only; everything else is inherited from {inherits}.",
        f"# Path: {path_note}.",
        *identity_lines(name, description, inherits, dev, day, drv, command, results_ref,
                        doc["date"],
                        "scipy.optimize.least_squares on log(predicted / measured time) of the "
                        "one-direction points, soft-L1 loss (scale 0.05): time = start + bytes / "
                        "min(SMs x per-SM rate (x m / (m + half) for TMA messages of m bytes), "
                        "path cap); copy engines: setup + bytes / rate (docs/decisions/D50.md)"),
        "[calibration.ranks]",
        f"ranks = {doc['world']}",
        f"devices = {doc['devices']}",
        f"path = {_q(doc['path'])}",
        f"note = {_q(path_note)}",
        f"not_measured = {{ {', '.join(f'{k} = {_q(v)}' for k, v in NOT_MEASURED.items())} }}",
        f"nuisance = {{ {', '.join(f'{_q(k)} = {_num(round(v, 4))}' for k, v in result.nuisance.items())} }}",
        "",
    ]
    for i, g in enumerate(result.groups):
        lines += [f"[calibration.residual.peers_{i}]", f"group = {_q(g.name)}",
                  f"points = {g.points}",
                  f"median_abs_error = {_num(round(g.median_abs_error, 4))}",
                  f"max_abs_error = {_num(round(g.max_abs_error, 4))}",
                  f"fitted = [{', '.join(_q('gpu.transfer_remote.' + k) for k in g.fitted)}]"]
        if g.note:
            lines.append(f"note = {_q(g.note)}")
        lines.append("")
    lines.append("[gpu.transfer_remote]")
    for key in WRITTEN:
        if key in result.values:
            value = round(result.values[key], 4 if result.values[key] < 100 else 1)
            lines.append(f"{key} = {{ value = {_num(value)}, source = "
                         f"{_q(how_measured(doc, key))}, provenance = \"{tag}\" }}")
    return "\n".join(lines).rstrip() + "\n"


def summary_rows(result: RanksFit) -> list[list[str]]:
    return [[g.name, str(g.points), _pct(g.median_abs_error), _pct(g.max_abs_error),
             ", ".join(g.fitted) or g.note] for g in result.groups]
