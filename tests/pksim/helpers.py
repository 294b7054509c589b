"""Helpers the CLI tests share: run a command, write a study file, interrupt a run."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

import pksim.runner
from pksim.cli.main import cli
from pksim.runner import run_task as _REAL_RUN_TASK


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
    monkeypatch.setattr(pksim.runner, "run_task", task)
    return calls


def small_study(sizes: str = '["1MiB", "4MiB", "16MiB"]', world: str = "[4, 8]",
                system: str = "dgx-h100") -> str:
    """A study of one all-reduce workload, pk and nccl, the time plot: sizes x worlds rows x 2."""
    return (f'name = "small"\nsystems = ["{system}"]\nimpls = ["pk", "nccl"]\n'
            f'[[workload]]\nname = "ar"\nop = "all-reduce"\nbytes = {sizes}\nworld = {world}\n'
            f'[plots]\nkinds = ["time"]\n')

