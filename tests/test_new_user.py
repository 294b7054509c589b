"""A new user's bad inputs, every command: each must end in one line on stderr that starts
``pksim: error:``, exit code 2, no traceback, nothing on stdout and nothing written (the
folder the command runs in, and every file the user had there, unchanged).

The cases are by class of mistake, not by issue: numbers that are no number, nan, inf,
negative, zero or huge; names that are not among the choices; options that do not apply to
the op or implementation; sizes that do not fit or do not divide; files that are missing,
folders, broken, or name what another file names; then a seeded fuzz of the numeric options.
Most run in-process (click's CliRunner); a few run the installed ``pksim`` to prove the real
entry point does the same. Issue 40.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hwmodels.catalog import SYSTEMS_DIR
from pksim_cli.main import cli

H100 = ["--system", "dgx-h100"]
AR = [*H100, "--op", "all-reduce", "--bytes", "1MiB"]
GEMM = [*H100, "--op", "gemm-rs", "--m", "4096", "--n", "4096", "--k", "4096"]
MOE = [*H100, "--op", "moe-dispatch-gemm", "--tokens", "1024", "--hidden", "1024",
       "--experts", "8", "--topk", "2", "--expert-hidden", "1024"]
ATTN = [*H100, "--op", "ring-attention", "--batch", "1", "--heads", "8", "--head-dim", "128"]
NVLINK = "gpu.nvlink.link_bandwidth_GBps"

# Files a case may name: written into the folder the case runs in, before it runs.
FILES = {
    "nan.toml": 'name = "n"\nsystems = ["dgx-h100"]\n[[workload]]\nname = "w"\n'
                'op = "all-reduce"\nbytes = nan\nworld = 8\n',
    "world1.toml": 'name = "w1"\nsystems = ["dgx-h100"]\n[[workload]]\nname = "w"\n'
                   'op = "all-reduce"\nbytes = "1MiB"\nworld = 1\n',
    "sms.toml": 'name = "s"\nsystems = ["dgx-h100"]\n[[workload]]\nname = "w"\nop = "gemm-rs"\n'
                'm = 4096\nn = 4096\nk = 4096\nworld = 8\nsearch = {comm_sms = [0, -4]}\n',
    "sms-big.toml": 'name = "s2"\nsystems = ["dgx-h100"]\n[[workload]]\nname = "w"\n'
                    'op = "gemm-rs"\nm = 4096\nn = 4096\nk = 4096\nworld = 8\n'
                    'search = {comm_sms = [1000]}\n',
    "skew.toml": 'name = "k"\nsystems = ["dgx-h100"]\n[[workload]]\nname = "w"\n'
                 'op = "moe-combine"\ntokens = 64\nhidden = 64\nexperts = 8\ntopk = 2\n'
                 'expert_hidden = 64\nskew = inf\nworld = 8\n',
    "dup.toml": 'name = "d"\nsystems = ["dgx-h100", "dgx-h100"]\n[[workload]]\nname = "w"\n'
                'op = "all-reduce"\nbytes = "1MiB"\nworld = 8\n',
    "pow.toml": 'name = "p"\nsystems = ["dgx-h100"]\n[[workload]]\nname = "w"\n'
                'op = "all-reduce"\nm = "2 ** 10 ** 10"\nn = 4\nworld = 8\n',
    "seq.toml": 'name = "q"\nsystems = ["dgx-h100"]\n[[workload]]\nname = "w"\n'
                'op = "ulysses-attention"\nbatch = 1\nheads = 8\nseq = 4\nhead_dim = 64\n'
                'world = 8\n',
    "fp4.toml": 'name = "f"\nsystems = ["dgx-h100"]\n[[workload]]\nname = "w"\n'
                'op = "all-gather"\ndtype = "fp4"\nbytes = "1MiB"\nworld = 8\n',
    "empty-share.toml": 'name = "e"\nsystems = ["dgx-h100"]\n[[workload]]\nname = "w"\n'
                        'op = "all-to-all"\ncount = 1\nworld = 8\n',
    "broken.toml": 'name = "b"\nsystems = [\n',
    "unknown-key.toml": 'name = "u"\nsystem = ["dgx-h100"]\n',
    "dgx-h100.toml": (SYSTEMS_DIR / "dgx-h100.toml").read_text(),      # a copy, same name
    "cycle-a.toml": 'name = "a"\ndescription = "d"\ninherits = "cycle-b.toml"\n',
    "cycle-b.toml": 'name = "b"\ndescription = "d"\ninherits = "cycle-a.toml"\n',
    "implausible.toml": 'name = "slow-links"\ndescription = "d"\ninherits = "dgx-h100"\n'
                        '[gpu.nvlink]\nlink_bandwidth_GBps = { value = 1e-30, source = "x", '
                        'provenance = "estimate" }\n',
    "program.toml": 'name = "p"\n',
    "notes.txt": "the user's own file\n",
}
FOLDERS = ("default", "out-file")     # ./default: the guide's own `-o default` makes one

# (command line, words the error must contain). {d} is the folder the case runs in.
CASES = [
    # ---- predict: numbers ------------------------------------------------------------------
    (["predict", *AR[:-1], "0"], "--bytes"),
    (["predict", *AR[:-1], "-1"], "--bytes"),
    (["predict", *AR[:-1], "nan"], "--bytes"),
    (["predict", *AR[:-1], "inf"], "--bytes"),
    (["predict", *AR[:-1], "1.5"], "--bytes"),
    (["predict", *AR[:-1], "1TiB"], "more than the 80 GB"),
    (["predict", *AR[:-1], "1PiB"], "cannot read size"),
    (["predict", *AR, "--world", "0"], "--world 0"),
    (["predict", *AR, "--world", "1"], "at least 2 ranks"),
    (["predict", *AR, "--world", "9"], "larger than the cluster"),
    (["predict", *AR, "--world", "2.5"], "--world"),
    (["predict", *AR, "--domains", "0"], "--domains"),
    (["predict", *AR, "--domains", "100000"], "at most 16384"),
    (["predict", *AR, "--world", "2", "--domains", "2"], "would hold none"),
    (["predict", *AR, "--comm-sms", "0"], "--comm-sms 0"),
    (["predict", *AR, "--comm-sms", "1000"], "--comm-sms 1000"),
    (["predict", *MOE, "--skew", "nan"], "--skew nan"),
    (["predict", *MOE, "--skew", "-1"], "--skew -1"),
    (["predict", *MOE, "--skew", "1e300"], "--skew"),
    (["predict", *MOE, "--topk", "9"], "--topk 9"),
    (["predict", *ATTN, "--seq", "1"], "--seq 1"),
    (["predict", *ATTN, "--seq", "0"], "--seq"),
    (["predict", *GEMM[:-1], "0"], "--k"),
    (["predict", *GEMM[:-1], "99999999999"], "--k 99999999999"),
    (["predict", *GEMM[:-3], "999999999", "--k", "999999999"], "operands"),
    (["predict", *GEMM, "--chunk-bytes", "1TiB"], "--chunk-bytes"),
    (["predict", *AR, "--chunk-bytes", "1GiB"], "smaller than the buffer"),
    (["predict", *AR, "--chunk-bytes", "3"], "--chunk-bytes 3"),
    (["predict", *AR, "--root", "3"], "has no root"),
    (["predict", *H100, "--op", "broadcast", "--bytes", "1MiB", "--root", "8"], "--root 8"),
    # ---- predict: --set values -------------------------------------------------------------
    (["predict", *AR, "--set", "gpu.sm.count=1000000"], "plausible"),
    (["predict", *AR, "--set", f"{NVLINK}=1e-30"], "plausible"),
    (["predict", *AR, "--set", f"{NVLINK}=1e30"], "plausible"),
    (["predict", *AR, "--set", f"{NVLINK}=nan"], "finite"),
    (["predict", *AR, "--set", "gpu.hbm.efficiency=2"], "at most 1"),
    (["predict", *AR, "--set", "gpu.sm.count=1.5"], "whole number"),
    (["predict", *AR, "--set", "gpu.sm.count=many"], "must be a number"),
    (["predict", *AR, "--set", "gpu.nvlink=5"], "table"),
    (["predict", *AR, "--set", "nothing"], "KEY=VALUE"),
    (["predict", *AR, "--set", "gpu.tensor.tflops_fp8=1e-9"], "plausible"),
    # ---- predict: names and options that do not apply -------------------------------------
    (["predict", *H100, "--op", "all-sing", "--bytes", "1MiB"], "all-sing"),
    (["predict", *AR, "--dtype", "fp3"], "fp3"),
    (["predict", *AR, "--dtype", "fp4"], "no fp4"),
    (["predict", "--system", "dgx-a100", "--op", "all-reduce", "--bytes", "1MiB",
      "--dtype", "fp8"], "no fp8"),
    (["predict", *AR, "--impl", "mpi"], "mpi"),
    (["predict", *AR, "--mechanism", "carrier-pigeon"], "carrier-pigeon"),
    (["predict", *AR, "--algorithm", "ring", "--mechanism", "multimem"], "multimem runs in-network"),
    (["predict", *AR, "--algorithm", "in-network", "--mechanism", "tma"], "in-network runs by"),
    (["predict", *AR, "--launch", "graph"], "only --impl nccl"),
    (["predict", *AR, "--nvls", "off"], "only --impl nccl"),
    (["predict", *AR, "--nvls", "maybe"], "maybe"),
    (["predict", *AR, "--impl", "nccl", "--comm-sms", "4"], "NCCL picks"),
    (["predict", *AR, "--impl", "nccl", "--algorithm", "two-shot"], "NCCL has no such"),
    (["predict", *AR, "--impl", "nccl", "--algorithm", "nvls", "--nvls", "off"], "--nvls off"),
    (["predict", *H100, "--op", "all-to-all", "--bytes", "1MiB", "--impl", "nccl",
      "--algorithm", "ring"], "point-to-point"),
    (["predict", *AR, "--m", "4"], "--m"),
    (["predict", *GEMM, "--bytes", "1MiB"], "--bytes"),
    (["predict", *GEMM, "--peers", "+1"], "--peers"),
    (["predict", *GEMM, "--algorithm", "pairwise"], "communicates by"),
    (["predict", *GEMM, "--overlap", "intra-sm", "--mechanism", "register"], "intra-SM"),
    (["predict", *AR, "--peer-order", "staggered", "--algorithm", "ring"], "--peer-order"),
    (["predict", *AR, "--schedule", "no/such/label"], "--schedule"),
    (["predict", *AR, "--nccl-version", "1.0", "--impl", "nccl"], "'1.0'"),
    (["predict", "--program", "nosuch"], "nosuch"),
    (["predict", "--program", "allreduce", "--dtype", "fp8"], "leave out --dtype"),
    (["predict", *AR, "--full"], "--full"),
    (["predict", *GEMM, "--overlap", "none", "--comm-sms", "8"], "--overlap none"),
    (["predict", *AR, "--domains", "2", "--set", "scaleout.nic_bandwidth_Gbps=0"],
     "no scale-out network"),
    (["predict", "--program", "allreduce", "--system", "nosuch"], "nosuch"),
    (["predict", *AR, "--bogus"], "--bogus"),
    (["predict", "--op", "all-reduce", "--bytes", "1MiB"], "--system"),
    (["predict", "--system", "nosuch", "--op", "all-reduce", "--bytes", "1MiB"], "nosuch"),
    (["predict", "--system", "{d}/default", "--op", "all-reduce", "--bytes", "1MiB"], "folder"),
    (["predict", "--system", "{d}/implausible.toml", "--op", "all-reduce", "--bytes", "1MiB"],
     "implausible.toml"),
    (["predict", "--system", "{d}/cycle-a.toml", "--op", "all-reduce", "--bytes", "1MiB"],
     "cycle"),
    # ---- the collectives' own options ------------------------------------------------------
    (["predict", *H100, "--op", "reduce-scatter", "--bytes", "4"], "less than one bf16"),
    (["predict", *H100, "--op", "all-to-all", "--bytes", "2"], "8 shares"),
    (["predict", *H100, "--op", "send-recv", "--bytes", "1MiB", "--peers", "+0"], "itself"),
    (["predict", *H100, "--op", "send-recv", "--bytes", "1MiB", "--peers", "+8"], "itself"),
    (["predict", *H100, "--op", "send-recv", "--bytes", "1MiB", "--peers", "3>3"], "itself"),
    (["predict", *H100, "--op", "send-recv", "--bytes", "1MiB", "--peers", "0>9"], "rank 9"),
    (["predict", *H100, "--op", "send-recv", "--bytes", "1MiB", "--peers", "up"], "'up'"),
    (["predict", *H100, "--op", "all-gather-v", "--splits", "1,2"], "8 shares"),
    (["predict", *H100, "--op", "all-gather-v", "--splits", "1,2,3,4,5,6,7,-8"], "negative"),
    (["predict", *H100, "--op", "all-gather-v", "--splits", "0,0,0,0,0,0,0,0"], "every share"),
    (["predict", *H100, "--op", "all-gather", "--bytes", "1MiB", "--reduce-op", "max"],
     "does not reduce"),
    # ---- search ---------------------------------------------------------------------------
    (["search", *AR, "--top", "0"], "--top"),
    (["search", *AR, "--top", "-5"], "--top"),
    (["search", *AR, "--top", "many"], "--top"),
    (["search", *AR, "--chunk-bytes", "1GiB"], "--chunk-bytes"),
    (["search", *AR, "--dtype", "fp4"], "no fp4"),
    (["search", *AR, "--algorithm", "ring", "--mechanism", "multimem"], "no candidate"),
    # ---- trace ----------------------------------------------------------------------------
    (["trace", *AR, "-o", "{d}/t.txt"], "FILE.json"),
    (["trace", *ATTN, "--seq", "1", "-o", "{d}/t.json"], "--seq 1"),
    (["trace", *AR[:-1], "0", "-o", "{d}/t.json"], "--bytes"),
    (["trace", *AR, "--world", "1", "-o", "{d}/t.json"], "at least 2"),
    (["trace", *AR, "-o", "{d}/notes.txt/t.json"], "is a file"),
    (["trace", *AR, "--set", "gpu.sm.count=0", "-o", "{d}/t.json"], "gpu.sm.count"),
    (["trace", "--program", "nosuch", "-o", "{d}/t.json"], "nosuch"),
    (["trace", *AR, "-o", ""], "-o ''"),
    # ---- whatif -----------------------------------------------------------------------------
    (["whatif", "--study", "{d}/world1.toml", "-o", "{d}/o"], "world1.toml"),
    (["whatif", "--study", "{d}/nan.toml", "-o", "{d}/o"], "nan.toml"),
    (["whatif", "--study", "{d}/sms.toml", "-o", "{d}/o"], "search.comm_sms = 0"),
    (["whatif", "--study", "{d}/sms-big.toml", "-o", "{d}/o"], "search.comm_sms 1000"),
    (["whatif", "--study", "{d}/skew.toml", "-o", "{d}/o"], "skew.toml"),
    (["whatif", "--study", "{d}/dup.toml", "-o", "{d}/o"], "listed twice"),
    (["whatif", "--study", "{d}/pow.toml", "-o", "{d}/o"], "exponent"),
    (["whatif", "--study", "{d}/seq.toml", "-o", "{d}/o"], "seq 4"),
    (["whatif", "--study", "{d}/fp4.toml", "-o", "{d}/o"], "no fp4"),
    (["whatif", "--study", "{d}/empty-share.toml", "-o", "{d}/o"], "less than one"),
    (["whatif", "--study", "{d}/broken.toml", "-o", "{d}/o"], "not valid TOML"),
    (["whatif", "--study", "{d}/unknown-key.toml", "-o", "{d}/o"], "unknown key 'system'"),
    (["whatif", "--study", "{d}/default", "-o", "{d}/o"], "is a folder"),
    (["whatif", "--study", "{d}/nothing.toml", "-o", "{d}/o"], "no such file"),
    (["whatif", "--systems", "dgx-h100,{d}/dgx-h100.toml", "-o", "{d}/o"], "both named"),
    (["whatif", "--systems", "dgx-h100", "--vary", f"{NVLINK}=1e-9x", "-o", "{d}/o"],
     "plausible"),
    (["whatif", "--systems", "dgx-h100", "--vary", f"{NVLINK}=1e30", "-o", "{d}/o"],
     "plausible"),
    (["whatif", "--systems", "dgx-h100", "--vary", f"{NVLINK}=nanx", "-o", "{d}/o"], "finite"),
    (["whatif", "--systems", "dgx-h100", "--vary", f"{NVLINK}", "-o", "{d}/o"], "KEY=V1"),
    (["whatif", "--systems", "dgx-h100", "--workers", "0", "-o", "{d}/o"], "--workers"),
    (["whatif", "--systems", "dgx-h100", "--set", "gpu.hbm.capacity_GB=1e12", "-o", "{d}/o"],
     "plausible"),
    (["whatif", "--systems", "dgx-h100", "-o", "{d}/notes.txt"], "is a file"),
    (["whatif", "--systems", "dgx-h100", "--resume", "-o", "{d}/o"], "nothing to resume"),
    (["whatif", "--systems", "", "-o", "{d}/o"], "names no system"),
    # ---- sweep ----------------------------------------------------------------------------
    (["sweep", *H100, "--op", "all-reduce", "--bytes", "1MiB:1KiB", "-o", "{d}/s"], "--bytes"),
    (["sweep", *H100, "--op", "all-reduce", "--bytes", "nan", "-o", "{d}/s"], "--bytes"),
    (["sweep", *H100, "--op", "all-reduce", "--bytes", "1KiB:1TiB", "-o", "{d}/s"], "80 GB"),
    (["sweep", *H100, "--op", "broadcast", "--bytes", "1MiB", "--root", "8", "-o", "{d}/s"],
     "--root 8"),
    (["sweep", *H100, "--op", "all-reduce", "--bytes", "1MiB", "--world", "1", "-o", "{d}/s"],
     "at least 2"),
    (["sweep", *H100, "--set", f"{NVLINK}=0", "--op", "all-reduce", "--bytes", "1MiB", "-o",
      "{d}/s"], "above 0"),
    (["sweep", *H100, "--op", "all-to-all", "--bytes", "2", "-o", "{d}/s"], "8 shares"),
    (["sweep", *H100, "--op", "all-reduce", "--bytes", "1MiB", "--impl", "", "-o", "{d}/s"],
     "--impl"),
    (["sweep", "--system", "dgx-h100,dgx-h100", "--op", "all-reduce", "--bytes", "1MiB", "-o",
      "{d}/s"], "listed twice"),
    (["sweep", *H100, "--op", "all-reduce", "--bytes", "1MiB", "--dtype", "fp4", "-o", "{d}/s"],
     "--dtype fp4"),
    (["sweep", *H100, "--op", "gemm-rs", "--shape", "m=1024", "--shape", "n=1024", "--shape",
      "k=-1", "-o", "{d}/s"], "--shape"),
    (["sweep", *H100, "--op", "ring-attention", "--shape", "batch=1", "--shape", "heads=8",
      "--shape", "seq=1", "--shape", "head_dim=64", "-o", "{d}/s"], "--shape seq 1"),
    # ---- codegen -----------------------------------------------------------------------------
    (["codegen", *AR], "-o/--output"),
    (["codegen", *AR, "-o", "{d}/notes.txt"], "is a file"),
    (["codegen", *H100, "--op", "send-recv", "--bytes", "1MiB", "--peers", "0>0", "-o",
      "{d}/c"], "itself"),
    (["codegen", *AR, "--dtype", "fp8", "-o", "{d}/c"], "bf16 and fp32"),
    (["codegen", *AR, "--comm-sms", "0", "-o", "{d}/c"], "--comm-sms 0"),
    (["codegen", *GEMM[:-5], "0", "--n", "1", "--k", "1", "-o", "{d}/c"], "--m"),
    (["codegen", *H100, "--op", "all-to-all", "--bytes", "2", "-o", "{d}/c"], "8 shares"),
    (["codegen", "--program", "nosuch", "-o", "{d}/c"], "nosuch"),
    (["codegen", *AR, "--world", "9", "-o", "{d}/c"], "--world 9"),
    (["codegen", *AR, "--domains", "0", "-o", "{d}/c"], "--domains"),
    (["codegen", *AR, "--m", "4", "-o", "{d}/c"], "--m"),
    (["codegen", *GEMM, "--bytes", "1MiB", "-o", "{d}/c"], "--bytes"),
    (["codegen", *AR, "--root", "3", "-o", "{d}/c"], "has no root"),
    # ---- run ---------------------------------------------------------------------------------
    (["run", *AR], "--virtual"),
    (["run", "--virtual", "--iters", "0", *AR], "--iters"),
    (["run", "--virtual", "--warmup", "-1", *AR], "--warmup"),
    (["run", "--virtual", "--blocks-per-rank", "-3", *AR], "--blocks-per-rank"),
    (["run", "--virtual", "--iters", "x", *AR], "--iters"),
    # ---- validate ------------------------------------------------------------------------------
    (["validate", "--suite", "nosuch", "--prepare", "--no-build", "-o", "{d}/v"], "nosuch"),
    (["validate", "--deadline-s", "nan", "--prepare", "--no-build", "-o", "{d}/v"],
     "--deadline-s"),
    (["validate", "--deadline-s", "-5", "-o", "{d}/v"], "--deadline-s"),
    (["validate", "--gpu-memory", "0", "--prepare", "--no-build", "-o", "{d}/v"],
     "--gpu-memory"),
    (["validate", "--gpu-memory", "nan", "--prepare", "--no-build", "-o", "{d}/v"],
     "--gpu-memory"),
    (["validate", "--report", "{d}/nowhere"], "not found"),
    (["validate", "--prepare", "--report", "{d}/v"], "two halves"),
    (["validate", "--no-build", "-o", "{d}/v"], "--no-build"),
    (["validate", "--published", "--add", "{d}/nothing.log"], "does not exist"),
    (["validate", "-o", "{d}/notes.txt", "--prepare", "--no-build"], "is a file"),
    # ---- systems, programs, env, calibrate -----------------------------------------------------
    (["systems", "show", "nosuch"], "nosuch"),
    (["systems", "show", "dgx-h100", "--set", "gpu.sm.count=-1"], "gpu.sm.count"),
    (["systems", "check", "{d}/dgx-h100.toml"], "name of a shipped system"),
    (["systems", "check", "{d}/implausible.toml"], "plausible"),
    (["systems", "check", "{d}/broken.toml"], "valid TOML"),
    (["systems", "check", "{d}/default"], "folder"),
    (["systems", "check"], "Missing argument"),
    (["systems", "list", "--json", "extra"], "extra"),
    (["programs", "show", "nosuch"], "nosuch"),
    (["programs", "show", "{d}/program.toml"], "program.toml"),
    (["programs", "list", "--bogus"], "--bogus"),
    (["programs", "report", "--system", "nosuch", "-o", "{d}/r"], "nosuch"),
    (["programs", "report", "--program", "nosuch", "-o", "{d}/r"], "nosuch"),
    (["programs", "report", "--date", "yesterday", "-o", "{d}/r"], "--date"),
    (["programs", "report", "--system", "dgx-h100", "--system", "dgx-h100", "-o", "{d}/r"],
     "given twice"),
    (["env", "--bogus"], "--bogus"),
    (["env", "extra"], "extra"),
    (["env", "--json=yes"], "--json"),
    (["calibrate", "--from-json", "{d}/nothing.json", "-o", "{d}/cal.toml"], "nothing.json"),
    (["calibrate", "--ranks", "0", "-o", "{d}/cal.toml"], "--ranks 0"),
    (["calibrate", "--ranks", "-2", "-o", "{d}/cal.toml"], "--ranks"),
    (["calibrate", "--system", "nosuch", "--from-json", "{d}/notes.txt", "-o", "{d}/c.toml"],
     "nosuch"),
    (["calibrate", "--device", "x"], "--device"),
    (["nosuch-command"], "nosuch-command"),
    (["--bogus"], "--bogus"),
]

# The numeric options and values none of which may be accepted, for the seeded fuzz.
FUZZ = [
    (["predict", *H100, "--op", "all-reduce", "--bytes"], ["0", "-1", "nan", "inf", "-inf",
                                                          "1e400", "0.5", "3", "x", "1EiB"]),
    (["predict", *AR, "--world"], ["0", "1", "-3", "9", "1e3", "x", "2.5", "99999999999"]),
    (["predict", *AR, "--domains"], ["0", "-1", "2049", "x", "1.5"]),
    (["predict", *AR, "--comm-sms"], ["0", "-1", "133", "nan", "1.5", "10000000000"]),
    (["predict", *MOE, "--skew"], ["nan", "inf", "-inf", "-1", "101", "1e300", "x"]),
    (["predict", *MOE, "--experts"], ["0", "-8", "x", "3000000000"]),
    (["predict", *ATTN, "--seq"], ["0", "1", "7", "-8", "x"]),
    (["predict", *GEMM[:-2], "--k"], ["0", "-1", "x", "1.5", "3000000000"]),
    (["search", *AR, "--top"], ["0", "-1", "x", "1.5"]),
    (["predict", *AR, "--set"], [f"{NVLINK}={v}" for v in ("nan", "inf", "-1", "1e-30",
                                                           "1e30", "x")]),
    (["predict", *AR, "--set"], [f"gpu.sm.count={v}" for v in ("0", "-1", "1e9", "1.5", "x")]),
    (["whatif", "--systems", "dgx-h100", "-o", "{d}/o", "--vary"],
     [f"{NVLINK}={v}" for v in ("nanx", "-1x", "0x", "1e-9x", "1e30x", "infx", "1e30")]),
    (["whatif", "--systems", "dgx-h100", "-o", "{d}/o", "--workers"], ["0", "-1", "x"]),
    (["validate", "--prepare", "--no-build", "-o", "{d}/v", "--gpu-memory"],
     ["0", "-1", "nan", "inf", "1e7", "x"]),
    (["validate", "--prepare", "--no-build", "-o", "{d}/v", "--deadline-s"],
     ["0", "-1", "nan", "inf", "x"]),
    (["run", *AR, "--virtual", "--iters"], ["0", "-1", "x"]),
]
FUZZ_CASES = 40


def _fuzzed() -> list[tuple[list[str], str]]:
    rng = random.Random(40)
    pool = [(args, value) for args, values in FUZZ for value in values]
    picked = rng.sample(pool, FUZZ_CASES)
    return [(args + [value], args[-1]) for args, value in picked]


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every file and folder under ``folder``, with the files' contents."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


@pytest.fixture
def home(tmp_path, monkeypatch):
    """The folder a case runs in: the user's files there, the current directory."""
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    for name in FOLDERS:
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _args(case: list[str], folder: Path) -> list[str]:
    return [a.replace("{d}", str(folder)) for a in case]


def _check(code: int, stdout: str, stderr: str, needle: str, before, after, args) -> None:
    lines = stderr.strip().splitlines()
    assert code == 2, (args, code, stdout, stderr)
    assert "Traceback" not in stdout + stderr, (args, stderr)
    assert len(lines) == 1 and lines[0].startswith("pksim: error:"), (args, stderr)
    assert stdout == "", (args, stdout)
    assert needle in lines[0], (args, needle, lines[0])
    assert after == before, (args, sorted(set(after) ^ set(before)))


@pytest.mark.parametrize("case, needle", CASES + _fuzzed(),
                         ids=[" ".join(c)[:90] for c, _ in CASES + _fuzzed()])
def test_a_bad_input_is_one_line_exit_2_and_writes_nothing(home, case, needle):
    args = _args(case, home)
    before = _tree(home)
    result = CliRunner().invoke(cli, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    _check(result.exit_code, result.stdout, result.stderr, needle.replace("{d}", str(home)),
           before, _tree(home), args)


def test_there_are_enough_cases_of_every_command():
    counts: dict[str, int] = {}
    for case, _ in CASES:
        counts[case[0]] = counts.get(case[0], 0) + 1
    assert len({tuple(c) for c, _ in CASES + _fuzzed()}) >= 100 + FUZZ_CASES
    for command in ("predict", "search", "trace", "whatif", "sweep", "codegen", "run",
                    "validate", "systems", "programs", "env", "calibrate"):
        assert counts.get(command, 0) >= 5 or command == "env" and counts[command] >= 3, command


ENTRY = Path(sys.executable).with_name("pksim")


@pytest.mark.skipif(not ENTRY.exists(), reason="pksim is not installed beside this Python")
@pytest.mark.parametrize("case, needle", [
    (["predict", *H100, "--op", "moe-dispatch-gemm", "--tokens", "1024", "--hidden", "1024",
      "--experts", "8", "--topk", "2", "--expert-hidden", "1024", "--skew", "nan"], "--skew nan"),
    (["predict", *AR, "--world", "many"], "--world"),
    (["whatif", "--study", "{d}/world1.toml", "-o", "{d}/o"], "world1.toml"),
    (["predict", *AR, "--set", f"{NVLINK}=1e-30"], "plausible"),
    (["whatif", "--study", "{d}/sms.toml", "-o", "{d}/o"], "search.comm_sms"),
])
def test_the_installed_command_does_the_same(home, case, needle):
    args = _args(case, home)
    before = _tree(home)
    proc = subprocess.run([str(ENTRY), *args], capture_output=True, text=True, cwd=home,
                          env=dict(os.environ, COLUMNS="100"), timeout=300)
    _check(proc.returncode, proc.stdout, proc.stderr, needle.replace("{d}", str(home)), before,
           _tree(home), args)
