"""validation/device/ scripts without a GPU (stand-ins for the GPU programs), and the results
files they bring back read as the report reads them."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from codegen.build import find_nvcc
from hwmodels.errors import ConfigError
from pksim_cli.main import cli
from validation.report.data import build_report, group_name
from validation.suites.suite import load_suite, parse_suite

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(args):
    return CliRunner().invoke(cli, args)


def test_gpu_validate_script_keeps_to_its_budget(tmp_path):
    """validation/device/validate.sh with stand-ins for the GPU programs: a step that would
    overrun is killed at its limit, steps without their minimum left are skipped, what did not
    run is listed; with time left the fused suite and its memcheck run."""
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    bundle = tmp_path / "bundle"
    assert run(["validate", "--suite", "quick", "--prepare", "--no-build", "-o",
                str(bundle)]).exit_code == 0
    (bundle / "fused" / "sanitize_fused").write_text("#!/bin/sh\n")
    (bundle / "fused" / "sanitize_fused").chmod(0o755)
    fake = tmp_path / "bin"
    fake.mkdir()
    # a correctness matrix of two collectives and a copy: the stand-in runs one of them
    (bundle / "matrix").mkdir()
    (bundle / "matrix" / "cases.json").write_text(json.dumps(
        [{"id": "m1", "op": "all-gather"}, {"id": "m2", "op": "all-gather"},
         {"id": "copy-1GiB", "kind": "copy_bw"}]))
    (fake / "py").write_text(f"""#!/bin/bash
case "$*" in
  *microbench/run.py*) exit 0;;
  "-m validation.run.collectives --cases "*matrix/cases.json*)
    echo '{{"id": "m1", "ok": true}}' > "$6"; exit 0;;
  *validation.run.collectives*) exit 0;;
  *validation.run.fused*) sleep "${{FAKE_SLEEP:-0}}"; exec {sys.executable} -c "
import json, sys
cases = json.load(open(sys.argv[1]))
with open(sys.argv[2], 'w') as f:
    for c in cases[:4]:
        f.write(json.dumps({{'id': c['id'], 'ok': True, 'ms': 1.0}}) + chr(10))
" "$4/cases.json" "$6";;
  *) exec {sys.executable} "$@";;
esac
""")
    (fake / "compute-sanitizer").write_text(
        "#!/bin/bash\necho 'x world 2 200x264x72 gemm_blocks 0 (64 + 0 per rank): ok'\n"
        "echo '========= ERROR SUMMARY: 0 errors'\n")
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho fake\n")
    (fake / "nvcc").write_text("#!/bin/sh\nexit 0\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    out = tmp_path / "out"
    n = len(json.loads((bundle / "fused" / "cases.json").read_text()))

    def gpu_validate(total_s: int, sleep_s: int) -> str:
        env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", PYTHON=str(fake / "py"),
                   PK_TOTAL_S=str(total_s), PK_RESERVE_S="5", FAKE_SLEEP=str(sleep_s))
        res = subprocess.run(["bash", "validation/device/validate.sh", str(bundle), str(out)],
                             cwd=root, env=env, capture_output=True, text=True, timeout=120)
        assert (tmp_path / "out.tgz").is_file() and not out.exists()
        return res.stdout

    # 21 s usable: microbench (needs 40) and the collective suite (30) are skipped; the fused
    # suite (20) would take 60 s and is killed at 21; its memcheck finds no time left
    text = gpu_validate(26, 60)
    assert "microbench SKIPPED" in text and "collective suite SKIPPED" in text
    assert "fused suite exit 137" in text and "KILLED at its limit" in text
    assert "fused memcheck SKIPPED" in text and "fused memcheck: not run (no time left)" in text
    assert "collective suite: 0 of 34 cases ok, 0 failed, 34 not run" in text
    assert f"fused suite: 0 of {n} cases ok, 0 failed, {n} not run" in text
    # with time for everything
    text = gpu_validate(200, 0)
    assert "microbench exit 0" in text and "collective suite exit 0" in text
    assert f"fused suite: 4 of {n} cases ok, 0 failed, {n - 4} not run" in text
    assert "fused memcheck (exit 0): 1 of" in text and "ERROR SUMMARY: 0 errors" in text
    # the matrix says how far it got (a session once stopped at its deadline and only
    # matrix.log said)
    assert "matrix: 1 of 2 cases ok, 0 failed, 1 not run; not run: m2" in text


def test_measured_rows_read_from_gzip_as_from_text(tmp_path):
    """validation/data keeps the suite's results gzip-compressed: the same rows either way,
    the last row of an id winning; a file that is not gzip is a one-line error."""
    import gzip

    from validation.report.data import load_measured
    rows = [{"id": "a", "median_s": 1e-6}, {"id": "b", "median_s": 2e-6}, {"id": "a", "median_s": 3e-6}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    plain, packed = tmp_path / "m.jsonl", tmp_path / "m.jsonl.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    assert load_measured(packed) == load_measured(plain) == {"a": rows[2], "b": rows[1]}
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_text(text)
    with pytest.raises(ConfigError, match="bad.jsonl.gz: not a gzip-compressed text file"):
        load_measured(bad)


def test_gemm_script_runs_the_benchmark_as_a_module(tmp_path):
    """validation/device/gemm.sh with stand-ins for nvidia-smi and python3 (the real
    interpreter without site-packages, so the project is importable only from the checkout):
    every benchmark process gets past its imports, with no PYTHONPATH set."""
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, GPU-0, 580, 345 MHz'\n")
    (fake / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@" --help\n')
    for f in fake.iterdir():
        f.chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path)}
    res = subprocess.run(["bash", "validation/device/gemm.sh", "--lib", "x.so", "--baseline", "y.so",
                          str(tmp_path / "out")], cwd=root, env=env, capture_output=True, text=True,
                         timeout=120)
    for step in ("bench v0-3", "bench v4-6,0", "bench v7-9,4", "baseline v4"):
        assert f"{step} rc=0" in res.stdout, res.stdout + res.stderr


# A stand-in for the GPU programs of the device scripts: it writes a row for the first case of
# --cases into the file after --out, found by name (a stand-in that took --out's place by
# position once wrote its row to a file named "--out" in the repository root, 9b9bf5f).
STAND_IN = """#!/bin/bash
out=""; cases=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift;;
    --cases) cases="$2"; shift;;
  esac
  shift
done
[ -n "$out" ] || exit 0
case "$out" in /*) ;; *) echo "stand-in: --out $out is not an absolute path" >&2; exit 5;; esac
exec {python} -c "import json, sys; c = json.load(open(sys.argv[1])); \\
open(sys.argv[2], 'a').write(json.dumps({{'id': c[0]['id'], 'ok': True}}) + chr(10))" "$cases" "$out"
"""


def test_scale_script_writes_only_into_its_output(tmp_path):
    """validation/device/scale.sh with stand-ins: each step's rows land in OUTDIR (then
    OUTDIR.tgz) and the coverage lines count them; nothing is written where it runs."""
    import subprocess
    import sys
    import tarfile
    root = Path(__file__).resolve().parents[2]
    bundle = tmp_path / "bundle"
    (bundle / "matrix").mkdir(parents=True)
    for path, ids in ((bundle / "cases.json", ["s1", "s2"]),
                      (bundle / "matrix" / "cases.json", ["m1", "m2", "m3"])):
        path.write_text(json.dumps([{"id": i, "op": "all-gather"} for i in ids]))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "py").write_text(f"""#!/bin/bash
case "$*" in
  *validation.run.collectives*) exec {fake / 'stand-in'} "$@";;
  *) exec {sys.executable} "$@";;
esac
""")
    (fake / "stand-in").write_text(STAND_IN.format(python=sys.executable))
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho fake\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    before = sorted(p.name for p in root.iterdir())
    env = dict(os.environ, PATH=f"{fake}:/usr/bin:/bin", PYTHON=str(fake / "py"),
               PK_MEMCHECK_S="0")
    res = subprocess.run(["bash", "validation/device/scale.sh", str(bundle),
                          str(tmp_path / "out")], cwd=root, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "matrix: 1 of 3 cases ok, 0 failed, 2 not run; not run: m2 m3" in res.stdout
    assert "suite: 1 of 2 cases ok, 0 failed, 1 not run; not run: s2" in res.stdout
    with tarfile.open(tmp_path / "out.tgz") as tgz:
        names = set(tgz.getnames())
    assert {"out/matrix.jsonl", "out/measured.jsonl", "out/times.txt"} <= names
    assert sorted(p.name for p in root.iterdir()) == before


def test_kernels_session_runs_every_step_into_one_archive(tmp_path):
    """validation/device/kernels_session.sh (issue #38's one call) with stand-ins that do
    nothing for python3, nvcc and compute-sanitizer: every step runs (the matrix with its
    timed slice, the host cost, the GEMM), within the budget, and all of it ends in one
    archive (a device call returns at most 8 files)."""
    import subprocess
    import tarfile
    root = Path(__file__).resolve().parents[2]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3'\n")
    for name in ("python3", "nvcc", "compute-sanitizer"):
        (fake / name).write_text("#!/bin/sh\necho \"$0 $*\" >> \"$CALLS\"\nexit 0\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    host = tmp_path / "host"
    host.mkdir()
    (host / "libs.json").write_text("{}")
    calls = tmp_path / "calls.txt"
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path), "CALLS": str(calls)}
    out = tmp_path / "out"
    res = subprocess.run(["bash", "validation/device/kernels_session.sh", "--hostcost", str(host),
                          str(out)], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["kernels-session.tgz"]
    with tarfile.open(out / "kernels-session.tgz") as tar:
        names = tar.getnames()
        times = tar.extractfile("ks/times.txt").read().decode()
    assert "ks/matrix/random-matrix.tgz" in names and "ks/gemm/device.txt" in names
    for step in ("matrix exit", "host cost exit", "gemm exit"):
        assert step in times, times
    ran = calls.read_text()
    for module in ("validation.prepare.random_matrix", "--timed NVIDIA H100 80GB HBM3",
                   "coll/timed.json", "--bundle build/rm/timed", "validation.run.fused_host",
                   "--timed-cases", "validation.run.gemm"):
        assert module in ran, module
