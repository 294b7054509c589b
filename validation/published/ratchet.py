"""The CI ratchet of the published judge: per judged entry and size band, the median and p90
|error| reached, rounded UP to the next 0.5 %, and the NCCL picks reproduced. A change that
makes a value worse fails tests/validation/test_published_judge.py.

    python -m validation.published.ratchet --write     # rewrite ratchet.toml on purpose
"""
from __future__ import annotations

import argparse
import math
import tomllib
from pathlib import Path

from validation.published.judge import BANDS, EntryReport, judge

RATCHET = Path(__file__).with_name("ratchet.toml")
STATS = ("median", "p90")


def up_half_pct(x: float) -> float:
    """A fraction as a percentage rounded up to the next 0.5 % (a hair of slack for floats)."""
    return math.ceil(round(x * 200, 6)) / 2


def values(reports: list[EntryReport]) -> dict:
    """{entry: {"<band>.<stat>": percent, "picks_matched": n}} of the judged entries."""
    out = {}
    for r in reports:
        v = {f"{band}.{stat}": up_half_pct(r.bands[band][stat])
             for band, _lo, _hi in BANDS if band in r.bands for stat in STATS}
        if r.picks:
            v["picks_matched"] = sum(p.match for p in r.picks)
        if v:
            out[r.name] = v
    return out


def read(path: Path = RATCHET) -> dict:
    with path.open("rb") as handle:
        return tomllib.load(handle)


def compare(current: dict, limits: dict) -> list[str]:
    """One line per value that got worse (or an entry or band judged before, no longer)."""
    worse = []
    for entry, lim in limits.items():
        now = current.get(entry, {})
        for key, allowed in lim.items():
            got = now.get(key)
            if got is None:
                worse.append(f"{entry} {key}: judged before ({allowed}), not any more")
            elif key == "picks_matched" and got < allowed:
                worse.append(f"{entry}: NCCL picks reproduced {got}, ratchet {allowed}")
            elif key != "picks_matched" and got > allowed:
                worse.append(f"{entry} band {key}: |error| {got} % > ratchet {allowed} %")
    return worse


def text(current: dict) -> str:
    lines = ["# The published judge's ratchet (validation/published/ratchet.py): per entry,",
             "# |error| in percent per size band (rounded up to 0.5 %) and NCCL picks reproduced.",
             "# Rewrite on purpose: python -m validation.published.ratchet --write", ""]
    for entry in sorted(current):
        lines.append(f'["{entry}"]')
        lines += [f'"{k}" = {v}' for k, v in current[entry].items()]
        lines.append("")
    return "\n".join(lines)


def write(path: Path = RATCHET) -> dict:
    current = values(judge())
    path.write_text(text(current))
    return current


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite ratchet.toml")
    args = parser.parse_args(argv)
    if args.write:
        print(f"wrote {RATCHET}: {len(write())} entries")
        return 0
    worse = compare(values(judge()), read())
    print("\n".join(worse) or "no value worse than the ratchet")
    return 1 if worse else 0


if __name__ == "__main__":
    raise SystemExit(main())
