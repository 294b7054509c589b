"""validation/report/gemm.py: the side-by-side GEMM table and the clocks of the sustained runs,
on records written as validation/run/gemm.py writes them and nvidia-smi csv lines."""
import json
import time

from validation.report import gemm as rg


def _time(M, impl, ms, variant=None, torch_ms=None, **kw):
    flops = 2.0 * M ** 3
    r = {"kind": "time", "M": M, "N": M, "K": M, "impl": impl, "ms": ms, "tflops": flops / ms / 1e9}
    if variant is not None:
        r.update(variant=variant, variant_name=f"name{variant}", sms=kw.get("sms", 0),
                 group_m=kw.get("group_m", 0), ratio_to_torch=torch_ms / ms)
    return r


def _write(tmp_path, name, recs):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return p


def test_best_variant_is_judged_against_its_own_process(tmp_path):
    # Process 1: torch 2.0 ms, variant 0 2.2 ms. Process 2: torch 1.8 ms, variant 4 1.9 ms,
    # variant 4 on 124 SMs 1.7 ms (not a full grid: never the "best variant").
    p1 = _write(tmp_path, "a.jsonl", [_time(8192, "torch.matmul", 2.0),
                                       _time(8192, "pk_gemm", 2.2, 0, 2.0)])
    p2 = _write(tmp_path, "b.jsonl", [_time(8192, "torch.matmul", 1.8),
                                       _time(8192, "pk_gemm", 1.9, 4, 1.8),
                                       _time(8192, "pk_gemm", 1.7, 4, 1.8, sms=124)])
    rows = rg.shape_table(rg.read_runs([p1, p2]))
    flops = 2.0 * 8192 ** 3
    assert rows[2] == (f"| 8192 x 8192 x 8192 | {flops / 2.0e9:.0f} / {flops / 1.8e9:.0f} | "
                       f"{flops / 2.2e9:.0f} (91 %) | 4 name4: {flops / 1.9e9:.0f} (95 %) |")
    cells = rg.variant_table(rg.read_runs([p1, p2]))
    assert cells[2:] == ["| 0 name0 | 91 |", "| 4 name4 | 95 |", "| 4 name4, 124 SMs | 106 |"]


def test_sustained_clocks_are_the_samples_inside_each_window(tmp_path):
    t0 = 1_800_000_000.0  # whole seconds, so that the local form carries it exactly
    local = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(t0))
    offset = rg.utc_offset_s([[{"t0": t0, "local": local}]])
    recs = [{"kind": "sustain", "M": 8192, "N": 8192, "K": 8192, "impl": "torch.matmul",
             "variant": None, "calls": 1000, "ms": 1.5, "tflops": 733.0, "t0": t0, "t1": t0 + 1.5,
             "local": local},
            {"kind": "sustain", "M": 8192, "N": 8192, "K": 8192, "impl": "pk_gemm", "variant": 4,
             "variant_name": "c2", "calls": 1000, "ms": 1.4, "tflops": 785.0, "t0": t0 + 2.0,
             "t1": t0 + 3.5, "local": local}]
    run = _write(tmp_path, "s.jsonl", recs)

    def stamp(t):
        lt = time.localtime(t)
        return time.strftime("%Y/%m/%d %H:%M:%S", lt) + f".{int(round((t % 1) * 1000)):03d}"

    # torch's window: samples at +0.1 (settling, left out), +0.5, +1.0, +1.4; variant 4's:
    # +2.6, +3.0 (+1.8 lies between the two windows)
    smi = [("timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], "
            "temperature.gpu, clocks_event_reasons.active")]
    for dt, mhz, w in [(0.1, 1980, 300), (0.5, 1700, 690), (1.0, 1650, 700), (1.4, 1600, 699),
                       (1.8, 1980, 200), (2.6, 1750, 650), (3.0, 1770, 640)]:
        smi.append(f"{stamp(t0 + dt)}, {mhz} MHz, 2619 MHz, {w:.2f} W, 50, 0x0000000000000004")
    smi_path = tmp_path / "smi.csv"
    smi_path.write_text("\n".join(smi + ["[N/A] garbled"]) + "\n")
    samples = rg.read_smi(smi_path, offset)
    assert len(samples) == 7
    rows = rg.sustained_table(rg.read_runs([run]), samples)
    assert rows[2] == "| 1 | torch.matmul | 1000 | 733 |  | 1650 | 699 | 3 |"
    assert rows[3] == "| 1 | 4 c2 | 1000 | 785 | 107 % | 1760 | 645 | 2 |"


def test_host_cost_rows_name_the_library_of_each_process(tmp_path):
    new = _write(tmp_path, "n.jsonl", [
        {"kind": "env", "library": "build/new.so"},
        {"kind": "host", "impl": "torch.matmul", "variant": None, "us_per_call": 9.04},
        {"kind": "host", "impl": "pk_gemm", "variant": 4, "variant_name": "c2", "us_per_call": 3.46},
        {"kind": "host", "impl": "pk_gemm", "variant": 5, "variant_name": "c2s3", "error": "x"}])
    base = _write(tmp_path, "b.jsonl", [
        {"kind": "env", "library": "build/base.so"},
        {"kind": "host", "impl": "pk_gemm", "variant": 4, "variant_name": "c2", "us_per_call": 41.0}])
    rows = rg.host_table(rg.read_runs([new, base]))
    assert rows[2:] == ["| 1 | new.so | torch.matmul | 9.0 |", "| 1 | new.so | 4 c2 | 3.5 |",
                        "| 1 | new.so | 5 c2s3 | error |", "| 2 | base.so | 4 c2 | 41.0 |"]
