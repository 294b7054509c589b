"""One vocabulary: every command's --json and every JSON and CSV file it writes against the
schema docs/outputs.md documents (the test reads the document's tables):

- every key is documented, for its output or among the common keys (a key documented as
  ``parent.*`` has data for children, e.g. busy_s's resource classes; ``parent.**`` a whole
  subtree of data, whose keys only the unit rules below judge); a system figure keeps its
  system file's dotted key (``gpu.nvlink.latency_ns``), the one vocabulary with its own units;
- units in the key: no key ends in _B, _us, _ms or _ns, none is nbytes, size or seconds
  (the old names are allowed only as the documented aliases, beside their new name);
- every alias docs/outputs.md lists is one pksim_core.vocabulary.RENAMED knows, and an output
  that has an alias has its new name in the same object.

``pksim validate --report`` reads the committed measurement files (their report is one of
the outputs here; tests/validation/test_report_committed.py checks its numbers)."""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from pksim_cli.main import cli
from pksim_core.vocabulary import MOVED, RENAMED
from tests.validation.committed import COMMITTED, committed_bundle

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "outputs.md"
_MARK = re.compile(r"<!--\s*schema:\s*([\w\s-]+?)\s*-->")
_BAD = re.compile(r"(_B|_us|_ms|_ns)$|^(nbytes|size|seconds)$")

STUDY = """name = "tiny"
systems = ["dgx-h100"]
programs = ["allgather"]
[vary]
"gpu.nvlink.link_bandwidth_GBps" = ["2x"]
[[workload]]
name = "ar"
op = "all-reduce"
bytes = ["1MiB", "4MiB"]
world = 8
[[workload]]
name = "rs"
op = "gemm-rs"
m = 1024
n = 1024
k = 1024
world = 8
[plots]
kinds = ["time", "speedup", "breakdown", "roofline", "timeline", "sensitivity",
         "program-roofline", "program-gain"]
"""


def schema() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(section id -> documented keys, alias -> its new names) from docs/outputs.md: each
    table after a ``<!-- schema: ID [ID ...] -->`` line documents, in its first column, the
    keys of those outputs (``common``: of all); the table after ``<!-- schema: aliases -->``
    has old names, new names (pairwise when as many; ``*`` stands for any stem)."""
    keys: dict[str, set[str]] = {}
    aliases: dict[str, set[str]] = {}
    ids: list[str] = []
    for line in DOC.read_text().splitlines():
        mark = _MARK.search(line)
        if mark:
            ids = mark.group(1).split()
            continue
        if not line.startswith("|") or set(line) <= set("|-: ") or not ids:
            continue
        cells = line.strip("|").split("|")
        names = re.findall(r"`([^`]+)`", cells[0])
        if ids == ["aliases"]:
            new = re.findall(r"`([^`]+)`", cells[1])
            pairs = zip(names, new) if len(new) == len(names) else ((o, n) for o in names
                                                                    for n in new)
            for old, name in pairs:
                aliases.setdefault(old, set()).add(name)
            continue
        for i in ids:
            keys.setdefault(i, set()).update(names)
    return keys, aliases


def _new_names(key: str, aliases: dict[str, set[str]]) -> set[str] | None:
    """The new names of an old ``key`` (None: it is no alias); patterns: ``*_B``."""
    if key in aliases:
        return aliases[key]
    for old, new in aliases.items():
        if old.startswith("*") and key.endswith(old[1:]):
            return {key[: -len(old) + 1] + n[1:] for n in new}
    return None


def _walk(obj, free: set[str], deep: set[str], aliases: dict[str, set[str]],
          parent: str = "", data: bool = False):
    """(key, object holding it, whether it is data) for every key of ``obj``; an alias's
    value is its new key's, so only the new one is walked into."""
    if isinstance(obj, list):
        for item in obj:
            yield from _walk(item, free, deep, aliases, parent, data)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            is_data = data or parent in free
            yield key, obj, is_data
            if is_data or _new_names(key, aliases) is None or isinstance(value, dict) \
                    and key == "schedule":
                yield from _walk(value, free, deep, aliases, key, data or key in deep)


def check(output: str, obj, keys: dict[str, set[str]], aliases: dict[str, set[str]]
          ) -> list[str]:
    documented = keys.get(output, set()) | keys.get("common", set())
    free = {k[:-2] for k in documented if k.endswith(".*")}
    deep = {k[:-3] for k in documented if k.endswith(".**")}
    problems = []
    for key, holder, is_data in _walk(obj, free, deep, aliases):
        if "." in key:          # a system figure under its file's key (gpu.nvlink.latency_ns)
            continue
        new = _new_names(key, aliases)
        if key == "schedule" and isinstance(holder[key], dict):
            new = None          # the schedule itself; the alias is the label text's old name
        if new is not None and (new & set(holder) or not is_data):
            if not new & set(holder):
                problems.append(f"{output}: alias {key!r} without its new name "
                                f"({', '.join(sorted(new))})")
            continue
        if _BAD.search(key) and not (key == "size" and is_data):
            problems.append(f"{output}: {key!r} has no unit in its name (or the wrong one)")
        if not is_data and key not in documented and f"{key}.*" not in documented \
                and f"{key}.**" not in documented:
            problems.append(f"{output}: {key!r} is not in docs/outputs.md")
    return problems


def _csv(path: Path) -> dict:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return {column: None for column in next(csv.reader(lines[:1]), [])}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, list]:
    """Output id (a docs/outputs.md section) -> the objects every command gave for it."""
    tmp = tmp_path_factory.mktemp("outputs")
    runner = CliRunner()
    out: dict[str, list] = {}

    def run(section: str, args: list[str]) -> None:
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, f"pksim {' '.join(args)}: {result.output[-400:]}"
        out.setdefault(section, []).append(json.loads(result.stdout))   # notes go to stderr

    def files(section: str, pattern: str, where: Path) -> None:
        for path in sorted(where.glob(pattern)):
            obj = _csv(path) if path.suffix == ".csv" else json.loads(path.read_text())
            out.setdefault(section, []).append(obj)

    h100 = ["--system", "dgx-h100"]
    run("systems-list", ["systems", "list", "--json"])
    run("systems-show", ["systems", "show", "dgx-h100", "--json"])
    run("systems-check", ["systems", "check", str(ROOT / "docs/examples/h200-nvlink5.toml"),
                          "--json"])
    run("programs-list", ["programs", "list", "--json"])
    run("programs-show", ["programs", "show", "gemm-reducescatter", "--json"])
    for extra in (["--impl", "pk"], ["--impl", "nccl"], ["--world", "12", "--domains", "2"]):
        run("predict", ["predict", *h100, "--op", "all-reduce", "--bytes", "1MiB", "--json",
                        *extra])
    run("predict", ["predict", *h100, "--op", "gemm-rs", "--m", "1024", "--n", "1024", "--k",
                    "1024", "--json"])
    run("predict", ["predict", "--system", "h200-virtual", "--op", "all-gather", "--bytes",
                    "1MiB", "--world", "4", "--json"])
    run("predict-program", ["predict", "--program", "gemm-reducescatter", "--json"])
    run("search", ["search", *h100, "--op", "all-reduce", "--bytes", "1MiB", "--top", "2",
                   "--json"])
    run("search-program", ["search", "--program", "gemm-reducescatter", "--top", "2", "--json"])
    run("trace", ["trace", *h100, "--op", "all-reduce", "--bytes", "1MiB", "-o",
                  str(tmp / "t.json"), "--gantt", "--json"])
    run("trace", ["trace", *h100, "--op", "gemm-rs", "--m", "1024", "--n", "1024", "--k",
                  "1024", "-o", str(tmp / "f.json"), "--json"])
    run("trace-program", ["trace", "--program", "gemm-reducescatter", "-o",
                          str(tmp / "p.json"), "--gantt", "--json"])
    files("chrome-trace", "[tf].json", tmp)
    files("chrome-trace-program", "p.json", tmp)
    files("gantt", "*-gantt.*[nv]", tmp)
    run("env", ["env", "--json"])
    run("codegen", ["codegen", *h100, "--op", "all-reduce", "--bytes", "1MiB", "-o",
                    str(tmp / "gen"), "--json"])
    files("codegen", "gen/*.json", tmp)
    study = tmp / "study.toml"
    study.write_text(STUDY)
    run("whatif", ["whatif", "--study", str(study), "-o", str(tmp / "w"), "--json",
                   "--workers", "1"])
    files("results", "w/results.*", tmp)
    files("summary", "w/summary.csv", tmp)
    files("plot-data", "w/[!rs]*.[cj]s*", tmp)
    files("plot-data", "w/s[!u]*.[cj]s*", tmp)
    run("sweep", ["sweep", *h100, "--op", "all-reduce", "--bytes", "1MiB,4MiB", "-o",
                  str(tmp / "s"), "--json", "--workers", "1"])
    files("sweep-file", "s/sweep.*", tmp)
    files("plot-data", "s/[!s]*.[cj]s*", tmp)
    run("programs-report", ["programs", "report", "-o", str(tmp / "r"), "--program",
                            "allgather", "--json"])
    files("programs-report", "r/results.*", tmp)
    files("plot-data", "r/roofline-share.[cj]s*", tmp)
    run("validate-published", ["validate", "--published", "--json", "-o", str(tmp / "pub")])
    bundle = committed_bundle(tmp / "bundle")
    run("validate-report", ["validate", "--report", str(bundle), "--json", "-o",
                            str(tmp / "rep"), *[a for m in COMMITTED for a in ("--measured", m)]])
    files("validate-report", "rep/report.json", tmp)
    calibration = ROOT / "validation/data/calibration/h200-microbench-2026-12-03-run28.json.gz"
    run("calibrate", ["calibrate", "--from-json", str(calibration), "-o", str(tmp / "c.toml"),
                      "--json"])
    return out


EXPECTED = ("systems-list", "systems-show", "systems-check", "programs-list", "programs-show",
            "predict", "predict-program", "search", "search-program", "trace", "trace-program",
            "chrome-trace", "chrome-trace-program", "gantt", "env", "codegen", "whatif",
            "results", "summary", "plot-data", "sweep", "sweep-file", "programs-report",
            "validate-published", "validate-report", "calibrate")


def test_every_output_is_collected_and_documented(outputs):
    keys, _ = schema()
    assert set(outputs) == set(EXPECTED)
    assert not set(EXPECTED) - set(keys), "docs/outputs.md has no section for " + \
        ", ".join(sorted(set(EXPECTED) - set(keys)))


@pytest.mark.parametrize("section", EXPECTED)
def test_output_keys_follow_the_schema(outputs, section):
    keys, aliases = schema()
    problems = sorted({p for obj in outputs.get(section, []) for p in
                       check(section, obj, keys, aliases)})
    assert not problems, f"{len(problems)} problems, e.g.\n" + "\n".join(problems[:25])


def test_aliases_are_the_renames_the_code_makes():
    """Every rename pksim_core.vocabulary.RENAMED makes is in docs/outputs.md with its new name;
    the document's others are the contextual ones (a span's bytes) and systems show's."""
    _, aliases = schema()
    for old, new in RENAMED.items():
        assert new in aliases.get(old, ()), f"docs/outputs.md: {old} -> {new} is not listed"
    for new in MOVED.values():
        assert new in aliases["bytes"] and new in aliases["nbytes"]


def test_the_checker_finds_what_breaks_the_rules():
    keys = {"x": {"time_s", "busy_s.*", "label"}}
    assert check("x", {"time_s": 1.0, "busy_s": {"nvl_in": 1.0}, "label": "a"}, keys, {}) == []
    problems = check("x", {"time_us": 1.0, "nbytes": 4, "undocumented_s": 1.0,
                           "schedule": "a", "capacity_B": 1}, keys,
                     {"schedule": {"label"}, "*_B": {"*_bytes"}})
    assert len(problems) == 7 and any("time_us" in p for p in problems), problems
    assert any("'schedule' without its new name (label)" in p for p in problems)
    assert any("'capacity_B' without its new name (capacity_bytes)" in p for p in problems)
    assert check("x", {"label": "a", "schedule": "a"}, keys, {"schedule": {"label"}}) == []
