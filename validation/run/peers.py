"""Peer reads, writes and reductions between ranks, one process per rank (``pksim calibrate
--ranks N`` starts it under a torchrun-style launcher):

    torchrun --standalone --nproc_per_node=N -m validation.run.peers \\
        --lib libpeer_moves.so --points POINTS.json --out PEERS.json

Every rank allocates a send and a receive buffer (one slot per peer) with the library
(validation/microbench/peers/peer_moves.cu), the ranks exchange CUDA IPC handles through
torch.distributed (gloo) and map each other's buffers, as validation/runtime/collectives.py
does for the generated collectives. Then, for each (mechanism, operation) it checks the
moved values once (every rank with every peer), and times every point of POINTS.json:
a mechanism (tma, register, copy-engine), an operation (write, read, reduce), a pattern
(``one``: rank 0 to rank 1; ``both``: 0 and 1 to each other at once; ``all``: every rank
with every peer at once), SMs, bytes per peer and the TMA message size. Time: CUDA events
around ``iters`` back-to-back launches after ``warmup`` (a copy-engine transfer: around each
one alone), the median of ``repeats`` such rounds, each started by a host barrier of all
ranks; a point's time is the slowest active rank's. Processes on one device take turns on
it (time slices), so there each rank's events time its own work. Rank 0 writes PEERS.json (device, the ranks' devices, whether the path is local:
all ranks on one device; the checks; the points). torch only; no simpy, no simulator.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from validation.runtime.library import ensure_eager_loading, torch_module

MECHANISMS = {"tma": 0, "register": 1, "copy-engine": 2}
OPERATIONS = {"write": 0, "read": 1, "reduce": 2}
PATTERNS = ("one", "both", "all")
FORMAT = "pksim peers v1"
CHECK_BYTES = 256 << 10
CHECK_MSG = 4096


def active_peers(pattern: str, world: int) -> dict[int, list[int]]:
    """rank -> the peers it moves data with, for a pattern."""
    if pattern == "one":
        return {0: [1]}
    if pattern == "both":
        return {0: [1], 1: [0]}
    return {r: [q for q in range(world) if q != r] for r in range(world)}


def slot(rank: int, peer: int) -> int:
    """Where ``rank`` keeps what it exchanges with ``peer``: the index of peer among its peers."""
    return peer if peer < rank else peer - 1


def remote_is_source(mechanism: str, op: str) -> bool:
    """Reads, and register reductions (a pull: the local buffer += the peer's), take their
    data from the peer; writes and TMA reductions (a store-add into the peer) send it."""
    return op == "read" or (op == "reduce" and mechanism == "register")


def expected_base(sender: int, receiver: int) -> float:
    """The values ``sender`` keeps for ``receiver``: base + (i % 61) * 0.25."""
    return float(sender * 8 + receiver)


class Lib:
    def __init__(self, path: str):
        self.dll = ctypes.CDLL(path)
        d = self.dll
        d.pm_error.restype = ctypes.c_char_p
        d.pm_alloc.argtypes = [ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_void_p)]
        d.pm_free.argtypes = [ctypes.c_void_p]
        d.pm_ipc_handle.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        d.pm_ipc_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        d.pm_ipc_close.argtypes = [ctypes.c_void_p]
        d.pm_fill.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_float,
                              ctypes.c_float, ctypes.c_void_p]
        d.pm_count_bad.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_float,
                                   ctypes.c_float, ctypes.c_void_p,
                                   ctypes.POINTER(ctypes.c_ulonglong)]
        d.pm_launch.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                ctypes.c_ulonglong, ctypes.c_int, ctypes.c_uint,
                                ctypes.c_void_p]
        d.pm_status.argtypes = [ctypes.POINTER(ctypes.c_uint)]
        d.pm_sm_count.argtypes = [ctypes.POINTER(ctypes.c_int)]

    def call(self, name: str, *args) -> None:
        rc = getattr(self.dll, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name}: {self.dll.pm_error().decode()}")

    def alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_void_p()
        self.call("pm_alloc", max(nbytes, 16), ctypes.byref(ptr))
        return int(ptr.value)

    def handle(self, ptr: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        self.call("pm_ipc_handle", ctypes.c_void_p(ptr), buf)
        return buf.raw

    def open(self, handle: bytes) -> int:
        base = ctypes.c_void_p()
        self.call("pm_ipc_open", bytes(handle), ctypes.byref(base))
        return int(base.value)


class PeerRanks:
    """This process's rank, its buffers and its peers' (mapped through CUDA IPC)."""

    def __init__(self, lib: Lib, slot_bytes: int):
        torch = torch_module()
        import torch.distributed as dist
        if not dist.is_initialized():
            dist.init_process_group(backend=os.environ.get("PKSIM_DIST_BACKEND", "gloo"))
        self.dist, self.lib = dist, lib
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        self.device = local_rank % max(1, torch.cuda.device_count())
        torch.cuda.set_device(self.device)
        self.stream = torch.cuda.Stream()
        self.slot_bytes = slot_bytes
        size = slot_bytes * max(1, self.world - 1)
        self.send, self.recv = lib.alloc(size), lib.alloc(size)
        props = torch.cuda.get_device_properties(self.device)
        mine = {"rank": self.rank, "device": self.device, "name": props.name,
                "uuid": str(getattr(props, "uuid", "")) or f"{os.uname().nodename}:{self.device}",
                "host": os.uname().nodename,
                "send": lib.handle(self.send), "recv": lib.handle(self.recv)}
        everyone: list[Any] = [None] * self.world
        dist.all_gather_object(everyone, mine)
        self.info = [{k: v for k, v in e.items() if k not in ("send", "recv")} for e in everyone]
        self.opened: list[int] = []
        self.peer_send: dict[int, int] = {}
        self.peer_recv: dict[int, int] = {}
        for e in everyone:
            if e["rank"] == self.rank:
                continue
            self.peer_send[e["rank"]] = lib.open(e["send"])
            self.peer_recv[e["rank"]] = lib.open(e["recv"])
            self.opened += [self.peer_send[e["rank"]], self.peer_recv[e["rank"]]]

    @property
    def local_path(self) -> bool:
        """Every rank on one device: a peer's buffer is in the same HBM."""
        return len({(i["host"], i["uuid"]) for i in self.info}) == 1

    def pointers(self, mechanism: str, op: str, peers: list[int]) -> tuple[Any, Any]:
        remote, local = (ctypes.c_void_p * len(peers))(), (ctypes.c_void_p * len(peers))()
        pull = remote_is_source(mechanism, op)
        for i, q in enumerate(peers):
            there = (self.peer_send if pull else self.peer_recv)[q] + slot(q, self.rank) * self.slot_bytes
            here = (self.recv if pull else self.send) + slot(self.rank, q) * self.slot_bytes
            remote[i], local[i] = there, here
        return remote, local

    def launch(self, point: dict, peers: list[int]) -> None:
        remote, local = self.pointers(point["mechanism"], point["op"], peers)
        self.lib.call("pm_launch", MECHANISMS[point["mechanism"]], OPERATIONS[point["op"]],
                      remote, local, len(peers), int(point["bytes"]), int(point.get("sms", 1)),
                      int(point.get("msg_bytes", 16)), ctypes.c_void_p(self.stream.cuda_stream))

    def barrier(self) -> None:
        self.stream.synchronize()
        self.dist.barrier()

    def close(self) -> None:
        for base in self.opened:
            self.lib.dll.pm_ipc_close(ctypes.c_void_p(base))
        self.lib.dll.pm_free(ctypes.c_void_p(self.send))
        self.lib.dll.pm_free(ctypes.c_void_p(self.recv))


def check(ranks: PeerRanks, mechanism: str, op: str) -> dict:
    """Every rank with every peer once: what arrived equals what was sent (plus 1 for a
    reduction into buffers of ones)."""
    lib, st = ranks.lib, ctypes.c_void_p(ranks.stream.cuda_stream)
    count = CHECK_BYTES // 4
    peers = [q for q in range(ranks.world) if q != ranks.rank]
    for q in peers:
        lib.call("pm_fill", ctypes.c_void_p(ranks.send + slot(ranks.rank, q) * ranks.slot_bytes),
                 count, expected_base(ranks.rank, q), 0.25, st)
        lib.call("pm_fill", ctypes.c_void_p(ranks.recv + slot(ranks.rank, q) * ranks.slot_bytes),
                 count, 1.0, 0.0, st)
    ranks.barrier()
    point = {"mechanism": mechanism, "op": op, "bytes": CHECK_BYTES,
             "sms": 2 * len(peers), "msg_bytes": CHECK_MSG}
    ranks.launch(point, peers)
    ranks.barrier()
    bad = 0
    for q in peers:
        got = ctypes.c_ulonglong(0)
        base = expected_base(q, ranks.rank) + (1.0 if op == "reduce" else 0.0)
        lib.call("pm_count_bad", ctypes.c_void_p(ranks.recv + slot(ranks.rank, q) * ranks.slot_bytes),
                 count, base, 0.25, st, ctypes.byref(got))
        bad += got.value
    status = ctypes.c_uint(0)
    lib.call("pm_status", ctypes.byref(status))
    everyone: list[Any] = [None] * ranks.world
    ranks.dist.all_gather_object(everyone, (bad, status.value))
    wrong = sum(b for b, _ in everyone)
    timeouts = sum(s for _, s in everyone)
    return {"mechanism": mechanism, "op": op, "ok": wrong == 0 and timeouts == 0,
            "wrong_values": wrong, "timeouts": timeouts, "bytes_per_peer": CHECK_BYTES}


def time_point(ranks: PeerRanks, point: dict, iters: int, warmup: int, repeats: int) -> dict:
    torch = torch_module()
    peers = active_peers(point["pattern"], ranks.world).get(ranks.rank, [])
    # a copy-engine transfer is timed alone (its setup is the figure: back to back, the
    # engines overlap one copy's setup with the previous copy's bytes); kernels back to back
    alone = point["mechanism"] == "copy-engine"
    times = []
    for r in range(repeats):
        if peers:
            for _ in range(warmup if r == 0 else 0):
                ranks.launch(point, peers)
        ranks.barrier()
        if peers:
            for _ in range(iters if alone else 1):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(ranks.stream)
                for _ in range(1 if alone else iters):
                    ranks.launch(point, peers)
                end.record(ranks.stream)
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e-3 / (1 if alone else iters))
    mine = statistics.median(times) if times else None
    everyone: list[Any] = [None] * ranks.world
    ranks.dist.all_gather_object(everyone, mine)
    per_rank = {r: t for r, t in enumerate(everyone) if t is not None}
    return {**point, "npeers": len(active_peers(point["pattern"], ranks.world)[0]),
            "active": len(per_rank), "time_s": max(per_rank.values()),
            "per_rank_s": [per_rank.get(r) for r in range(ranks.world)], "iters": iters,
            "repeats": repeats}


def driver_version() -> str:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ""
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="libpeer_moves.so")
    ap.add_argument("--points", required=True, type=Path, help="the points (JSON list)")
    ap.add_argument("--out", required=True, type=Path, help="results (written by rank 0)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ns = ap.parse_args(argv)
    ensure_eager_loading()
    torch = torch_module()
    points = json.loads(ns.points.read_text())
    lib = Lib(ns.lib)
    slot_bytes = max([CHECK_BYTES] + [int(p["bytes"]) for p in points])
    ranks = PeerRanks(lib, slot_bytes)
    t0 = time.time()
    pairs = list(dict.fromkeys((p["mechanism"], p["op"]) for p in points))
    checks = [check(ranks, mech, op) for mech, op in pairs]
    rows = []
    for i, point in enumerate(points):
        rows.append(time_point(ranks, point, ns.iters, ns.warmup, ns.repeats))
        if ranks.rank == 0 and (i % 20 == 0 or i == len(points) - 1):
            print(f"peers: {i + 1}/{len(points)} points ({time.time() - t0:.0f} s)", flush=True)
    if ranks.rank == 0:
        sms = ctypes.c_int(0)
        lib.call("pm_sm_count", ctypes.byref(sms))
        doc = {"format": FORMAT, "device": ranks.info[0]["name"], "driver": driver_version(),
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "world": ranks.world, "sms": sms.value, "ranks": ranks.info,
               "path": "local" if ranks.local_path else "peer",
               "devices": len({(i["host"], i["uuid"]) for i in ranks.info}),
               "torch": torch.__version__, "command": " ".join(sys.argv),
               "checks": checks, "points": rows, "seconds": round(time.time() - t0, 1)}
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = ns.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, ns.out)
    ranks.barrier()
    ranks.close()
    ranks.dist.destroy_process_group()
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
