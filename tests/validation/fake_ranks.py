"""A stand-in for torchrun + validation/run/peers.py (tests/validation/test_calibrate_ranks.py):
started as the --launcher of `pksim calibrate --ranks N`, it reads the points pksim asks for
and writes the results file N real ranks would, with times from known figures (TRUTH) and a
deterministic +-1 % ripple, so that the fit has something to recover.

    python fake_ranks.py --path peer|local [--bad-check] --nproc N -m validation.run.peers \\
        --lib L --points P --out O
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# The figures the fake hardware has (per SM in B/s; the half size in bytes; seconds).
TRUTH = {"tma write": 23.3e9, "tma read": 21.0e9, "tma reduce": 19.5e9,
         "register write": 4.14e9, "register read": 3.9e9, "half": 1100.0,
         "cap": 350e9, "start": 4e-6, "ce setup": 17.9e-6, "ce cap": 368e9}


def time_s(p: dict, local: bool) -> float:
    """bytes / min(SMs x rate x m / (m + half), cap) after a start; copy engines: setup +
    bytes / their rate per transfer. One rank's time, alone or beside the others: each has
    its own links (peer path), or its own time slices of the one device (local path)."""
    total = p["bytes"] * p["npeers"]
    if p["mechanism"] == "copy-engine":
        return p["npeers"] * (TRUTH["ce setup"] + p["bytes"] / TRUTH["ce cap"])
    op = "read" if (p["mechanism"], p["op"]) == ("register", "reduce") else p["op"]
    rate = p["sms"] * TRUTH[f"{p['mechanism']} {op}"]
    if p["mechanism"] == "tma":
        rate *= p["msg_bytes"] / (p["msg_bytes"] + TRUTH["half"])
    return TRUTH["start"] + total / min(rate, TRUTH["cap"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", choices=("peer", "local"), required=True)
    ap.add_argument("--bad-check", action="store_true")
    ap.add_argument("--nproc", type=int, required=True)
    ap.add_argument("-m", dest="module")
    ap.add_argument("--lib")
    ap.add_argument("--points", type=Path)
    ap.add_argument("--out", type=Path)
    ns = ap.parse_args()
    assert ns.module == "validation.run.peers", ns.module
    n, local = ns.nproc, ns.path == "local"
    rows = []
    for i, p in enumerate(json.loads(ns.points.read_text())):
        active = {"one": 1, "both": 2, "all": n}[p["pattern"]]
        npeers = n - 1 if p["pattern"] == "all" else 1
        row = {**p, "npeers": npeers, "active": active}
        row["time_s"] = time_s(row, local) * (1 + 0.01 * ((i * 7919) % 21 - 10) / 10)
        rows.append(row)
    pairs = dict.fromkeys((p["mechanism"], p["op"]) for p in rows)
    checks = [{"mechanism": m, "op": o, "ok": not ns.bad_check, "wrong_values": 3 * ns.bad_check,
               "timeouts": 0} for m, o in pairs]
    ns.out.write_text(json.dumps({
        "format": "pksim peers v1", "device": "Fake GPU", "driver": "0.0", "world": n,
        "date": "2026-12-04T12:00:00+00:00", "sms": 132, "path": ns.path,
        "devices": 1 if local else n, "ranks": [], "checks": checks, "points": rows}))
    print(f"fake ranks: {len(rows)} points", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
