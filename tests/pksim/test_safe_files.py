"""Results an interrupt cannot lose or spoil (pksim_core.safe_files, docs/decisions/D69.md): every
file written whole or not at all, the rows journaled as they finish, --resume completing from
whatever complete rows exist, whichever moment the Ctrl-C came at."""
from __future__ import annotations

import json

import pytest

from pksim_core.plots import OutputDir
from pksim_core.safe_files import Journal, read_journal, whole

from tests.pksim.helpers import interrupt_after, run, small_study

STUDY = small_study('["1MiB", "4MiB"]', "8")
ROWS = 4                                  # 2 sizes x 2 impls
FILES = ("results.json", "results.csv", "summary.csv", "time.csv", "time.json")


def _study(tmp_path):
    path = tmp_path / "small.toml"
    path.write_text(STUDY)
    return ["whatif", "--study", str(path), "--workers", "1"]


def _rows(folder):
    """results.json's rows without what differs between runs (wall times)."""
    rows = json.loads((folder / "results.json").read_text())["rows"]
    return [{k: v for k, v in r.items() if k not in ("seconds", "wall_s")} for r in rows]


@pytest.fixture(scope="module")
def complete(tmp_path_factory):
    """The uninterrupted study's rows."""
    tmp = tmp_path_factory.mktemp("full")
    result = run(_study(tmp) + ["-o", str(tmp / "o")])
    assert result.exit_code == 0, result.output
    return _rows(tmp / "o")


def _readable_or_absent(folder):
    """Every results file there parses (none is a part of a file); no temporary is left."""
    for name in ("results.json", "time.json"):
        if (folder / name).exists():
            json.loads((folder / name).read_text())
    assert not list(folder.glob(".*.tmp"))


# ---- an interrupt during the tasks ----------------------------------------------------------------
@pytest.mark.parametrize("k", range(ROWS))
def test_an_interrupt_after_any_row_keeps_the_rows_and_resume_completes(tmp_path, monkeypatch,
                                                                         complete, k):
    base, out = _study(tmp_path), tmp_path / "o"
    interrupt_after(monkeypatch, k)
    assert run(base + ["-o", str(out)]).exit_code == 130
    _readable_or_absent(out)
    assert len(json.loads((out / "results.json").read_text())["rows"]) == k
    calls = interrupt_after(monkeypatch, 10 ** 6)
    assert run(base + ["-o", str(out), "--resume"]).exit_code == 0
    assert len(calls) == ROWS - k                       # only the missing rows ran
    assert _rows(out) == complete
    assert not list(out.glob("*.partial.jsonl"))        # the results file replaced the journal


# ---- an interrupt while the files are written ------------------------------------------------------
def _interrupt_write(monkeypatch, n: int) -> list:
    """The n-th results file written (results.json, results.csv, summary.csv, time.png, ...)
    is interrupted half-way: half its text written where it is being written, then Ctrl-C."""
    import csv
    import pathlib
    from matplotlib.figure import Figure
    writes: list = []

    def hit(where) -> bool:
        writes.append(where)
        return len(writes) == n + 1

    real_text, real_row, real_fig = pathlib.Path.write_text, csv.DictWriter.writerow, Figure.savefig

    def write_text(self, text, *args, **kwargs):
        if "partial.jsonl" not in self.name and hit(self):     # the journal is not a result
            real_text(self, text[: len(text) // 2])
            raise KeyboardInterrupt
        return real_text(self, text, *args, **kwargs)

    def writerow(self, row):
        real_row(self, row)
        if not getattr(self, "_counted", False):
            self._counted = True
            if hit("csv"):
                raise KeyboardInterrupt

    def savefig(self, target, *args, **kwargs):
        if hit(target):
            pathlib.Path(target).write_bytes(b"\x89PNG half")
            raise KeyboardInterrupt
        return real_fig(self, target, *args, **kwargs)
    monkeypatch.setattr(pathlib.Path, "write_text", write_text)
    monkeypatch.setattr(csv.DictWriter, "writerow", writerow)
    monkeypatch.setattr(Figure, "savefig", savefig)
    return writes


@pytest.mark.parametrize("n", range(6))
def test_an_interrupt_while_writing_leaves_whole_files_and_resume_completes(
        tmp_path, monkeypatch, complete, n):
    base, out = _study(tmp_path), tmp_path / "o"
    assert run(base + ["-o", str(out)]).exit_code == 0   # an earlier run's files, then --force
    before = {name: (out / name).read_text() for name in FILES}
    writes = _interrupt_write(monkeypatch, n)
    result = run(base + ["-o", str(out), "--force"])
    assert result.exit_code == 130 and len(writes) == n + 1, result.output
    for name in FILES:                                    # the old file, or the whole new one
        text = (out / name).read_text()
        if text != before[name]:
            assert json.loads(text) if name.endswith(".json") else \
                text.endswith("\n") and text.count("\n") == before[name].count("\n"), name
    assert not list(out.glob(".*.tmp"))
    journal = out / "results.partial.jsonl"
    assert journal.exists()                               # every row is in the journal
    assert len(journal.read_text().splitlines()) == 1 + ROWS
    monkeypatch.undo()
    calls = interrupt_after(monkeypatch, 10 ** 6)
    assert run(base + ["-o", str(out), "--resume"]).exit_code == 0
    assert calls == []                                    # every row was kept
    assert _rows(out) == complete


def test_the_folder_and_the_journal_exist_once_the_first_row_is_done(tmp_path, monkeypatch):
    """Stopped before any results file is written (the second task is interrupted and the
    writing too): the first row is on disk, and --resume runs the other three only."""
    base, out = _study(tmp_path), tmp_path / "o"
    interrupt_after(monkeypatch, 1)
    _interrupt_write(monkeypatch, 0)
    assert run(base + ["-o", str(out)]).exit_code == 130
    assert not (out / "results.json").exists()
    lines = (out / "results.partial.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["resume"]["study"] == "small"
    monkeypatch.undo()
    calls = interrupt_after(monkeypatch, 10 ** 6)
    assert run(base + ["-o", str(out), "--resume"]).exit_code == 0
    assert len(calls) == ROWS - 1


def test_a_zero_byte_results_file_resumes_from_the_journal_and_fails_without(tmp_path, complete):
    base, out = _study(tmp_path), tmp_path / "o"
    assert run(base + ["-o", str(out)]).exit_code == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    identity = json.loads((out / "results.json").read_text())["resume"]
    (out / "results.json").write_text("")           # what an older pksim left after a Ctrl-C
    result = run(base + ["-o", str(out), "--resume"])
    assert result.exit_code == 2 and "cannot read" in result.output
    Journal(out / "results.partial.jsonl", identity, rows[:3]).add(rows[3])
    with (out / "results.partial.jsonl").open("a") as handle:
        handle.write('{"system": "dgx-h1')          # a last line cut short: left out
    result = run(base + ["-o", str(out), "--resume"])
    assert result.exit_code == 0, result.output
    assert _rows(out) == complete


def test_a_journal_of_another_run_or_a_stale_one_is_refused(tmp_path):
    base, out = _study(tmp_path), tmp_path / "o"
    out.mkdir()
    Journal(out / "results.partial.jsonl", {"command": "whatif", "study": "other"}).add({})
    result = run(base + ["-o", str(out)])
    assert result.exit_code == 2 and "--resume completes it" in result.output
    result = run(base + ["-o", str(out), "--resume"])
    assert result.exit_code == 2 and "comes from another run" in result.output
    assert run(base + ["-o", str(out), "--force"]).exit_code == 0
    assert not (out / "results.partial.jsonl").exists()


def test_whole_leaves_the_old_file_when_the_write_fails(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with whole(path) as tmp:
            tmp.write_text("new, half")
            raise KeyboardInterrupt
    assert path.read_text() == "old" and list(tmp_path.iterdir()) == [path]
    with whole(path) as tmp:
        tmp.write_text("new")
    assert path.read_text() == "new"


def test_read_journal_gives_the_complete_rows(tmp_path):
    path = tmp_path / "x.partial.jsonl"
    assert read_journal(path, {"op": "a"}) is None
    journal = Journal(path, {"op": "a"}, [{"i": 0}])
    journal.add({"i": 1})
    with path.open("a") as handle:
        handle.write('{"i": ')
    assert read_journal(path, {"op": "a"}) == [{"i": 0}, {"i": 1}]
    with pytest.raises(Exception, match="another run"):
        read_journal(path, {"op": "b"})
    journal.finish()
    assert not path.exists()


LONGER = small_study('["1MiB", "4MiB", "16MiB", "64MiB", "256MiB", "1GiB"]', "72",
                     "gb200-nvl72")                        # rows of about 0.2 s


def test_a_real_sigint_to_the_installed_command_keeps_what_was_done(tmp_path):
    """SIGINT to ``pksim whatif`` (two worker processes) once its first row is journaled:
    exit 130, every file there whole, and --resume gives the uninterrupted study's rows."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path
    entry = Path(sys.executable).with_name("pksim")
    if not entry.exists():
        pytest.skip("pksim is not installed beside this Python")
    study = tmp_path / "longer.toml"
    study.write_text(LONGER)
    out = tmp_path / "o"
    proc = subprocess.Popen([str(entry), "whatif", "--study", str(study), "--workers", "2",
                             "-o", str(out), "--no-plots"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    journal = out / "results.partial.jsonl"
    while proc.poll() is None and not (journal.exists() and
                                       len(journal.read_text().splitlines()) >= 2):
        time.sleep(0.05)                          # wait for the first row, not for a time
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=300)
    assert code in (130, 0), proc.stderr.read()   # 0: it finished before the signal
    data = json.loads((out / "results.json").read_text())
    assert len(data["rows"]) <= 12 and data["interrupted"] == (code == 130)
    assert not list(out.glob(".*.tmp"))
    result = run(["whatif", "--study", str(study), "--workers", "1", "-o", str(out),
                  "--no-plots", "--resume"])
    assert result.exit_code == 0, result.output
    assert len(_rows(out)) == 12 and not journal.exists()
    full = run(["whatif", "--study", str(study), "--workers", "1", "-o", str(tmp_path / "f"),
                "--no-plots"])
    assert full.exit_code == 0 and _rows(out) == _rows(tmp_path / "f")
