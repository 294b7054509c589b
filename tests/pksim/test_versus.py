"""pk's best schedule against NCCL's pick (pksim_core.versus, docs/decisions/D44.md): at >= 64 MiB
with NVLS available to both they are bound by the same resource, and the difference in time
is itemised into parts that add up."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hwmodels.catalog import load_system
from pksim_cli.main import cli
from pksim_core.versus import PARTS, itemise, versus_nccl
from pksim_core.nccl import nccl_schedule
from pksim_core.simulate import predict

MiB = 1 << 20


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-b200"])
@pytest.mark.parametrize("nbytes", [64 * MiB, 256 * MiB, 1024 * MiB])
def test_large_allreduce_same_binding_and_parts_add_up(name, nbytes):
    system = load_system(name)
    v = versus_nccl(system, "all-reduce", nbytes)
    # both run the switch's reduction (pk's streamed in-network kernel, NCCL's NVLS) and are
    # bound by the GPUs' NVLink ports, whose in-network traffic both carry at the multimem
    # efficiency: the same payload and wire time, the difference all in what is exposed
    assert v["same_busiest_group"], (v["pk"]["busiest_resource"], v["nccl"]["busiest_resource"])
    assert v["pk"]["busiest_group"] == v["nccl"]["busiest_group"] == "nvlink"
    assert v["pk"]["label"].startswith("in-network/multimem")
    assert v["nccl"]["label"] == "nccl/nvls/Simple"
    for side in ("pk", "nccl"):
        parts = v[side]["parts"]
        assert set(parts) == set(PARTS)
        assert sum(parts.values()) == pytest.approx(v[side]["time_s"], rel=1e-12)
        assert parts["wire_s"] == pytest.approx(
            (parts["payload_s"] + parts["wire_s"]) * (1 - v[side]["efficiency"]))
    diff = v["difference_parts"]
    assert sum(diff.values()) == pytest.approx(v["difference_s"], rel=1e-9, abs=1e-12)
    assert abs(diff["payload_s"]) < 1e-9 and abs(diff["wire_s"]) < 1e-9


def test_itemised_host_floor():
    # NCCL one-thread on dgx-h100 at 4 KiB: the host's 8 launch calls (8 x 4.23 us) outlast
    # the GPU's ring/LL: the host part is the floor less the GPU's time
    system = load_system("dgx-h100")
    p = predict(system, nccl_schedule(system, "all-reduce", 4096, launch="one-thread"))
    it = itemise(system, p)
    assert p.time_s == pytest.approx(8 * system.gpu.sync.launch_api_s)
    assert it["parts"]["host_s"] > 0
    assert sum(it["parts"].values()) == pytest.approx(p.time_s, rel=1e-12)


def test_predict_json_has_vs_nccl():
    r = CliRunner().invoke(cli, ["predict", "--system", "dgx-h100", "--op", "all-reduce",
                                 "--bytes", "256MiB", "--json"])
    assert r.exit_code == 0, r.output
    v = json.loads(r.output)["vs_nccl"]
    assert v["same_busiest_group"] and set(v["difference_parts"]) == set(PARTS)
    assert v["pk"]["time_s"] == pytest.approx(json.loads(r.output)["time_s"])
    # virtual ranks (one GPU): NCCL cannot run there, no comparison
    r = CliRunner().invoke(cli, ["predict", "--system", "h200-virtual-calibrated", "--op",
                                 "all-reduce", "--bytes", "1MiB", "--world", "4", "--json"])
    assert r.exit_code == 0, r.output
    assert "vs_nccl" not in json.loads(r.output)
