"""pksim validate without a GPU: suites, --prepare (nvcc skipped), --report on constructed
measurements whose statistics are worked out by hand, overwrite refusal, the PNG."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from codegen.build import find_nvcc
from hwmodels.errors import ConfigError
from pksim_cli.main import cli
from validation.prepare.collectives import runnable
from validation.suites.suite import load_suite, parse_suite
from validation.report.data import build_report, group_name

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(args):
    return CliRunner().invoke(cli, args)


# ---- suites --------------------------------------------------------------------------------

def test_default_suite_covers_every_runnable_kernel_size_and_world():
    s = load_suite("default")
    # every runnable kernel but recursive halving / doubling, which the scale suite judges
    assert sorted(s.kernels()) == sorted(k for k in runnable() if k[1] != "rhd")
    assert s.worlds == (2, 4, 8)
    assert min(s.sizes) == 4 << 10 and max(s.sizes) == 1 << 30
    cands = s.candidates(132)
    per_group: dict = {}
    for c in cands:
        per_group[c.group] = per_group.get(c.group, 0) + 1
        assert c.blocks_per_rank >= 1
    assert len(per_group) == 5 * 6 * 3 and min(per_group.values()) >= 5
    # per (size, world): ag 2 x (3 + 3 + 1) + rs 2 x 9 + ar 3 x 9 + a2a 7 + bc 7 = 73 candidates
    assert len(cands) == 73 * 6 * 3
    # blocks per rank at world 8: 132 // 8 = 16, divided by 4, 2, 1
    assert {c.blocks_per_rank for c in cands if c.world == 8 and c.mechanism == "tma"} == {4, 8, 16}
    assert s.timing(1 << 30) == (5, 1) and s.timing(4 << 10) == (100, 3)


def test_quick_suite_is_small():
    s = load_suite("quick")
    assert len(s.candidates(132)) <= 40


def _suite_text(**changes) -> str:
    base = {"name": '"t"', "ops": '["all-reduce"]', "algorithms": '["direct"]',
            "mechanisms": '["tma"]', "worlds": "[2]", "sizes": '["1MiB"]'}
    base.update(changes)
    return "\n".join(f"{k} = {v}" for k, v in base.items() if v is not None) + "\n"


@pytest.mark.parametrize("changes, words", [
    ({"colour": '"red"'}, ["bad.toml", "unknown key 'colour'"]),
    ({"ops": '["all-scatter"]'}, ["bad.toml", "ops entry 'all-scatter'"]),
    ({"mechanisms": '["multimem"]'}, ["mechanisms entry 'multimem'"]),
    ({"worlds": "[1000]"}, ["worlds entry 1000", "2 to 576"]),
    ({"set": "[\"gpu.sm.count\"]"}, ["set entry", "KEY=VALUE"]),
    ({"sizes": '["1 parsec"]'}, ["cannot read size"]),
    ({"sizes": None}, ["missing key 'sizes'"]),
    ({"ops": '["all-to-all"]', "algorithms": '["ring"]'}, ["op 'all-to-all' has none"]),
    ({"dtype": '"fp8"'}, ["dtype = 'fp8'"]),
])
def test_bad_suites_are_one_line_errors(tmp_path, changes, words):
    path = tmp_path / "bad.toml"
    path.write_text(_suite_text(**changes))
    with pytest.raises(ConfigError) as err:
        load_suite(path)
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_unknown_nested_key_and_cli_exit_code(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(_suite_text() + "[timing]\niterations = 3\n")
    result = run(["validate", "--suite", str(path), "--prepare", "--no-build", "-o",
                  str(tmp_path / "b")])
    assert result.exit_code == 2
    assert "unknown key 'timing.iterations'" in result.output and str(path) in result.output
    result = run(["validate", "--suite", "no-such-suite", "--prepare", "-o", str(tmp_path / "b")])
    assert result.exit_code == 2 and "not a shipped suite" in result.output


def test_min_candidates_is_checked():
    s = parse_suite({"name": "t", "ops": ["broadcast"], "algorithms": ["direct"],
                     "mechanisms": ["copy-engine"], "worlds": [2], "sizes": [4096],
                     "min_candidates": 2}, "mine.toml")
    with pytest.raises(ConfigError, match="mine.toml: min_candidates = 2, but broadcast 4KiB"):
        s.check_candidates(132)


# ---- --prepare -----------------------------------------------------------------------------

def test_prepare_quick_suite(tmp_path):
    """Libraries are built where nvcc is (PKSIM_TEST_BUILD=1), else only emitted."""
    build = find_nvcc() is not None and os.environ.get("PKSIM_TEST_BUILD") == "1"
    out = tmp_path / "bundle"
    args = ["validate", "--suite", "quick", "--prepare", "-o", str(out), "--json"]
    result = run(args + ([] if build else ["--no-build"]))
    assert result.exit_code == 0, result.output
    meta = json.loads(result.stdout)
    cases = json.loads((out / "cases.json").read_text())
    kernels = [c for c in cases if c.get("op")]
    # quick: world 2 (66 SMs per rank), blocks 33 and 66; ag direct x (tma 2 + reg 2 + ce 1)
    # + ar (direct, two-shot) x 3 mechanisms x 2 = 5 + 12 = 17 per size, 2 sizes
    assert meta["cases"] == len(kernels) == 34
    unpredicted = [c for c in kernels if c["predicted_s"] is None]
    assert meta["not_predicted"] == len(unpredicted)
    for c in kernels:
        assert c["schedule"]["comm_sms"] == c["blocks_per_rank"]
        assert (c["predicted_s"] is None) == ("not_predicted" in c)
        assert (c["iters"], c["warmup"]) == ((3, 1) if c["bytes"] >= 1 << 20 else (5, 1))
        if not build:
            assert c["lib"].startswith("lib/lib") and c["lib"].endswith(".so")
        else:
            assert (out / c["lib"]).is_file()
    assert all(c["not_predicted"] for c in unpredicted)
    assert "tma_copy" in meta["calibration"]["benchmarks"]
    assert meta["estimated_gpu_s"] > 0
    again = run(args + ["--no-build"])
    assert again.exit_code == 2 and "already exists" in again.output


def test_prepare_lists_what_the_simulator_cannot_predict(tmp_path, monkeypatch):
    from hwmodels.errors import InfeasibleError
    import pksim_core.simulate

    real = pksim_core.simulate.predict

    def predict(system, schedule, *a, **kw):
        if schedule.mechanism == "copy-engine":
            raise InfeasibleError(f"{schedule.op}/{schedule.algorithm}: not modelled here")
        return real(system, schedule, *a, **kw)
    monkeypatch.setattr(pksim_core.simulate, "predict", predict)
    result = run(["validate", "--suite", "quick", "--prepare", "--no-build", "-o",
                  str(tmp_path / "b"), "--json"])
    assert result.exit_code == 0, result.output
    kernels = [c for c in json.loads((tmp_path / "b" / "cases.json").read_text()) if c.get("op")]
    ce = [c for c in kernels if c["mechanism"] == "copy-engine"]
    # quick, per size: all-gather direct (1 candidate) + all-reduce direct, two-shot (2 each)
    assert len(ce) == 2 * (1 + 2 * 2)
    assert all(c["predicted_s"] is None and "not modelled here" in c["not_predicted"] for c in ce)
    assert json.loads(result.stdout)["not_predicted"] == len(ce)
    assert "not_predicted" not in next(c for c in kernels if c["mechanism"] == "tma")


def test_run_without_gpu_says_how_to_split(tmp_path, monkeypatch):
    monkeypatch.setattr("pksim_cli.validate.gpu_missing", lambda: "no NVIDIA GPU here")
    result = run(["validate", "--suite", "quick", "-o", str(tmp_path / "b")])
    assert result.exit_code == 2
    line = result.output.strip()
    assert "\n" not in line and "--prepare" in line and "validation.run.collectives" in line
    assert "--report" in line


# ---- --report on constructed numbers -------------------------------------------------------

US = 1e-6


def _case(cid, op, alg, mech, pred_us, blocks=16):
    c = {"id": cid, "lib": f"lib/lib{op}.so", "op": op, "algorithm": alg, "mechanism": mech,
         "world": 2, "dtype": "bf16", "bytes": 1 << 20, "count": 1000, "blocks_per_rank": blocks,
         "time": True, "iters": 5, "warmup": 1, "label": f"{alg}/{mech}/{blocks}sm",
         "predicted_s": pred_us * US if pred_us else None, "bound_resource": "hbm"}
    if not pred_us:
        c["not_predicted"] = "all-reduce/direct: the copy engine cannot reduce"
    return c


def _bundle(tmp_path: Path) -> Path:
    """Two groups, all-reduce and all-gather at 1 MiB, world 2 (predicted, measured in us):

    a1 two-shot/tma      100 / 100  error  0
    a2 two-shot/register  90 / 125  error -0.28   <- the simulator's pick (lowest predicted)
    a3 direct/tma        110 /  80  error +0.375  <- measured best
    a4 direct/copy-engine  - / 200  not predicted
    b1 direct/tma         52 /  40  error +0.30   <- pick and best
    b2 direct/register    60 /  50  error +0.20
    b3 ring/tma           70 / failed
    b4 ring/register      65 / no row (not measured)
    """
    out = tmp_path / "bundle"
    out.mkdir()
    cases = [{"id": "copy-1GiB", "kind": "copy_bw", "bytes": 1 << 30, "iters": 10},
             _case("a1", "all-reduce", "two-shot", "tma", 100),
             _case("a2", "all-reduce", "two-shot", "register", 90),
             _case("a3", "all-reduce", "direct", "tma", 110),
             _case("a4", "all-reduce", "direct", "copy-engine", None),
             _case("b1", "all-gather", "direct", "tma", 52),
             _case("b2", "all-gather", "direct", "register", 60),
             _case("b3", "all-gather", "ring", "tma", 70),
             _case("b4", "all-gather", "ring", "register", 65)]
    measured = {"a1": 100, "a2": 125, "a3": 80, "a4": 200, "b1": 40, "b2": 50}
    (out / "cases.json").write_text(json.dumps(cases))
    (out / "prepare.json").write_text(json.dumps({
        "suite": "synthetic", "system": "h200-virtual-calibrated",
        "calibration": {"benchmarks": ["hbm_copy", "tma_copy"], "results": "x.json"}}))
    info = {"device": "NVIDIA H200", "date": "2026-12-03", "torch": "2", "cuda": "13"}
    rows = [{"id": "copy-1GiB", "kind": "copy_bw", "ok": True, "copy_GBps": 2100.0, **info}]
    for c in cases[1:]:
        row = {k: v for k, v in c.items() if k != "lib"} | info
        if c["id"] in measured:
            rows.append(row | {"ok": True, "median_s": measured[c["id"]] * US})
        elif c["id"] == "b3":
            rows.append(row | {"ok": False, "error": "device timeout: rank 1"})
    (out / "measured.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_report_statistics_are_the_hand_worked_ones(tmp_path):
    rep = build_report(_bundle(tmp_path))
    s = rep["summary"]
    assert (s["cases"], s["compared"], s["not_predicted"], s["measured_ok"], s["failed"],
            s["not_measured"]) == (8, 5, 1, 6, 1, 1)
    # |errors| sorted: 0, 0.20, 0.28, 0.30, 0.375
    assert s["median_abs_error"] == pytest.approx(0.28)
    assert s["max_abs_error"] == pytest.approx(0.375) and s["worst_case"] == "a3"
    assert s["mean_abs_error"] == pytest.approx((0 + 0.20 + 0.28 + 0.30 + 0.375) / 5)   # 0.231
    assert s["median_error"] == pytest.approx(0.20)   # signed: -0.28, 0, 0.20, 0.30, 0.375
    assert s["within_10"] == pytest.approx(1 / 5) and s["within_25"] == pytest.approx(2 / 5)
    # all-reduce: pick a2 (90 us predicted) ran 125 us; best a3 ran 80 us: 125 / 80 - 1 = 0.5625;
    # the simulator put a3 third (90 < 100 < 110). all-gather: pick b1 = best b1, regret 0.
    groups = {g["op"]: g for g in rep["ranking"]}
    ar, ag = groups["all-reduce"], groups["all-gather"]
    assert (ar["pick"], ar["best"], ar["hit"], ar["best_rank"]) == ("a2", "a3", False, 3)
    assert ar["regret"] == pytest.approx(0.5625)
    assert (ag["pick"], ag["best"], ag["hit"], ag["regret"]) == ("b1", "b1", True, 0.0)
    # the miss names what the model gets wrong: the pick a2 predicted -28 % (hbm-bound), the
    # best a3 +37.5 %: the best's error is the larger one in its own direction
    assert ar["diagnosis"] == ("the pick is predicted -28.0 % (hbm-bound), the best +37.5 % "
                               "(hbm-bound): mostly the best's hbm (too slow in the model)")
    assert "diagnosis" not in ag
    assert s["misses"] == [f"{group_name(ar)}: regret +56.3%; {ar['diagnosis']}"]
    assert (s["ranking_hits"], s["groups_ranked"], s["groups_within_5"]) == (1, 2, 1)
    assert s["median_regret"] == pytest.approx(0.5625 / 2)
    assert s["max_regret"] == pytest.approx(0.5625)
    assert not any(t["met"] for t in s["targets"].values()) and not s["targets_met"]
    # worst (op, algorithm, mechanism) first: all-reduce direct/tma (a3, 0.375)
    k = rep["kernels"][0]
    assert (k["op"], k["algorithm"], k["mechanism"], k["worst"]) == \
        ("all-reduce", "direct", "tma", "a3")
    assert s["copy_GBps"] == 2100.0 and s["device"] == "NVIDIA H200"


def test_report_files_json_and_overwrite_refusal(tmp_path):
    bundle = _bundle(tmp_path)
    result = run(["validate", "--report", str(bundle), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["median_abs_error"] == pytest.approx(0.28)
    assert summary["targets"]["max_abs_error"]["met"] is False
    assert (bundle / "scatter.png").read_bytes()[:8] == PNG_MAGIC
    md = (bundle / "report.md").read_text()
    assert "not predicted: all-reduce/direct: the copy engine cannot reduce (1 cases" in md
    assert "None of the 8 kernels below is a calibration input" in md
    assert "b3: failed: device timeout" in md and "b4: not measured" in md
    assert "| all-reduce | direct | tma |" in md
    assert ("- all-reduce 1MiB w2: regret +56.3%; the pick is predicted -28.0 % (hbm-bound)"
            in md)
    report = json.loads((bundle / "report.json").read_text())
    assert report["summary"]["worst_case"] == "a3" and len(report["cases"]) == 8
    before = (bundle / "report.md").read_text()
    again = run(["validate", "--report", str(bundle)])
    assert again.exit_code == 2 and "already exists" in again.output
    assert "\n" not in again.output.strip()
    assert (bundle / "report.md").read_text() == before
    forced = run(["validate", "--report", str(bundle), "--force"])
    assert forced.exit_code == 0, forced.output
    assert "median |error| 28.0%" in forced.output
    elsewhere = run(["validate", "--report", str(bundle), "-o", str(tmp_path / "r2")])
    assert elsewhere.exit_code == 0 and (tmp_path / "r2" / "scatter.png").is_file()


def test_report_refuses_measurements_of_other_cases(tmp_path):
    bundle = _bundle(tmp_path)
    rows = (bundle / "measured.jsonl").read_text().splitlines()
    row = json.loads(rows[1])
    row["count"] = 999
    (bundle / "measured.jsonl").write_text("\n".join([rows[0], json.dumps(row)] + rows[2:]) + "\n")
    result = run(["validate", "--report", str(bundle)])
    assert result.exit_code == 2 and "has count = 999" in result.output


def test_help():
    result = run(["validate", "--help"])
    assert result.exit_code == 0 and "--prepare" in result.output and "--report" in result.output


def test_scale_suite_runs_every_algorithm_past_one_node():
    s = load_suite("scale")
    assert s.worlds == (16, 32, 72, 128) and s.overrides == ("domain.gpus_per_domain=128",)
    cands = s.candidates(132)
    # every (op, algorithm) codegen emits for these ops, at some world, by TMA or registers
    assert {(c.op, c.algorithm) for c in cands} == {
        ("all-gather", "direct"), ("all-gather", "ring"), ("all-gather", "rhd"),
        ("reduce-scatter", "direct"), ("reduce-scatter", "ring"), ("reduce-scatter", "rhd"),
        ("all-reduce", "direct"), ("all-reduce", "two-shot"), ("all-reduce", "ring"),
        ("all-reduce", "rhd")}
    # no candidate the kernels refuse: no TMA sum of every rank past 8, no rhd at 72
    assert not any(c.mechanism == "tma" and c.algorithm in ("direct", "two-shot")
                   and c.op != "all-gather" for c in cands)
    assert not any(c.algorithm == "rhd" and c.world == 72 for c in cands)
    # a rank's share of the 132 SMs: 8 and 4 blocks at 16 ranks, one at 72 and 128
    assert {c.blocks_per_rank for c in cands if c.world == 16} == {4, 8}
    assert {c.blocks_per_rank for c in cands if c.world in (72, 128)} == {1}
