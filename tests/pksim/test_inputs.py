"""pksim_core.inputs and what the commands do with a request's edges that are not errors: a buffer
that does not divide over the ranks runs as nccl-tests runs it and says so; a shipped name
wins over a file or folder of that name unless a path is given; a study's errors name it."""
from __future__ import annotations

import json
import shutil

import pytest

from hwmodels.catalog import SYSTEMS_DIR, load_system, system_path
from hwmodels.errors import ConfigError
from pksim_core.inputs import MAX_RANKS, check_unique_systems, check_world, even_bytes
from pksim_core.study import STUDIES_DIR, find_study

from tests.pksim.helpers import run

MiB = 1 << 20


@pytest.mark.parametrize("op, nbytes, dtype, world, want", [
    ("reduce-scatter", MiB, "bf16", 3, 3 * (MiB // 3 // 2 * 2)),      # 174762 elements a rank
    ("all-gather", MiB, "bf16", 3, 1048572),
    ("all-to-all", 1000, "fp32", 8, 8 * 124),                          # 31 elements a peer
    ("scatter", 1001, "fp4", 2, 1000),                                 # fp4: whole bytes
    ("all-gather", MiB, "bf16", 8, MiB),                               # divides: unchanged
    ("all-reduce", 1002, "bf16", 3, 1002),                             # not split: unchanged
])
def test_even_bytes_cuts_whole_elements_per_rank_as_nccl_tests(op, nbytes, dtype, world, want):
    got, note = even_bytes(op, nbytes, dtype, world)
    assert got == want and (note == "") == (got == nbytes)
    if note:
        assert f"{nbytes - got} left over" in note and "nccl-tests" in note


def test_less_than_an_element_per_rank_names_the_divisor():
    with pytest.raises(ConfigError, match="8 shares.*needs at least 16 bytes"):
        even_bytes("all-to-all", 2, "bf16", 8)


def test_predict_says_it_cut_the_buffer_and_predicts_the_cut_one():
    res = run(["predict", "--system", "dgx-h100", "--op", "reduce-scatter", "--bytes", "1MiB",
               "--world", "3", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["nbytes"] == 1048572
    assert res.stderr.startswith("pksim: note: reduce-scatter cuts --bytes 1048576 into 3 shares")
    exact = run(["predict", "--system", "dgx-h100", "--op", "reduce-scatter", "--bytes",
                 "1048572", "--world", "3", "--json"])
    assert exact.stderr == "" and json.loads(exact.stdout)["time_s"] == \
        json.loads(res.stdout)["time_s"]


def test_check_world_fills_every_domain_and_stays_within_the_rank_limit():
    h100 = load_system("dgx-h100")
    assert check_world(h100, None, 2) == 16 and check_world(h100, 9, 2) == 9
    for world, domains, match in ((8, 2, "1 would hold none"), (2, 3, "2 would hold none"),
                                  (None, MAX_RANKS // 8 + 1, "at most 16384"),
                                  (MAX_RANKS + 1, 1, "at most 16384")):
        with pytest.raises(ConfigError, match=match):
            check_world(h100, world, domains)


def test_two_systems_of_one_name_are_refused(tmp_path):
    copy = tmp_path / "dgx-h100.toml"
    shutil.copy(SYSTEMS_DIR / "dgx-h100.toml", copy)
    h100 = load_system("dgx-h100")
    with pytest.raises(ConfigError, match="both named 'dgx-h100'"):
        check_unique_systems([("dgx-h100", h100), (str(copy), load_system(str(copy)))], "x")
    with pytest.raises(ConfigError, match="listed twice"):
        check_unique_systems([("dgx-h100", h100), ("dgx-h100", h100)], "x")
    check_unique_systems([("dgx-h100", h100), ("hgx-h200", load_system("hgx-h200"))], "x")
    # systems check says so; the shipped file itself passes
    res = run(["systems", "check", str(copy)])
    assert res.exit_code == 2 and "name of a shipped system" in res.stderr
    assert run(["systems", "check", str(SYSTEMS_DIR / "dgx-h100.toml")]).exit_code == 0


def test_a_shipped_name_wins_over_a_folder_or_file_of_that_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "default").mkdir()                   # what `whatif -o default` leaves
    (tmp_path / "dgx-h100").write_text("not a system")
    assert find_study("default").path == str(STUDIES_DIR / "default.toml")
    assert system_path("dgx-h100") == SYSTEMS_DIR / "dgx-h100.toml"
    with pytest.raises(ConfigError, match="is a folder"):
        find_study("./default")                     # a path names the folder
    with pytest.raises(ConfigError, match="not valid TOML|must be"):
        load_system("./dgx-h100")
    mine = tmp_path / "mine.toml"
    mine.write_text((STUDIES_DIR / "default.toml").read_text().replace('name = "default"',
                                                                       'name = "mine"'))
    assert find_study("mine.toml").name == "mine"    # a .toml is a path


def test_a_study_error_names_the_file_not_study(tmp_path):
    study = tmp_path / "bad.toml"
    study.write_text('name = "b"\nsystems = ["dgx-h100"]\n[[workload]]\nname = "w"\n'
                     'op = "all-reduce"\nm = "ceil(x / tp)"\nn = 4\nworld = 8\n')
    res = run(["whatif", "--study", str(study), "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and res.stderr.startswith(f"pksim: error: {study}: workload 'w'")
    assert "study:" not in res.stderr and not (tmp_path / "o").exists()
