"""More bad inputs of a new user (tests/new_user/cases.py), and a seeded fuzz that draws
values, not picks them from a list, for the numeric options tests/test_new_user.py's fuzz
leaves out: each must end as that file's contract says (one line ``pksim: error:`` on stderr
naming the option or file, exit 2, no traceback, nothing on stdout, nothing written)."""
from __future__ import annotations

import random
import string

import pytest
from click.testing import CliRunner

from pksim_cli.main import cli
from tests import test_new_user as contract
from tests.new_user.cases import AR, ATTN, CASES, FILES, GEMM, H100, MOE

# option -> (the command line before the value, the kind of value it takes, the words the
# error names). Kinds: ranks (2..8 on dgx-h100), positive (a whole number >= 1), size (bytes
# within a GPU's memory), fraction (0..1], figure (a plausible positive system figure).
OPTIONS = [
    (["sweep", *H100, "--op", "all-reduce", "--bytes", "1MiB", "-o", "{d}/s", "--world"],
     "ranks", "--world"),
    (["trace", *AR, "-o", "{d}/t.json", "--world"], "ranks", "--world"),
    (["codegen", *AR, "-o", "{d}/c", "--world"], "ranks", "--world"),
    (["search", *AR, "--world"], "ranks", "--world"),
    (["predict", *MOE, "--topk"], "positive", "--topk"),
    (["predict", *ATTN, "--seq", "1024", "--heads"], "positive", "--heads"),
    (["predict", *ATTN, "--seq", "1024", "--batch"], "positive", "--batch"),
    (["predict", *GEMM[:-4], "--k", "4096", "--n"], "positive", "--n"),
    (["codegen", *AR, "-o", "{d}/c", "--comm-sms"], "positive", "--comm-sms"),
    (["search", *AR, "--top"], "positive", "--top"),
    (["run", "--virtual", *AR, "--iters"], "positive", "--iters"),
    (["predict", *AR, "--chunk-bytes"], "size", "--chunk-bytes"),
    (["sweep", *H100, "--op", "all-gather", "-o", "{d}/s", "--bytes"], "size", "--bytes"),
    (["trace", *H100, "--op", "reduce-scatter", "-o", "{d}/t.json", "--bytes"], "size",
     "--bytes"),
    (["codegen", *H100, "--op", "all-gather", "-o", "{d}/c", "--bytes"], "size", "--bytes"),
    (["predict", *AR, "--set"], "fraction:gpu.hbm.efficiency", "gpu.hbm.efficiency"),
    (["predict", *AR, "--set"], "figure:gpu.nvlink.latency_ns", "gpu.nvlink.latency_ns"),
    (["whatif", "--systems", "dgx-h100", "-o", "{d}/o", "--set"],
     "figure:gpu.hbm.bandwidth_GBps", "gpu.hbm.bandwidth_GBps"),
    (["systems", "show", "dgx-h100", "--set"], "figure:gpu.sm.count", "gpu.sm.count"),
]
DRAWS = 120


def _junk(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_letters) for _ in range(rng.randint(1, 6)))


def _draw(kind: str, rng: random.Random) -> str:
    """A value ``kind`` must refuse, drawn at random from the ways it can be wrong."""
    key = kind.partition(":")[2]
    if kind == "ranks":
        ways = [lambda: str(rng.randint(-10 ** 6, 1)), lambda: str(rng.randint(9, 10 ** 9)),
                lambda: f"{rng.uniform(2, 8):.2f}", lambda: _junk(rng)]
    elif kind == "positive":
        ways = [lambda: str(rng.randint(-10 ** 9, 0)), lambda: f"{rng.uniform(1, 99):.3f}",
                lambda: _junk(rng), lambda: f"1e{rng.randint(1, 30)}"]
    elif kind == "size":
        ways = [lambda: str(rng.randint(-10 ** 9, 0)), lambda: f"{rng.uniform(0.1, 0.9):.3f}",
                lambda: f"{rng.randint(200, 9000)}TiB", lambda: _junk(rng),
                lambda: rng.choice(["nan", "inf", "-inf"])]
    elif kind.startswith("fraction"):
        ways = [lambda: f"{key}={rng.uniform(1.01, 1e6):.4g}",
                lambda: f"{key}={-rng.uniform(1e-6, 1e6):.4g}", lambda: f"{key}=0",
                lambda: f"{key}={_junk(rng)}", lambda: f"{key}=nan"]
    else:
        ways = [lambda: f"{key}={-rng.uniform(1e-6, 1e6):.4g}", lambda: f"{key}=0",
                lambda: f"{key}=1e{rng.randint(31, 300)}", lambda: f"{key}={_junk(rng)}",
                lambda: f"{key}={rng.choice(['nan', 'inf'])}"]
    return rng.choice(ways)()


def _fuzzed() -> list[tuple[list[str], str]]:
    rng = random.Random(4040)
    out: dict[tuple[str, ...], str] = {}
    while len(out) < DRAWS:
        args, kind, needle = OPTIONS[len(out) % len(OPTIONS)]
        out.setdefault((*args, _draw(kind, rng)), needle)
    return [(list(args), needle) for args, needle in out.items()]


@pytest.fixture
def home(tmp_path, monkeypatch):
    for name, text in {**contract.FILES, **FILES}.items():
        path = tmp_path / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    for name in contract.FOLDERS:
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


ALL = CASES + _fuzzed()


@pytest.mark.parametrize("case, needle", ALL, ids=[" ".join(c)[:90] for c, _ in ALL])
def test_a_bad_input_is_one_line_exit_2_and_writes_nothing(home, case, needle):
    args = contract._args(case, home)
    before = contract._tree(home)
    result = CliRunner().invoke(cli, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    contract._check(result.exit_code, result.stdout, result.stderr,
                    needle.replace("{d}", str(home)), before, contract._tree(home), args)


def test_these_are_new_cases_of_every_command():
    """None repeats tests/test_new_user.py's; every command (and pkb) has at least five."""
    old = {tuple(c) for c, _ in contract.CASES + contract._fuzzed()}
    mine = [tuple(c) for c, _ in ALL]
    assert len(set(mine)) == len(mine) and not set(mine) & old
    counts: dict[str, int] = {}
    for case, _ in CASES:
        counts[case[0]] = counts.get(case[0], 0) + 1
    for command in ("predict", "search", "trace", "whatif", "sweep", "codegen", "run",
                    "validate", "systems", "programs", "calibrate", "pkb"):
        assert counts.get(command, 0) >= 5, command
    assert len(mine) >= 100 + DRAWS
