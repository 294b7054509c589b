"""The Python API (docs/api.md): the CLI's engine. A result's ``to_dict()`` is the command's
``--json``; errors are PksimErrors with the CLI's one-line message; ``import pksim`` and the
CLI's start load only what they use; docs/api.md's example runs."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pksim
from hwmodels.errors import ConfigError, InfeasibleError
from tests.pksim.helpers import run

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("scipy", "matplotlib", "rich", "numpy", "validation", "codegen")


def cli_json(args: list[str]):
    result = run(args + ["--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


OURS = ("pksim.", "pksim_core.", "pksim_cli.")


def loaded_after(code: str) -> set[str]:
    """Top-level packages and pksim modules a fresh interpreter holds after ``code``."""
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout.split()
    return {m for m in out if "." not in m or m.startswith(OURS)}


def test_import_pksim_loads_no_engine():
    mods = loaded_after("import pksim; assert pksim.__version__")
    assert "pksim_core.lazy" in mods
    assert not {m for m in mods if m.startswith(OURS) and m != "pksim_core.lazy"}
    assert not mods & {*HEAVY, "simpy", "click"}


def test_the_cli_loads_only_the_command_it_runs():
    mods = loaded_after("from pksim_cli.main import cli\n"
                        "try:\n    cli(['--version'])\nexcept SystemExit:\n    pass")
    assert not {m for m in mods if m.startswith(("pksim_cli.", "pksim.api"))} - {
        "pksim_cli.main", "pksim_cli.group"}
    assert not mods & {*HEAVY, "simpy"}
    mods = loaded_after("from pksim_cli.main import cli\n"
                        "try:\n    cli(['predict', '--system', 'dgx-h100', '--op', 'all-reduce',"
                        " '--bytes', '1MiB'])\nexcept SystemExit:\n    pass")
    assert "pksim_cli.predict" in mods and "pksim_core.collective_model" in mods
    assert not mods & set(HEAVY)
    assert "pksim_cli.whatif" not in mods and "pksim_cli.calibrate" not in mods


@pytest.mark.parametrize("args", [
    ["--system", "dgx-h100", "--op", "all-reduce", "--bytes", "1MiB"],
    ["--system", "dgx-h100", "--op", "reduce-scatter", "--bytes", "64MiB", "--impl", "nccl"],
    ["--system", "dgx-h100", "--op", "all-gather", "--bytes", "4MiB", "--algorithm", "ring",
     "--mechanism", "tma", "--comm-sms", "32", "--set", "gpu.nvlink.link_bandwidth_GBps=50"],
    ["--system", "dgx-h100", "--op", "gemm-rs", "--m", "4096", "--n", "4096", "--k", "4096"],
])
def test_predict_to_dict_is_the_cli_json(args):
    options = {"system": args[1], "op": args[3]}
    rest = args[4:]
    for flag, value in zip(rest[::2], rest[1::2]):
        key = {"--bytes": "bytes", "--set": "set", "--n": "n"}.get(flag, flag[2:].replace("-", "_"))
        options[key] = [value] if key == "set" else int(value) if key in (
            "m", "n", "k", "comm_sms") else value
    got = pksim.predict(**options)
    assert got.to_dict() == cli_json(["predict", *args])
    assert got.time_s == got.prediction.time_s > 0 and got.bound_s <= got.time_s
    assert got.bound_resource in got.breakdown or got.bound_resource == "latency"


def test_predict_gives_the_nccl_pick():
    nccl = pksim.predict(system="dgx-h100", op="all-reduce", bytes=1 << 26, impl="nccl")
    assert nccl.schedule.impl == "nccl" and nccl.vs_nccl is None
    assert nccl.nccl["pick"]["algorithm"] in ("ring", "tree", "nvls", "collnet_direct",
                                              "collnet_chain", "pat")
    pk = pksim.predict(system="dgx-h100", op="all-reduce", bytes=1 << 26)
    assert pk.nccl is None and pk.vs_nccl["nccl"]["label"] == nccl.schedule.label()
    assert pk.vs_nccl["nccl"]["time_s"] == pytest.approx(nccl.time_s, rel=1e-12)


def test_search_to_dict_is_the_cli_json():
    got = pksim.search(system="dgx-h100", op="all-reduce", bytes="1MiB", top=3)
    assert got.to_dict() == cli_json(["search", "--system", "dgx-h100", "--op", "all-reduce",
                                      "--bytes", "1MiB", "--top", "3"])
    assert len(got.ranked) == 3 and got.ranked[0].time_s <= got.ranked[2].time_s
    assert got.candidates == got.simulated + len(got.pruned) + len(got.infeasible)


def test_program_predict_and_search_are_the_cli_json():
    got = pksim.predict(program="allreduce")
    assert got.to_dict() == cli_json(["predict", "--program", "allreduce"])
    found = pksim.search(program="allreduce", top=2)
    assert found.to_dict() == cli_json(["search", "--program", "allreduce", "--top", "2"])


def test_sweep_rows_are_the_cli_rows(tmp_path):
    got = pksim.sweep(system="dgx-h100", op="all-gather", bytes="4KiB:64KiB", workers=1)
    assert got.files == () and len(got.entries) == 5
    cli = cli_json(["sweep", "--system", "dgx-h100", "--op", "all-gather", "--bytes",
                    "4KiB:64KiB", "-o", str(tmp_path), "--workers", "1"])
    assert got.to_dict()["rows"] == cli["rows"]
    assert [e["size_bytes"] for e in got.entries] == [4096 << i for i in range(5)]
    with_files = pksim.sweep(system="dgx-h100", op="all-gather", bytes=4096, workers=1,
                             output=tmp_path / "api", plots=False)
    assert {p.name for p in with_files.files} == {"sweep.csv", "sweep.json"}


def test_whatif_rows_are_the_cli_rows(tmp_path):
    study = tmp_path / "s.toml"
    study.write_text('name = "s"\nsystems = ["dgx-h100"]\n[[workload]]\nname = "ar"\n'
                     'op = "all-reduce"\nm = 1024\nn = 1024\nworld = 8\n')
    got = pksim.whatif(str(study), vary=["gpu.nvlink.link_bandwidth_GBps=2x"], workers=1)
    cli = cli_json(["whatif", "--study", str(study), "--vary",
                    "gpu.nvlink.link_bandwidth_GBps=2x", "-o", str(tmp_path / "o"),
                    "--workers", "1", "--no-plots"])
    drop = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert drop(got.to_dict()["rows"]) == drop(cli["rows"])
    assert len({e["variant"] for e in got.entries}) == 2 and len(got.entries) == 2


@pytest.mark.parametrize("call, args", [
    (dict(system="dgx-h100", op="all-reduce", bytes="1.5B"),
     ["predict", "--system", "dgx-h100", "--op", "all-reduce", "--bytes", "1.5B"]),
    (dict(system="no-such-system", op="all-reduce", bytes="1MiB"),
     ["predict", "--system", "no-such-system", "--op", "all-reduce", "--bytes", "1MiB"]),
    (dict(system="dgx-h100", op="all-reduce", bytes="1MiB", world=64),
     ["predict", "--system", "dgx-h100", "--op", "all-reduce", "--bytes", "1MiB",
      "--world", "64"]),
    (dict(system="dgx-h100", op="gemm-rs", m=4096), ["predict", "--system", "dgx-h100",
                                                     "--op", "gemm-rs", "--m", "4096"]),
])
def test_errors_are_pksim_errors_with_the_cli_message(call, args):
    with pytest.raises(pksim.PksimError) as caught:
        pksim.predict(**call)
    result = run(args)
    assert result.exit_code == 2
    assert result.output.strip() == f"pksim: error: {caught.value}"


def test_options_are_checked_as_the_cli_checks_them():
    with pytest.raises(ConfigError, match="unknown option 'nbytes'"):
        pksim.predict(system="dgx-h100", op="all-reduce", nbytes=4096)
    with pytest.raises(ConfigError, match="op='all-sum': not one of"):
        pksim.predict(system="dgx-h100", op="all-sum", bytes=4096)
    with pytest.raises(ConfigError, match="Missing option '--op'"):
        pksim.predict(system="dgx-h100", bytes=4096)
    with pytest.raises(InfeasibleError):
        pksim.predict(system="dgx-h100", op="all-reduce", bytes="1MiB", algorithm="rhd",
                      world=6)


AR = dict(system="dgx-h100", op="all-reduce", bytes="1MiB")


@pytest.mark.parametrize("call, words", [
    (dict(AR, world="8"), "predict: world='8': must be a whole number"),
    (dict(AR, world=2.5), "world=2.5: must be a whole number"),
    (dict(AR, world=True), "world=True: must be a whole number"),
    (dict(AR, comm_sms=4.5), "comm_sms=4.5"),
    (dict(AR, domains="2"), "domains='2'"),
    (dict(AR, root="0"), "root='0'"),
    (dict(AR, bytes=1.5), "bytes=1.5: must be bytes as an int or text"),
    (dict(AR, bytes=[1]), "bytes=[1]"),
    (dict(AR, set=5), "set=5: must be 'KEY=VALUE' text, a list of them or a dict"),
    (dict(AR, set={"gpu.nvlink.latency_ns": True}), "set={'gpu.nvlink.latency_ns': True}"),
    (dict(AR, set={3: 4}), "set={3: 4}: must be"),
    (dict(AR, set={"gpu.nvlink.latency_ns": float("nan")}), "latency_ns = nan must be a finite"),
    (dict(AR, cold_l2="yes"), "cold_l2='yes': must be True or False"),
    (dict(AR, full=1), "full=1: must be True or False"),
    (dict(AR, nvls=True), "nvls=True: must be text"),
    (dict(AR, system=5), "system=5: must be text"),
    (dict(AR, dtype=None), "dtype=None: give a value"),
    (dict(AR, impl=None), "impl=None: give a value"),
    (dict(system="dgx-h100", op="moe-dispatch-gemm", tokens=1024, hidden=1024, experts=8,
          topk=2, expert_hidden=1024, skew="x"), "skew='x': must be a number"),
])
def test_predict_keywords_of_the_wrong_kind_are_config_errors(call, words):
    """A keyword of the wrong type is a ConfigError naming it and its value (it was a
    TypeError from deep inside, or accepted: comm_sms=4.5, cold_l2='yes', impl=None)."""
    with pytest.raises(ConfigError) as caught:
        pksim.predict(**call)
    assert words in str(caught.value)


@pytest.mark.parametrize("call, words", [
    (lambda: pksim.sweep(world="8", **AR), "sweep: world='8'"),
    (lambda: pksim.sweep(plots="no", **AR), "sweep: plots='no': must be True or False"),
    (lambda: pksim.sweep(nvls=False, **AR), "sweep: nvls=False"),
    (lambda: pksim.sweep(nvls="maybe", **AR), "--nvls 'maybe': must be \"on\" or \"off\""),
    (lambda: pksim.whatif(systems=5), "whatif: systems=5"),
    (lambda: pksim.whatif(workers="2"), "whatif: workers='2': must be a whole number"),
    (lambda: pksim.whatif(study=5), "whatif: study=5: must be text"),
    (lambda: pksim.whatif(nvls="maybe"), "--nvls 'maybe'"),
])
def test_sweep_and_whatif_keywords_are_checked_before_any_work(call, words):
    with pytest.raises(ConfigError) as caught:
        call()
    assert words in str(caught.value)


def test_load_system_with_overrides():
    plain = pksim.load_system("dgx-h100")
    changed = pksim.load_system("dgx-h100", set=["gpu.nvlink.link_bandwidth_GBps=50"])
    assert changed.gpu.nvlink.link_bandwidth_Bps == 2 * plain.gpu.nvlink.link_bandwidth_Bps
    assert pksim.load_system("dgx-h100", set="gpu.nvlink.link_bandwidth_GBps=50") == changed
    assert pksim.load_system("dgx-h100", set={"gpu.nvlink.link_bandwidth_GBps": 50}) == changed
    # a float keeps every digit (repr), so the dict and the text give the same system
    third = {"gpu.nvlink.link_bandwidth_GBps": 100 / 3}
    assert pksim.load_system("dgx-h100", set=third) == pksim.load_system(
        "dgx-h100", set=[f"gpu.nvlink.link_bandwidth_GBps={100 / 3!r}"])


def test_set_as_a_dict_predicts_as_the_texts():
    as_dict = pksim.predict(**AR, set={"gpu.nvlink.link_bandwidth_GBps": 50})
    as_text = pksim.predict(**AR, set=["gpu.nvlink.link_bandwidth_GBps=50"])
    assert as_dict.to_dict() == as_text.to_dict()
    assert as_dict.time_s < pksim.predict(**AR).time_s


def test_the_api_page_example_runs(tmp_path, monkeypatch):
    text = (ROOT / "docs" / "api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 2
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    for block in blocks:
        exec(compile(block, "docs/api.md", "exec"), scope)     # noqa: S102
    assert len(scope["table"]) == 15 and all(pk > 0 and nccl > 0 for _, pk, nccl, _ in
                                             scope["table"])
    assert (tmp_path / "sweep-ratio.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert scope["faster"].time_s < scope["best"].time_s
    assert os.path.getsize(tmp_path / "sweep-ratio.png") > 10_000
