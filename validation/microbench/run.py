#!/usr/bin/env python3
"""Build and run the pksim microbenchmark suite; collect its JSON lines.

    python3 validation/microbench/run.py --out DIR [--only NAME,...]
                                         [--build-only] [--quick] [--bin-dir BIN]
                                         [--bench-args "ARGS"] [--kernels KERNELS]

* Builds every *.cu next to this file into DIR/bin with
  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a, in parallel,
  cached by a hash of the source, common.cuh and the flags
  (DIR/bin/NAME-HASH, or BIN/NAME-HASH with --bin-dir: binaries built on
  another machine are reused, no nvcc needed); build logs in DIR/logs/.
* Runs each benchmark (CUDA programs and torch_bench.py) with a timeout and
  CUDA_MODULE_LOADING=EAGER; stdout/stderr go to DIR/logs/NAME.{out,err}.
* Collects the JSON lines into DIR/microbench.json:
    {"device": {...}, "date": ISO, "command": ..., "complete": bool,
     "builds": [...], "runs": [...], "results": [...]}
  rewritten (atomically) every few seconds while a benchmark runs, so a
  killed run keeps everything finished so far.  A benchmark that fails,
  times out or does not build is recorded in "runs" with its stderr tail;
  the others still run.
* Uses only the standard library (torch only inside torch_bench.py).
Exit status: 0 if every selected benchmark built, ran and passed its checks,
1 otherwise (the JSON and the summary table say which).
"""
import argparse
import concurrent.futures
import ctypes
import datetime
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NVCC_FLAGS = ["-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a"]
EXTRA_LIBS = {}  # name -> extra link flags (e.g. ["-lcuda"]); none needed now
HEADERS = ["common.cuh"]
# Benchmarks of the generated collectives' own routines compile against the kernel sources
# (kernels/ of a checkout, pksim_kernels/ of a wheel: --kernels, else $PKSIM_KERNELS, else the
# installed package pksim_kernels; as hwmodels.resources finds them, which this stdlib-only
# script cannot import), with ptxas' report of each kernel's registers and stack in their
# build log (a timed kernel must have no stack where the generated kernels have none:
# tests/validation/test_microbench_build.py).
KERNEL_BENCHES = {"block_moves": "collectives", "signal_chain": "collectives",
                  "epilogue_moves": "collectives", "fused_pull": "fused", "gemm_store_add": "fused"}
KERNELS = None
EXTRA_FLAGS, EXTRA_HEADERS = {}, {}


def default_kernels():
    env = os.environ.get("PKSIM_KERNELS")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("pksim_kernels")
    for cand in (spec.submodule_search_locations or []) if spec else []:
        if (Path(cand) / "include" / "pk" / "pk.cuh").is_file():
            return Path(cand)
    return None


def set_kernels(kernels):
    """Point the kernel benchmarks' flags and hashed headers at ``kernels`` (None: not found;
    those benchmarks then fail to build with a message that says so)."""
    global KERNELS
    KERNELS = Path(kernels).resolve() if kernels else None
    EXTRA_FLAGS.clear()
    EXTRA_HEADERS.clear()
    if KERNELS is None:
        return
    flags = ["-I", str(KERNELS / "include"), "-I", str(KERNELS), "-Xptxas", "-v"]
    common = sorted([*(KERNELS / "include" / "pk").glob("*.cuh"),
                     *(KERNELS / "collectives").glob("*.[ch]*")])
    fused = sorted(common + [*(KERNELS / "fused").glob("*.[ch]*"), *(KERNELS / "gemm").glob("*.cuh")])
    for name, kind in KERNEL_BENCHES.items():
        EXTRA_FLAGS[name] = flags
        EXTRA_HEADERS[name] = fused if kind == "fused" else common


set_kernels(default_kernels())
# Run order: bandwidth first, the benchmark most able to hang (spinning
# kernels on two streams) last.
ORDER = ["hbm_copy", "sm_copy", "tma_copy", "tma_reduce", "block_moves", "atomics", "launch_latency", "torch_bench", "signal_chain",
         "epilogue_moves", "fused_pull", "gemm_store_add", "flag_latency"]
TIMEOUT_S = {"torch_bench": 180}
DEFAULT_TIMEOUT_S = 90
PYTHON_BENCHES = {"torch_bench": "torch_bench.py"}


# ------------------------------------------------------------------ building
def find_nvcc():
    for cand in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def cuda_sources():
    return {p.stem: p for p in sorted(HERE.glob("*.cu"))}


def source_hash(src: Path, name: str) -> str:
    h = hashlib.sha256()
    h.update(src.read_bytes())
    for p in [HERE / hdr for hdr in HEADERS] + EXTRA_HEADERS.get(name, []):
        if p.exists():
            h.update(p.read_bytes())
    h.update(" ".join(NVCC_FLAGS + EXTRA_FLAGS.get(name, []) + EXTRA_LIBS.get(name, [])).encode())
    return h.hexdigest()[:16]


def compile_cmd(nvcc, src: Path, out: Path, name: str):
    return [nvcc, *NVCC_FLAGS, *EXTRA_FLAGS.get(name, []), "-o", str(out), str(src),
            *EXTRA_LIBS.get(name, [])]


def build_one(name, src: Path, bindir: Path, logdir: Path, nvcc):
    """Returns a dict: name, ok, binary, cached, seconds, log_tail."""
    binary = bindir / f"{name}-{source_hash(src, name)}"
    rec = {"name": name, "binary": str(binary), "cached": False, "seconds": 0.0}
    if binary.exists():
        return {**rec, "ok": True, "cached": True, "log_tail": ""}
    if nvcc is None:
        return {**rec, "ok": False, "log_tail": "nvcc not found (set NVCC or put nvcc on PATH)"}
    if name in KERNEL_BENCHES and KERNELS is None:
        return {**rec, "ok": False, "log_tail": "the kernel sources are not found (pass --kernels "
                                                "DIR, set PKSIM_KERNELS or install pksim)"}
    tmp = bindir / f".{binary.name}.{os.getpid()}.tmp"
    t0 = time.time()
    try:
        proc = subprocess.run(compile_cmd(nvcc, src, tmp, name), capture_output=True, text=True, timeout=600)
        log = proc.stdout + proc.stderr
        ok = proc.returncode == 0 and tmp.exists()
    except (OSError, subprocess.TimeoutExpired) as e:
        log, ok = f"{type(e).__name__}: {e}", False
    rec["seconds"] = round(time.time() - t0, 2)
    (logdir / f"{name}.build.log").write_text(" ".join(compile_cmd(nvcc, src, binary, name)) + "\n" + log)
    if ok:
        os.replace(tmp, binary)
    elif tmp.exists():
        tmp.unlink()
    return {**rec, "ok": ok, "log_tail": log[-3000:]}


def build_all(names, bindir: Path, logdir: Path, jobs=None):
    bindir.mkdir(parents=True, exist_ok=True)
    logdir.mkdir(parents=True, exist_ok=True)
    srcs = cuda_sources()
    nvcc = find_nvcc()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2) as ex:
        futs = [ex.submit(build_one, n, srcs[n], bindir, logdir, nvcc) for n in names if n in srcs]
        return [f.result() for f in futs]


# ------------------------------------------------------------------ results file
class ResultFile:
    def __init__(self, path: Path, command: str):
        self.path = path
        self.doc = {"device": {}, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "command": command, "complete": False, "builds": [], "runs": [], "results": []}

    def add_device(self, info: dict, source: str):
        info = {k: v for k, v in info.items() if v is not None}
        if not info:
            return
        dev = self.doc["device"]
        for k, v in info.items():
            dev.setdefault(k, v)
        dev.setdefault("sources", [])
        if source not in dev["sources"]:
            dev["sources"].append(source)

    def write(self):
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.doc, indent=1))
        os.replace(tmp, self.path)


def nvidia_smi_info():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    try:
        out = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    f = [x.strip() for x in out.stdout.strip().splitlines()[0].split(",")]
    keys = ["name", "driver_version", "memory_total_mib", "clock_max_sm_mhz", "clock_max_mem_mhz"]
    return dict(zip(keys, f))


def torch_version():
    try:
        return importlib.metadata.version("torch")
    except Exception:  # noqa: BLE001 -- not installed
        return None


# ------------------------------------------------------------------ running
CURRENT = {"proc": None}  # the benchmark process running now (for signal handling)


def _die_with_parent():
    """In the child before exec: get SIGKILL if run.py dies (Linux only)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 -- best effort
        pass


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the benchmark's own process group
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_bench(name, cmd, timeout_s, logdir: Path, results: ResultFile):
    out_path, err_path = logdir / f"{name}.out", logdir / f"{name}.err"
    env = dict(os.environ, CUDA_MODULE_LOADING="EAGER", PYTHONUNBUFFERED="1")
    run = {"bench": name, "command": " ".join(cmd), "status": "running", "returncode": None, "wall_s": None,
           "n_results": 0, "n_failed_checks": 0, "stderr_tail": ""}
    results.doc["runs"].append(run)
    results.write()
    t0 = time.time()
    consumed = 0
    partial = ""

    def collect():
        nonlocal consumed, partial
        with open(out_path, "rb") as fh:
            fh.seek(consumed)
            chunk = fh.read().decode(errors="replace")
        consumed += len(chunk.encode())
        text = partial + chunk
        lines = text.split("\n")
        partial = lines.pop()  # incomplete last line (if any)
        new = 0
        for line in lines:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if obj.get("record") == "device":
                results.add_device(obj.get("device", {}), name)
                continue
            obj["program"] = name
            results.doc["results"].append(obj)
            run["n_results"] += 1
            run["n_failed_checks"] += obj.get("check") != "ok"
            new += 1
        return new

    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=str(HERE), start_new_session=True,
                                    preexec_fn=_die_with_parent)
        except (OSError, subprocess.SubprocessError) as e:
            run.update(status="failed", wall_s=0.0, stderr_tail=f"could not start: {e}")
            results.write()
            return run
        CURRENT["proc"] = proc
        timed_out = False
        last_write = time.time()
        try:
            while proc.poll() is None:
                time.sleep(0.25)
                if time.time() - t0 > timeout_s:
                    timed_out = True
                    _kill(proc)
                    break
                if time.time() - last_write > 2.0:
                    if collect():
                        results.write()
                    last_write = time.time()
        except BaseException:  # interrupted (signal): keep what the benchmark printed
            _kill(proc)
            collect()
            run.update(status="interrupted", returncode=proc.returncode, wall_s=round(time.time() - t0, 2),
                       stderr_tail=err_path.read_text(errors="replace")[-2000:])
            results.write()
            raise
        finally:
            CURRENT["proc"] = None
    collect()
    stderr = err_path.read_text(errors="replace")
    run["returncode"] = proc.returncode
    run["wall_s"] = round(time.time() - t0, 2)
    run["stderr_tail"] = stderr[-2000:]
    if timed_out:
        run["status"] = f"timeout after {timeout_s:.0f} s"
    elif proc.returncode != 0:
        run["status"] = "failed"
    elif run["n_failed_checks"]:
        run["status"] = "check failed"
    else:
        run["status"] = "ok"
    results.write()
    return run


# ------------------------------------------------------------------ summary
def headline(rows):
    """Best value of the main metric over the rows with check ok (cold-L2 rows if there are any)."""
    ok = [r for r in rows if r.get("check") == "ok"]
    cold = [r for r in ok if (r.get("params") or {}).get("l2") == "cold"]
    ok = cold or ok
    for key, best, unit, scale in (("tflops", max, "TFLOP/s", 1), ("gbps", max, "GB/s", 1),
                                   ("gops_per_s", max, "Gop/s", 1), ("time_s", min, "us", 1e6)):
        vals = [r[key] for r in ok if isinstance(r.get(key), (int, float))]
        if vals:
            word = "max" if best is max else "min"
            return f"{word} {best(vals) * scale:.4g} {unit}" + (" (cold L2)" if cold else "")
    return "-"


def print_summary(results: ResultFile):
    print("\n%-15s %-22s %6s %6s %8s  %s" % ("benchmark", "status", "points", "bad", "wall_s", "headline"))
    for run in results.doc["runs"]:
        rows = [r for r in results.doc["results"] if r.get("program") == run["bench"]]
        benches = sorted({r.get("bench", "?") for r in rows})
        heads = "; ".join(f"{b}: {headline([r for r in rows if r.get('bench') == b])}" for b in benches) or "-"
        wall = "-" if run["wall_s"] is None else f"{run['wall_s']:.1f}"
        print("%-15s %-22s %6d %6d %8s  %s" % (run["bench"], run["status"][:22], run["n_results"],
                                                run["n_failed_checks"], wall, heads))
        if run["status"] not in ("ok", "check failed") and run.get("stderr_tail"):
            tail = run["stderr_tail"].strip().splitlines()[-3:]
            for line in tail:
                print(f"{'':15}   | {line[:160]}")
    print(f"\nresults: {results.path}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="output directory")
    ap.add_argument("--only", default="", help="comma-separated benchmark names (default: all)")
    ap.add_argument("--build-only", action="store_true", help="only build the CUDA programs")
    ap.add_argument("--quick", action="store_true", help="smaller sweeps (smoke test)")
    ap.add_argument("--timeout-s", type=float, default=None, help="per-benchmark timeout (default 90, torch 180)")
    ap.add_argument("--budget-s", type=float, default=330.0,
                    help="wall-clock budget for all runs; later benchmarks are skipped past it (default 330)")
    ap.add_argument("--python", default=sys.executable, help="interpreter for torch_bench.py")
    ap.add_argument("--jobs", type=int, default=None, help="parallel nvcc jobs (default: CPU count)")
    ap.add_argument("--bin-dir", type=Path, default=None,
                    help="where binaries are built / reused (default OUT/bin); lets prebuilt binaries be shared")
    ap.add_argument("--bench-args", default="",
                    help="arguments for every selected CUDA program (e.g. \"--payload-mib 256\" for block_moves)")
    ap.add_argument("--kernels", type=Path, default=None,
                    help="the kernel sources (kernels/ of a checkout) [default: $PKSIM_KERNELS, "
                         "else the installed pksim's]")
    args = ap.parse_args(argv)
    if args.kernels:
        set_kernels(args.kernels)

    known = [n for n in ORDER if n in cuda_sources() or n in PYTHON_BENCHES]
    known += [n for n in cuda_sources() if n not in known]
    selected = known
    if args.only:
        selected = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = [s for s in selected if s not in known]
        if unknown:
            ap.error(f"unknown benchmark(s) {unknown}; known: {', '.join(known)}")
        selected = [n for n in known if n in selected]

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    bindir = args.bin_dir.resolve() if args.bin_dir else out / "bin"
    logdir = out / "logs"
    results = ResultFile(out / "microbench.json", " ".join([sys.executable, *sys.argv]))
    results.add_device(nvidia_smi_info(), "nvidia-smi")
    results.add_device({"torch": torch_version()}, "importlib.metadata")

    t0 = time.time()
    cu_names = [n for n in selected if n in cuda_sources()]
    builds = build_all(cu_names, bindir, logdir, args.jobs)
    results.doc["builds"] = builds
    results.write()
    build_by_name = {b["name"]: b for b in builds}
    print(f"built {sum(b['ok'] for b in builds)}/{len(builds)} CUDA programs in {time.time() - t0:.1f} s "
          f"({sum(b['cached'] for b in builds)} cached) -> {bindir}")
    for b in builds:
        if not b["ok"]:
            print(f"  BUILD FAILED {b['name']}: {b['log_tail'].strip()[-800:]}")
    if args.build_only:
        results.doc["complete"] = True
        results.write()
        return 0 if all(b["ok"] for b in builds) else 1

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    t_runs = time.time()
    try:
        run_all(args, selected, build_by_name, results, logdir, t_runs)
    except KeyboardInterrupt as e:
        print(f"\ninterrupted ({e}); partial results kept", flush=True)
        results.write()
        print_summary(results)
        return 130
    results.doc["complete"] = True
    results.write()
    print_summary(results)
    return 0 if all(r["status"] == "ok" for r in results.doc["runs"]) else 1


def run_all(args, selected, build_by_name, results, logdir, t_runs):
    for name in selected:
        remaining = args.budget_s - (time.time() - t_runs)
        if name in PYTHON_BENCHES:
            cmd = [args.python, str(HERE / PYTHON_BENCHES[name])]
        else:
            b = build_by_name[name]
            if not b["ok"]:
                results.doc["runs"].append({"bench": name, "status": "build failed", "returncode": None,
                                            "wall_s": None, "n_results": 0, "n_failed_checks": 0,
                                            "stderr_tail": b["log_tail"][-2000:]})
                results.write()
                continue
            cmd = [b["binary"], *args.bench_args.split()]
        if args.quick:
            cmd.append("--quick")
        if remaining < 5:
            results.doc["runs"].append({"bench": name, "status": "skipped (budget)", "returncode": None,
                                        "wall_s": None, "n_results": 0, "n_failed_checks": 0, "stderr_tail": ""})
            results.write()
            continue
        timeout = min(args.timeout_s or TIMEOUT_S.get(name, DEFAULT_TIMEOUT_S), remaining)
        print(f"== {name} (timeout {timeout:.0f} s)", flush=True)
        try:
            run = run_bench(name, cmd, timeout, logdir, results)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 -- never let one benchmark stop the suite
            run = {"bench": name, "status": f"driver error: {type(e).__name__}: {e}", "returncode": None,
                   "wall_s": None, "n_results": 0, "n_failed_checks": 0, "stderr_tail": ""}
            results.doc["runs"].append(run)
            results.write()
        print(f"   {run['status']}: {run['n_results']} points in {run['wall_s']} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
