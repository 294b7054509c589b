"""Results that an interrupt cannot lose or spoil (docs/decisions/D69.md).

- ``whole(path)``: a file is written into a temporary file beside it and renamed over it
  once complete (``os.replace``, atomic on one file system), so a Ctrl-C, a kill or a full
  disk at any moment leaves the old file or the new one, never a part of one.
- ``Journal``: the rows of a study or sweep as they finish, one JSON line each in
  ``<folder>/<name>.partial.jsonl``, written and flushed the moment their task ends (the
  folder exists from the first row on); its first line is the run's identity, what
  ``--resume`` matches. The finished results file replaces it. ``read_journal`` gives back
  every complete row (a line cut by an interrupt is left out).
"""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from hwmodels.errors import ConfigError

JOURNAL_SUFFIX = ".partial.jsonl"


@contextmanager
def whole(path: Path) -> Iterator[Path]:
    """Yield the temporary path to write; on success it replaces ``path``, on any error
    (an interrupt included) it is removed and ``path`` is left as it was."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def journal_path(results: Path) -> Path:
    """The journal beside a results file: results.json -> results.partial.jsonl."""
    return results.with_name(results.stem + JOURNAL_SUFFIX)


class Journal:
    """Rows appended as they finish (``add``), after the identity line and the rows a
    ``--resume`` kept; ``finish`` removes it once the results file holds them all."""

    def __init__(self, path: Path, identity: dict[str, Any], kept: list[dict] = ()):
        self.path, self.identity, self.kept = Path(path), identity, list(kept)
        self._handle = None

    def add(self, record: dict[str, Any]) -> None:
        try:
            if self._handle is None:
                self._start()
            self._handle.write(json.dumps(record, default=str) + "\n")
            self._handle.flush()
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot write ({exc.strerror or exc})") from None

    def _start(self) -> None:
        """The folder, then the identity and the kept rows, whole, before the first row."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with whole(self.path) as tmp:
            lines = [{"resume": self.identity}] + self.kept
            tmp.write_text("".join(json.dumps(x, default=str) + "\n" for x in lines))
        self._handle = self.path.open("a")

    def finish(self) -> None:
        """The results file now holds every row: the journal goes."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        self.path.unlink(missing_ok=True)


def read_journal(path: Path, identity: dict[str, Any]) -> list[dict] | None:
    """The complete rows of the journal at ``path`` (None if there is none); ConfigError if
    it belongs to another run. A last line an interrupt cut short is left out."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"--resume: cannot read {path} ({exc.strerror or exc})") from None
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue                   # cut short by the interrupt: that row runs again
    if not records or not isinstance(records[0], dict) or "resume" not in records[0]:
        return []
    recorded = records[0]["resume"]
    if not isinstance(recorded, dict):
        return []
    check_identity(path, recorded, identity)
    return [r for r in records[1:] if isinstance(r, dict)]


# What a run's identity holds where a file written before the key existed has none.
IDENTITY_DEFAULTS = {"nvls": "on"}


def check_identity(path: Path, recorded: dict[str, Any], identity: dict[str, Any]) -> None:
    """``--resume``: the run that wrote ``path`` (its ``recorded`` identity) is this one; a
    key it lacks reads as IDENTITY_DEFAULTS says. ConfigError naming the first key that
    differs."""
    for key, value in identity.items():
        theirs = recorded.get(key, IDENTITY_DEFAULTS.get(key))
        if theirs != value:
            raise ConfigError(f"--resume: {path} comes from another run: its {key} is "
                              f"{theirs!r}, this run's {value!r}")
