"""Docs that cannot drift: run every example of README.md and docs/guide.md.

An example is a fenced block whose first line is ``$ pksim ...`` (a command may go on
over lines ending in ``\\``; ``# ...`` after it is a comment); the lines after it are the
command's output. A fence marked ``slow`` (```` ```text slow ````) is an example the test
skips unless PKSIM_DOCS_SLOW=1 (``make docs`` runs them all).

Each command runs in-process (click's CliRunner, COLUMNS=100) in a temporary folder, so
a relative ``-o`` writes there (``docs/`` is linked into it, for study files). Images: a PNG the command writes at ``a/b.png`` (relative
to that folder) becomes ``docs/images/a-b.png`` (``-o default`` -> ``default-time.png``;
``-o trace-ring.json --gantt`` -> ``trace-ring-gantt.png``); only images the markdown
references are copied.

``python docs/run_examples.py`` (``make docs``) rewrites the output blocks and images
(``--only TEXT``: only the examples whose command contains TEXT);
``--check`` only compares (as tests/test_docs.py does): a number that differs by more than
2 %, or a word that differs, fails with the file, the command and the first differing token.
Lines that say how long something took (``(31.6 s)``) are not compared.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Run as a script, this folder is sys.path[0], and its validation/ pages would stand in for
# the validation package (a namespace package found before the installed one): drop it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from click.testing import CliRunner  # noqa: E402

from pksim.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
FILES = (ROOT / "README.md", ROOT / "docs" / "guide.md")
IMAGES = ROOT / "docs" / "images"
TOLERANCE = 0.02
_FENCE = re.compile(r"^```(.*)$")
_TOKEN = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|[A-Za-z_]+|\S")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$")
_TIMING = re.compile(r"\(\d+(?:\.\d+)? ?s\)|\d+(?:\.\d+)? ?s elapsed|took \d")


@dataclass
class Example:
    path: Path
    start: int            # index of the fence line
    end: int              # index of the closing fence line
    command: str          # as written, continuation lines joined
    output: str           # the output written in the markdown
    slow: bool


def examples(path: Path) -> list[Example]:
    lines = path.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        body = lines[i + 1:j]
        if body and body[0].startswith("$ pksim "):
            k, command = 0, body[0][2:]
            while command.rstrip().endswith("\\") and k + 1 < len(body):
                k += 1
                command = command.rstrip()[:-1] + " " + body[k].strip()
            out.append(Example(path, i, j, command, "\n".join(body[k + 1:]),
                               "slow" in m.group(1).split()))
        i = j + 1
    return out


def run(example: Example, images_to: Path | None = None) -> str:
    """The command's output (stdout and stderr), run in a temporary folder; with
    ``images_to``, the images the markdown references are copied there."""
    args = shlex.split(example.command, comments=True)[1:]
    old = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="pksim-docs-") as tmp:
        os.symlink(ROOT / "docs", Path(tmp) / "docs")     # study files named as docs/...
        os.chdir(tmp)
        try:
            result = CliRunner().invoke(cli, args, env={"COLUMNS": "100"})
        finally:
            os.chdir(old)
        text = result.output.rstrip()
        if result.exit_code not in (0,) and result.exception and \
                not isinstance(result.exception, SystemExit):
            raise RuntimeError(f"{example.path.name}: `{example.command}` raised "
                               f"{result.exception!r}")
        if images_to is not None:
            wanted = set(re.findall(r"images/([\w.-]+\.png)", example.path.read_text()))
            for png in Path(tmp).rglob("*.png"):
                if png.relative_to(tmp).parts[0] == "docs":
                    continue
                name = "-".join(png.relative_to(tmp).parts)
                if name in wanted:
                    shutil.copyfile(png, images_to / name)
    return text


def _tokens(text: str) -> list[str]:
    return [t for line in text.splitlines() if not _TIMING.search(line)
            for t in _TOKEN.findall(line)]


def first_difference(expected: str, actual: str) -> str | None:
    """None when they agree (numbers within 2 %, other tokens equal), else a message."""
    a, b = _tokens(expected), _tokens(actual)
    for i, (x, y) in enumerate(zip(a, b)):
        if _NUMBER.match(x) and _NUMBER.match(y):
            fx, fy = float(x), float(y)
            if abs(fx - fy) > TOLERANCE * max(abs(fx), abs(fy)):
                return f"token {i}: the docs say {x}, the program prints {y}"
        elif x != y:
            return f"token {i}: the docs say {x!r}, the program prints {y!r}"
    if len(a) != len(b):
        extra = (b if len(b) > len(a) else a)[min(len(a), len(b))]
        return (f"the docs have {len(a)} tokens, the program prints {len(b)} "
                f"(first extra: {extra!r})")
    return None


def check(example: Example) -> str | None:
    diff = first_difference(example.output, run(example))
    return None if diff is None else \
        f"{example.path.relative_to(ROOT)}: `{example.command}`: {diff}"


def rewrite(path: Path, only: str = "") -> int:
    """Rewrite the outputs (and images) of ``path``'s examples whose command contains
    ``only`` (every example when empty); the number rewritten."""
    lines = path.read_text().splitlines()
    found = [ex for ex in examples(path) if only in ex.command]
    for ex in reversed(found):
        body = lines[ex.start + 1:ex.end]
        k = 0
        while body[k].rstrip().endswith("\\"):
            k += 1
        output = run(ex, IMAGES)
        lines[ex.start + 1:ex.end] = body[:k + 1] + (output.splitlines() if output else [])
    path.write_text("\n".join(lines) + "\n")
    return len(found)


def main(argv: list[str]) -> int:
    if "--check" in argv:
        failures = [f for path in FILES for ex in examples(path) if (f := check(ex))]
        print("\n".join(failures) or "every example agrees with the program")
        return 1 if failures else 0
    only = argv[argv.index("--only") + 1] if "--only" in argv else ""
    for path in FILES:
        print(f"{path.relative_to(ROOT)}: {rewrite(path, only)} examples rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
