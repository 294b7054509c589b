"""Prepare a run of the communication kernels of issue 30 (``validation/suites/comm.toml``):
emit and build one library per variant, predict every timed case on the suite's system, and
write the cases file that ``validation/run/collectives.py`` runs on the GPU.

    python -m validation.prepare.comm --out BUNDLE [--suite comm] [--pack]
    python -m validation.prepare.comm --repredict RESULTS.jsonl[.gz] --out NEW.jsonl

BUNDLE gets ``lib/*.so``, ``src/*.cu`` + manifests and ``cases.json``; ``--pack`` also writes
``libs.tar.xz`` (the libraries, about a fifth of their size, for a copy to a GPU machine).
Each prediction is of the schedule as the GPU runs it (validation.prepare.predict:
behind the L2 flush and, for copy engines, the spin the runner queues before every call).
``--repredict`` predicts the timed rows of a finished run again with the model as it is now
(the measurements unchanged), for a model whose primitives were fitted after the run.
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import tarfile
from pathlib import Path

import codegen
from codegen.build import compile_many
from hwmodels.catalog import load_system
from hwmodels.errors import InfeasibleError
from hwmodels.system import System
from pksim_core import simulate
from pksim_core.schedule import Schedule
from validation.prepare.predict import flush_lead_s
from validation.suites.comm_suite import (CommSuite, LibraryVariant, cases, epilogue_fields,
                                          load_comm_suite, schedule_extra)


def library_schedule(v: LibraryVariant, comm_sms: int = 16) -> Schedule:
    """The schedule a variant's library is generated from (world, sizes and splits are run-time
    arguments: fixed here, so that the source, and its cached build, stay the same)."""
    return Schedule(op=v.op, shape=(("bytes", 1 << 30),), world=8, algorithm=v.algorithm,
                    mechanism=v.mechanism, comm_sms=comm_sms, extra=v.extra)


def build_libs(out: Path, suite: CommSuite, system_name: str = "h200-virtual",
               build: bool = True) -> dict[LibraryVariant, str]:
    """One library per variant, as ``lib/<name>.so`` relative to ``out``. ``build=False`` only
    emits the sources and returns the paths the libraries will have (``lib<stem>.so``)."""
    system = load_system(system_name)
    jobs, keys = [], []
    for v in suite.variants:
        e = codegen.emit(system, library_schedule(v), None, out / "src")
        jobs.append((e.source, codegen.options_for(e.plan)))
        keys.append(v)
    if not build:
        return {v: f"lib/lib{source.stem}.so" for v, (source, _) in zip(keys, jobs)}
    (out / "lib").mkdir(parents=True, exist_ok=True)
    libs = {}
    for v, res in zip(keys, compile_many(jobs)):
        if isinstance(res, Exception):
            raise res
        shutil.copy2(res, out / "lib" / res.name)
        libs[v] = f"lib/{res.name}"
    return libs


def predict_case(system: System, case: dict) -> dict:
    """The prediction fields of a timed case (predicted_s None where the model cannot say)."""
    v: LibraryVariant = case["variant"]
    sched = Schedule(op=v.op, shape=(("bytes", case["schedule_bytes"]),), world=case["world"],
                     dtype=case["dtype"], algorithm=v.algorithm, mechanism=v.mechanism,
                     comm_sms=case["blocks_per_rank"],
                     extra=schedule_extra(v, case["world"], case["splits"]))
    out = {"schedule": sched.to_dict(), "label": sched.label(), "predicted_system": system.name}
    try:
        p = simulate.predict(system, sched, host_lead_s=flush_lead_s(system, v.mechanism), cold=True)
    except InfeasibleError as exc:
        return out | {"predicted_s": None, "predict_error": str(exc)}
    return out | {"predicted_s": p.time_s, "bound_s": p.bound_s, "bound_resource": p.bound_resource}


def case_rows(suite: CommSuite, libs: dict[LibraryVariant, str]) -> list[dict]:
    system = load_system(suite.system)
    rows = []
    for seed, c in enumerate(cases(suite, system.gpu.sm.count), start=suite.seed * 1000):
        v: LibraryVariant = c.pop("variant")
        row = dict(c, op=v.op, algorithm=v.algorithm, mechanism=v.mechanism, family=v.family,
                   lib=libs[v], seed=seed, **epilogue_fields(v, bool(c.get("time"))))
        if v.peers:
            row["peers"] = v.peers
        if row.get("time"):
            row.update(predict_case(system, dict(c, variant=v)))
        if row["splits"] is None:
            del row["splits"]
        rows.append(row)
    return rows


def repredict(rows: list[dict], system: System) -> list[dict]:
    """``rows`` (a run's results) with every timed row's prediction fields made again."""
    out = []
    for row in rows:
        if row.get("time"):
            v = LibraryVariant(row["op"], row["algorithm"], row["mechanism"], row.get("reduce_op", "sum"),
                        row.get("epilogue", "none"), row.get("peers", ""))
            case = dict(row, variant=v, splits=row.get("splits"))
            row = {k: val for k, val in row.items() if k not in ("predict_error", "bound_s",
                                                                "bound_resource")}
            row.update(predict_case(system, case))
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--suite", default="comm")
    ap.add_argument("--pack", action="store_true", help="also write libs.tar.xz")
    ap.add_argument("--repredict", type=Path, help="a run's RESULTS.jsonl[.gz]: write it to --out "
                    "with the timed rows predicted again")
    ns = ap.parse_args(argv)
    if ns.repredict:
        raw = ns.repredict.read_bytes()
        text = gzip.decompress(raw).decode() if ns.repredict.suffix == ".gz" else raw.decode()
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        system = load_system(load_comm_suite(ns.suite).system)
        ns.out.write_text("".join(json.dumps(r) + "\n" for r in repredict(rows, system)))
        print(f"{sum(1 for r in rows if r.get('time'))} timed rows predicted again on "
              f"{system.name} into {ns.out}")
        return 0
    suite = load_comm_suite(ns.suite)
    ns.out.mkdir(parents=True, exist_ok=True)
    libs = build_libs(ns.out, suite)
    rows = case_rows(suite, libs)
    (ns.out / "cases.json").write_text(json.dumps(rows, indent=1))
    if ns.pack:
        with tarfile.open(ns.out / "libs.tar.xz", "w:xz") as tar:
            tar.add(ns.out / "lib", arcname="lib")
    timed = sum(1 for r in rows if r.get("time"))
    print(f"{len(libs)} libraries, {len(rows)} cases ({timed} timed) in {ns.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
