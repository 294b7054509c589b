"""``pksim env``: what this machine offers and what each command needs; the GPU commands
point to it before anything is built."""
from __future__ import annotations

import json

from click.testing import CliRunner

from pksim_cli.main import cli
from validation import environment


def test_help():
    res = CliRunner().invoke(cli, ["env", "--help"])
    assert res.exit_code == 0 and "Usage:" in res.output and "--json" in res.output


def test_json_names_every_probe_and_command():
    res = CliRunner().invoke(cli, ["env", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert {"gpu", "nvcc", "torch", "simpy", "nvlink", "multicast", "kernels", "cache"} <= \
        set(out["machine"])
    assert set(out["commands"]) == set(environment.NEEDS)
    assert out["machine"]["kernels"]["ok"]          # an installed pksim has its kernels
    assert out["commands"]["calibrate --from-json"]["missing"] == []


def test_table():
    res = CliRunner().invoke(cli, ["env"])
    assert res.exit_code == 0 and "codegen --build" in res.output and "multicast" in res.output


def test_missing_for_lists_what_is_absent():
    probes = {"gpu": {"ok": False, "detail": "nvidia-smi not found"},
              "torch": {"ok": True, "detail": "2.5"}, "kernels": {"ok": True, "detail": "k"},
              "nvcc": {"ok": False, "detail": "not found"}}
    got = environment.missing_for("run --virtual", probes)
    assert got == ["an NVIDIA GPU (nvidia-smi): nvidia-smi not found",
                   "nvcc (on PATH, $NVCC or /usr/local/cuda/bin/nvcc): not found"]


def test_a_gpu_command_points_to_env_before_building(tmp_path, monkeypatch):
    monkeypatch.setattr(environment, "probe_nvcc", lambda: {"ok": False, "detail": "not found"})
    res = CliRunner().invoke(cli, ["codegen", "--build", "--system", "h200-virtual", "--op",
                                   "all-gather", "--bytes", "1MiB", "--world", "2", "-o",
                                   str(tmp_path)])
    assert res.exit_code == 2
    line = res.output.strip()
    assert "\n" not in line and "pksim codegen --build needs nvcc" in line
    assert "`pksim env`" in line
    assert not list(tmp_path.iterdir())              # nothing emitted, nothing built
