"""Helpers the CLI tests share: run a command, check a one-line error, write a study file,
interrupt a run."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

import pksim_core.runner
from pksim_cli.main import cli
from pksim_core.runner import run_task as _REAL_RUN_TASK


def run(args):
    return CliRunner().invoke(cli, args)


def write(tmp_path: Path, text: str, name: str = "study.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def interrupt_after(monkeypatch, k: int) -> list:
    """Make the k+1-th task raise KeyboardInterrupt (Ctrl-C); returns the tasks run."""
    calls: list = []

    def task(t):
        if len(calls) == k:
            raise KeyboardInterrupt
        calls.append(t)
        return _REAL_RUN_TASK(t)
    monkeypatch.setattr(pksim_core.runner, "run_task", task)
    return calls


def one_line_error(result, *needles: str) -> str:
    """The command failed as bad input: exit 2, one line "pksim: error: ..." holding each
    needle, no traceback. Returns the line."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("pksim: error:"), result.output
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def small_study(sizes: str = '["1MiB", "4MiB", "16MiB"]', world: str = "[4, 8]",
                system: str = "dgx-h100") -> str:
    """A study of one all-reduce workload, pk and nccl, the time plot: sizes x worlds rows x 2."""
    return (f'name = "small"\nsystems = ["{system}"]\nimpls = ["pk", "nccl"]\n'
            f'[[workload]]\nname = "ar"\nop = "all-reduce"\nbytes = {sizes}\nworld = {world}\n'
            f'[plots]\nkinds = ["time"]\n')

