"""Shared test helpers, and the check that the suite writes nothing into the repository tree
(a stand-in that wrote to its argument "--out" in the current folder left a file of that name
in the repository root, committed by 9b9bf5f): ``git status`` before and after the session,
the difference reported and the run failed."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

from hwmodels.catalog import SYSTEMS_DIR

# hypothesis keeps no example database and its other files outside the tree (.hypothesis/)
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), f"pksim-hypothesis-{os.getuid()}"))
settings.register_profile("pksim", database=None)
settings.load_profile("pksim")


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


# PKSIM_SUITE=full (make test-full): the exhaustive variants too. By default a test marked
# ``exhaustive`` is skipped; its file keeps a representative slice unmarked.
FULL_SUITE = os.environ.get("PKSIM_SUITE") == "full"


def pytest_collection_modifyitems(config, items):
    if FULL_SUITE:
        return
    skip = pytest.mark.skip(reason="an exhaustive variant: make test-full (PKSIM_SUITE=full) "
                                   "runs it; the default suite keeps a slice of its file")
    for item in items:
        if item.get_closest_marker("exhaustive") is not None:
            item.add_marker(skip)


ROOT = Path(__file__).resolve().parents[1]
# what a test run or an install may leave: caches, the virtual environment, build metadata,
# the device-call copies (.dev, .whl: excluded in .git/info/exclude)
TREE_ALLOWED = (".venv/", ".pytest_cache/", "__pycache__/", ".egg-info/", ".dev/", ".whl/",
                ".pyc")


def tree_state(root: Path = ROOT) -> set[str] | None:
    """``git status`` of ``root`` (untracked and ignored entries too, folders collapsed), less
    TREE_ALLOWED; None where it is not a git checkout (an installed copy)."""
    try:
        proc = subprocess.run(["git", "status", "--porcelain", "--ignored",
                               "--untracked-files=normal"], cwd=root, capture_output=True,
                              text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return {line for line in proc.stdout.splitlines()
            if not any(a in line for a in TREE_ALLOWED)}


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):        # the controller, not an xdist worker
        session.config.stash[_BEFORE] = tree_state()


def pytest_sessionfinish(session, exitstatus):
    before = session.config.stash.get(_BEFORE, None)
    if before is None or hasattr(session.config, "workerinput"):
        return
    after = tree_state() or set()
    new = sorted(after - before)
    if new:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        line = f"the tests wrote into the repository tree {ROOT}: {'; '.join(new)}"
        if reporter is not None:
            reporter.write_line(line, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[set | None]()
