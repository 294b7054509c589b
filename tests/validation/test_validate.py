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
from pksim.cli.main import cli
from validation.prepare.collectives import runnable
from validation.suites.suite import load_suite, parse_suite
from validation.report.data import build_report, group_name

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(args):
    return CliRunner().invoke(cli, args)


# ---- suites --------------------------------------------------------------------------------

def test_default_suite_covers_every_runnable_kernel_size_and_world():
    s = load_suite("default")
    assert sorted(s.kernels()) == sorted(runnable())
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
    ({"worlds": "[16]"}, ["worlds entry 16"]),
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
    import pksim.simulate

    real = pksim.simulate.predict

    def predict(system, schedule, *a, **kw):
        if schedule.mechanism == "copy-engine":
            raise InfeasibleError(f"{schedule.op}/{schedule.algorithm}: not modelled here")
        return real(system, schedule, *a, **kw)
    monkeypatch.setattr(pksim.simulate, "predict", predict)
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
    monkeypatch.setattr("validation.prepare.bundle.gpu_missing", lambda: "no NVIDIA GPU here")
    result = run(["validate", "--suite", "quick", "-o", str(tmp_path / "b")])
    assert result.exit_code == 2
    line = result.output.strip()
    assert "\n" not in line and "--prepare" in line and "run_collectives" in line
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


# ---- the fused part ------------------------------------------------------------------------

RUN2 = Path(__file__).resolve().parents[2] / "validation" / "data" / "cited" / \
    "h200-fused-2026-12-02-run2.jsonl"


def _variant_counts():
    from validation.suites.fused_suite import variants
    v = variants()
    return {op: (sum(x[0] == op and x[1] == "intra-sm" for x in v),
                 sum(x[0] == op and x[1] == "inter-sm" for x in v))
            for op in ("gemm-rs", "ag-gemm", "gemm-ar")}


def test_default_fused_part_is_run2s_shapes_and_every_variant():
    f = load_suite("default").fused
    assert f.shapes == ((2, 8192, 8192, 2048), (4, 8192, 8192, 2048), (8, 8192, 8192, 2048),
                        (8, 8192, 8192, 1024), (4, 4096, 4096, 4096))
    assert [f.comm_counts(w) for w in (2, 4, 8)] == [[8, 16], [4, 8], [2, 4]]   # 16 / w, 32 / w
    # per (shape, world): each intra-SM variant once, each inter-SM variant at 2 block counts
    # staggered + the fewer blocks sequential (3), and one none per op (3)
    per = sum(intra + 3 * inter for intra, inter in _variant_counts().values()) + 3
    cands = f.candidates()
    assert len(cands) == 5 * per and len({c.group for c in cands}) == 3 * 5


def test_default_fused_cases_have_run2s_ids():
    """Every timed case of run 2 is a case of the default suite, with the same fields."""
    class Libs(dict):
        def __missing__(self, key):
            return f"lib/{key}.so"
    f = load_suite("default").fused
    cases = {c["id"]: c for c in (x.case(Libs(), 1, 20, 3) for x in f.candidates())}
    timed = [json.loads(x) for x in RUN2.read_text().splitlines() if '"time": true' in x]
    assert len(timed) == 76
    for row in timed:
        case = cases[row["id"]]
        for key in ("kind", "op", "overlap", "mechanism", "world", "m", "n", "k",
                    "comm_blocks", "tile_order", "iters", "warmup"):
            assert case.get(key) == row.get(key), (row["id"], key)


def test_quick_fused_part_is_tiny():
    f = load_suite("quick").fused
    assert f.shapes == ((2, 1000, 1024, 512),) and f.comm_counts(2) == [8]
    counts = _variant_counts()
    # one case per runnable variant (inter-SM: 16 // 2 = 8 blocks, staggered only) + 3 none
    assert len(f.candidates()) == sum(a + b for a, b in counts.values()) + 3 <= 12


def test_prepare_quick_suite_includes_predicted_fused_cases(tmp_path):
    out = tmp_path / "bundle"
    result = run(["validate", "--suite", "quick", "--prepare", "--no-build", "-o", str(out),
                  "--json"])
    assert result.exit_code == 0, result.output
    meta = json.loads(result.stdout)
    cases = json.loads((out / "fused" / "cases.json").read_text())
    counts = _variant_counts()
    assert meta["fused"]["cases"] == len(cases) == sum(a + b for a, b in counts.values()) + 3
    assert meta["fused"]["groups"] == 3 and meta["fused"]["not_predicted"] == 0
    for c in cases:
        assert c["predicted_s"] > 0 and c["schedule"]["op"] == c["op"]
        assert (c["world"], c["m"], c["n"], c["k"]) == (2, 1000, 1024, 512)
        assert (c["iters"], c["warmup"], c["time"], c["check"]) == (5, 1, True, True)
        assert c["schedule"]["overlap"] == c.get("overlap", "none")
        if c["kind"] == "none":
            assert c["coll_lib"].startswith("lib/lib") and c["gemm_lib"] == "lib/libpk_gemm.so"
        else:
            assert c["lib"].startswith("lib/lib") and c["lib"].endswith(".so")
            assert c["comm_blocks"] == (8 if c["overlap"] == "inter-sm" else 0)
    # compute-sanitizer: one library per (op, overlap)
    pairs = {(op, ov) for op, (intra, inter) in counts.items()
             for ov, n in (("intra-sm", intra), ("inter-sm", inter)) if n}
    assert len((out / "fused" / "memcheck_libs.txt").read_text().split()) == len(pairs)
    assert meta["estimated_gpu_s"] > meta["fused"]["estimated_gpu_s"] > 0
    # each candidate timed on its own, in the suite's order (seeds 10, 11, ...)
    assert [c["seed"] for c in cases] == list(range(10, 10 + len(cases)))
    assert not any("interleave" in c for c in cases)
    # quick.toml's [fused.timing] idle = 4: every case timed from an idle GPU
    assert {c.get("idle") for c in cases} == {4.0}


def test_an_interleaving_suite_puts_each_group_together(tmp_path):
    # [fused.timing] interleave = true: a group's candidates follow one another with one
    # interleave key (timed in turn by run_fused), each keeping the seed of its place in
    # the candidate list
    suites = Path(__file__).resolve().parents[2] / "validation" / "suites"
    quick = (suites / "quick.toml").read_text()
    suite = tmp_path / "quick-interleaved.toml"
    suite.write_text(quick.replace("[fused.timing]\n", "[fused.timing]\ninterleave = true\n"))
    out = tmp_path / "bundle"
    result = run(["validate", "--suite", str(suite), "--prepare", "--no-build", "-o", str(out)])
    assert result.exit_code == 0, result.output
    cases = json.loads((out / "fused" / "cases.json").read_text())
    keys = [c["interleave"] for c in cases]
    assert keys == sorted(keys, key=keys.index) and len(set(keys)) == 3
    assert all(c["interleave"] == f"{c['op']} 1000x1024x512 w2" for c in cases)
    assert sorted(c["seed"] for c in cases) == list(range(10, 10 + len(cases)))
    bad = tmp_path / "bad.toml"
    bad.write_text(quick.replace("[fused.timing]\n", "[fused.timing]\ninterleave = 1\n"))
    result = run(["validate", "--suite", str(bad), "--prepare", "--no-build", "-o",
                  str(tmp_path / "b2")])
    assert result.exit_code != 0
    assert "timing.interleave" in result.output and "true or false" in result.output
    assert "Traceback" not in result.output
    for value in ("-1", "true", '"4"'):
        bad.write_text(quick.replace("idle = 4\n", f"idle = {value}\n"))
        result = run(["validate", "--suite", str(bad), "--prepare", "--no-build", "-o",
                      str(tmp_path / "b3")])
        assert result.exit_code != 0
        assert "timing.idle" in result.output and "from 0 to 100" in result.output, value
        assert "Traceback" not in result.output


def _fused_bundle(tmp_path: Path) -> Path:
    """A fused-only bundle: one group, gemm-rs 1000 x 1024 x 512 at world 2, three candidates
    (predicted / measured, us):

    n  none                         100 / 125   error -0.20
    i  intra-sm/tma                  90 / 100   error -0.10   <- the simulator's pick
    e  inter-sm/register, 8 blocks  120 /  80   error +0.50   <- measured best
    """
    out = tmp_path / "fbundle"
    (out / "fused").mkdir(parents=True)
    (out / "cases.json").write_text("[]")
    (out / "prepare.json").write_text(json.dumps({
        "suite": "fused-fixture", "system": "h200-virtual-calibrated",
        "calibration": {"benchmarks": ["gemm"], "results": "x.json"}}))
    shape = {"world": 2, "m": 1000, "n": 1024, "k": 512, "iters": 5, "warmup": 1,
             "check": True, "time": True}
    cases = [
        {"id": "n", "kind": "none", "op": "gemm-rs", "collective": "reduce-scatter direct/register",
         "gemm_lib": "lib/libpk_gemm.so", "coll_lib": "lib/librs.so", "label": "none",
         "predicted_s": 100 * US, "bound_resource": "tensor", **shape},
        {"id": "i", "kind": "fused", "op": "gemm-rs", "overlap": "intra-sm", "algorithm": "direct",
         "mechanism": "tma", "comm_blocks": 0, "tile_order": -1, "lib": "lib/libi.so",
         "label": "intra-sm/direct/tma", "predicted_s": 90 * US, "bound_resource": "hbm", **shape},
        {"id": "e", "kind": "fused", "op": "gemm-rs", "overlap": "inter-sm", "algorithm": "direct",
         "mechanism": "register", "comm_blocks": 8, "tile_order": 0, "lib": "lib/libe.so",
         "label": "inter-sm/direct/register/8sm", "predicted_s": 120 * US,
         "bound_resource": "issue", **shape}]
    (out / "fused" / "cases.json").write_text(json.dumps(cases))
    info = {"device": "NVIDIA H200", "date": "2026-12-03", "torch": "2", "cuda": "13"}
    ms = {"n": 0.125, "i": 0.100, "e": 0.080}
    rows = [{k: v for k, v in c.items() if not k.endswith("lib")} | info |
            {"ok": True, "ms": ms[c["id"]]} for c in cases]
    rows.append({"id": "args-x", "kind": "arg_check", "ok": True} | info)   # no case of the suite
    (tmp_path / "run.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_report_fused_statistics_are_the_hand_worked_ones(tmp_path):
    bundle = _fused_bundle(tmp_path)
    rep = build_report(bundle, [tmp_path / "run.jsonl"])
    assert rep["summary"]["cases"] == 0 and rep["rows_not_in_suite"] == {"arg_check": 1}
    f = rep["fused"]["summary"]
    assert (f["cases"], f["compared"], f["failed"], f["not_measured"]) == (3, 3, 0, 0)
    # |errors| sorted: 0.10 (i), 0.20 (n), 0.50 (e): median 0.20, max 0.50, mean 0.8 / 3
    assert f["median_abs_error"] == pytest.approx(0.20)
    assert f["max_abs_error"] == pytest.approx(0.50) and f["worst_case"] == "e"
    assert f["mean_abs_error"] == pytest.approx(0.8 / 3)
    assert f["median_error"] == pytest.approx(-0.10)          # signed: -0.20, -0.10, +0.50
    # pick: i (90 us predicted, the lowest) ran 100 us; best: e ran 80 us; regret
    # 100 / 80 - 1 = 0.25; the simulator put e third (90 < 100 < 120)
    (g,) = rep["fused"]["ranking"]
    assert (g["op"], g["m"], g["n"], g["k"], g["world"]) == ("gemm-rs", 1000, 1024, 512, 2)
    assert (g["pick"], g["best"], g["hit"], g["best_rank"]) == ("i", "e", False, 3)
    assert g["regret"] == pytest.approx(0.25) and f["max_regret"] == pytest.approx(0.25)
    assert f["worst_ranking_group"] == "gemm-rs 1000x1024x512 w2"
    assert not any(t["met"] for t in f["targets"].values())
    # fused vs none: i 125 / 100 = 1.25 measured, 100 / 90 = 1.11 predicted (agree: both > 1);
    # e 125 / 80 = 1.5625 measured, 100 / 120 = 0.83 predicted (disagree)
    vs = {v["id"]: v for v in rep["fused"]["vs_none"]}
    assert vs["i"]["measured_speedup"] == pytest.approx(1.25)
    assert vs["i"]["predicted_speedup"] == pytest.approx(100 / 90) and vs["i"]["agree"]
    assert vs["e"]["measured_speedup"] == pytest.approx(1.5625)
    assert vs["e"]["predicted_speedup"] == pytest.approx(100 / 120) and not vs["e"]["agree"]
    assert (f["vs_none_compared"], f["vs_none_agree"], f["fused_faster_measured"],
            f["fused_faster_predicted"]) == (2, 1, 2, 1)


def test_report_fused_files_and_cli(tmp_path):
    bundle = _fused_bundle(tmp_path)
    result = run(["validate", "--report", str(bundle), "--measured", str(tmp_path / "run.jsonl"),
                  "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["fused"]["median_abs_error"] == pytest.approx(0.20)
    md = (bundle / "report.md").read_text()
    assert "## Fused GEMM + communication kernels" in md and "## Summary\n" not in md
    assert "| gemm-rs | 2 | 1000x1024x512 | intra-sm/tma | 125 us | 100 us | 100 us | 90 us | " \
        "1.25x | 1.11x | yes |" in md
    assert "1 arg_check" in md and "None of the 3 kernels below" in md
    assert (bundle / "scatter.png").read_bytes()[:8] == PNG_MAGIC
    text = run(["validate", "--report", str(bundle), "--measured", str(tmp_path / "run.jsonl"),
                "--force"])
    assert "fused on NVIDIA H200: 3 of 3 cases compared" in text.output
    assert "worst regret +25.0%" in text.output


def test_report_refuses_fused_rows_of_another_case(tmp_path):
    bundle = _fused_bundle(tmp_path)
    rows = (tmp_path / "run.jsonl").read_text().splitlines()
    bad = json.loads(rows[1]) | {"m": 2000}
    (tmp_path / "run.jsonl").write_text("\n".join([rows[0], json.dumps(bad)] + rows[2:]) + "\n")
    result = run(["validate", "--report", str(bundle), "--measured", str(tmp_path / "run.jsonl")])
    assert result.exit_code == 2 and "measured row i has m = 2000" in result.output


def test_report_of_run2_with_the_default_suite(tmp_path):
    """The committed fused run 2 reports against a default-suite bundle (no GPU)."""
    out = tmp_path / "b"
    result = run(["validate", "--prepare", "--no-build", "-o", str(out), "--suite", "default"])
    assert result.exit_code == 0, result.output
    rep = build_report(out, [RUN2])
    f = rep["fused"]["summary"]
    assert f["measured_ok"] == f["compared"] == 76 and f["failed"] == 0
    assert f["groups_ranked"] == 15 and rep["summary"]["measured_ok"] == 0
    # run_fused's correctness-only, argument and deadline rows are no case of the suite
    assert sum(rep["rows_not_in_suite"].values()) == 137 - 76


def _fused_suite_text(**fused) -> str:
    base = {"ops": '["gemm-rs"]', "overlaps": '["none", "intra-sm"]',
            "shapes": '[{mnk = "1000x1024x512", worlds = [2]}]'}
    base.update(fused)
    return 'name = "f"\n[fused]\n' + "".join(f"{k} = {v}\n" for k, v in base.items()
                                              if v is not None)


@pytest.mark.parametrize("changes, words", [
    ({"ops": '["gemm-xx"]'}, ["fused.ops entry 'gemm-xx'", "gemm-rs, ag-gemm, gemm-ar"]),
    ({"overlaps": '["cross-sm"]'}, ["fused.overlaps entry 'cross-sm'", "inter-sm"]),
    ({"shapes": '[{mnk = "1000x1024", worlds = [2]}]'},
     ["fused.shapes[0].mnk = '1000x1024'", "not MxNxK"]),
    ({"shapes": '[{mnk = "1000x1020x512", worlds = [2]}]'},
     ["fused.shapes[0].mnk = '1000x1020x512'", "multiples of 8"]),
    ({"shapes": '[{mnk = "4x1024x512", worlds = [8]}]'}, ["fused.shapes[0].mnk", "below world 8"]),
    ({"shapes": '[{mnk = "1000x1024x512", worlds = [16]}]'}, ["fused.shapes[0].worlds = [16]"]),
    ({"shapes": '[{mnk = "1000x1024x512", world = [2]}]'}, ["unknown key 'fused.shapes[0].world'"]),
    ({"shapes": '["1000x1024x512"]'}, ["fused.shapes[0] = '1000x1024x512'", "must be a table"]),
    ({"shapes": None}, ["fused: missing key 'shapes'"]),
    ({"sequential": '"sometimes"'}, ["fused.sequential = 'sometimes'"]),
    ({"colour": '"red"'}, ["unknown key 'fused.colour'"]),
])
def test_bad_fused_suites_are_one_line_errors_exit_2(tmp_path, changes, words):
    path = tmp_path / "badf.toml"
    path.write_text(_fused_suite_text(**changes))
    result = run(["validate", "--suite", str(path), "--prepare", "--no-build", "-o",
                  str(tmp_path / "b")])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and str(path) in line and all(w in line for w in words), line


def test_fused_only_suite_parses():
    s = parse_suite({"name": "f", "fused": {"ops": ["gemm-ar"], "overlaps": ["none"],
                                            "shapes": [{"mnk": "64x64x64", "worlds": [2, 4]}]}},
                    "f.toml")
    assert s.ops == () and s.candidates(132) == []
    assert [(c.overlap, c.world) for c in s.fused.candidates()] == [("none", 2), ("none", 4)]


def test_gpu_validate_script_keeps_to_its_budget(tmp_path):
    """validation/device/validate.sh with stand-ins for the GPU programs: a step that would
    overrun is killed at its limit, steps without their minimum left are skipped, what did not
    run is listed; with time left the fused suite and its memcheck run."""
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    bundle = tmp_path / "bundle"
    assert run(["validate", "--suite", "quick", "--prepare", "--no-build", "-o",
                str(bundle)]).exit_code == 0
    (bundle / "fused" / "sanitize_fused").write_text("#!/bin/sh\n")
    (bundle / "fused" / "sanitize_fused").chmod(0o755)
    fake = tmp_path / "bin"
    fake.mkdir()
    # a correctness matrix of two collectives and a copy: the stand-in runs one of them
    (bundle / "matrix").mkdir()
    (bundle / "matrix" / "cases.json").write_text(json.dumps(
        [{"id": "m1", "op": "all-gather"}, {"id": "m2", "op": "all-gather"},
         {"id": "copy-1GiB", "kind": "copy_bw"}]))
    (fake / "py").write_text(f"""#!/bin/bash
case "$*" in
  *microbench/run.py*) exit 0;;
  "-m validation.run.collectives --cases "*matrix/cases.json*)
    echo '{{"id": "m1", "ok": true}}' > "$6"; exit 0;;
  *validation.run.collectives*) exit 0;;
  *validation.run.fused*) sleep "${{FAKE_SLEEP:-0}}"; exec {sys.executable} -c "
import json, sys
cases = json.load(open(sys.argv[1]))
with open(sys.argv[2], 'w') as f:
    for c in cases[:4]:
        f.write(json.dumps({{'id': c['id'], 'ok': True, 'ms': 1.0}}) + chr(10))
" "$4/cases.json" "$6";;
  *) exec {sys.executable} "$@";;
esac
""")
    (fake / "compute-sanitizer").write_text(
        "#!/bin/bash\necho 'x world 2 200x264x72 gemm_blocks 0 (64 + 0 per rank): ok'\n"
        "echo '========= ERROR SUMMARY: 0 errors'\n")
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho fake\n")
    (fake / "nvcc").write_text("#!/bin/sh\nexit 0\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    out = tmp_path / "out"
    n = len(json.loads((bundle / "fused" / "cases.json").read_text()))

    def gpu_validate(total_s: int, sleep_s: int) -> str:
        env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", PYTHON=str(fake / "py"),
                   PK_TOTAL_S=str(total_s), PK_RESERVE_S="5", FAKE_SLEEP=str(sleep_s))
        res = subprocess.run(["bash", "validation/device/validate.sh", str(bundle), str(out)],
                             cwd=root, env=env, capture_output=True, text=True, timeout=120)
        assert (tmp_path / "out.tgz").is_file() and not out.exists()
        return res.stdout

    # 21 s usable: microbench (needs 40) and the collective suite (30) are skipped; the fused
    # suite (20) would take 60 s and is killed at 21; its memcheck finds no time left
    text = gpu_validate(26, 60)
    assert "microbench SKIPPED" in text and "collective suite SKIPPED" in text
    assert "fused suite exit 137" in text and "KILLED at its limit" in text
    assert "fused memcheck SKIPPED" in text and "fused memcheck: not run (no time left)" in text
    assert "collective suite: 0 of 34 cases ok, 0 failed, 34 not run" in text
    assert f"fused suite: 0 of {n} cases ok, 0 failed, {n} not run" in text
    # with time for everything
    text = gpu_validate(200, 0)
    assert "microbench exit 0" in text and "collective suite exit 0" in text
    assert f"fused suite: 4 of {n} cases ok, 0 failed, {n - 4} not run" in text
    assert "fused memcheck (exit 0): 1 of" in text and "ERROR SUMMARY: 0 errors" in text
    # the matrix says how far it got (run 18 stopped at its deadline and only matrix.log said)
    assert "matrix: 1 of 2 cases ok, 0 failed, 1 not run; not run: m2" in text


def test_measured_rows_read_from_gzip_as_from_text(tmp_path):
    """validation/data keeps the suite's results gzip-compressed: the same rows either way,
    the last row of an id winning; a file that is not gzip is a one-line error."""
    import gzip

    from validation.report.data import load_measured
    rows = [{"id": "a", "median_s": 1e-6}, {"id": "b", "median_s": 2e-6}, {"id": "a", "median_s": 3e-6}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    plain, packed = tmp_path / "m.jsonl", tmp_path / "m.jsonl.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    assert load_measured(packed) == load_measured(plain) == {"a": rows[2], "b": rows[1]}
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_text(text)
    with pytest.raises(ConfigError, match="bad.jsonl.gz: not a gzip-compressed text file"):
        load_measured(bad)
