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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test` runs `-n auto --dist loadgroup`): each test file runs
    on one worker, so its module fixtures (a file's nvcc builds, a fit) are made once; the
    default what-if study's two users (the golden test and the guide's block in
    tests/test_docs.py, both marked ``default_study``) share a worker and so one run of it."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if any(m.name == "xdist_group" for m in item.iter_markers()):
            continue
        group = "default-study" if item.get_closest_marker("default_study") else \
            str(item.path.relative_to(config.rootpath))
        item.add_marker(pytest.mark.xdist_group(group))
