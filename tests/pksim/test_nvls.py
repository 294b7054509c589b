"""``--nvls on|off`` (NCCL_NVLS_ENABLE) for NCCL's predictions on sweep, whatif and in study
files, as predict takes it: off leaves NCCL's tuner without NVLS and NVLSTree, pk's rows do
not move, and every row says which it ran with (``nccl_nvls``). Issue 40."""
from __future__ import annotations

import json

import pytest

from pksim_core.nccl import nccl_schedule
from hwmodels.catalog import load_system
from pksim_core.simulate import predict
from tests.pksim.helpers import one_line_error, run, write

SWEEP = ["sweep", "--system", "dgx-h100", "--op", "all-reduce", "--bytes", "256MiB",
         "--workers", "1", "--no-plots", "--force"]
STUDY = ('name = "nv"\nsystems = ["dgx-h100"]\n{nvls}[[workload]]\nname = "ar"\n'
         'op = "all-reduce"\nbytes = "256MiB"\nworld = 8\n')


def _rows(path) -> dict[str, dict]:
    data = json.loads(path.read_text())
    return {r["impl"]: r for r in data["results" if "results" in data else "rows"]}


def test_sweep_nvls_off_is_nccls_pick_without_nvls(tmp_path):
    """At 256 MiB on dgx-h100 NCCL picks NVLS; with --nvls off the row is the tuner's pick
    without it, exactly as nccl_schedule(nvls=False) predicts, and pk's row is the same."""
    for mode in ("on", "off"):
        assert run([*SWEEP, "--nvls", mode, "-o", str(tmp_path / mode)]).exit_code == 0
    on, off = _rows(tmp_path / "on" / "sweep.json"), _rows(tmp_path / "off" / "sweep.json")
    assert on["nccl"]["nccl_nvls"] == "on" and off["nccl"]["nccl_nvls"] == "off"
    assert "nvls" in on["nccl"]["label"] and "nvls" not in off["nccl"]["label"]
    system = load_system("dgx-h100")
    for mode, rows in (("on", on), ("off", off)):
        expect = predict(system, nccl_schedule(system, "all-reduce", 256 << 20, 8,
                                               nvls=mode == "on"))
        assert rows["nccl"]["time_s"] == pytest.approx(expect.time_s, rel=1e-12)
    assert off["nccl"]["time_s"] > on["nccl"]["time_s"]
    assert off["pk"]["time_s"] == on["pk"]["time_s"]


def test_a_study_file_sets_nvls_and_the_option_overrides_it(tmp_path):
    study = write(tmp_path, STUDY.format(nvls='nvls = "off"\n'))
    args = ["whatif", "--study", str(study), "--workers", "1", "--no-plots", "--force"]
    result = run([*args, "-o", str(tmp_path / "file")])
    assert result.exit_code == 0, result.output
    assert "NCCL with NVLS off" in result.output
    assert run([*args, "--nvls", "on", "-o", str(tmp_path / "on")]).exit_code == 0
    off, on = _rows(tmp_path / "file" / "results.json"), _rows(tmp_path / "on" / "results.json")
    assert off["nccl"]["nccl_nvls"] == "off" and on["nccl"]["nccl_nvls"] == "on"
    assert off["nccl"]["time_s"] > on["nccl"]["time_s"]
    assert off["pk"]["speedup"] > on["pk"]["speedup"]
    # a run with NVLS off is not resumed as one with it on
    one_line_error(run([*args, "--nvls", "on", "--resume", "-o", str(tmp_path / "file")]),
                   "comes from another run")


@pytest.mark.parametrize("value", ['"of"', "0", "false", '["off"]'])
def test_a_study_nvls_that_is_not_on_or_off_names_the_file(tmp_path, value):
    study = write(tmp_path, STUDY.format(nvls=f"nvls = {value}\n"))
    one_line_error(run(["whatif", "--study", str(study), "-o", str(tmp_path / "o")]),
                   f"{study}: nvls", "must be \"on\" or \"off\"")
    assert not (tmp_path / "o").exists()
