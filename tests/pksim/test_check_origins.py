"""Cross-field checks of a system (hwmodels/checks.py) name where the bad value came from:
the --set that gave it, else the file that holds it (a parent's for an inherited key),
never the shipped file when the user's --set or file made the contradiction."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from hwmodels.catalog import SYSTEMS_DIR
from pksim_cli.main import cli

# (system, --set options, words of the message): one case per check of check_system
CASES = [
    ("dgx-h100", ["gpu.architecture=ampere"], "TMA arrived with Hopper"),
    ("dgx-h100", ["gpu.transfer_remote.tma_read_per_sm_GBps=0"], "needs positive"),
    ("dgx-h100", ["gpu.transfer.tma_local_per_sm_GBps=0"], "needs positive"),
    ("dgx-h100", ["gpu.tensor.tflops_bf16=0"], "tflops_bf16 must be above 0"),
    ("h200-single", ["domain.fabric=nvswitch", "domain.gpus_per_domain=8"],
     "needs a [[domain.switch_tier]]"),
    ("dgx-h100", ["gpu.nvlink.links=0"], "links must be above 0"),
    ("dgx-h100", ["gpu.nvlink.link_bandwidth_GBps=0"], "must be above 0 for an NVLink domain"),
    ("dgx-h100", ["domain.fabric=none"], "needs domain.gpus_per_domain = 1"),
    ("gb200-nvl576", ["domain.switch_tier.1.gpus_per_group=100"], "not a multiple"),
    ("gb200-nvl576", ["domain.switch_tier.0.gpus_per_group=7"], "does not divide"),
    ("dgx-h100", ["domain.switch_tier.0.gpus_per_group=4"], "must span the domain"),
    ("gb200-nvl576", ["domain.switch_tier.0.uplink_bandwidth_GBps=0"],
     "must be above 0 below the top tier"),
    ("dgx-h100", ["gpu.nvlink.links=100"], "ports"),
]


def _error(args) -> str:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pksim: error: "), result.output
    return lines[0].removeprefix("pksim: error: ")


@pytest.mark.parametrize("system, sets, words", CASES, ids=[" ".join(c[1]) for c in CASES])
def test_a_check_broken_by_set_names_the_set(system, sets, words):
    args = ["predict", "--system", system, "--op", "all-reduce", "--bytes", "1MiB"]
    for s in sets:
        args += ["--set", s]
    line = _error(args)
    assert words in line, line
    blamed = line.split(": ")[0]
    assert blamed.startswith("--set ") and "toml" not in blamed, line   # not the shipped file
    assert any(f"--set {s}" in line.split(": ")[0] for s in sets), line


# A file's [[domain.switch_tier]] replaces its parent's array: those checks are covered by
# the --set cases and by the inherited-domain case below.
IN_FILES = [c for c in CASES if not any(".switch_tier." in s for s in c[1])]


@pytest.mark.parametrize("system, sets, words", IN_FILES, ids=[" ".join(c[1]) for c in IN_FILES])
def test_a_check_broken_by_a_file_names_that_file(tmp_path, system, sets, words):
    """The same values written in the user's file (inheriting the shipped one): the error
    names the user's file."""
    tables: dict[str, list[str]] = {}
    for s in sets:
        key, value = s.split("=")
        *table, name = key.split(".")
        if value.replace(".", "").isdigit():
            line = f'{name} = {{ value = {value}, source = "mine", provenance = "estimate" }}'
        else:
            line = f'{name} = "{value}"'
        tables.setdefault(".".join(table), []).append(line)
    text = f'name = "mine"\ndescription = "d"\ninherits = "{system}"\n'
    for table, lines in tables.items():
        text += f"[{table}]\n" + "\n".join(lines) + "\n"
    path = tmp_path / "mine.toml"
    path.write_text(text)
    line = _error(["systems", "check", str(path)])
    assert words in line, line
    assert line.startswith(str(path)) and str(SYSTEMS_DIR) not in line.split(": ")[0], line


def test_an_inherited_contradiction_names_each_file_that_gave_a_value(tmp_path):
    """A child sets the domain size its parent's top switch tier does not span: the child
    changed what it inherits, so the child is named; a parent that alone holds the bad
    values is named itself."""
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\ndescription = "d"\ninherits = "dgx-h100"\n'
                    '[domain]\ngpus_per_domain = { value = 16, source = "mine", '
                    'provenance = "estimate" }\n')
    line = _error(["systems", "check", str(path)])
    assert "must span the domain" in line
    assert line.split(": ")[0] == str(path), line
    child = tmp_path / "child.toml"
    child.write_text(f'name = "child"\ndescription = "d"\ninherits = "{path}"\n')
    line = _error(["systems", "check", str(child)])
    assert line.split(": ")[0] == str(path), line
