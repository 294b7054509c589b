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
