"""Every command's edges: impossible values, outputs that cannot be written or would be
overwritten, options out of range. Each ends in one line on stderr and exit code 2."""
from __future__ import annotations

import pytest

from pksim_core.plots import OutputDir

from tests.pksim.helpers import interrupt_after, one_line_error, run, small_study

SMALL = ["--system", "dgx-h100", "--op", "all-reduce", "--bytes", "1MiB"]
NVLINK = "gpu.nvlink.link_bandwidth_GBps"


# ---- values: from --set, a file, --vary ------------------------------------------------
@pytest.mark.parametrize("value, needle", [
    ("0", "must be above 0"), ("nan", "finite"), ("inf", "finite"), ("1e400", "finite"),
    ("-50", "at least 0")])
def test_set_impossible_nvlink_bandwidth(value, needle):
    line = one_line_error(run(["predict", *SMALL, "--set", f"{NVLINK}={value}"]), needle)
    assert line.startswith(f"pksim: error: --set {NVLINK}={value}:")   # the --set, not the file


def test_set_nan_latency():
    one_line_error(run(["predict", *SMALL, "--set", "gpu.nvlink.latency_ns=nan"]),
                   "--set gpu.nvlink.latency_ns=nan", "finite")


def test_nan_in_a_system_file_fails_check_and_names_the_file(shipped_copy):
    path = shipped_copy("dgx-h100")
    text = path.read_text().replace("link_bandwidth_GBps = 25", "link_bandwidth_GBps = nan")
    path.write_text(text)
    one_line_error(run(["systems", "check", str(path)]), str(path), NVLINK, "finite")
    one_line_error(run(["predict", "--system", str(path), "--op", "all-reduce",
                        "--bytes", "1MiB"]), "finite")


def test_inherited_figure_blames_the_file_that_gave_it(write_system, shipped_copy):
    parent = shipped_copy("dgx-h100")
    parent.write_text(parent.read_text().replace("latency_ns = { value = ",
                                                 "latency_ns = { value = -", 1))
    child = write_system(f'name = "c"\ndescription = "d"\ninherits = "{parent}"\n')
    line = one_line_error(run(["systems", "check", str(child)]))
    assert str(parent) in line and str(child) not in line


@pytest.mark.parametrize("choice, needle", [("0x", "must be above 0"), ("nanx", "finite"),
                                            ("infx", "finite"), ("-1x", "at least 0"),
                                            ("nan", "finite")])
def test_vary_impossible_values(tmp_path, choice, needle):
    one_line_error(run(["whatif", "--systems", "dgx-h100", "--vary", f"{NVLINK}={choice}",
                        "-o", str(tmp_path / "w"), "--no-plots"]), "--vary", needle)
    assert not (tmp_path / "w").exists()


# ---- sizes and options -------------------------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    (["--bytes", "3"], "whole number of bf16 elements"),
    (["--bytes", "1152921504606846976"], "more than the 80 GB"),
    (["--bytes", "2^60"], "cannot read size"),
    (["--bytes", "1MiB", "--world", "1"], "at least 2 ranks"),
    (["--bytes", "1MiB", "--comm-sms", "0"], "--comm-sms 0"),
    (["--bytes", "1MiB", "--comm-sms", "1000"], "--comm-sms 1000"),
])
@pytest.mark.parametrize("command", ["predict", "search"])
def test_collective_options_out_of_range(command, args, needle):
    one_line_error(run([command, "--system", "dgx-h100", "--op", "all-reduce", *args]), needle)


def test_moe_topk_above_experts():
    one_line_error(run(["predict", "--system", "dgx-h100", "--op", "moe-dispatch-gemm",
                        "--tokens", "1024", "--hidden", "1024", "--experts", "8",
                        "--topk", "16", "--expert-hidden", "1024"]), "--topk 16")


def test_predict_takes_every_dtype_the_gpu_has_and_uses_it():
    from pksim_core.schedule import DTYPES
    import json
    for dtype in DTYPES:             # Blackwell has every type, fp4 included
        result = run(["predict", "--system", "dgx-b200", "--op", "all-reduce", "--bytes",
                      "1MiB", "--dtype", dtype, "--json"])
        assert result.exit_code == 0, (dtype, result.output)
        assert json.loads(result.output)["schedule"]["dtype"] == dtype
    # Hopper has no fp4, Ampere no fp8 (their files' tensor rates are 0)
    one_line_error(run(["predict", *SMALL, "--dtype", "fp4"]), "--dtype fp4", "tflops_fp4 = 0")
    one_line_error(run(["predict", "--system", "dgx-a100", "--op", "all-gather", "--bytes",
                        "1MiB", "--dtype", "fp8"]), "--dtype fp8", "ampere")


def test_sweep_unknown_shape_key_is_an_error_not_a_traceback(tmp_path):
    one_line_error(run(["sweep", "--system", "dgx-h100", "--op", "all-reduce", "--shape",
                        "q=1:4", "-o", str(tmp_path / "s")]), "--shape q")
    one_line_error(run(["sweep", "--system", "dgx-h100", "--op", "gemm-rs", "--shape",
                        "m=1024", "-o", str(tmp_path / "s")]), "n, k")
    one_line_error(run(["sweep", "--system", "dgx-h100", "--op", "all-reduce", "--bytes",
                        "3", "-o", str(tmp_path / "s")]), "whole number")


# ---- outputs -----------------------------------------------------------------------------
def test_whatif_output_is_an_existing_file(tmp_path):
    target = tmp_path / "file"
    target.write_text("mine")
    one_line_error(run(["whatif", "-o", str(target), "--no-plots"]), "is a file")
    one_line_error(run(["whatif", "-o", str(target / "sub"), "--no-plots"]), "is a file")
    assert target.read_text() == "mine"


def _unwritable(monkeypatch):
    """A folder that refuses files (chmod does not stop root, so the probe fails)."""
    import tempfile

    def refuse(*_a, **_k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(tempfile, "mkstemp", refuse)


@pytest.mark.parametrize("args", [
    ["whatif", "--no-plots"],
    ["sweep", "--system", "dgx-h100", "--op", "all-reduce", "--bytes", "1MiB", "--impl", "pk"],
    ["trace", *SMALL],
    ["codegen", *SMALL],
])
def test_read_only_output_fails_before_any_work(tmp_path, monkeypatch, args):
    import sys
    import pksim_core.runner
    import pksim_core.search         # the engine's module (pksim.search is the API's function)

    def no_work(*_a, **_k):
        raise AssertionError("work started before the output was checked")
    monkeypatch.setattr(pksim_core.runner, "run_tasks", no_work)
    monkeypatch.setattr(sys.modules["pksim_core.search"], "_branch_and_bound", no_work)
    _unwritable(monkeypatch)
    out = tmp_path / "ro" / ("t.json" if args[0] == "trace" else "d")
    one_line_error(run(args + ["-o", str(out)]), "cannot write", "Permission denied")


def test_write_error_is_one_line(tmp_path, monkeypatch):
    from pathlib import Path
    from hwmodels.errors import ConfigError

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(ConfigError, match="No space left"):
        OutputDir(tmp_path).write_json("x.json", {})


def test_codegen_never_overwrites_without_force(tmp_path):
    out = tmp_path / "cg"
    first = run(["codegen", *SMALL, "-o", str(out)])
    assert first.exit_code == 0, first.output
    source = next(out.glob("*.cu"))
    source.write_text("// edited by hand\n")
    one_line_error(run(["codegen", *SMALL, "-o", str(out)]), "exists", "--force")
    assert source.read_text() == "// edited by hand\n"
    alias = run(["codegen", *SMALL, "--out", str(out), "--force"])      # the hidden alias
    assert alias.exit_code == 0, alias.output
    assert source.read_text() != "// edited by hand\n"
    assert "--out" not in run(["codegen", "--help"]).output.replace("--output", "")


# ---- interrupted studies and --resume --------------------------------------------------------
STUDY = small_study()


def _stable(path):
    """A study or sweep file without what differs between runs (wall times)."""
    import csv
    import json
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        if isinstance(data, dict):
            data.pop("wall_s", None)
            for row in data.get("rows", []) + data.get("results", []):
                row.pop("wall_s", None)
                row.pop("seconds", None)
        return data
    with path.open() as handle:
        return [{k: v for k, v in r.items() if k not in ("wall_s", "seconds")}
                for r in csv.DictReader(handle)]


def test_interrupted_study_is_marked_partial_and_resume_completes_it(tmp_path, monkeypatch):
    import json
    study = tmp_path / "small.toml"
    study.write_text(STUDY)
    base = ["whatif", "--study", str(study), "--workers", "1"]
    full = tmp_path / "full"
    assert run(base + ["-o", str(full)]).exit_code == 0
    total = len(json.loads((full / "results.json").read_text())["rows"])
    assert total == 12

    k = 5
    part = tmp_path / "part"
    interrupt_after(monkeypatch, k)
    stopped = run(base + ["-o", str(part)])
    assert stopped.exit_code == 130
    data = json.loads((part / "results.json").read_text())
    assert data["interrupted"] is True and len(data["rows"]) == k and data["tasks"] == total
    for name in ("results.csv", "summary.csv"):
        text = (part / name).read_text()
        assert text.startswith(f"# partial: {k} of {total} rows") and "system," in text
    assert not (part / "time.png").exists()                  # no plot from part of a study
    # a results.json written before files said which run they came from still resumes
    data.pop("resume")
    (part / "results.json").write_text(json.dumps(data))

    calls = interrupt_after(monkeypatch, 10 ** 6)
    resumed = run(base + ["-o", str(part), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert len(calls) == total - k                           # only the missing rows ran
    for name in ("results.json", "results.csv", "summary.csv", "time.csv", "time.json"):
        assert _stable(part / name) == _stable(full / name), name


def test_interrupted_before_any_row_leaves_csv_headers(tmp_path, monkeypatch):
    import pksim_core.runner

    def stop(_task):
        raise KeyboardInterrupt
    monkeypatch.setattr(pksim_core.runner, "run_task", stop)
    study = tmp_path / "small.toml"
    study.write_text(STUDY)
    result = run(["whatif", "--study", str(study), "--workers", "1", "-o", str(tmp_path / "o")])
    assert result.exit_code == 130
    lines = (tmp_path / "o" / "results.csv").read_text().splitlines()
    assert lines[0].startswith("# partial: 0 of 12") and lines[1].startswith("system,variant")


def test_resume_without_a_previous_run_is_one_line(tmp_path):
    one_line_error(run(["whatif", "--systems", "dgx-h100", "--resume", "--no-plots",
                        "-o", str(tmp_path / "none")]), "nothing to resume")


# ---- one interface: --json conventions, systems show, what an answer rests on ----------------
def test_predict_json_nulls_what_does_not_apply():
    import json
    coll = json.loads(run(["predict", *SMALL, "--json"]).output)
    assert coll["baseline_s"] is None and coll["speedup"] is None
    assert coll["compute_s"] is None and coll["time_s"] > 0 and coll["label"]
    fused = json.loads(run(["predict", "--system", "dgx-h100", "--op", "gemm-rs", "--m", "4096",
                            "--n", "4096", "--k", "4096", "--json"]).output)
    assert fused["busbw_GBps"] is None and fused["baseline_s"] > 0 and fused["speedup"] > 0


def test_sweep_and_whatif_json_in_seconds_with_labels(tmp_path):
    import json
    sweep = run(["sweep", "--system", "dgx-h100", "--op", "all-reduce", "--bytes", "1MiB",
                 "--workers", "1", "--no-plots", "--json", "-o", str(tmp_path / "s")])
    assert sweep.exit_code == 0, sweep.output
    row = json.loads(sweep.output)["rows"][0]
    assert "pk_time_s" in row and "pk_time_us" not in row and 0 < row["pk_time_s"] < 1
    assert isinstance(row["pk_label"], str) and "pk_schedule" not in row
    study = tmp_path / "small.toml"
    study.write_text(STUDY)
    what = run(["whatif", "--study", str(study), "--workers", "1", "--no-plots", "--json",
                "-o", str(tmp_path / "w")])
    assert what.exit_code == 0, what.output
    entry = json.loads(what.output)["rows"][0]
    assert 0 < entry["time_s"] < 1 and "time_us" not in entry and isinstance(entry["label"], str)


def test_every_command_takes_output_and_the_same_dtypes():
    from pksim_core.schedule import DTYPES
    for command in (["whatif"], ["sweep"], ["trace"], ["codegen"], ["run"]):
        text = run(command + ["--help"]).output
        assert "-o, --output" in text, command
    for command in (["predict"], ["search"], ["sweep"], ["codegen"], ["trace"]):
        text = run(command + ["--help"]).output.replace("\n", " ").replace(" ", "")
        assert "|".join(DTYPES) in text, command


def test_systems_show_prints_values():
    import json
    text = run(["systems", "show", "dgx-h100"]).output
    assert "value" in text
    line = next(l for l in text.splitlines() if "gpu.nvlink.link_bandwidth_GBps" in l)
    assert " 25 " in line
    shown = json.loads(run(["systems", "show", "dgx-h100", "--json"]).output)
    assert shown["provenance"]["gpu.nvlink.link_bandwidth_GBps"]["value"] == 25
    assert shown["provenance"]["gpu.hbm.capacity_GB"]["value"] == 80


def test_whatif_rows_name_the_figure_they_rest_on_and_its_provenance(tmp_path):
    import json
    out = tmp_path / "w"
    study = tmp_path / "small.toml"
    study.write_text(STUDY)
    result = run(["whatif", "--study", str(study), "--systems", "rubin-ultra-nvl576,dgx-h100",
                  "--no-plots",
                  "--workers", "1", "--vary", f"{NVLINK}=2x", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "rests on" in result.output
    rows = json.loads((out / "results.json").read_text())["rows"]
    links = [r for r in rows if r["status"] == "ok" and r["bound_resource"] == "nvl_in"]
    assert links and all(r["binding_figure"] == NVLINK for r in links)
    tags = {(r["system"], r["variant"]): r["binding_provenance"] for r in links}
    assert any(tag == "assumed" for (s, v), tag in tags.items() if s == "rubin-ultra-nvl576")
    assert any(tag == "override" for (s, v), tag in tags.items() if v != "base")
    tensor = [r for r in rows if r["status"] == "ok" and r["bound_resource"] == "tensor"]
    assert all(r["binding_figure"] == "gpu.tensor.tflops_bf16" and r["binding_provenance"]
               for r in tensor)


SWEEP = ["sweep", "--system", "dgx-h100,h200-virtual", "--op", "all-reduce", "--bytes",
         "1MiB:8MiB", "--world", "4", "--workers", "1"]


def test_interrupted_sweep_is_partial_and_resume_completes_it(tmp_path, monkeypatch):
    import json
    full = tmp_path / "full"
    assert run(SWEEP + ["-o", str(full)]).exit_code == 0
    total = 2 * 4 * 2                      # systems x sizes (1, 2, 4, 8 MiB) x impls
    assert len(json.loads((full / "sweep.json").read_text())["results"]) == total

    k = 5
    part = tmp_path / "part"
    interrupt_after(monkeypatch, k)
    result = run(SWEEP + ["-o", str(part)])
    assert result.exit_code == 130
    assert (part / "sweep.csv").read_text().startswith(f"# partial: {k} of {total} rows")
    data = json.loads((part / "sweep.json").read_text())
    assert data["partial"].startswith(f"partial: {k} of {total}") and "--resume" in data["partial"]
    assert len(data["results"]) == k
    assert not (part / "busbw.png").exists()

    calls = interrupt_after(monkeypatch, 10 ** 6)
    resumed = run(SWEEP + ["-o", str(part), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert len(calls) == total - k                           # only the missing rows ran
    for name in ("sweep.json", "sweep.csv", "busbw.csv", "busbw.json", "time.json",
                 "roofline.json"):
        assert _stable(part / name) == _stable(full / name), name
    assert (part / "busbw.png").exists()


def test_sweep_resume_refuses_another_sweeps_files(tmp_path):
    out = tmp_path / "s"
    assert run(SWEEP + ["-o", str(out), "--no-plots"]).exit_code == 0
    one_line_error(run(SWEEP + ["-o", str(out), "--no-plots", "--resume", "--dtype", "fp32"]),
                   "--resume", "another run", "dtype")
    one_line_error(run(["sweep", "--system", "dgx-h100", "--op", "all-gather", "--bytes",
                        "1MiB", "--resume", "-o", str(out)]), "--resume", "all-gather")
    one_line_error(run(SWEEP + ["--resume", "-o", str(tmp_path / "none")]), "nothing to resume")


def test_every_binding_resource_names_a_figure_of_the_system_with_its_provenance():
    """Each resource a prediction can be bound by maps to a key the system file has (so its
    provenance is known), on every shipped system, virtual ranks included; only the NCCL
    baseline's own time rests on no single figure."""
    from hwmodels.catalog import list_systems, load_system
    from pksim_core.provenance import binding_figure, provenance_of
    from pksim_core.schedule import DTYPES
    resources = ["issue", "latency", "hbm", "l2", "ce", "cecmd", "mempath", "tensor", "nvl_in",
                 "nvl_out", "nic_in", "nic_out", "sw1", "nvls1", "up1", "down1", "sw2"]
    for name in list_systems():
        system = load_system(name)
        tiers = len(system.domain.switch_tiers)
        for resource in resources:
            level = resource.lstrip("swnvlsupdown")
            if level.isdigit() and int(level) > tiers:
                continue
            for mechanism in ("tma", "register", "copy-engine", "multimem"):
                if mechanism == "multimem" and system.domain.fabric == "shared-memory":
                    continue                       # no multimem inside one GPU
                for dtype in DTYPES if resource == "tensor" else ("bf16",):
                    key = binding_figure(system, resource, mechanism, dtype)
                    assert key and provenance_of(system, key), (name, resource, mechanism, key)
        assert binding_figure(system, "nccl") == ""
    virtual = load_system("h200-virtual")
    assert binding_figure(virtual, "issue", "tma") == "gpu.transfer.tma_local_per_sm_GBps"
    h100 = load_system("dgx-h100")
    assert binding_figure(h100, "issue", "multimem") == "gpu.transfer_remote.multimem_per_sm_GBps"
    assert provenance_of(h100, "gpu.transfer_remote.multimem_per_sm_GBps") == "estimate"


def _keys(obj):
    """Every key of a JSON document, at any depth."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield key
            yield from _keys(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _keys(value)


def test_every_file_and_json_gives_times_in_seconds(tmp_path):
    """One rule for machine-readable output (docs/outputs.md): CSV headers, JSON files and
    --json give times in seconds, in keys ending _s; no key in us, ms or ns (the Chrome
    trace's own ts/dur, microseconds by its format, carry no unit in their names)."""
    import csv
    import json
    import re
    study = tmp_path / "small.toml"
    study.write_text(STUDY.replace('kinds = ["time"]', 'kinds = ["time", "breakdown", '
                                   '"timeline", "sensitivity", "roofline", "speedup"]'))
    commands = [
        ["whatif", "--study", str(study), "--workers", "1", "--vary", f"{NVLINK}=2x",
         "-o", str(tmp_path / "w"), "--json"],
        ["sweep", "--system", "dgx-h100", "--op", "all-reduce", "--bytes", "1MiB,2MiB",
         "--workers", "1", "-o", str(tmp_path / "s"), "--json"],
        ["trace", *SMALL, "--gantt", "-o", str(tmp_path / "t" / "t.json"), "--json"],
        ["predict", *SMALL, "--impl", "nccl", "--json"],
        ["search", *SMALL, "--json", "--top", "2"],
        ["codegen", *SMALL, "-o", str(tmp_path / "c"), "--json"],
    ]
    other_unit = re.compile(r"_(us|ms|ns)$")
    for args in commands:
        result = run(args)
        assert result.exit_code == 0, (args, result.output)
        assert not [k for k in _keys(json.loads(result.output)) if other_unit.search(k)], args
    files = [p for p in tmp_path.rglob("*") if p.suffix in (".csv", ".json")]
    assert len(files) > 20
    for path in files:
        if path.suffix == ".csv":
            with path.open() as handle:
                header = next(csv.reader(line for line in handle if not line.startswith("#")))
            keys = header
        else:
            keys = list(_keys(json.loads(path.read_text())))
        bad = [k for k in keys if other_unit.search(str(k))]
        assert not bad, (path.name, bad)
    results = json.loads((tmp_path / "w" / "results.json").read_text())["rows"]
    with (tmp_path / "w" / "results.csv").open() as handle:
        first = next(csv.DictReader(line for line in handle if not line.startswith("#")))
    assert float(first["time_s"]) == pytest.approx(results[0]["time_s"], rel=1e-5)
    assert 1e-7 < results[0]["time_s"] < 1e-2                 # seconds, not microseconds


# ---- a study's or a sweep's cases: checked before any work ------------------------------------
@pytest.mark.parametrize("workload, needle", [
    ('op = "all-reduce"\nbytes = [3, "1MiB"]', "bytes 3: not a whole number of bf16"),
    ('op = "all-reduce"\nbytes = "1TiB"', "more than the 80 GB"),
    ('op = "moe-dispatch-gemm"\ntokens = 1024\nhidden = 1024\nexperts = 8\ntopk = 16\n'
     'expert_hidden = 1024', "topk 16 is more than the 8 experts"),
    ('op = "gemm-rs"\nm = 4\nn = 1024\nk = 1024', "m 4 is smaller than the world (8)"),
])
def test_a_study_case_no_run_can_have_is_one_line_before_any_work(tmp_path, monkeypatch,
                                                                    workload, needle):
    import pksim_core.runner

    def no_work(*_a, **_k):
        raise AssertionError("work started before the cases were checked")
    monkeypatch.setattr(pksim_core.runner, "run_tasks", no_work)
    study = tmp_path / "bad.toml"
    study.write_text(f'name = "bad"\nsystems = ["dgx-h100"]\n[[workload]]\nname = "w"\n'
                     f'{workload}\nworld = 8\n')
    one_line_error(run(["whatif", "--study", str(study), "-o", str(tmp_path / "o")]),
                   str(study), "workload 'w'", "dgx-h100", needle)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, needle", [
    (["--op", "moe-dispatch-gemm", "--shape", "tokens=1024", "--shape", "hidden=1024",
      "--shape", "experts=8", "--shape", "topk=16", "--shape", "expert_hidden=1024"],
     "--shape topk 16 is more than the 8 experts"),
    (["--op", "all-reduce", "--shape", "count=1:1099511627776"], "more than the 80 GB"),
    (["--op", "all-reduce", "--bytes", "1MiB", "--root", "8"], "--root 8 is not a rank of 8"),
])
def test_sweep_case_no_run_can_have(tmp_path, args, needle):
    one_line_error(run(["sweep", "--system", "dgx-h100", *args, "-o", str(tmp_path / "s")]),
                   needle)


@pytest.mark.parametrize("args, needle", [
    (["--root", "9"], "--root 9 is not a rank of 8"),
    (["--root", "-1"], "--root -1 is not a rank"),
    (["--chunk-bytes", "3"], "--chunk-bytes 3: not a whole number of bf16"),
])
def test_root_and_chunk_name_their_option(args, needle):
    one_line_error(run(["predict", *SMALL, *args]), needle)
