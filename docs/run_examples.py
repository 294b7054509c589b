"""Docs that cannot drift: run every example of README.md and docs/guide/*.md.

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

Claims: a number in a sentence of README.md, docs/guide/*.md, systems.md, programs.md or
VALIDATION.md is written with the rule that makes it, in a comment right after it:
``1.07-1.15x<!--= range speed-up | table = whatif -o default | title ~ gb200 | ranks = 8 -->``.
``make docs`` rewrites the number before the comment from the rule (after rewriting the
examples); ``--check`` and tests/test_docs.py fail when they differ. The value is the text
right before the comment, up to a space or an opening bracket. A rule is ``WHAT COLUMN`` and ``|``-separated filters:

- WHAT: ``value`` (the one matching cell), ``range`` (lowest-highest, ``1.07-1.15x``),
  ``min``, ``max``, ``count`` (matching rows), or ``grep REGEX``: the first group of the
  regular expression's first match in the source's text (a line that is no table);
- ``table = TEXT``: the tables that the example whose command contains TEXT prints (this
  file's, or ``FILE: TEXT`` another file's), ``table = FILE.md``: a markdown file's tables
  (``FILE.json``, ``.toml``, ``.csv``: a committed result's text, for ``grep``), or
  ``table = $ pksim ...``: the tables that command prints;
- ``title ~ REGEX`` (a table's title line, or the heading above a markdown table; ``!~``:
  no match), ``COLUMN = A, B`` (the cell is one of them), ``COLUMN ~ REGEX``, ``COLUMN !~
  REGEX``; ``in ms`` writes a time column's cell in that unit;
- or a system file's figure, ``figure SYSTEM KEY``, the number of its guessed figures,
  ``guesses SYSTEM`` (``pksim systems list``'s ``assumed_figures``), and of its figures of
  one provenance, ``tagged SYSTEM TAG``.
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

from hwmodels.catalog import load_system  # noqa: E402
from hwmodels.units import TIME_UNITS, significant  # noqa: E402
from pksim_cli.main import cli  # noqa: E402
from pksim_core.study import figure  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FILES = (ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md")))
IMAGES = ROOT / "docs" / "images"
TOLERANCE = 0.02
_FENCE = re.compile(r"^```(.*)$")
_TOKEN = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|[A-Za-z_]+|\S")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$")
_TIMING = re.compile(r"\(\d+(?:\.\d+)? ?s\)|\d+(?:\.\d+)? ?s elapsed|took \d")
CLAIM_FILES = FILES + tuple(ROOT / "docs" / n for n in ("systems.md", "programs.md",
                                                        "VALIDATION.md"))
_CLAIM = re.compile(r"([^\s(\[`]*?)<!--=\s*(.*?)\s*-->", re.S)
_CELL_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")


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


# ---- claims ----------------------------------------------------------------------------
@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[dict[str, str]]


def tables(text: str) -> list[Table]:
    """The tables in ``text``: rich tables (title on the line above) and markdown tables
    (title: the heading above them)."""
    out, lines, heading = [], text.splitlines(), ""
    for i, line in enumerate(lines):
        if line.startswith("#"):
            heading = line.lstrip("# ")
        if line.startswith("┏"):
            head = [c.strip() for c in lines[i + 1].strip("┃").split("┃")]
            rows = []
            for row in lines[i + 3:]:
                if not row.startswith("│"):
                    break
                rows.append(dict(zip(head, (c.strip() for c in row.strip("│").split("│")))))
            out.append(Table(lines[i - 1] if i else "", head, rows))
        elif line.startswith("|") and i + 1 < len(lines) and set(lines[i + 1]) <= set("|-: ") \
                and (i == 0 or not lines[i - 1].startswith("|")):
            head = [c.strip() for c in line.strip("|").split("|")]
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(dict(zip(head, (c.strip() for c in row.strip("|").split("|")))))
            out.append(Table(heading, head, rows))
    return out


_RUNS: dict[str, str] = {}


def _source_text(path: Path, where: str) -> str:
    """What a claim reads: a markdown file, a command's output (run once per process), or
    the output of the example (of this file, or ``FILE: ``) whose command contains it."""
    if re.search(r"\.(md|json|toml|csv)$", where):
        return (ROOT / where).read_text()
    if where.startswith("$ pksim "):
        if where not in _RUNS:
            _RUNS[where] = run(Example(path, 0, 0, where[2:], "", False))
        return _RUNS[where]
    file, _, command = where.rpartition(": ")
    path = ROOT / file if file else path
    found = [ex for ex in examples(path) if command in ex.command]
    if len(found) != 1:
        raise ValueError(f"{path.name}: {len(found)} examples run {command!r}, not one")
    return found[0].output


def _source_tables(path: Path, where: str) -> list[Table]:
    return tables(_source_text(path, where))


def _number(cell: str) -> float:
    match = _CELL_NUMBER.search(cell)
    if not match:
        raise ValueError(f"{cell!r} is not a number")
    return float(match.group().replace(",", ""))


def _as_unit(cell: str, header: str, unit: str) -> str:
    """A time cell (``25.1 us``, or a number in a ``... (us)`` column) in ``unit``, three
    significant figures."""
    factors = dict(TIME_UNITS)
    have = re.search(r"\s(s|ms|us|ns)$", cell) or re.search(r"\((\w+)\)$", header)
    if not have:
        raise ValueError(f"neither {cell!r} nor its column {header!r} names a unit")
    return significant(_number(cell) * factors[have.group(1)] / factors[unit])


def _filters(filters: list[str]) -> tuple[str | None, list, str | None, list]:
    source, titles, unit, conditions = None, [], None, []
    for f in filters:
        if f.startswith("table ="):
            source = f.partition("=")[2].strip()
        elif f.startswith("in "):
            unit = f[3:].strip()
        else:
            match = re.match(r"(.+?)\s*(!~|[=~])\s*(.*)$", f)
            if not match:
                raise ValueError(f"cannot read the filter {f!r}")
            (titles if match.group(1) == "title" else conditions).append(match.groups())
    return source, titles, unit, conditions


def _matches(row: dict[str, str], conditions: list) -> bool:
    """Every condition holds: ``= A, B`` (one of), ``~ REGEX``, ``!~ REGEX`` (no match)."""
    return all(bool(re.search(v, row.get(c, ""))) == (op == "~") if op != "=" else
               row.get(c) in [x.strip() for x in v.split(",")] for c, op, v in conditions)


def evaluate(rule: str, path: Path) -> str:
    """The text a claim's rule gives (see the module's docstring)."""
    head, *filters = [part.strip() for part in rule.split("|")]
    what, _, column = head.partition(" ")
    if what in ("figure", "guesses", "tagged"):
        system, _, key = column.partition(" ")
        loaded = load_system(system)
        if what == "tagged":
            return str(sum(prov.tag == key for prov in loaded.provenance.values()))
        return str(len(loaded.assumed_keys())) if what == "guesses" else \
            f"{figure(loaded, key):g}"
    source, titles, unit, conditions = _filters(filters)
    if source is None:
        raise ValueError(f"claim {rule!r} names no table")
    if what == "grep":
        match = re.search(column, _source_text(path, source))
        if not match:
            raise ValueError(f"claim {rule!r}: no match")
        return match.group(1)
    cells = []
    for t in _source_tables(path, source):
        if not _matches({"title": t.title}, titles):
            continue
        header = next((h for h in t.headers if h == column or h.startswith(column + " (")),
                      None)
        for row in (r for r in t.rows if _matches(r, conditions)):
            if what != "count" and header is None:
                raise ValueError(f"no column {column!r} in {t.title!r}")
            cells.append("" if what == "count" else
                         _as_unit(row[header], header, unit) if unit else row[header])
    if what == "count":
        return str(len(cells))
    if not cells:
        raise ValueError(f"claim {rule!r}: no row matches")
    if what == "value":
        if len(set(cells)) != 1:
            raise ValueError(f"claim {rule!r}: {len(cells)} rows match ({', '.join(cells)})")
        return cells[0]
    lo, hi = min(cells, key=_number), max(cells, key=_number)
    if what in ("min", "max"):
        return lo if what == "min" else hi
    if what != "range":
        raise ValueError(f"claim {rule!r}: {what!r} is not value, range, min, max or count")
    suffix = lo[_CELL_NUMBER.search(lo).end():]
    return lo if lo == hi else f"{lo[:len(lo) - len(suffix)]}-{hi}"


def _value(rule: str, path: Path) -> str:
    value = evaluate(rule, path)
    if not value or re.search(r"[\s(\[`]", value):
        raise ValueError(f"{path.name}: <!--= {rule} --> gives {value!r}: a claim's value "
                         f"is one word (write the rest around it)")
    return value


def claims(path: Path) -> list[tuple[str, str, str]]:
    """(written value, rule, value the rule gives) for every claim of ``path``."""
    return [(m.group(1), m.group(2), _value(m.group(2), path))
            for m in _CLAIM.finditer(path.read_text())]


def check_claims(path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}: the text says {said!r}, the rule gives {got!r} "
            f"(<!--= {rule} -->)" for said, rule, got in claims(path) if said != got]


def rewrite_claims(path: Path) -> int:
    """Write each claim's value before its rule; the number that changed."""
    changed = 0

    def put(m: re.Match) -> str:
        nonlocal changed
        value = _value(m.group(2), path)
        changed += value != m.group(1)
        return f"{value}<!--= {m.group(2)} -->"

    path.write_text(_CLAIM.sub(put, path.read_text()))
    return changed


def main(argv: list[str]) -> int:
    if "--check" in argv:
        failures = [f for path in FILES for ex in examples(path) if (f := check(ex))]
        failures += [f for path in CLAIM_FILES for f in check_claims(path)]
        print("\n".join(failures) or "every example and claim agrees with the program")
        return 1 if failures else 0
    only = argv[argv.index("--only") + 1] if "--only" in argv else ""
    for path in FILES:
        print(f"{path.relative_to(ROOT)}: {rewrite(path, only)} examples rewritten")
    for path in CLAIM_FILES:
        print(f"{path.relative_to(ROOT)}: {rewrite_claims(path)} claims rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
