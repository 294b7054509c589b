"""hwmodels.files.read_toml, the one reader of system files, kernel profiles, studies,
programs and suites: whatever is wrong with the file is one line naming it, through every
command that reads one."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from hwmodels.errors import ConfigError
from hwmodels.files import read_toml
from tests.pksim.helpers import one_line_error, run

ROOT = Path(__file__).resolve().parents[2]


def test_read_toml_names_the_file_and_what_is_wrong(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('name = "x"\nvalue = 1.5\n')
    assert read_toml(good) == {"name": "x", "value": 1.5}
    cases = {
        "missing.toml": (None, "system file {p}: no such file"),
        "folder.toml": ("dir", "system file {p}: is a folder, not a .toml file"),
        "binary.toml": (b"\xff\xfe\x00x", "{p}: not a TOML text file (byte 0 is not UTF-8)"),
        "latin1.toml": ('name = "caf\xe9"\n'.encode("latin-1"), "{p}: not a TOML text file"),
        "broken.toml": (b'name = "x\n', "{p}: not valid TOML"),
    }
    for name, (content, words) in cases.items():
        path = tmp_path / name
        if content == "dir":
            path.mkdir()
        elif content is not None:
            path.write_bytes(content)
        with pytest.raises(ConfigError) as caught:
            read_toml(path, "system file")
        message = str(caught.value)
        assert words.format(p=path) in message and "\n" not in message, message


@pytest.mark.parametrize("args", [
    ["systems", "check", "{f}"],
    ["systems", "show", "{f}"],
    ["predict", "--system", "{f}", "--op", "all-reduce", "--bytes", "1MiB"],
    ["whatif", "--study", "{f}", "-o", "{d}/o"],
    ["whatif", "--systems", "{f}", "-o", "{d}/o"],
    ["programs", "show", "{f}"],
    ["predict", "--program", "{f}", "--system", "dgx-h100"],
    ["validate", "--suite", "{f}", "--prepare", "--no-build", "-o", "{d}/v"],
    ["validate", "--system", "{f}", "--prepare", "--no-build", "-o", "{d}/v"],
])
def test_a_binary_file_is_one_line_in_every_command(tmp_path, args):
    """A file that is not UTF-8 text (a copied binary, a file saved in Latin-1) was a
    UnicodeDecodeError traceback in each of these."""
    f = tmp_path / "bad.toml"
    f.write_bytes(b"\xff\xfe\x00name")
    result = run([a.format(f=f, d=tmp_path) for a in args])
    one_line_error(result, f"{f}: not a TOML text file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


def test_only_hwmodels_files_reads_toml_files():
    """The system files, profiles, studies, programs and suites are read by read_toml alone
    (tomllib's loads of a command-line value is not reading a file)."""
    readers = []
    for folder in ("hwmodels", "pksim", "validation/suites"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text()
            if re.search(r"tomllib\.load\(|tomllib\.loads\([^)]*read_text", text):
                readers.append(str(path.relative_to(ROOT)))
    assert readers == [], readers
