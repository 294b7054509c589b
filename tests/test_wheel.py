"""The wheel works with no source tree: built from a copy of the checkout (pip wheel, no build
isolation: offline), installed into a clean virtual environment (no system site-packages; the
project's dependencies come from this interpreter's site-packages through a .pth line, which
adds the folder but not its .pth files, so the editable install stays out), and run from a
temporary directory with the checkout off sys.path. From there: pksim imports from the
environment's site-packages, `pksim env` finds the kernel sources in it, and nvcc builds one
generated collective, one fused kernel and one kernel microbenchmark (into a fresh kernel
cache), the three at once. Without nvcc the builds skip, and fail under CI (CI=true)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from codegen.build import find_nvcc

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() == "true"
pytestmark = pytest.mark.wheel


def _tracked(*folders: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "--", *folders], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return [line for line in out.splitlines() if line]


def _ignore_untracked(src: Path):
    return shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__",
                                  ".pytest_cache", "pksim-out", ".whl", ".cache", "dist")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src") / "pksim"
    shutil.copytree(ROOT, src, ignore=_ignore_untracked(ROOT))
    dist = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps",
                           "--no-build-isolation", "--no-index", "-q", "-w", str(dist)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (whl,) = dist.glob("pksim-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("venv")
    env_dir = home / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True,
                   timeout=120)
    python = env_dir / "bin" / "python"
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--no-deps", "--no-index", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    # the dependencies (numpy, scipy, simpy, click, rich, matplotlib): this interpreter's
    (site / "zz_pksim_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = home / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PKSIM_KERNELS", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PKSIM_CACHE=str(home / "cache"), PATH=f"{env_dir / 'bin'}{os.pathsep}"
               f"{env.get('PATH', '')}")
    return {"python": python, "pksim": env_dir / "bin" / "pksim", "site": site.resolve(),
            "work": work, "env": env}


def _run(venv: dict, *cmd: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=venv["work"], env=venv["env"], capture_output=True,
                          text=True, timeout=timeout)


def _needs_nvcc() -> None:
    if find_nvcc() is None:
        if IN_CI:
            pytest.fail("nvcc not found under CI (CI=true): the wheel's builds must be checked")
        pytest.skip("nvcc not found: the builds from the wheel cannot be checked")


def test_the_wheel_carries_every_kernel_source_and_microbenchmark(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    kernels = {f"pksim_kernels/{p.removeprefix('kernels/')}" for p in _tracked("kernels")}
    assert kernels and kernels <= names, sorted(kernels - names)
    data = set(_tracked("validation/microbench", "validation/device", "validation/suites",
                        "validation/published/corpus", "hwmodels/systems", "pksim_core/studies",
                        "pksim_core/programs/shipped"))
    assert data <= names, sorted(data - names)


def test_pksim_imports_from_the_environment_not_the_checkout(venv):
    proc = _run(venv, str(venv["python"]), "-c",
                "import json, sys, pksim, codegen, validation, hwmodels.resources as r; "
                "print(json.dumps({'file': pksim.__file__, 'path': sys.path, "
                "'kernels': str(r.kernels_dir()), 'microbench': str(r.microbench_dir())}))")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    site = venv["site"]
    assert Path(out["file"]).resolve().is_relative_to(site), out["file"]
    assert Path(out["kernels"]).is_relative_to(site) and Path(out["microbench"]).is_relative_to(site)
    on_path = [Path(p) if p else venv["work"] for p in out["path"]]   # "": its cwd
    assert not any(p.resolve() == ROOT for p in on_path), out["path"]


def test_pksim_env_from_the_wheel(venv):
    proc = _run(venv, str(venv["pksim"]), "env", "--json")
    assert proc.returncode == 0, proc.stderr
    machine = json.loads(proc.stdout)["machine"]
    assert machine["kernels"]["ok"]
    assert Path(machine["kernels"]["detail"]).is_relative_to(venv["site"] / "pksim_kernels")


BUILDS = {"all-reduce": ["--op", "all-reduce", "--bytes", "64MiB", "--world", "8"],
          "gemm-rs": ["--op", "gemm-rs", "--m", "4096", "--n", "4096", "--k", "1024",
                      "--world", "8"]}


@pytest.fixture(scope="module")
def wheel_builds(venv) -> dict:
    """The three builds from the wheel (a generated collective, a fused kernel, a kernel
    microbenchmark), started at once: each is its own nvcc process, so on two cores they
    take about the time of the two longest rather than of all three in turn."""
    _needs_nvcc()
    procs = {}
    for name, args in BUILDS.items():
        procs[name] = subprocess.Popen(
            [str(venv["pksim"]), "codegen", "--build", "--system", "h200-virtual", *args,
             "-o", str(venv["work"] / name), "--json"],
            cwd=venv["work"], env=venv["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
    run_py = venv["site"] / "validation" / "microbench" / "run.py"
    procs["microbench"] = subprocess.Popen(   # block_moves includes collectives/*.cuh
        [str(venv["python"]), str(run_py), "--out", str(venv["work"] / "mb"), "--build-only",
         "--only", "block_moves"], cwd=venv["work"], env=venv["env"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        out[name] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return out


def test_codegen_builds_a_collective_and_a_fused_kernel_from_the_wheel(venv, wheel_builds):
    for name in BUILDS:
        proc = wheel_builds[name]
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = venv["work"] / name
        assert list(out.glob("lib*.so")), sorted(out.iterdir())
        manifest = json.loads(proc.stdout)
        assert any(str(venv["site"] / "pksim_kernels") in a for a in manifest["nvcc_command"])


def test_a_kernel_microbenchmark_builds_from_the_wheel(venv, wheel_builds):
    proc = wheel_builds["microbench"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    builds = json.loads((venv["work"] / "mb" / "microbench.json").read_text())["builds"]
    assert [b["ok"] for b in builds] == [True]


def test_the_device_wheel_check_script_parses():
    script = ROOT / "validation" / "device" / "wheel_check.sh"
    assert os.access(script, os.X_OK)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
