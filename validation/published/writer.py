"""A corpus entry written from a user's nccl-tests run (``pksim validate --published --add``).

``entry_text`` renders TOML by hand (no writer dependency) with the printed digits kept;
the text is parsed back with the strict loader before it is written, so a written file
always loads."""
from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from hwmodels.errors import ConfigError
from validation.published.corpus import Entry, parse_entry
from validation.published.nccl_tests import NcclTestsRun, TuningLog

SIZE_MEANS = {"all_gather": "total gathered bytes (count x sizeof(dtype) x ranks), as nccl-tests prints it",
              "reduce_scatter": "total input bytes (count x sizeof(dtype) x ranks), as nccl-tests prints it"}
DEFAULT_SIZE_MEANS = "bytes of each rank's buffer (count x sizeof(dtype)), as nccl-tests prints it"
TIMING = "nccl-tests: wall time of iters back-to-back launches / iters (per graph launch with -G)"


@dataclass(frozen=True)
class EntryMeta:
    """What the log does not say, given by options or prompts."""
    name: str
    system: str
    source: str
    nccl_version: str
    launch: str
    processes: str
    nvls: str
    op: str


def _s(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)     # a JSON string is a TOML basic string


def _row(size: int, half) -> str:
    return (f"  {{ bytes = {size}, time_us = {half.time_us}, algbw_GBps = {half.algbw_GBps}, "
            f"busbw_GBps = {half.busbw_GBps} }},")


def _title(meta: EntryMeta, log_name: str) -> str:
    where = f", {log_name}" if log_name else ""
    return f"{meta.op} on {meta.system} (user run{where})"


def entry_text(run: NcclTestsRun, meta: EntryMeta, tuning: TuningLog | None = None,
               log_name: str = "") -> str:
    dtypes = {r.dtype for r in run.rows}
    redops = {r.redop for r in run.rows if r.redop}
    hosts = {d[2] for d in run.devices}
    lines = [f"name = {_s(meta.name)}", 'kind = "curve"', 'role = "judge"',
             f"title = {_s(_title(meta, log_name))}",
             "", "[source]", f"text = {_s(meta.source)}", "", "[system]",
             f"name = {_s(meta.system)}", f"gpu = {_s(run.gpu or 'unknown')}"]
    if run.devices:
        lines.append(f"gpus = {len(run.devices)}")
        lines.append(f"nodes = {len(hosts)}")
    lines += ["", "[launch]", f"nccl_version = {_s(meta.nccl_version)}",
              f"mode = {_s(meta.launch)}", f"processes = {_s(meta.processes)}"]
    if run.tests_version:
        lines.append(f"nccl_tests_version = {_s(run.tests_version)}")
    for key, toml_key in (("warmup", "warmup"), ("iters", "iters")):
        if key in run.header:
            lines.append(f"{toml_key} = {run.header[key]}")
    if run.header.get("graph"):
        lines.append(f"graph_launches = {run.header['graph']}")
    lines += ["", "[environment]", f"nvls = {_s(meta.nvls)}", "", "[conventions]",
              f"op = {_s(meta.op)}", 'placement = "out-of-place"',
              f"dtype = {_s(dtypes.pop() if len(dtypes) == 1 else 'unknown')}",
              f"redop = {_s(redops.pop() if len(redops) == 1 else 'none' if not redops else 'unknown')}",
              f"size_means = {_s(SIZE_MEANS.get(meta.op, DEFAULT_SIZE_MEANS))}",
              f"timing = {_s(TIMING)}", "", "[[series]]", 'label = "out-of-place"', "rows = ["]
    lines += [_row(r.bytes, r.out_of_place) for r in run.rows] + ["]"]
    if all(r.in_place for r in run.rows):
        lines += ["", "[[series]]", 'label = "in-place"', 'placement = "in-place"', "rows = ["]
        lines += [_row(r.bytes, r.in_place) for r in run.rows] + ["]"]
    if tuning:
        for coll, algo, proto, lat, bw in tuning.table:
            lines += ["", "[[table]]", f"coll = {_s(coll)}", f"algo = {_s(algo)}",
                      f"proto = {_s(proto)}", f"latency_us = {lat}", f"algbw_GBps = {bw}"]
        for coll, size, algo, proto, lo, hi in tuning.choices:
            lines += ["", "[[choice]]", f"coll = {_s(coll)}", f"bytes = {size}",
                      f"algo = {_s(algo)}", f"proto = {_s(proto)}", f"nvls = {_s(meta.nvls)}",
                      'from = "log"']
            if lo is not None:
                lines += [f"channel_lo = {lo}", f"channel_hi = {hi}"]
    return "\n".join(lines) + "\n"


def write_entry(text: str, out: Path, force: bool) -> Entry:
    """Check ``text`` with the strict loader, then write it to ``out`` (never over an
    existing file unless ``force``)."""
    if out.exists() and not force:
        raise ConfigError(f"{out} exists (give --force to overwrite it)")
    if out.suffix != ".toml":
        raise ConfigError(f"-o {out}: a corpus entry is a .toml file")
    entry = parse_entry(tomllib.loads(text, parse_float=Decimal), out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return entry
