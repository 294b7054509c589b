"""Docs that cannot drift: every example of README.md and docs/guide/*.md agrees with what
the program prints (numbers within 2 %, words exactly; docs/run_examples.py), the NCCL
trace spans its prediction, and plots keep at most eight legend entries with distinct
colours. Examples marked ``slow`` run only with PKSIM_DOCS_SLOW=1 (``make docs`` runs them
all); the one slow example, the default what-if study (about a minute), is compared in
tests/golden/test_predictions.py with the tables the golden test's own run of it printed,
so that CI checks it without running the study twice."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from hwmodels.catalog import load_system
from pksim_core import plots
from pksim_core.gantt import gantt
from pksim_cli.main import cli
from pksim_core.study import figure
from tests.golden.test_predictions import is_default_study

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("run_examples", ROOT / "docs" / "run_examples.py")
run_examples = importlib.util.module_from_spec(_spec)
sys.modules["run_examples"] = run_examples
_spec.loader.exec_module(run_examples)

EXAMPLES = [ex for path in run_examples.FILES for ex in run_examples.examples(path)]
SLOW = os.environ.get("PKSIM_DOCS_SLOW") == "1"


def test_every_doc_has_examples():
    guide = sorted((ROOT / "docs" / "guide").glob("*.md"))
    assert list(run_examples.FILES) == [ROOT / "README.md", *guide] and len(guide) >= 5
    with_examples = {ex.path.relative_to(ROOT).as_posix() for ex in EXAMPLES}
    assert {"README.md", "docs/guide/default-study.md", "docs/guide/what-if.md",
            "docs/guide/programs.md", "docs/guide/sweeps-and-traces.md"} <= with_examples
    assert sum(not ex.slow for ex in EXAMPLES) >= 5


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda ex: f"{ex.path.name}:{ex.command[:60]}")
def test_example_output_matches_the_program(example):
    if is_default_study(example.command) and not SLOW:
        pytest.skip("the default study: tests/golden/test_predictions.py compares it with the "
                    "run the golden test makes anyway")
    if example.slow and not SLOW:
        pytest.skip("slow example: PKSIM_DOCS_SLOW=1 (or make docs) runs it")
    problem = run_examples.check(example)
    assert problem is None, problem + "  (run `make docs` and commit the docs)"


def test_the_default_study_block_is_checked_in_ci():
    """Exactly one example is the default study, and the golden test file checks it."""
    assert sum(is_default_study(ex.command) for ex in EXAMPLES) == 1
    assert not any(ex.slow and not is_default_study(ex.command) for ex in EXAMPLES), \
        "a slow example other than the default study would go unchecked in CI"


def test_comparison_tolerates_two_percent_not_more():
    diff = run_examples.first_difference
    assert diff("time 5.36 ms (31.6 s)", "time 5.40 ms (2.0 s)") is None
    assert "5.36" in diff("time 5.36 ms", "time 5.6 ms")
    assert "'ms'" in diff("time 5.36 ms", "time 5.36 us")
    assert "tokens" in diff("a b", "a b c")


def test_nccl_trace_spans_its_prediction(tmp_path):
    path = tmp_path / "t.json"
    result = CliRunner().invoke(cli, ["trace", "--system", "dgx-h100", "--op", "all-reduce",
                                      "--bytes", "16MiB", "--impl", "nccl", "-o", str(path)])
    assert result.exit_code == 0, result.output
    trace = json.loads(path.read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    end = max(e["ts"] + e["dur"] for e in spans)
    assert end == pytest.approx(trace["otherData"]["time_s"] * 1e6, rel=1e-6)


def test_legend_keeps_eight_distinct_colours_and_sums_the_rest():
    weights = {f"r{i}": float(20 - i) for i in range(12)}
    entry, colours = plots.legend_groups(weights)
    assert len(colours) == plots.MAX_LEGEND and plots.OTHER in colours
    assert len(set(colours.values())) == len(colours)
    assert [k for k in entry if entry[k] == plots.OTHER] == [f"r{i}" for i in range(7, 12)]
    few = plots.legend_groups({"a": 1.0, "b": 2.0})[1]
    assert list(few) == ["b", "a"] and plots.OTHER not in few


def test_breakdown_and_gantt_legends_are_capped():
    items = [{"group": "g", "label": f"x{j}", "time_s": 10e-6,
              "busy_s": {f"res{i}": (i + 1) * 1e-6 for i in range(11)}} for j in range(2)]
    events = [{"track": "t", "name": f"p{i}", "group": f"p{i}", "start_s": i * 1e-6,
               "end_s": (i + 1) * 1e-6} for i in range(10)]
    for fig in (plots.breakdown(items, "b"), gantt(events, "g")):
        legend = fig.legends[0]
        labels = [t.get_text() for t in legend.get_texts()]
        assert len(labels) <= plots.MAX_LEGEND and labels[-1] == plots.OTHER
        colours = {tuple(h.get_facecolor()) for h in legend.legend_handles}
        assert len(colours) == len(labels)


@pytest.mark.parametrize("path", run_examples.CLAIM_FILES, ids=lambda p: p.name)
def test_every_claimed_number_is_what_its_rule_gives(path):
    """A number written with its rule (``1.07-1.15x<!--= range speed-up | ... -->``) is what
    the rule computes from the tables, outputs and system files it names."""
    problems = run_examples.check_claims(path)
    assert not problems, "\n".join(problems) + "\n(run `make docs` and commit the docs)"


def test_claims_are_where_the_issue_found_prose_wrong():
    """The sentences that drifted before are claims now, not typed numbers."""
    text = {p.relative_to(ROOT / "docs").as_posix(): p.read_text()
            for p in run_examples.CLAIM_FILES if p.parent != ROOT}
    for name, rule in [("guide/default-study.md", "workload = tp-allreduce | ranks = 8"),
                       ("guide/default-study.md", "workload = allreduce-1GiB"),
                       ("guide/default-study.md", "workload = mlp-down-gemm-rs, mlp-up-ag-gemm"),
                       ("guide/what-if.md", "table = moe-alltoall"),
                       ("guide/sweeps-and-traces.md", "table = sweep --system"),
                       ("systems.md", "figure dgx-h100 gpu.nvlink.latency_ns"),
                       ("programs.md", "table = docs/programs/report.md"),
                       ("programs.md", "table = bench/results-programs-2026-12-04.json"),
                       ("systems.md", "figure hgx-h200 gpu.l2.capacity_MiB"),
                       ("guide/sweeps-and-traces.md", "title ~ vr-nvl144 | size = 16MiB")]:
        assert rule in text[name], (name, rule)


def test_claim_rules_compute_what_they_say():
    guide = run_examples.ROOT / "docs" / "guide" / "default-study.md"
    table = "table = whatif -o default | title ~ dgx-h100"
    assert run_examples.evaluate(f"count workload | {table}", guide) == "16"
    assert run_examples.evaluate(f"range speed-up | {table} | workload = tp-allreduce",
                                 guide) == "1.09-1.16x"
    assert run_examples.evaluate(f"value time (us) | {table} | workload = allreduce-1GiB | "
                                 f"in ms", guide) == "3.98"
    assert run_examples.evaluate("figure dgx-h100 gpu.sm.count", guide) == "132"
    bench = "bench/results-programs-2026-12-04.json"
    assert run_examples.evaluate(rf'grep "wall_s": ([\d.]+) | table = {bench}', guide) == \
        str(json.loads((ROOT / bench).read_text())["runs"][0]["wall_s"])
    with pytest.raises(ValueError, match="rows match"):
        run_examples.evaluate(f"value speed-up | {table}", guide)


def test_systems_overview_table_is_the_catalog():
    """docs/systems.md's overview table against `pksim systems list --json`: GPUs per domain,
    dies, BF16 PFLOP/s, HBM TB/s, NVLink GB/s, switch tiers, in-switch reduction, guesses."""
    result = CliRunner().invoke(cli, ["systems", "list", "--json"])
    systems = {r["name"]: r for r in json.loads(result.output)}
    (table,) = [t for t in run_examples.tables((ROOT / "docs" / "systems.md").read_text())
                if t.title == "Overview"]
    assert {row["system"].strip("`") for row in table.rows} == set(systems)
    first = run_examples._number
    for row in table.rows:
        s = systems[row["system"].strip("`")]
        got = [int(row["GPUs per domain"]), int(row["dies per GPU"]),
               first(row["BF16 dense PFLOP/s per GPU"]), first(row["HBM TB/s"]),
               int(first(row["switch tiers (GPUs per group)"])), int(row["guesses"])]
        want = [s["gpus_per_domain"], s["dies_per_gpu"], float(f"{s['bf16_dense_PFLOPs']:.3g}"),
                float(f"{s['hbm_TBps']:.3g}"), s["switch_tiers"], s["assumed_figures"]]
        assert got == want, (row["system"], got, want)
        link = row["NVLink GB/s per GPU per direction"]
        assert link.startswith("none") or first(link) == s["nvlink_GBps_per_direction"]
        assert row["in-switch reduction"] == ("yes" if s["in_switch_reduction"] else
                                              "n/a" if s["switch_tiers"] == 0 else "no")


# ---- the pages' shape: length and links ---------------------------------------------------
MAX_PAGE_LINES = 500
# Pages a program writes whole, with the program that writes them (their length is the data's).
GENERATED_PAGES = {"docs/validation/calibration.md": "validation/calibrate/report.py",
                   "docs/validation/published.md": "pksim validate --published --write-docs"}
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.*?) *#*$")


def test_every_page_is_at_most_500_lines():
    long = {p.relative_to(ROOT).as_posix(): n for p in PAGES
            if (n := len(p.read_text().splitlines())) > MAX_PAGE_LINES}
    for page, writer in GENERATED_PAGES.items():
        assert (ROOT / page).exists() and writer.split()[-1] in (ROOT / page).read_text(), page
        long.pop(page, None)
    assert long == {}, f"pages over {MAX_PAGE_LINES} lines (split them by topic): {long}"


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`|\*\*|<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """A page's anchors: its headings' slugs (repeats numbered -1, -2, ...) and ``<a id>``."""
    found, seen, fenced = set(re.findall(r'<a (?:id|name)="([^"]+)"', text)), {}, False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        if not fenced and (m := _HEADING.match(line)):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(text: str) -> list[str]:
    """The relative links of a page's prose (not of its code blocks or inline code)."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return [t for t in _LINK.findall(prose) if not re.match(r"[a-z][a-z+.-]*:", t)]


def broken_links(page: Path) -> list[str]:
    out = []
    for target in links(page.read_text()):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            out.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            out.append(f"{target} (no such anchor)")
    return out


def test_the_link_checker_finds_a_missing_file_and_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# Top `x` (y)!\n## Top `x` (y)!\n<a id=\"d7\"></a>\n")
    (tmp_path / "b.md").write_text(
        "[ok](a.md#top-x-y) [ok](a.md#top-x-y-1) [ok](a.md#d7) [ok](#here)\n## Here\n"
        "[bad](a.md#nope) [bad](c.md) `[code](c.md)` [web](https://x.org/c.md)\n"
        "```\n[fenced](c.md)\n```\n")
    assert broken_links(tmp_path / "b.md") == ["a.md#nope (no such anchor)",
                                               "c.md (no such file)"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(page):
    assert broken_links(page) == []


def test_decision_records_are_one_file_each_with_an_index():
    """docs/decisions/Dn.md per record, numbered as code cites them; the index lists every
    number up to the last, a missing one marked "not filed"."""
    folder = ROOT / "docs" / "decisions"
    numbers = sorted(int(p.stem[1:]) for p in folder.glob("D*.md"))
    assert len(numbers) >= 68 and not (ROOT / "docs" / "decisions.md").exists()
    index = (folder / "README.md").read_text()
    for n in range(1, numbers[-1] + 1):
        (row,) = [r for r in index.splitlines() if re.match(rf"\| \[?D{n}\b", r)]
        if n in numbers:
            title = (folder / f"D{n}.md").read_text().splitlines()[0]
            assert title.startswith(f"# D{n}. ") and f"](D{n}.md)" in row, row
        else:
            assert "not filed" in row, row
    assert {55, 59} <= set(range(1, numbers[-1] + 1)) - set(numbers)


def _tree_text_files():
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and not d.endswith(".egg-info")
                   and d not in ("build", "__pycache__", "node_modules")]
        for name in files:
            if name.endswith((".py", ".md", ".cu", ".cuh", ".toml", ".sh")) or name == "Makefile":
                yield Path(folder) / name


def test_every_decision_citation_names_a_record_file():
    """Code and docs cite a record as docs/decisions/Dn.md (the old single file is gone)."""
    cited, stale = set(), []
    for path in _tree_text_files():
        text = path.read_text(errors="replace")
        if path != Path(__file__) and "decisions.md" in text:
            stale.append(path.relative_to(ROOT).as_posix())
        cited |= {int(n) for n in re.findall(r"decisions/D(\d+)\.md", text)}
    assert stale == [], f"cite docs/decisions/Dn.md, not decisions.md: {stale}"
    folder = ROOT / "docs" / "decisions"
    assert len(cited) > 40 and {n for n in cited if not (folder / f"D{n}.md").exists()} == set()


def test_validation_calibration_table_is_the_calibration_pages():
    """docs/VALIDATION.md's residual table (points, median (max) |error| per microbenchmark)
    against docs/validation/calibration.md's, which validation/calibrate/report.py generates:
    every microbenchmark of the page is listed, with its numbers."""
    docs = ROOT / "docs"
    (page,) = [t for t in run_examples.tables((docs / "validation" / "calibration.md").read_text())
               if t.title == "Residual per microbenchmark"]
    want = {r["microbenchmark"].strip("`"): (r["points"], r["median abs. error"],
                                             r["max abs. error"]) for r in page.rows}
    (table,) = [t for t in run_examples.tables((docs / "VALIDATION.md").read_text())
                if t.title == "Calibration"]
    got = {}
    for row in table.rows:
        names = [n.strip(" `") for n in row["microbenchmark"].split(",")]
        points = [p.strip() for p in row["points"].split(",")]
        errors = re.findall(r"\*?\*?([\d.]+) %\*?\*? \(([\d.]+) %\)", row["median (max)"])
        if row["median (max)"] == "measured only":
            errors = [("-", "-")]
        assert len(names) == len(points) == len(errors), row
        for name, n, (median, worst) in zip(names, points, errors):
            got[name] = (n, median if median == "-" else f"{median}%",
                         worst if worst == "-" else f"{worst}%")
    assert got == want


def test_validation_remote_path_table_is_the_refitted_file():
    """docs/VALIDATION.md's `calibrate --ranks 4` table: each fitted figure is the refitted
    file's to the digits written, and the last column is dgx-h100's figure."""
    fitted = tomllib.loads((ROOT / "validation" / "data" / "cited" /
                            "h200-single-ranks4-2026-12-04.toml").read_text())
    remote = fitted["gpu"]["transfer_remote"]
    dgx = load_system("dgx-h100")
    (table,) = [t for t in run_examples.tables((ROOT / "docs" / "VALIDATION.md").read_text())
                if t.title.startswith("The remote path")]
    seen = 0
    for row in table.rows:
        first, *rest = re.findall(r"`?(\w+)`?", row["figure (local path)"].replace(" / ", " "))
        keys = [first] + [f"{r}_per_sm_GBps" for r in rest]
        written = row["fitted"].split(" / ")
        assert len(written) == len(keys), row
        for key, text in zip(keys, written):
            digits = len(text.partition(".")[2])
            assert round(remote[key]["value"], digits) == float(text), (key, text)
            seen += 1
        theirs = float(run_examples._number(row["dgx-h100's NVLink figure"]))
        assert theirs == float(f"{figure(dgx, f'gpu.transfer_remote.{keys[0]}'):.3g}"), key
    assert seen == 7


def test_validation_remote_path_residuals_are_the_refitted_files():
    """The sentence under that table, "TMA write 3.9 % (45 %), read ...; registers ... and
    ...", against the refitted file's [calibration.residual] groups, to the digits written."""
    fitted = tomllib.loads((ROOT / "validation" / "data" / "cited" /
                            "h200-single-ranks4-2026-12-04.toml").read_text())
    groups = {g["group"]: g for g in fitted["calibration"]["residual"].values()}
    text = " ".join((ROOT / "docs" / "VALIDATION.md").read_text().split())
    said = re.search(r"TMA write (.*?); registers (.*?); copy engine", text)
    pairs = re.findall(r"([\d.]+) % \(([\d.]+) %\)", said.group(1) + " " + said.group(2))
    names = ["tma write", "tma read", "tma reduce", "register write", "register read"]
    assert len(pairs) == len(names)
    for name, (median, worst) in zip(names, pairs):
        group = groups[f"{name}, one direction"]
        for written, value in ((median, group["median_abs_error"]),
                               (worst, group["max_abs_error"])):
            digits = len(written.partition(".")[2])
            assert round(100 * value, digits) == float(written), (name, written, value)


# VALIDATION.md's published-measurement curves and the corpus entries they are
CURVES = {"A h200": "h200-8gpu-allreduce-nvls-graph",
          "B h200": "h200-8gpu-allreduce-nvlsoff-graph",
          "C h200": "h200-8gpu-allreduce-nvls-eager", "D h200": "h200-8gpu-allgather-eager",
          "E h200": "h200-8gpu-reducescatter-eager",
          "h100 in-place": "h100-8gpu-allreduce-inplace-blog",
          "a100": "a100-8gpu-allreduce-eager", "b200 all-reduce": "b200-8gpu-allreduce",
          "b200 2-GPU": "b200-2gpu-allreduce-ring-ll128-nccl-pr2343",
          "h100 Megatron": "h100-8gpu-ag-rs-symmetric-megatron-pr5596",
          "h100 helion": "h100-8gpu-allreduce-oneshot-helion245"}


def test_validation_published_table_is_the_published_page():
    """docs/VALIDATION.md's median / p90 |error| per curve and band, and met or missed,
    against docs/validation/published.md (which `pksim validate --published --write-docs`
    writes)."""
    docs = ROOT / "docs"
    page = {r["entry"]: r for t in run_examples.tables((docs / "validation" / "published.md")
                                                        .read_text()) if "entry" in t.headers
            for r in t.rows}
    (table,) = [t for t in run_examples.tables((docs / "VALIDATION.md").read_text())
                if t.title.startswith("Multi-GPU") and "curve" in t.headers]
    assert len(table.rows) == len(CURVES)
    for row in table.rows:
        (entry,) = [e for prefix, e in CURVES.items() if row["curve"].startswith(prefix)]
        theirs = page[entry]
        for band, key in zip(table.headers[1:5], [h for h in theirs if "med/p90/max" in h]):
            want = "-" if theirs[key] == "-" else " / ".join(theirs[key].split("/")[:2])
            assert row[band] == want, (row["curve"], band, row[band], want)
        assert row["target"] == theirs["target"].lower(), row["curve"]
