"""``--scheduler``: ``pksim whatif`` and ``pksim sweep`` on a Dask cluster give the rows of the
serial run. The cluster is local, two workers in this process (``processes=False``: CI's two
cores run the tasks as threads; the tasks go through the same client and executor as on a
remote cluster)."""
from __future__ import annotations

import json

import pytest

from tests.pksim.helpers import run, write
from tests.pksim.test_whatif import SMALL

distributed = pytest.importorskip("dask.distributed")

VOLATILE = ("seconds", "wall_s")


def _rows(report: dict) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in VOLATILE} for row in report["rows"]]


@pytest.fixture(scope="module")
def scheduler():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        yield cluster.scheduler_address


def test_whatif_on_a_cluster_gives_the_serial_rows(tmp_path, scheduler):
    study = write(tmp_path, SMALL)       # an all-reduce at two sizes and a gemm-rs
    reports = {}
    for name, how in (("serial", ["--workers", "1"]), ("dask", ["--scheduler", scheduler])):
        result = run(["whatif", "--study", str(study), "-o", str(tmp_path / name),
                      "--no-plots", "--json", *how])
        assert result.exit_code == 0, result.output
        reports[name] = json.loads(result.output)
    assert len(reports["serial"]["rows"]) == 3
    assert all(r["status"] == "ok" for r in reports["serial"]["rows"])
    assert _rows(reports["dask"]) == _rows(reports["serial"])
    serial = json.loads((tmp_path / "serial" / "results.json").read_text())["rows"]
    dask = json.loads((tmp_path / "dask" / "results.json").read_text())["rows"]
    assert [{k: v for k, v in r.items() if k not in VOLATILE} for r in dask] == \
        [{k: v for k, v in r.items() if k not in VOLATILE} for r in serial]


def test_sweep_on_a_cluster_gives_the_serial_rows(tmp_path, scheduler):
    reports = {}
    for name, how in (("serial", ["--workers", "1"]), ("dask", ["--scheduler", scheduler])):
        result = run(["sweep", "--system", "dgx-h100", "--op", "reduce-scatter",
                      "--bytes", "4KiB:1MiB", "-o", str(tmp_path / name), "--no-plots",
                      "--json", *how])
        assert result.exit_code == 0, result.output
        reports[name] = json.loads(result.output)
    assert len(reports["serial"]["rows"]) == 9                  # 4 KiB .. 1 MiB
    assert all(r["pk_time_s"] > 0 and r["nccl_time_s"] > 0 for r in reports["serial"]["rows"])
    assert _rows(reports["dask"]) == _rows(reports["serial"])


def test_an_unreachable_scheduler_is_a_one_line_error(tmp_path):
    result = run(["sweep", "--system", "dgx-h100", "--op", "all-reduce", "--bytes", "1MiB",
                  "-o", str(tmp_path), "--scheduler", "tcp://127.0.0.1:9", "--json"])
    assert result.exit_code == 2, result.output
    assert "--scheduler tcp://127.0.0.1:9: cannot connect" in result.output
