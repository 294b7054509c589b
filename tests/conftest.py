"""Shared test helpers."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hwmodels.catalog import SYSTEMS_DIR


@pytest.fixture
def write_system(tmp_path):
    """Write a system file into a temp dir; returns its path. ``parent`` copies a
    shipped system next to it so that ``inherits`` resolves locally too."""
    def write(text: str, name: str = "user.toml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path
    return write


@pytest.fixture
def shipped_copy(tmp_path):
    """A copy of a shipped system file in a temp dir, to be edited."""
    def copy(name: str) -> Path:
        dst = tmp_path / f"{name}.toml"
        shutil.copy(SYSTEMS_DIR / f"{name}.toml", dst)
        return dst
    return copy

