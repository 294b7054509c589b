"""ParallelKernelBench's metric: one call's share of back-to-back calls (predict.steady_time)."""
from __future__ import annotations

import pytest

from hwmodels.catalog import load_system
from pksim_core.programs.load import load_program
from pksim_core.programs.predict import predict_program, steady_time
from pksim_core.programs.timeline import ProgramTask, run_tasks

H100 = load_system("dgx-h100")
API = H100.gpu.sync.launch_api_s


def _one(tasks):
    return max(s.end_s for s in run_tasks(H100, tasks))


def test_a_gpu_bound_call_repeats_every_kernel_time():
    # one 10 us kernel: alone it ends at api + 10 us; the next call is issued at 2 api, before
    # the first ends, so it starts when the first ends: one call per 10 us
    tasks = [ProgramTask("k", ("k",), ("stream",), 10e-6)]
    assert API < 10e-6
    assert _one(tasks) == pytest.approx(API + 10e-6)
    assert steady_time(H100, tasks, _one(tasks)) == pytest.approx(10e-6)


def test_a_host_bound_call_repeats_every_launch():
    # three 0.5 us kernels on one stream: the host needs 3 api per call, the GPU 1.5 us
    tasks = [ProgramTask(f"k{i}", (f"k{i}",), ("stream",), 0.5e-6) for i in range(3)]
    assert 3 * API > 1.5e-6
    assert steady_time(H100, tasks, _one(tasks)) == pytest.approx(3 * API)


def test_the_program_prediction_carries_both_times():
    p = predict_program(H100, load_program("gemm-reducescatter"))
    d = p.to_dict(timeline=False)
    assert 0 < d["best_steady_s"] < p.best_s and 0 < d["baseline_steady_s"] < p.baseline_s
    assert d["steady_speedup"] == pytest.approx(p.baseline.steady_s / p.best.steady_s)
