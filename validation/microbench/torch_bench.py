#!/usr/bin/env python3
"""GEMM and attention throughput through torch (cuBLAS / SDPA kernels).

What it measures
  gemm       bf16 torch.matmul(A, B, out=C), C = A[M,K] @ B[K,N], by shape:
             square M=N=K in 1024..16384 (powers of 2 and 12288), skinny
             M=N=8192 with K in 512..4096, and M in 128..8192 with N=K=8192.
             TFLOP/s = 2 M N K / time.
  attention  torch.nn.functional.scaled_dot_product_attention, bf16, q/k/v of
             shape [B, H, S, D], B in 4/8/16, H in 16/32, S in 1024..8192,
             D = 128, causal false/true (torch picks its backend).
             TFLOP/s = 4 B H S^2 D / time, halved for causal.
How
  Inputs are torch.randn.  Each point: a correctness check first (GEMM: the
  poisoned (NaN) output is compared on 32 random rows x 32 random columns
  with a float32 reference, max error / sqrt(K) < 0.1; attention: batch 0 / head 0 compared with a
  float32 reference of the same formula (max error < 0.02 + 0.02 max|ref|),
  all outputs finite), then warm-up
  runs, then n iterations each timed with its own CUDA-event pair (n chosen
  so a point costs ~0.2 s GPU time, 5..40); when the working set is under
  256 MiB the L2 is flushed by writing a 256 MiB buffer before every timed
  iteration (outside the events).  Median, p10, p90 of the iterations.
Output: one JSON object per line on stdout, as the CUDA microbenchmarks.
Usage:  python3 torch_bench.py [--quick] [--only gemm|attention]
"""
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # run as a file (run.py)
from validation.runtime.timer import time_calls  # noqa: E402


FAILURES = []


def emit(obj):
    if obj.get("check", "ok") != "ok":
        FAILURES.append(obj)
    print(json.dumps(obj), flush=True)


def quantile(values, q):
    v = sorted(values)
    if not v:
        return None
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


class Timer:
    def __init__(self, torch, budget_s):
        self.torch = torch
        self.budget_s = budget_s
        self.flush_buf = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")

    def run(self, fn, working_set_bytes, warmup=3, min_n=5, max_n=40):
        cold = working_set_bytes < 256 * 1024 * 1024
        t1 = max(time_calls(fn, 1, warmup)[0], 1e-6)
        n = int(min(max_n, max(min_n, self.budget_s / t1)))
        times = time_calls(fn, n, 0, flush=self.flush_buf if cold else None)
        return {
            "time_s": quantile(times, 0.5),
            "time_p10_s": quantile(times, 0.1),
            "time_p90_s": quantile(times, 0.9),
            "samples": n,
            "l2": "flushed" if cold else "working set > 256 MiB",
        }


def gemm_shapes(quick):
    shapes = []
    squares = [1024, 4096, 8192, 16384] if quick else [1024, 2048, 4096, 8192, 12288, 16384]
    shapes += [("square", s, s, s) for s in squares]
    shapes += [("skinny_k", 8192, 8192, k) for k in ([512, 4096] if quick else [512, 1024, 2048, 4096])]
    ms = [128, 1024, 8192] if quick else [128, 256, 512, 1024, 2048, 4096, 8192]
    shapes += [("m_sweep", m, 8192, 8192) for m in ms]
    return shapes


def bench_gemm(torch, timer, quick):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    for series, m, n, k in gemm_shapes(quick):
        params = {"series": series, "m": m, "n": n, "k": k, "dtype": "bf16", "op": "torch.matmul"}
        rec = {"bench": "gemm", "params": params, "flop": 2.0 * m * n * k}
        try:
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=gen)
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            torch.matmul(a, b, out=c)
            rows = torch.randint(0, m, (32,), device="cuda", generator=gen)
            cols = torch.randint(0, n, (32,), device="cuda", generator=gen)
            ref = a[rows].float() @ b[:, cols].float()
            got = c[rows][:, cols].float()
            err = ((got - ref).abs().max() / math.sqrt(k)).item()
            if not torch.isfinite(c).all().item() or not err < 0.1:
                rec["check"] = f"FAIL: max |C - ref| / sqrt(K) = {err:.3g} (or non-finite output)"
            else:
                rec.update(timer.run(lambda: torch.matmul(a, b, out=c), 2 * (m * k + k * n + m * n)))
                rec["tflops"] = rec["flop"] / rec["time_s"] / 1e12
                rec["check"] = "ok"
            del a, b, c
        except Exception as e:  # noqa: BLE001 -- record and go on (OOM, unsupported shape)
            rec["check"] = f"FAIL: {type(e).__name__}: {str(e)[:300]}"
        emit(rec)
        torch.cuda.empty_cache()


def attention_configs(quick):
    batches = [4, 16] if quick else [4, 8, 16]
    heads = [16, 32]
    seqs = [1024, 4096] if quick else [1024, 2048, 4096, 8192]
    return [(bsz, h, s, 128, causal) for bsz in batches for h in heads for s in seqs for causal in (False, True)]


def reference_attention(torch, q, k, v, causal):
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = q.shape[-2]
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v.float()


def bench_attention(torch, timer, quick):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    gen = torch.Generator(device="cuda")
    gen.manual_seed(4321)
    for bsz, h, s, d, causal in attention_configs(quick):
        flop = 4.0 * bsz * h * s * s * d * (0.5 if causal else 1.0)
        params = {"batch": bsz, "heads": h, "seq": s, "head_dim": d, "causal": causal, "dtype": "bf16",
                  "op": "scaled_dot_product_attention"}
        rec = {"bench": "attention", "params": params, "flop": flop}
        try:
            q, k, v = (torch.randn(bsz, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                       for _ in range(3))
            out = sdpa(q, k, v, is_causal=causal)
            ref = reference_attention(torch, q[0, 0], k[0, 0], v[0, 0], causal)
            err = (out[0, 0].float() - ref).abs().max().item()
            tol = 0.02 + 0.02 * ref.abs().max().item()
            if not torch.isfinite(out).all().item() or not err < tol:
                rec["check"] = f"FAIL: max |O - ref| = {err:.3g} (or non-finite output)"
            else:
                rec.update(timer.run(lambda: sdpa(q, k, v, is_causal=causal), 4 * q.numel() * q.element_size()))
                rec["tflops"] = flop / rec["time_s"] / 1e12
                rec["check"] = "ok"
            del q, k, v, out
        except Exception as e:  # noqa: BLE001
            rec["check"] = f"FAIL: {type(e).__name__}: {str(e)[:300]}"
        emit(rec)
        torch.cuda.empty_cache()


def main(argv):
    quick = "--quick" in argv
    only = None
    if "--only" in argv:
        only = argv[argv.index("--only") + 1].split(",")
    try:
        import torch
    except ImportError as e:
        print(f"torch_bench: torch is not importable ({e}); install torch with CUDA to run it", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("torch_bench: torch.cuda.is_available() is False (no GPU or no CUDA build of torch)", file=sys.stderr)
        return 3
    props = torch.cuda.get_device_properties(0)
    emit({"bench": "torch_bench", "record": "device", "device": {
        "name": props.name,
        "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "global_mem_bytes": props.total_memory,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "matmul_allow_bf16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "sdp_flash": torch.backends.cuda.flash_sdp_enabled(),
        "sdp_mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
        "sdp_cudnn": getattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: None)(),
    }})
    timer = Timer(torch, budget_s=0.08 if quick else 0.2)
    t0 = time.time()
    if only is None or "gemm" in only:
        bench_gemm(torch, timer, quick)
    if only is None or "attention" in only:
        bench_attention(torch, timer, quick)
    print(f"torch_bench: done in {time.time() - t0:.1f} s, {len(FAILURES)} failed checks", file=sys.stderr)
    return 2 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
