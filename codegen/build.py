"""Stage 3 of codegen: source -> binary (a shared library), cached by content.

The cache key is the SHA-256 of the source text, the frozen ``BuildOptions``, the nvcc
version line and the text of every header under ``kernels/include/pk``, ``kernels/collectives``,
``kernels/fused`` and ``kernels/gemm`` (a header edit must not reuse a stale binary). The
kernels folder comes from ``hwmodels.resources`` (a wheel's ``pksim_kernels``). Binaries live in
``$PKSIM_CACHE`` (default ``~/.cache/pksim/kernels``) as ``<key>/lib<stem>.so`` with a
``build.json`` beside them (command, seconds, nvcc version, and per kernel the registers,
stack and spills ptxas reported: ``-Xptxas -v`` is part of every build, see
``ptxas_report``). A failed nvcc raises CompileError carrying the exact command and stderr.
"""
from __future__ import annotations

import hashlib
import re
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from hwmodels.errors import CompileError
from hwmodels.resources import kernel_include_dirs, kernels_dir
from pksim_core.kernel_contract import TARGETS


@dataclass(frozen=True)
class BuildOptions:
    """Everything besides the source that decides the binary; hashable, the cache key."""
    arch: str = "sm_90a"
    opt_level: int = 3
    lineinfo: bool = True
    defines: tuple[tuple[str, str], ...] = ()
    extra: tuple[str, ...] = field(default=())

    def gencode(self) -> str:
        num = self.arch.removeprefix("sm_")
        return f"-gencode=arch=compute_{num},code=sm_{num}"

    def to_dict(self) -> dict:
        out = asdict(self)
        out["defines"] = {k: v for k, v in self.defines}
        out["extra"] = list(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "BuildOptions":
        return cls(arch=data.get("arch", "sm_90a"), opt_level=int(data.get("opt_level", 3)),
                   lineinfo=bool(data.get("lineinfo", True)),
                   defines=tuple(sorted(dict(data.get("defines", {})).items())),
                   extra=tuple(data.get("extra", ())))


def find_nvcc() -> str | None:
    for cand in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


@lru_cache(maxsize=None)
def nvcc_version(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompileError(f"cannot run {nvcc} --version: {exc}", [nvcc, "--version"]) from None
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else out.stdout.strip()


@lru_cache(maxsize=None)
def listed_targets(nvcc: str) -> tuple[str, ...]:
    """The real architectures nvcc compiles for (``nvcc --list-gpu-code``: sm_90, sm_100, ...)."""
    try:
        out = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(x.strip() for x in out.stdout.split() if x.strip().startswith("sm_"))


def newest_target() -> tuple[str, str]:
    """The newest of the pk primitives' targets (kernel_contract.TARGETS) that this nvcc
    offers, and the nvcc version line that says so; the newest of them all when no nvcc is
    found (the build step will say so)."""
    nvcc = find_nvcc()
    if nvcc is None:
        return TARGETS[-1], "no nvcc found"
    listed = listed_targets(nvcc)
    offered = [t for t in TARGETS if t.removesuffix("a") in listed]
    return (offered[-1] if offered else TARGETS[-1]), nvcc_version(nvcc)


def headers_digest() -> str:
    h = hashlib.sha256()
    kernels = kernels_dir()
    for d in (kernels / "include" / "pk", kernels / "collectives", kernels / "fused",
              kernels / "gemm"):
        for p in sorted(d.glob("*")):
            if p.suffix in (".cuh", ".h"):
                h.update(p.name.encode())
                h.update(p.read_bytes())
    return h.hexdigest()


def nvcc_command(source: Path, output: Path, options: BuildOptions, nvcc: str = "nvcc") -> list[str]:
    cmd = [nvcc, f"-O{options.opt_level}", "-std=c++17", options.gencode()]
    if options.lineinfo:
        cmd.append("-lineinfo")
    for d in kernel_include_dirs():
        cmd += ["-I", str(d)]
    cmd += [f"-D{k}={v}" for k, v in options.defines]
    cmd += ["-Xptxas", "-v", "-Xcompiler", "-fPIC,-Wall,-Wextra", "-shared", *options.extra,
            "-o", str(output), str(source)]
    return cmd


_PTXAS_FUNCTION = re.compile(r"Function properties for (\S+)")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers")


def ptxas_report(log: str) -> dict[str, dict[str, int]]:
    """Per function ptxas -v reported: {mangled name: {"registers", "stack", "spill_stores",
    "spill_loads"}} (functions without a "Used N registers" line, such as device functions
    that were not inlined, have no "registers"). A stack is worth knowing: a grid whose
    threads have one starts slower (docs/design/limits.md)."""
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        m = _PTXAS_FUNCTION.search(line)
        if m:
            current = out.setdefault(m.group(1), {})
            continue
        m = _PTXAS_FRAME.search(line)
        if m and current is not None:
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)),
                           spill_loads=int(m.group(3)))
            continue
        m = _PTXAS_USED.search(line)
        if m and current is not None:
            current["registers"] = int(m.group(1))
            current = None
    return out


def cache_dir() -> Path:
    env = os.environ.get("PKSIM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "pksim" / "kernels"


def cache_key(source_text: str, options: BuildOptions, nvcc: str) -> str:
    blob = json.dumps({"source": hashlib.sha256(source_text.encode()).hexdigest(),
                       "options": options.to_dict(), "nvcc": nvcc_version(nvcc),
                       "headers": headers_digest(), "report": "ptxas -v"}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def compile_source(source: Path, options: BuildOptions, cache: Path | None = None,
                   nvcc: str | None = None, timeout_s: float = 900) -> Path:
    """Build ``source`` into a shared library (or reuse the cached one); returns its path."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise CompileError("nvcc not found (not on PATH, no $NVCC, no /usr/local/cuda/bin/nvcc)")
    source = Path(source).resolve()
    text = source.read_text()
    key = cache_key(text, options, nvcc)
    where = (cache or cache_dir()) / key
    lib = where / f"lib{source.stem}.so"
    if lib.is_file():
        return lib
    where.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        tmp_lib = Path(tmp) / lib.name
        cmd = nvcc_command(source, tmp_lib, options, nvcc)
        t0 = time.time()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise CompileError(f"nvcc ran past {timeout_s:.0f} s building {source.name}", cmd) from None
        if proc.returncode != 0:
            raise CompileError(f"nvcc failed building {source.name} (exit {proc.returncode}); "
                               f"command: {shlex.join(cmd)}", cmd, proc.stderr or proc.stdout)
        os.replace(tmp_lib, lib)
        (where / "build.json").write_text(json.dumps(
            {"command": cmd, "seconds": round(time.time() - t0, 2), "nvcc": nvcc_version(nvcc),
             "source": str(source), "kernels": ptxas_report(proc.stdout + proc.stderr),
             "log": _without_ptxas_info(proc.stdout + proc.stderr)[-4000:]}, indent=2))
    return lib


_PTXAS_V_LINE = re.compile(r"^ptxas info\s*: (Compiling entry function|Function properties|Used \d+ registers"
                           r"|Compile time)|^\s+\d+ bytes stack frame")


def _without_ptxas_info(log: str) -> str:
    """The log less ptxas -v's per-function lines (kept in "kernels"); its other notes, such
    as a wgmma serialisation's "Potential Performance Loss", stay."""
    return "\n".join(l for l in log.splitlines() if not _PTXAS_V_LINE.search(l))


def compile_many(jobs: list[tuple[Path, BuildOptions]], workers: int | None = None,
                 cache: Path | None = None) -> list[Path | CompileError]:
    """Build several sources in parallel; a failure is returned in its slot, not raised."""
    def one(job):
        try:
            return compile_source(job[0], job[1], cache)
        except CompileError as exc:
            return exc
    workers = workers or max(2, os.cpu_count() or 2)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, jobs))


def write_unit(out_dir: str | Path, name: str, text: str, options: BuildOptions,
               manifest: dict) -> tuple[Path, Path]:
    """Write a generated translation unit ``<name>.cu`` and its manifest ``<name>.json``:
    ``manifest`` (schedule, prediction, plan, entry) plus the source's name and hash, the
    build options and the exact nvcc command. Returns (source, manifest) paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    source = out / f"{name}.cu"
    manifest_path = out / f"{name}.json"
    source.write_text(text)
    data = dict(manifest)
    data.update({
        "source": source.name,
        "source_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "build_options": options.to_dict(),
        "nvcc_command": nvcc_command(source.resolve(), (out / f"lib{name}.so").resolve(),
                                     options, find_nvcc() or "nvcc"),
    })
    manifest_path.write_text(json.dumps(data, indent=2) + "\n")
    return source, manifest_path
