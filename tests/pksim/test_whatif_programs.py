"""What-if studies over programs: a study's ``programs`` (pksim_core.study_programs), their rows
(pksim_core.runner.program_fill), tables, files and plots, --resume, and the errors (few, small
programs: each prediction takes a tenth of a second or less)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError
from pksim_core.runner import RunTask, attach_baselines, run_task, tasks_for
from pksim_core.study import Case, SystemVariant, figure, find_study, load_study, load_variants
from pksim_core.study_programs import PROGRAM_OP
from tests.pksim.helpers import interrupt_after, one_line_error, run, write

SMALL = ["allgather-gemm", "reducescatter-rmsnorm"]
STUDY = """
name = "progs"
title = "programs"
systems = ["dgx-h100"]
programs = ["allgather-gemm", "reducescatter-rmsnorm"]
[[workload]]
name = "ar"
op = "all-reduce"
bytes = ["1MiB", "4MiB"]
world = 8
[plots]
kinds = ["time", "program-roofline", "program-gain"]
"""


# ---- the format ---------------------------------------------------------------------------
def test_programs_load_beside_workloads_and_alone(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "ag.toml").write_text(
        (Path(__file__).parents[2] / "pksim_core/programs/shipped/allgather.toml").read_text()
        .replace('name = "allgather"', 'name = "my-allgather"'))
    study = load_study(write(tmp_path, STUDY.replace(
        '"reducescatter-rmsnorm"]', '"reducescatter-rmsnorm", "mine/ag.toml"]')))
    assert [e.name for e in study.programs] == SMALL + ["my-allgather"]
    mine = study.programs[-1]
    assert mine.given == "mine/ag.toml" and mine.ref == str((tmp_path / "mine/ag.toml").resolve())
    assert (mine.world, mine.covers) == (8, (2,))
    only = load_study(write(tmp_path, 'systems = ["dgx-h100"]\nprograms = ["allgather"]\n',
                            "only.toml"))
    assert not only.workloads and [e.ref for e in only.programs] == ["allgather"]
    case = Case.of_program(only.programs[0])
    assert case.is_program and case.op == PROGRAM_OP and case.world == 8
    assert case.label() == "program allgather x8"


def test_shipped_programs_study():
    study = find_study("programs-whatif")
    assert study.systems == ("dgx-h100", "gb200-nvl72") and not study.workloads
    assert len(study.programs) == 6 and {k for k, _ in study.vary} == {
        "gpu.nvlink.link_bandwidth_GBps", "gpu.sm.count"}


# ---- the rows are pksim predict --program's, exactly ----------------------------------------
def test_program_rows_equal_predict_program_exactly(tmp_path):
    """Base and a what-if variant: each row's baseline, best, roofline and both shares equal
    `pksim predict --program NAME --system S [--set ...] --json` to the last bit (the same
    functions). And the roofline of `allgather` is its closed form: it all-gathers an 8 x
    1024 x 1024 bf16 output (16 MiB) over 8 ranks, so each GPU receives 7/8 of it through
    its 18 x 25 GB/s of NVLink: 7/8 x 16777216 B / 450e9 B/s = 32.62 us."""
    study = write(tmp_path, STUDY.replace('"reducescatter-rmsnorm"]',
                                          '"reducescatter-rmsnorm", "allgather"]'))
    out = tmp_path / "out"
    result = run(["whatif", "--study", str(study), "-o", str(out), "--workers", "1",
                  "--vary", "gpu.nvlink.link_bandwidth_GBps=2x", "--json"])
    assert result.exit_code == 0, result.output
    entries = [e for e in json.loads(result.output)["rows"] if e["op"] == PROGRAM_OP]
    assert len(entries) == 6 and all(e["status"] == "ok" for e in entries)
    rows = json.loads((out / "results.json").read_text())["rows"]
    for e in entries:
        extra = [] if e["variant"] == "base" else ["--set", "gpu.nvlink.link_bandwidth_GBps=50"]
        got = run(["predict", "--program", e["workload"], "--system", "dgx-h100", "--json"]
                  + extra)
        assert got.exit_code == 0, got.output
        want = json.loads(got.output)
        assert (e["baseline_s"], e["time_s"], e["roofline_s"], e["speedup"]) == (
            want["baseline_s"], want["best_s"], want["roofline_s"], want["speedup"])
        assert e["bound_resource"] == want["roofline_resource"]
        assert e["pct_of_roofline"] == want["best_pct_of_roofline"]
        assert e["baseline_pct_of_roofline"] == want["baseline_pct_of_roofline"]
        nccl = [r for r in rows if r["workload"] == e["workload"] and r["impl"] == "nccl"
                and r["variant"] == e["variant"]]
        assert [r["time_s"] for r in nccl] == [want["baseline_s"]]
        assert nccl[0]["pct_of_roofline"] == want["baseline_pct_of_roofline"]
        assert nccl[0]["roofline_terms_s"] == want["roofline_terms_s"]
    allgather = next(e for e in entries if e["workload"] == "allgather"
                     and e["variant"] == "base")
    assert allgather["roofline_s"] == pytest.approx(7 / 8 * 16777216 / 450e9, rel=1e-12)
    assert allgather["bound_resource"] == "nvlink"
    assert allgather["binding_figure"] == "gpu.nvlink.link_bandwidth_GBps"


def test_program_files_tables_and_plots(tmp_path):
    study = write(tmp_path, STUDY)
    out = tmp_path / "out"
    result = run(["whatif", "--study", str(study), "-o", str(out), "--workers", "1",
                  "--vary", "gpu.nvlink.link_bandwidth_GBps=2x"])
    assert result.exit_code == 0, result.output
    assert "programs: programs on dgx-h100 (baseline: PyTorch + NCCL)" in result.output
    assert "what if, programs on dgx-h100: one change at a time" in result.output
    assert "pksim %roof" in result.output and "baseline gain" in result.output
    with (out / "results.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    programs = [r for r in rows if r["op"] == PROGRAM_OP]
    assert len(programs) == 2 * 2 * 2            # programs x variants x impls
    for column in ("program", "roofline_s", "pct_of_roofline", "roofline_terms_s"):
        assert all(r[column] for r in programs), column
    # the pk row has the baseline's share beside its own; the nccl row is the baseline
    assert [bool(r["baseline_pct_of_roofline"]) for r in programs] == [
        r["impl"] == "pk" for r in programs]
    ops = [r for r in rows if r["op"] != PROGRAM_OP]
    assert ops and not any(r["roofline_s"] for r in ops)      # null for ops
    with (out / "summary.csv").open() as handle:
        summary = [r for r in csv.DictReader(handle) if r["op"] == PROGRAM_OP]
    assert {r["variant"] for r in summary} == {"base", "nvlink.link_bandwidth x2"}
    for r in summary:
        # % of roofline is roofline / time for both; speed-up the baseline's time / pksim's
        assert float(r["pct_of_roofline"]) == pytest.approx(
            100 * float(r["roofline_s"]) / float(r["time_s"]), rel=1e-5)
        assert float(r["baseline_pct_of_roofline"]) == pytest.approx(
            100 * float(r["roofline_s"]) / float(r["baseline_s"]), rel=1e-5)
        assert float(r["speedup"]) == pytest.approx(
            float(r["baseline_s"]) / float(r["time_s"]), rel=1e-5)
        plain = next(b for b in summary if b["variant"] == "base"
                     and b["workload"] == r["workload"])
        assert float(r["gain"]) == pytest.approx(float(plain["time_s"]) / float(r["time_s"]),
                                                 rel=1e-5)
    for stem in ("program-roofline", "program-gain"):
        assert (out / f"{stem}.png").read_bytes()[:4] == b"\x89PNG"
        points = json.loads((out / f"{stem}.json").read_text())
        assert {p["program"] for p in points} == set(SMALL)
        assert all(k.endswith("_s") or "time" not in k for p in points for k in p)
    # the op plots leave the programs out
    assert {p["workload"] for p in json.loads((out / "time.json").read_text())} == {"ar"}


def test_program_rows_of_a_pk_only_study_keep_their_baseline(tmp_path):
    """The pk row carries the baseline it was compared with, so impls = ["pk"] keeps the
    speed-up and both shares of the roofline."""
    study = load_study(write(tmp_path, STUDY.replace('systems = ["dgx-h100"]',
                                                     'systems = ["dgx-h100"]\nimpls = ["pk"]')))
    tasks, _ = tasks_for(load_variants(study), (), study.impls, "s", study.programs)
    rows = attach_baselines([run_task(t) for t in tasks])
    assert [r.impl for r in rows] == ["pk", "pk"]
    for r in rows:
        assert r.baseline_s >= r.time_s > r.roofline_s > 0
        assert r.speedup == r.baseline_s / r.time_s
        assert r.baseline_schedule.startswith("PyTorch + NCCL (") and r.schedule.startswith(
            "pksim (")


# ---- property: faster links never make a program slower ----------------------------------
def _nvlink_variants(system_name: str, factors) -> list[SystemVariant]:
    base = figure(load_system(system_name), "gpu.nvlink.link_bandwidth_GBps")
    return [SystemVariant(system_name, (f"gpu.nvlink.link_bandwidth_GBps={base * f}",), f"x{f}")
            for f in factors]


@pytest.mark.parametrize("system_name", ["dgx-h100", "gb200-nvl72"])
def test_more_nvlink_bandwidth_is_never_slower(system_name):
    """For the baseline and for pksim's best, 1.25x, 2x and 4x NVLink bandwidth: each time at
    most the unchanged system's (a tensor-parallel GEMM + reduce-scatter, an all-gather +
    GEMM, and a reduce-scatter + RMSNorm)."""
    programs = load_study_programs(["gemm-reducescatter"] + SMALL)
    for entry in programs:
        case = Case.of_program(entry)
        times = {}
        for variant in [SystemVariant(system_name)] + _nvlink_variants(system_name, (1.25, 2, 4)):
            for impl in ("pk", "nccl"):
                row = run_task(RunTask(variant, case, impl))
                assert row.ok, row.message
                times[(variant.label, impl)] = row.time_s
        for (label, impl), t in times.items():
            assert t <= times[("base", impl)], (entry.name, label, impl)


def test_faster_links_keep_the_fused_moe_lora_folds_on_gb200():
    """fused-moe-fwd-lora on gb200-nvl72: with faster NVLink NCCL's all-to-all-v alone beats
    pk's kernel alone, but folding the copy and index ops around it into pk's kernel saves two
    launches each, whose host issue costs more than the difference; pksim's best, chosen on
    the program's timeline (D61), keeps the folds, so faster links never make it slower (at
    D46's per-op choice it went from 202.7 to 206.3 us)."""
    (entry,) = load_study_programs(["fused-moe-fwd-lora"])
    case = Case.of_program(entry)
    base = run_task(RunTask(SystemVariant("gb200-nvl72"), case, "pk"))
    for faster in _nvlink_variants("gb200-nvl72", (1.25, 2, 4)):
        row = run_task(RunTask(faster, case, "pk"))
        assert row.time_s <= base.time_s, faster.label
        assert row.schedule == base.schedule == "pksim (27 launches, 2 fused)"


# programs whose best plans fold, fuse, carry several calls in one, or choose among those
MONOTONE = ["fused-moe-fwd-lora", "ring-attention-backward-dp", "ddp", "layernorm-backward",
            "blocked-fp8-quantize", "hyena-forward-cp", "moe-ep-balanced",
            "ulysses-attention-e2e", "gemm-allreduce", "sinkhorn-knopp"]


@pytest.mark.parametrize("system_name", ["dgx-h100", "gb200-nvl72"])
def test_twice_the_nvlink_bandwidth_never_slows_pksims_best(system_name):
    """pksim's best at 2x NVLink bandwidth is at most the unchanged system's, over programs
    whose plans choose among rewrites (all 82 shipped programs on both systems: D61)."""
    (faster,) = _nvlink_variants(system_name, (2,))
    for entry in load_study_programs(MONOTONE):
        case = Case.of_program(entry)
        base = run_task(RunTask(SystemVariant(system_name), case, "pk"))
        assert run_task(RunTask(faster, case, "pk")).time_s <= base.time_s, entry.name


def load_study_programs(names: list[str]):
    from pksim_core.study_programs import load_entries
    return load_entries({"programs": names}, "test", Path("."))


# ---- --resume --------------------------------------------------------------------------------
def _stable(path: Path):
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        if isinstance(data, dict):
            data.pop("wall_s", None)
            for row in data.get("rows", []):
                row.pop("seconds", None)
                row.pop("wall_s", None)
        return data
    with path.open() as handle:
        return [{k: v for k, v in r.items() if k not in ("seconds", "wall_s")}
                for r in csv.DictReader(handle)]


def test_resume_keeps_program_rows_and_completes_the_rest(tmp_path, monkeypatch):
    study = write(tmp_path, STUDY)
    base = ["whatif", "--study", str(study), "--workers", "1",
            "--vary", "gpu.nvlink.link_bandwidth_GBps=2x"]
    full = tmp_path / "full"
    assert run(base + ["-o", str(full)]).exit_code == 0
    total = len(json.loads((full / "results.json").read_text())["rows"])
    assert total == 2 * (2 + 2) * 2                  # variants x (ops + programs) x impls

    part = tmp_path / "part"
    interrupt_after(monkeypatch, 9)
    assert run(base + ["-o", str(part)]).exit_code == 130
    kept = json.loads((part / "results.json").read_text())["rows"]
    assert sum(r["op"] == PROGRAM_OP for r in kept) >= 1 and len(kept) == 9
    calls = interrupt_after(monkeypatch, 10 ** 6)
    resumed = run(base + ["-o", str(part), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert len(calls) == total - 9                   # only the missing rows ran
    ran = {(c.case.workload, c.case.shape, c.variant.label, c.impl) for c in calls}
    assert not ran & {(r["workload"], tuple(r["shape"].items()), r["variant"], r["impl"])
                      for r in kept}
    for name in ("results.json", "results.csv", "summary.csv", "program-roofline.json",
                 "program-gain.json"):
        assert _stable(part / name) == _stable(full / name), name


# ---- bad input: one line, exit 2, before any work ---------------------------------------------
@pytest.mark.parametrize("programs, needles", [
    ('["allgather", "no-such-program"]', ["programs", "unknown program 'no-such-program'"]),
    ('["bad.toml"]', ["programs", "bad.toml", "op 'a': unknown tensor 'y'"]),
    ('["missing.toml"]', ["programs", "missing.toml", "no such file"]),
    ('"allgather"', ["programs must be a list", "'allgather'"]),
    ('["allgather", "allgather"]', ["programs", "'allgather'", "named twice"]),
    ('["ar.toml"]', ["programs", "'ar.toml'", "is named 'ar', as a [[workload]] is"]),
])
def test_bad_programs_are_one_line_errors_before_any_work(tmp_path, monkeypatch, programs,
                                                          needles):
    import pksim_core.runner
    (tmp_path / "bad.toml").write_text('name = "bad"\nworld = 8\n[tensors]\nx = { shape = [4] }\n'
                                       '[[op]]\nname = "a"\nkind = "all-reduce"\ninput = "y"\n')
    (tmp_path / "ar.toml").write_text(
        (Path(__file__).parents[2] / "pksim_core/programs/shipped/allreduce.toml").read_text()
        .replace('name = "allreduce"', 'name = "ar"'))
    study = write(tmp_path, STUDY.replace('["allgather-gemm", "reducescatter-rmsnorm"]',
                                          programs))
    with pytest.raises(ConfigError) as err:
        load_study(study)
    assert str(study) in str(err.value)
    monkeypatch.setattr(pksim_core.runner, "run_task", lambda t: pytest.fail("work was started"))
    out = tmp_path / "out"
    one_line_error(run(["whatif", "--study", str(study), "-o", str(out)]), str(study),
                   *needles)
    assert not out.exists()


def test_a_world_no_system_holds_is_one_line_before_any_work(tmp_path, monkeypatch):
    """allgather runs on 8 ranks; h200-single's domain is one GPU; a --vary that shrinks the
    domain names the variant."""
    import pksim_core.runner
    monkeypatch.setattr(pksim_core.runner, "run_task", lambda t: pytest.fail("work was started"))
    study = write(tmp_path, STUDY.replace('systems = ["dgx-h100"]',
                                          'systems = ["dgx-h100", "h200-single"]'))
    out = tmp_path / "out"
    one_line_error(run(["whatif", "--study", str(study), "-o", str(out)]), str(study),
                   "programs: 'allgather-gemm' runs on 8 ranks, more than the 1 GPUs per "
                   "domain of h200-single")
    one_line_error(run(["whatif", "--study", str(write(tmp_path, STUDY)), "--systems",
                        "h200-single", "-o", str(out)]), "programs", "h200-single")
    assert not out.exists()
    study = load_study(write(tmp_path, STUDY, "ok.toml"))
    pairs = load_variants(study)
    small = SystemVariant("dgx-h100", ("domain.gpus_per_domain=4",
                                 "domain.switch_tier.0.gpus_per_group=4"), "four GPUs")
    shrunk = [(small, small.load())]
    with pytest.raises(ConfigError, match=r"more than the 4 GPUs per domain of dgx-h100 "
                                          r"\(four GPUs\)"):
        tasks_for(pairs + shrunk, (), study.impls, "s", study.programs)
