"""The comm suite (validation/suites/comm.toml), its cases and the report of a run, without a GPU."""
from __future__ import annotations

import random

import pytest

from hwmodels.errors import ConfigError
from validation.report.comm import summarise
from validation.suites.comm_suite import (ROW, LibraryVariant, cases, load_comm_suite, parse_comm_suite,
                                          sizes_for)


def test_shipped_suite_covers_every_new_kernel_and_mechanism():
    s = load_comm_suite("comm")
    ops = {v.op for v in s.variants}
    assert ops == {"reduce", "gather", "scatter", "all-to-all-v", "all-gather-v", "reduce-scatter-v",
                   "send-recv", "all-reduce", "reduce-scatter"}
    assert {v.mechanism for v in s.variants} == {"tma", "register", "copy-engine"}
    assert s.worlds == (2, 4, 8) and set(s.check_dtypes) == {"bf16", "fp32"}
    # 29 libraries: every checked at 3 worlds x 2 dtypes x 2 sizes; the timed ones in bf16
    rows = cases(s, 132)
    assert len(s.variants) == 29
    assert sum(1 for r in rows if not r.get("time")) == 29 * 3 * 2 * 2
    # a group's candidates share its sizes (drawn once per group)
    groups = {}
    for r in rows:
        if r.get("time"):
            groups.setdefault(r["group"], set()).add((r["count"], tuple(r["splits"] or ())))
    assert all(len(v) == 1 for v in groups.values())


def test_split_sizes_are_odd_when_checked_and_whole_rows_when_timed():
    rng = random.Random(1)
    v = LibraryVariant("all-to-all-v", "direct", "tma")
    count, splits, _ = sizes_for(v, 4, 1 << 20, "bf16", rng, odd=True)
    assert len(splits) == 16 and all(s % 2 == 1 or s == 0 for s in splits) and 0 in splits[:4]
    # count: the largest rank's sends or receives
    rows = [splits[r * 4:(r + 1) * 4] for r in range(4)]
    assert count == max(max(map(sum, rows)), max(sum(r[p] for r in rows) for p in range(4)))
    _, splits, _ = sizes_for(LibraryVariant("all-gather-v", "direct", "tma"), 8, 1 << 24, "bf16", rng,
                             odd=False)
    assert all(s % ROW == 0 for s in splits)
    # send-recv +1,-1: two messages per rank of half the bytes each
    count, splits, sbytes = sizes_for(LibraryVariant("send-recv", "direct", "tma", peers="+1,-1"), 4,
                                      1 << 20, "bf16", rng, odd=False)
    assert sbytes == 1 << 19 and count == 1 << 19 and sum(splits) == 8 * (1 << 18)


@pytest.mark.parametrize("table,why", [
    ({"name": "x", "worlds": [2], "check_dtypes": ["bf16"], "check_sizes": ["4KiB"],
      "timed_sizes": ["4KiB"], "kernels": [{"op": "reduce", "algorithms": ["ring"],
                                            "mechanisms": ["tma"]}]}, "no ring reduce"),
    ({"name": "x", "worlds": [2], "check_dtypes": ["bf16"], "check_sizes": ["4KiB"],
      "timed_sizes": ["4KiB"], "kernels": [{"op": "reduce", "algorithms": ["direct"],
                                            "mechanisms": ["copy-engine"]}]}, "does not run on"),
    ({"name": "x", "worlds": [2], "check_dtypes": ["bf16"], "check_sizes": ["4KiB"],
      "timed_sizes": ["4KiB"], "kernels": [{"op": "all-reduce", "algorithms": ["two-shot"],
                                            "mechanisms": ["tma"], "reduce_op": "prod"}]}, "prod"),
    ({"name": "x", "worlds": [2], "bogus": 1}, "bogus"),
])
def test_bad_suites_name_what_is_wrong(table, why):
    with pytest.raises(ConfigError, match=why):
        parse_comm_suite(table, "t.toml")


def _row(id_, group, pred, meas, ok=True, family="f", alg="direct", mech="tma", b=8):
    return dict(id=id_, group=group, family=family, time=True, ok=ok, predicted_s=pred,
                median_s=meas, algorithm=alg, mechanism=mech, blocks_per_rank=b)


def test_report_statistics_worked_by_hand():
    rows = [_row("a", "g1", 1.1, 1.0), _row("b", "g1", 1.0, 1.2, mech="register"),
            _row("c", "g2", 0.9, 1.0), _row("d", "g2", 1.0, 1.02, mech="register"),
            dict(id="e", ok=False)]
    s = summarise(rows)
    # errors: +10 %, -16.7 %, -10 %, -2 %: median |error| of (2, 10, 10, 16.7) = 10 %
    assert s["median_abs_error"] == pytest.approx(0.10)
    assert s["max_abs_error"] == pytest.approx(1 / 6)
    # g1: the model picks b (1.0) measured 1.2 against a's 1.0: 20 % regret; g2 picks c, the best
    by = {g["group"]: g for g in s["ranking"]}
    assert by["g1"]["regret"] == pytest.approx(0.2) and not by["g1"]["within"]
    assert by["g2"]["regret"] == 0 and by["g2"]["within"]
    assert (s["cases"], s["checked_ok"], s["failed"], s["groups_within"]) == (5, 4, ["e"], 1)


def test_repredict_makes_a_runs_predictions_again_and_keeps_its_measurements():
    # the committed run's min + bias reduce-scatter at 16 MiB, w4, registers, 33 blocks: measured
    # 32.3 us; predicted 26.0 us when prepared (the sum's moves alone, D53), 27.7 us with the
    # epilogue terms (D56); its check fields and measurement are left as they are
    import gzip
    import json

    from hwmodels.catalog import load_system
    from hwmodels.resources import data_dir
    from validation.prepare.comm import repredict
    raw = gzip.decompress((data_dir() / "report" / "h200-comm-2026-12-04.jsonl.gz").read_bytes())
    rows = [json.loads(line) for line in raw.decode().splitlines()]
    (row,) = [r for r in rows if r["id"] == "rs-min-bias-direct-reg-w4-bf16-16MiB-b33"]
    assert row["predicted_s"] == pytest.approx(26.04e-6, rel=1e-3)
    (new,) = repredict([row], load_system("h200-virtual-calibrated"))
    assert new["predicted_s"] == pytest.approx(27.7e-6, rel=2e-3)
    assert new["median_s"] == row["median_s"] and new["ok"] and new["schedule"] == row["schedule"]
    checked = next(r for r in rows if not r.get("time"))
    assert repredict([checked], load_system("h200-virtual-calibrated")) == [checked]
