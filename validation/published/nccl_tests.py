"""A parser of nccl-tests output (``all_reduce_perf`` and friends) and of an
``NCCL_DEBUG_SUBSYS=TUNING`` log, for turning a user's own run into a corpus entry.

nccl-tests prints ``#`` header lines (``# nccl-tests version ...`` in recent versions;
``# nThread 1 nGpus 8 ... warmup iters: 5 iters: 20 ... graph: 0``; one
``#  Rank  0 Group  0 Pid 123 on host device  0 [0x18] NVIDIA H100 80GB HBM3`` line per
rank), often ``NCCL version 2.x.y+cudaZ``, a column header (``#  size  count  type  redop
root  time  algbw  busbw  #wrong  time ...``: ``redop`` / ``root`` are absent in old
versions and in some tests) and one row per size: out-of-place then in-place. Values are
kept as printed (``Decimal``); ``#wrong`` may be ``N/A``."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

from hwmodels.errors import ConfigError

_NCCL_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
_LIBRARY = re.compile(r"nccl-library=(\d+)")
_TESTS_VERSION = re.compile(r"nccl-tests version (\S+)")
_DEVICE = re.compile(r"#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+"
                     r"(\d+)\s+\[[^\]]*\]\s+(.+?)\s*$")
_OP = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoall|"
                 r"sendrecv|gather|scatter|hypercube)_perf\b")
_HEADER_INT = {"nThread": r"nThread\s+(\d+)", "nGpus": r"nGpus\s+(\d+)",
               "warmup": r"warmup iters:\s*(\d+)", "iters": r"(?<!warmup )(?<!agg )iters:\s*(\d+)",
               "graph": r"graph:\s*(\d+)"}
_CHOICE = re.compile(r"(\w+): (\d+) Bytes -> Algo (\w+) proto (\w+)"
                     r"(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?")
_PAIR = re.compile(r"(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)")
_INFO = re.compile(r"^.*?NCCL INFO\s?")


@dataclass(frozen=True)
class Half:
    """The out-of-place or in-place columns of one row, as printed."""
    time_us: Decimal
    algbw_GBps: Decimal
    busbw_GBps: Decimal
    wrong: str


@dataclass(frozen=True)
class ResultRow:
    bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    out_of_place: Half
    in_place: Half | None


@dataclass(frozen=True)
class NcclTestsRun:
    rows: tuple[ResultRow, ...]
    header: dict = field(default_factory=dict)      # nThread, nGpus, warmup, iters, graph
    devices: tuple[tuple[int, int, str, str], ...] = ()   # (rank, pid, host, device name)
    nccl_version: str | None = None
    tests_version: str | None = None
    op: str | None = None

    @property
    def gpu(self) -> str | None:
        names = {d[3] for d in self.devices}
        return names.pop() if len(names) == 1 else (" / ".join(sorted(names)) or None)

    @property
    def processes(self) -> str | None:
        """``one`` (one pid drives every rank), ``per-gpu`` (a pid per rank), else None."""
        pids = {(d[2], d[1]) for d in self.devices}
        if len(self.devices) < 2:
            return None
        if len(pids) == 1:
            return "one"
        return "per-gpu" if len(pids) == len(self.devices) else None

    @property
    def launch_mode(self) -> str | None:
        graph = self.header.get("graph")
        return None if graph is None else ("graph" if graph > 0 else "eager")


def _num(text: str, where: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ConfigError(f"{where}: {text!r} is not a number") from None
    if not value.is_finite():
        raise ConfigError(f"{where}: {text!r} is not a finite number")
    return value


def _columns(line: str) -> list[str] | None:
    tokens = line.lstrip("#").split()
    return tokens if tokens[:2] == ["size", "count"] else None


def parse_nccl_tests(text: str, name: str = "nccl-tests output") -> NcclTestsRun:
    """Parse nccl-tests stdout; raises ``ConfigError`` (naming ``name`` and the line)."""
    header: dict = {}
    devices = []
    nccl_version = tests_version = op = None
    columns: list[str] | None = None
    rows: list[ResultRow] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if m := _NCCL_VERSION.search(line):
            nccl_version = nccl_version or m.group(1)
        if m := _LIBRARY.search(line):     # nccl-library=22304 -> 2.23.4
            code = int(m.group(1))
            nccl_version = nccl_version or f"{code // 10000}.{code // 100 % 100}.{code % 100}"
        if m := _TESTS_VERSION.search(line):
            tests_version = m.group(1)
        if op is None and (m := _OP.search(line)):
            op = m.group(1)
        if not line.startswith("#"):
            if columns is None or not line[0].isdigit():
                continue
            rows.append(_row(line.split(), columns, f"{name}:{number}"))
            continue
        if m := _DEVICE.match(line):
            devices.append((int(m.group(1)), int(m.group(2)), m.group(3), m.group(5)))
            continue
        if "Collective test starting" in line and (m := re.search(r"starting:\s*(\w+)", line)):
            op = re.sub(r"_perf$", "", m.group(1))
        for key, pattern in _HEADER_INT.items():
            if key not in header and (m := re.search(pattern, line)):
                header[key] = int(m.group(1))
        columns = _columns(line) or columns
    if not rows:
        raise ConfigError(f"{name}: no nccl-tests result rows found (is it all_*_perf output?)")
    sizes = [r.bytes for r in rows]
    if sizes != sorted(set(sizes)):
        raise ConfigError(f"{name}: sizes are not increasing ({sizes})")
    return NcclTestsRun(tuple(rows), header, tuple(devices), nccl_version, tests_version, op)


def _row(tokens: list[str], columns: list[str], where: str) -> ResultRow:
    has = {c: c in columns for c in ("type", "redop", "root")}
    lead = 2 + sum(has.values())
    if len(tokens) < lead + 4:
        raise ConfigError(f"{where}: a result row needs {lead + 4} columns, got {tokens}")
    fields = dict(zip(["size", "count"] + [c for c in has if has[c]], tokens[:lead]))
    halves = []
    for start in (lead, lead + 4):
        part = tokens[start:start + 4]
        if len(part) < 4:
            break
        halves.append(Half(*(_num(t, where) for t in part[:3]), part[3]))
    return ResultRow(int(_num(fields["size"], where)), int(_num(fields["count"], where)),
                     fields.get("type", "unknown"), fields.get("redop"),
                     int(fields["root"]) if "root" in fields else None,
                     halves[0], halves[1] if len(halves) > 1 else None)


@dataclass(frozen=True)
class TuningLog:
    """NCCL's cost table (coll, algo, proto, latency µs, algbw GB/s) and its per-call picks."""
    table: tuple[tuple[str, str, str, Decimal, Decimal], ...]
    choices: tuple[tuple[str, int, str, str, int | None, int | None], ...]


def parse_tuning(text: str, name: str = "tuning log") -> TuningLog:
    """Parse an ``NCCL_DEBUG_SUBSYS=TUNING`` log: the ``Algorithm`` / ``Protocol`` blocks
    with ``lat/bw`` cells per collective, and ``... Bytes -> Algo A proto P`` lines (each
    (coll, bytes) kept once, the first)."""
    table = []
    choices: dict[tuple[str, int], tuple] = {}
    algos: list[str] = []
    protos: list[str] = []
    for raw in text.splitlines():
        if m := _CHOICE.search(raw):
            coll, size = m.group(1), int(m.group(2))
            lo = int(m.group(5)) if m.group(5) else None
            hi = int(m.group(6)) if m.group(6) else None
            choices.setdefault((coll, size), (coll, size, m.group(3), m.group(4), lo, hi))
            continue
        line = _INFO.sub("", raw).strip()
        head, bar, rest = line.partition("|")
        head = head.strip()
        if not bar:
            continue
        if head == "Algorithm":
            algos = [a.strip() for a in rest.split("|") if a.strip()]
            protos = []
        elif head == "Protocol":
            protos = rest.replace("|", " ").split()
        elif algos and protos and (pairs := _PAIR.findall(rest)):
            per = len(protos) // len(algos)
            if len(pairs) != len(protos) or per == 0:
                raise ConfigError(f"{name}: {head}: {len(pairs)} lat/bw cells for "
                                  f"{len(protos)} protocols")
            for i, (lat, bw) in enumerate(pairs):
                table.append((head, algos[i // per], protos[i], Decimal(lat), Decimal(bw)))
    if not table and not choices:
        raise ConfigError(f"{name}: no TUNING table and no '... Bytes -> Algo' lines found "
                          f"(run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING)")
    return TuningLog(tuple(table), tuple(sorted(choices.values(), key=lambda c: (c[0], c[1]))))


def read_text(path: Path | str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
