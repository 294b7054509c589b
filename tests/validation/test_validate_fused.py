"""pksim validate's fused part without a GPU: the suites' [fused] table, --prepare of fused
cases, --report of constructed and committed fused measurements."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from codegen.build import find_nvcc
from hwmodels.errors import ConfigError
from pksim_cli.main import cli
from validation.report.data import build_report, group_name
from validation.suites.suite import load_suite, parse_suite

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
US = 1e-6


def run(args):
    return CliRunner().invoke(cli, args)


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
    """Every timed case of validation/data/cited/h200-fused-2026-12-02-run2.jsonl is a case
    of the default suite, with the same fields."""
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
    assert "| gemm-rs | 2 | 1000x1024x512 | intra-sm/tma | 125 us | 100 us | 100 us | 90.0 us | " \
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
    """The committed validation/data/cited/h200-fused-2026-12-02-run2.jsonl reports against
    a default-suite bundle (no GPU)."""
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
    ({"shapes": '[{mnk = "1000x1024x512", worlds = [1000]}]'}, ["fused.shapes[0].worlds = [1000]"]),
    # a world the suite's system does not have (h200-virtual-calibrated: 8 virtual ranks)
    ({"shapes": '[{mnk = "1000x1024x512", worlds = [16]}]'}, ["fused world 16", "8 ranks"]),
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
