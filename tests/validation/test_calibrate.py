"""Calibration (issue 4): the fit on the committed H200 results, the shipped calibrated
file, and the ``pksim calibrate`` command. No GPU needed; a few seconds."""
from __future__ import annotations

import gzip

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from hwmodels.catalog import load_system
from pksim_cli.main import cli
from pksim_core.microbench_model import predict, summarise
from validation.calibrate import fit as cal
from validation.calibrate import manifest
from validation.calibrate import microbench as gpu_run

ROOT = Path(__file__).resolve().parents[2]
# the calibration inputs (validation/data/calibration/MANIFEST.toml lists them, in this order)
CAL = ROOT / "validation" / "data" / "calibration"
RESULTS = CAL / "h200-microbench-2026-12-02.json.gz"
RUN2 = ROOT / "validation" / "data" / "cited" / "h200-microbench-2026-12-02-run2.json"
# the whole suite again, with block_moves' kernels keeping their pointers in
# registers (their stacks had slowed every launch; the small payloads are also timed alone
# behind a write) and launch_latency's behind-write launches on 4-264 blocks
SUITE3 = CAL / "h200-microbench-2026-12-03.json.gz"
# launch_latency again: ce_burst with 2 MiB copies and rounds chained across streams by
# events, with and without a kernel after each copy
LAUNCH3 = CAL / "h200-launch-2026-12-03-run2.json"
# block_moves, launch_latency, hbm_copy and ce_burst again:
# the collectives' routines without stacks; they replace the same measurements of SUITE3 and
# LAUNCH3 (validation.calibrate.fit.merge_results)
RUN14 = CAL / "h200-microbench-2026-12-03-run14.json.gz"
# block_moves with 1 GiB payloads: shared reads by TMA and
# register stores to several destinations at that size, the blocks' pieces of whole 4 KiB
BIG = CAL / "h200-block-moves-1gib-2026-12-03-run17.json.gz"
# block_moves, launch_latency, hbm_copy and ce_burst again (10:41 UTC) with the
# kernels' pieces of whole lines, of whole 4 KiB from 64 KiB a piece: they replace the same
# measurements of the files before (the 1 GiB run's small payloads behind a write among them)
RUN18 = CAL / "h200-microbench-2026-12-03-run18.json.gz"
# block_moves, launch_latency (ce_burst's rounds also waiting on every other stream), hbm_copy
# again (12:36 and 13:04 UTC, the kernels as committed) and block_moves at 256 MiB (with
# the first): the last of each measurement replaces the ones before, so that the fit and
# the suite measured in the same call share a machine (docs/decisions/D37.md)
RUN19 = CAL / "h200-microbench-2026-12-03-run19.json.gz"
BM256 = CAL / "h200-block-moves-256mib-2026-12-03-run19.json.gz"
RUN20 = CAL / "h200-microbench-2026-12-03-run20.json.gz"
# block_moves, launch_latency, hbm_copy again and two new primitives (14:00 UTC):
# signal_chain (peer copies with the generated kernels' ring hand-off between them) and
# fused_pull (the inter-SM fused kernels' pull-reduce alone)
RUN21 = CAL / "h200-microbench-2026-12-03-run21.json.gz"
# block_moves again (14:36 UTC), with block_moves_cross at the two-shot's own parts
# (512 B, 8 KiB), behind a kernel's write too, and by registers 4 sources a round; it comes
# before the 14:00 file so that its measurements (taken with the suite they are judged beside)
# replace its repeats, and only its new points count
RUN22 = CAL / "h200-block-moves-2026-12-03-run22.json.gz"
# block_moves again with its cold moves alone behind a write also at 1 and 4 MiB (16:36
# UTC), the whole microbenchmark step of the session with the ring change (17:08: block_moves
# also behind a read, measured only; launch_latency, hbm_copy, signal_chain, fused_pull
# again) and block_moves with crossed reads into one destination (17:20):
# the moves of 1-16 MiB the suite's TMA and register sums part at; each replaces the repeats
# of the files before it
RUN27 = CAL / "h200-block-moves-2026-12-03-run27.json.gz"
RUN28 = CAL / "h200-microbench-2026-12-03-run28.json.gz"
RUN29 = CAL / "h200-block-moves-2026-12-03-run29.json.gz"
# the pk GEMM on grids of 100-132 SMs (validation/run/gemm.py --from-jsonl of the two GEMM
# runs) and of 64-132 SMs at K = 1024, 2048, 8192 (validation/run/gemm.py --sm-sweep)
GEMM_SMS = CAL / "h200-gemm-sms-2026-12-02.json"
GEMM_SWEEP = CAL / "h200-gemm-sms-sweep-2026-12-02.json"
# our GEMM with the intra-SM fused kernels' epilogue, store-adding every tile into 1-8
# outputs, beside plain stores (docs/decisions/D34.md)
STORE_ADD = CAL / "h200-gemm-store-add-2026-12-03-run32.json"
# block_moves again with its shared reads also at 4 and 64 KiB alone behind a write (21:19
# UTC): the one-shot's and the broadcast's small cold moves; its repeats replace the files'
# before
RUN36 = CAL / "h200-block-moves-2026-12-03-run36.json.gz"
# block_moves with its moves to one destination compiled knowing it (pkc::one, as the generated
# one-shot, reduce-scatter and broadcast phases) and its kernels declared one block an SM
# (2026-12-04 00:45 UTC), and its 256 MiB and 1 GiB sweeps measured again with them: they
# replace every block_moves point of the files before (docs/decisions/D13.md, D37.md)
RUN45 = CAL / "h200-block-moves-2026-12-04-run45.json.gz"
BM256_46 = CAL / "h200-block-moves-256mib-2026-12-04-run46.json.gz"
BIG_46 = CAL / "h200-block-moves-1gib-2026-12-04-run46.json.gz"
# the collectives' sums with a reduce op and an epilogue beside the plain sum (epilogue_moves.cu,
# docs/decisions/D56.md): the epilogue stage's only input
EPI = CAL / "h200-epilogue-moves-2026-12-04.json.gz"
# the inter-SM fused kernels' pull-reduce in its TMA form alone (fused_pull_tma,
# docs/decisions/D54.md): its own three figures, nothing else
PULL_TMA = CAL / "h200-fused-pull-tma-2026-12-04.json"
# block_moves --shift on two H200s (the rows of validation/data/report/h200-block-moves-shift-
# 2026-12-04-{a,b}.jsonl.gz, params.run naming the file): the shifted moves' stage's only input,
# fitted on each point's time over its aligned twin's (docs/decisions/D63.md)
SHIFT = CAL / "h200-block-moves-shift-2026-12-04.json.gz"
INPUTS = tuple(i.path for i in manifest.inputs())
# the H100's (MANIFEST-h100.toml): validation/device/portability.sh --steps hardware,profile on
# one H100 80GB HBM3, 2026-12-07: the hardware's primitives (pksim calibrate --hardware-only's
# run) and the kernel profile's (block_moves, epilogue_moves, fused_pull, signal_chain)
H100_HARDWARE = CAL / "h100-hardware-2026-12-07.json.gz"
H100_PROFILE = CAL / "h100-profile-2026-12-07.json.gz"
PREDICTED = ("hbm_copy", "sm_copy", "tma_copy", "tma_reduce", "launch_latency",
             "flag_latency", "gemm", "attention")


@pytest.mark.parametrize("system", sorted(manifest.MANIFESTS))
def test_the_manifest_lists_the_inputs_the_shipped_file_records_with_their_digests(system):
    """Every calibration input as its manifest lists it (MANIFEST.toml for the H200,
    MANIFEST-h100.toml for the H100): the files the shipped calibrated file records (its
    [calibration] results, by name, in order), each with its sha256."""
    recorded = [x.strip().rsplit("/", 1)[-1]
                for x in load_system(system).calibration["results"].split(",")]
    listed = manifest.inputs(manifest.MANIFESTS[system])
    assert [i.file for i in listed] == recorded
    if system == "h200-calibrated":
        assert INPUTS == (RESULTS, SUITE3, LAUNCH3, RUN14, BIG, RUN18, RUN19, BM256, RUN20,
                          RUN22, RUN21, RUN27, RUN28, RUN29, GEMM_SMS, GEMM_SWEEP, STORE_ADD,
                          RUN36, RUN45, BM256_46, BIG_46, EPI, PULL_TMA, SHIFT)
    else:
        assert [i.path for i in listed] == [H100_HARDWARE, H100_PROFILE]
    gpu = load_system(system).calibrated["device"]
    for i in listed:
        assert manifest.sha256(i.path) == i.sha256, i.file
        assert i.gpu == gpu and i.date and i.command, i.file


def test_every_calibration_input_is_in_one_manifest():
    listed = [i.file for m in manifest.MANIFESTS.values() for i in manifest.inputs(m)]
    assert len(listed) == len(set(listed)) == 26
    assert sorted(p.name for p in CAL.iterdir() if not p.name.startswith("MANIFEST")) == \
        sorted(listed)


@pytest.fixture(scope="module")
def results():
    return cal.merge_results([cal.load_results(p) for p in INPUTS])


@pytest.fixture(scope="module")
def fitted(results):
    return cal.fit(load_system("h200-single"), results)


# Figures where the fit's objective is flat, so that the optimizer's stopping point moves with
# the scipy / numpy release (the TMA shared reads' reuse knee: by about 0.3 % between releases)
# and with the start: the start (h200-single, through hgx-h200) holds the H100's carried
# figures (docs/decisions/D71.md), from which the fit stops on the flat directions up to 1.4 %
# from the shipped file's figures (D71, "Refit"); the shipped file is not refitted.
LOOSE = {"gpu.kernel.tma_shared_reuse_MiB": 1e-2, "gpu.kernel.ldst_fanout_write": 5e-3,
         "gpu.kernel.ldst_fanout_reach_MiB": 1.5e-2, "gpu.tensor.gemm_k_overhead": 2e-2,
         "gpu.tensor.sustained_after_us": 3e-3, "gpu.tensor.sustained_sm_exponent": 5e-3,
         # the crossed sums' term (D83) was fitted as pksim calibrate fits, with the points on a
         # suite's size and world left out (3.156 ns/KiB); this fit keeps them (3.167)
         "gpu.kernel.tma_move_cross_ns_per_KiB": 5e-3}


@pytest.fixture(scope="module")
def shipped():
    return load_system("h200-calibrated")


def test_the_fit_on_the_committed_results_reproduces_the_shipped_file(fitted, shipped):
    assert len(fitted.values) == 68       # 23 + 8 collective-move figures + 2 knees + 2 host calls
    #                        + the copy-command time + the stream chain + the grid's start
    #                        + a moving kernel's start + the TMA shared reads' reuse
    #                        + the register fan-out writes (2)
    #                        + move_buffer_latency + 2 shared-read shares + sustained_sm_exponent
    #                        + the TMA message time + a further stream's first copy
    #                        + the hand-off's release + the fused pull-reduce's 3 figures
    #                        + a register sum's further round of loads
    #                        + the copy engines' bandwidth + a stream's wait on an event
    #                        + the epilogue's share of the memory path + its tile RMW rate
    #                        + a run-time set of destinations' latency
    #                        + the epilogue routines' 3 figures (TMA bias, register op, bias)
    #                        + the fused TMA pull-reduce's 3 figures
    #                        + the shifted moves' 3 (word loads, their L2 rate, TMA realign)
    #                        + the crossed TMA sums' term (D83)
    for key, value in fitted.values.items():
        rel = LOOSE.get(key, 2e-3)
        assert cal.get_figure(shipped, key) == pytest.approx(value, rel=rel), key
        prov = shipped.provenance[cal.provenance_key(key)]
        assert prov.tag == "calibrated"
        # a kernel figure's source is its profile's (pk-hopper, fitted by the same command)
        source = prov.source.removeprefix("kernel profile pk-hopper (fitted on NVIDIA H200): ")
        assert source.startswith("pksim calibrate on NVIDIA H200, driver 580.159.04, "
                                 "2026-12-04, fit residual "), prov.source
    assert all(stage.success for stage in fitted.stages)


def _fitted(summary, bench: str, points: int, median: float, predicted: int | None = None):
    """The bench's points (and of them, those the model predicts) and the calibrated model's
    median error on them, to 0.2 percentage points."""
    assert summary[bench].points == points, bench
    if predicted is not None:
        assert summary[bench].predicted == predicted, bench
    assert summary[bench].median_abs_error == pytest.approx(median, abs=0.002), bench


def test_the_calibrated_model_predicts_each_microbenchmark_within_5_percent_median(
        results, shipped):
    summary = summarise(predict(shipped, results.records))
    medians = {b: summary[b].median_abs_error for b in PREDICTED}
    # The real numbers of the 2026-12-02 and 2026-12-03 H200 runs (docs/VALIDATION.md);
    # launch times move by up to 20 % from one run to the next (host calls) and the
    # behind-write ones sit on the events' 0.5 us steps, hence their wider bound
    expected = {"hbm_copy": 0.036, "sm_copy": 0.039, "tma_copy": 0.021, "tma_reduce": 0.018,
                "launch_latency": 0.051, "flag_latency": 0.004, "gemm": 0.036,
                "attention": 0.020}
    for bench in PREDICTED:
        assert medians[bench] <= (0.10 if bench == "launch_latency" else 0.06), (bench, medians[bench])
        assert medians[bench] == pytest.approx(expected[bench], abs=0.002), bench
    # a measurement taken again replaces the earlier one: each shape once
    assert summary["hbm_copy"].points == 68 and summary["tma_reduce"].points == 99
    # 17 torch.matmul shapes + the pk GEMM 8192^3 on 132, 124, 116 and 100 SMs + the sweep:
    # 8192 x 8192 x {1024, 2048, 8192} on 64-124 SMs, and torch and the pk GEMM on the whole GPU
    assert summary["gemm"].points == 42
    sms = [p for p in predict(shipped, results.records) if p.params.get("series") == "sms"]
    assert len(sms) == 25 and max(abs(p.error) for p in sms) < 0.09
    # the collectives' routines at 64 MiB and 1 GiB, back to back, and timed alone behind a
    # write (4 KiB - 4 MiB on 4-264 blocks, their buffers in HBM), and at 256 MiB: 1368
    # points (the 32 behind a read measured only; from 21:19 UTC also the shared reads of 4 and
    # 64 KiB alone behind a write: 1440; from 2026-12-04 (moves to one destination compiled
    # knowing it: docs/decisions/D13.md) 1530, the 54 shared sums in the one-shot's staggered
    # order measured only too), 6.2 % median, and 36 x 2 with every group
    # of blocks on its own buffers (as virtual ranks), 2.9 %; copies queued on 1-8 streams
    # (ce_burst: forked, or in rounds chained by events from the previous stream or from
    # every other one, with and without a kernel, each wait on an event costing
    # sync.event_wait_us), 5.0 %
    _fitted(summary, "block_moves", 1530, 0.062, predicted=1444)
    _fitted(summary, "block_moves_own", 72, 0.029)
    _fitted(summary, "ce_burst", 96, 0.050)
    # peer copies around a ring of 2-8 groups with the generated kernels' hand-off between
    # them, 1-8 steps of 512 B - 1 MiB (h200-microbench-2026-12-03-run28.json.gz;
    # docs/decisions/D18.md): the 192 ring points predicted, 2.8 %; the 192 grid-barrier ones
    # measured only. The fused kernels' pull-reduce alone (rs and ar,
    # 2-8 ranks, 2-16 blocks each): 48 points, 3.7 %
    _fitted(summary, "signal_chain", 384, 0.028, predicted=192)
    _fitted(summary, "fused_pull", 48, 0.037, predicted=48)
    # its TMA form (tensor copies of 32-row boxes; D54): 48 points, 0.5 %
    _fitted(summary, "fused_pull_tma", 48, 0.005, predicted=48)
    # the crossed sums (parts of 512 B - 64 KiB behind a write, 32 MiB back to back; 8 sources
    # by registers also 4 a round) and, from 17:20 UTC, crossed reads into one destination
    # (4 KiB - 4 MiB parts behind a write), fitted with the other moves (
    # docs/decisions/D6.md): 192 points from 2026-12-04, 3.5 %
    _fitted(summary, "block_moves_cross", 192, 0.035)
    assert summary["atomics"].predicted == 0 and "measured only" in summary["atomics"].note
    # our GEMM store-adding every tile into 1-8 outputs (4 shapes; the 12 plain stores into
    # several outputs measured only): 20 points, 3.8 %
    _fitted(summary, "gemm_store_add", 32, 0.038, predicted=20)
    # the sums through the epilogue routines beside the plain sum, S -> D x 4-132 blocks at
    # 64 MiB (bf16; fp32 2->1, 8->1): 340 points, the 8 fp32 max-scale-bias ones failed the
    # program's too strict check (not fitted), 6.5 % (the plain sum's own error at these points)
    _fitted(summary, "epilogue_moves", 332, 0.065, predicted=332)
    # block_moves --shift: 10 shapes x 7 points x shifts 0, 2, 4, 8 x TMA and registers x two
    # GPUs: 1120 points, 9.5 % (the aligned model's own error at these points; the shift's
    # share, each point over its aligned twin: tests/validation/test_calibrate_shift.py)
    _fitted(summary, "block_moves_shift", 1120, 0.095)


def test_a_measurement_taken_again_replaces_the_earlier_one(tmp_path):
    rec = {"bench": "sm_copy", "check": "ok", "bytes": 8, "params": {"blocks": 1, "threads": 32}}
    other = {**rec, "params": {"blocks": 2, "threads": 32}, "time_s": 3e-6}
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    device = {"name": "NVIDIA H200"}
    old.write_text(json.dumps({"device": device, "date": "2026-12-02",
                               "results": [{**rec, "time_s": 1e-6}, other]}))
    new.write_text(json.dumps({"device": device, "date": "2026-12-03",
                               "results": [{**rec, "time_s": 2e-6}]}))
    merged = cal.merge_results([cal.load_results(old), cal.load_results(new)])
    assert [r["time_s"] for r in merged.records] == [2e-6, 3e-6]
    assert merged.date == "2026-12-03"


def test_the_shipped_file_records_device_date_driver_and_residuals(results, shipped):
    assert shipped.inherits == "h200-single"
    assert dict(shipped.calibrated) == {"device": "NVIDIA H200", "date": "2026-12-04",
                                        "driver": "580.159.04"}
    summary = summarise(predict(shipped, results.records))
    residual = cal.residuals(shipped)         # the hardware file's and its profile's
    assert set(residual) == set(PREDICTED) | {"block_moves", "block_moves_own", "ce_burst",
                                              "block_moves_cross", "signal_chain", "fused_pull",
                                              "gemm_store_add", "epilogue_moves",
                                              "fused_pull_tma", "block_moves_shift"}
    for bench, info in residual.items():
        assert info["points"] == summary[bench].predicted
        assert info["median_abs_error"] == pytest.approx(summary[bench].median_abs_error,
                                                         abs=1e-4)
        assert info["max_abs_error"] == pytest.approx(summary[bench].max_abs_error, abs=1e-4)


def test_the_virtual_calibrated_system_has_the_calibrated_figures(shipped):
    virtual = load_system("h200-virtual-calibrated")
    assert virtual.domain.fabric == "shared-memory" and virtual.domain.gpus_per_domain == 8
    assert virtual.gpu == shipped.gpu
    assert virtual.calibrated == shipped.calibrated      # a child of a calibrated file


def test_from_json_writes_a_file_that_loads(tmp_path):
    # the CLI on the first H200 run alone (a fit of seconds; the whole inputs' fit is the
    # module's `fitted`, compared with the shipped file above) writes exactly the fit's figures
    out = tmp_path / "cal.toml"
    res = CliRunner().invoke(cli, ["calibrate", "--from-json", str(RESULTS), "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["device"] == "NVIDIA H200" and report["inherits"] == "h200-single"
    system = load_system(str(out))
    assert system.inherits == "h200-single" and system.calibrated["date"] == "2026-12-02"
    direct = cal.fit(load_system("h200-single"), cal.merge_results([cal.load_results(RESULTS)]))
    assert direct.values
    for key, value in direct.values.items():
        assert cal.get_figure(system, key) == pytest.approx(value, rel=1e-9)
    assert report["groups"]["sm_copy"]["median_abs_error"] <= 0.05


def test_refuses_to_overwrite_without_force(tmp_path):
    out = tmp_path / "mine.toml"
    out.write_text("# a user's file\n")
    args = ["calibrate", "--from-json", str(RESULTS), "-o", str(out)]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2
    assert res.output.strip() == f"pksim: error: {out}: already exists (use --force to overwrite it)"
    assert out.read_text() == "# a user's file\n"
    res = CliRunner().invoke(cli, args + ["--force"])
    assert res.exit_code == 0, res.output
    assert load_system(str(out)).calibrated["device"] == "NVIDIA H200"


@pytest.mark.parametrize("content, message", [
    ("{", "not valid JSON (line 1 column 2"),
    ('{"device": {}}', "expected an object with a 'results' list"),
    ('{"results": [{"bench": "sm_copy", "check": "ok", "params": {}}]}',
     "results[0] (sm_copy): time_s = None is not a positive number"),
    ('{"results": [{"bench": "sm_copy", "check": "ok", "time_s": 1, "bytes": 8, '
     '"params": {"blocks": 1}}]}', "results[0] (sm_copy): params has no 'threads'"),
    ('{"results": [{"bench": "atomics", "check": "ok", "time_s": 1}]}', "no usable result"),
])
def test_bad_results_give_a_one_line_error(tmp_path, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    res = CliRunner().invoke(cli, ["calibrate", "--from-json", str(bad),
                                   "-o", str(tmp_path / "out.toml")])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pksim: error: {bad}: "), res.output
    assert message in lines[0]
    assert not (tmp_path / "out.toml").exists()


def test_gzipped_results_read_as_the_plain_file(tmp_path):
    plain = tmp_path / "results.json"
    plain.write_bytes(gzip.decompress(RESULTS.read_bytes()))
    packed = tmp_path / "results.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert cal.load_results(packed).records == cal.load_results(plain).records
    bad = tmp_path / "bad.json.gz"
    bad.write_text("not gzip")
    res = CliRunner().invoke(cli, ["calibrate", "--from-json", str(bad), "-o", str(tmp_path / "out.toml")])
    assert res.exit_code == 2
    assert res.output.strip().startswith(f"pksim: error: {bad}: not a gzip file"), res.output


def test_without_a_gpu_it_fails_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_run.shutil, "which", lambda name: None)
    res = CliRunner().invoke(cli, ["calibrate", "-o", str(tmp_path / "out.toml")])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        "pksim: error: no NVIDIA GPU on this machine (nvidia-smi not found); "
        "refit saved results with --from-json RESULTS.json (`pksim env` shows what this "
        "machine offers)"]


def test_help():
    res = CliRunner().invoke(cli, ["calibrate", "--help"])
    assert res.exit_code == 0
    for option in ("--device", "--system", "--output", "--from-json", "--force", "--json",
                   "--results-out"):
        assert option in res.output


def test_the_report_has_a_table_per_microbenchmark(shipped, tmp_path):
    from validation.calibrate.report import BEGIN, END, main
    doc = tmp_path / "VALIDATION.md"
    doc.write_text("# Validation\n\n## Other section\n\nkept\n")
    assert main(["--results", str(RESULTS), "-o", str(doc)]) == 0
    text = doc.read_text()
    assert "## Other section\n\nkept" in text and BEGIN in text and END in text
    for bench in PREDICTED + ("atomics",):
        assert f"#### `{bench}`" in text
    assert main(["--results", str(RESULTS), "-o", str(doc)]) == 0       # replaces, no copy
    assert doc.read_text() == text


def test_the_shipped_report_is_current():
    """docs/validation/calibration.md holds what the script generates from the shipped file
    (with the second run, which the shipped file predicts and which is refitted alone)."""
    from validation.calibrate.report import BEGIN, END, report
    doc = (ROOT / "docs" / "validation" / "calibration.md").read_text()
    shipped = load_system("h200-calibrated")
    block = report(shipped, shipped.calibration["results"],
                   ["validation/data/cited/h200-microbench-2026-12-02-run2.json"])
    assert doc[doc.index(BEGIN):doc.index(END) + len(END)] + "\n" == block


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no GPU")
@pytest.mark.gpu
def test_a_gpu_is_found():
    assert gpu_run.find_gpu(0).startswith("GPU 0")


def test_crossed_block_moves_wait_a_further_round_of_loads(shipped):
    # block_moves' crossed groups (the two-shot all-reduce's move): G groups each summing
    # part g of all G sources into part g of all G destinations, as _block_move with G groups;
    # by registers with 4 sources a round ("load_batch": 4, the two-shot's reduce_to<C, 4>)
    # 8 sources take 2 rounds: exactly transfer.load_round_ns (1422 ns, fitted on them) more
    from pksim_core.microbench_model import _block_move, predict_time_s
    rec = {"bench": "block_moves_cross", "bytes": 512.0, "time_s": 7e-6, "check": "ok",
           "params": {"mechanism": "register", "kind": "reduce", "sources": 8, "dests": 8,
                      "groups": 8, "blocks": 8, "timing": "behind_write"}}
    g = shipped.gpu
    once = predict_time_s(shipped, rec)
    twice = predict_time_s(shipped, {**rec, "params": {**rec["params"], "load_batch": 4}})
    assert once == pytest.approx(_block_move(g, 512.0, "register", "reduce", 8, 8, 8, groups=8,
                                             hot=False))
    assert twice - once == pytest.approx(g.kernel.load_round_s) and g.kernel.load_round_s \
        == pytest.approx(1422e-9)
    # at most 4 sources are one round whatever the batch; TMA has no rounds
    four = {**rec, "params": {**rec["params"], "sources": 4, "dests": 4, "groups": 4}}
    assert predict_time_s(shipped, {**four, "params": {**four["params"], "load_batch": 4}}) == \
        predict_time_s(shipped, four)
    # h200-block-moves-2026-12-03-run22.json.gz measured 5.44 us (8 at once) and 6.98 us (4 a
    # round) behind a kernel's write (docs/decisions/D24.md)
    assert 0.8e-6 < twice - once < 2.0e-6


def test_a_ring_hand_off_costs_the_drain_the_release_and_a_system_flag(shipped):
    # hwmodels.sm.handoff_s on the calibrated H200: L2 latency (the drain inside one GPU) +
    # sync.release_ns (532.2 ns, fitted on signal_chain) + the system-scope flag (905.3 ns)
    from hwmodels.sm import handoff_s
    g = shipped.gpu
    assert g.sync.release_s == pytest.approx(532.2e-9)
    assert handoff_s(g, g.l2.latency_s) == pytest.approx(g.l2.latency_s + 532.2e-9 + 905.3e-9)
    # a signal_chain point of S steps: the first copy from HBM, then S - 1 hand-offs and
    # copies of what the previous step left in L2: linear in S with exactly that slope
    from pksim_core.microbench_model import _block_move_body, predict_time_s
    rec = {"bench": "signal_chain", "check": "ok", "bytes": 4096.0, "time_s": 1e-5,
           "params": {"mechanism": "register", "sync": "ring", "groups": 8, "blocks": 16}}
    t = {s: predict_time_s(shipped, {**rec, "params": {**rec["params"], "steps": s}})
         for s in (1, 2, 8)}
    step = handoff_s(g, g.l2.latency_s) + _block_move_body(g, 4096.0, "register", "copy", 1, 1,
                                                           16, groups=8, hot=True)
    assert t[2] - t[1] == pytest.approx(step) and t[8] - t[1] == pytest.approx(7 * step)
    # h200-microbench-2026-12-03-run21.json.gz measured 1.74-1.77 us a step for 4 KiB at 8 x 16
    # blocks (17.44 - 5.12 us over 7); the model, refitted on the 17:08 signal_chain and the
    # 2026-12-04 moves, 1.73 us (docs/decisions/D18.md, D37.md)
    assert 1.5e-6 < step < 1.9e-6
    # grid barriers: measured only (the generated kernels in virtual ranks never meet in one)
    barrier = {**rec, "params": {**rec["params"], "sync": "barrier", "steps": 2}}
    assert predict_time_s(shipped, barrier) is None
    assert "barrier" in predict(shipped, [barrier])[0].note


def test_the_fused_pull_reduce_moves_at_its_own_calibrated_rate(shipped):
    # per SM and KiB of sums: base + S x source + D x dest (the kernel profile's pull_move_*):
    # gemm-rs on 4 ranks: 89.75 + 4 x 7.609 + 1 x 18.57 = 138.8 ns; gemm-ar: D = 4: 194.5 ns
    from pksim_core.mechanisms import move_time_per_B
    from pksim_core.workloads.fused_ops import plan
    g = shipped.gpu
    per_kib = {d: move_time_per_B(g, "register", 4, d, True, routine="pull") * 1024 * 1e9
               for d in (1, 4)}
    assert per_kib[1] == pytest.approx(89.75 + 4 * 7.609 + 18.57, rel=1e-3)
    assert per_kib[4] == pytest.approx(89.75 + 4 * 7.609 + 4 * 18.57, rel=1e-3)
    # slower than the collectives' register sum of the same shape (68.3 ns), as fused_pull
    # measured against block_moves
    assert per_kib[1] > 1.5 * move_time_per_B(g, "register", 4, 1, True) * 1024 * 1e9
    # the inter-SM gemm-rs / gemm-ar plans pull with it, nothing else does
    rs = plan("gemm-rs", {"m": 4096, "n": 4096, "k": 1024}, 4, 2, "direct", pull=1)
    assert {m.routine for c in rs.chunks for m in c.moves} == {"pull"}


def test_a_gemm_store_adding_into_one_output_holds_each_wave_for_its_bulk_stores(shipped):
    # Our GEMM 8192 x 8192 x 2048 on 132 SMs store-adding every tile into 1 output
    # (gemm_store_add, pksim_core.microbench_model._gemm_store_add): 2048 tiles, 16 waves. The waves
    # compute back to back at the tensor rate (flop / tensor = the GEMM's body); after each
    # the SMs hand its 8 MiB of store-adds to their bulk engines, stall = 8 MiB / (132 x
    # tma_reduce_per_sm); each wave's store-adds (8 MiB x the tile RMW weight of HBM) run on
    # the main loops' share of the memory path, h = tensor.epilogue_overlap, and keep up
    # (under h they take less than a wave). The last starts as the last wave ends, moves at
    # h during the last stall, then at the whole path: the end is
    #   launch + flop / tensor + 16 stall + (last - h stall),  last = 8 MiB x w / HBM
    from hwmodels.sm import gemm_efficiency, sustained_factor, tile_reduce_memory_weight
    from pksim_core.microbench_model import predict_time_s
    g = shipped.gpu
    m = n = 8192
    k = 2048
    flop = 2.0 * m * n * k
    peak = g.tensor.flops("bf16") * gemm_efficiency(g, m, n, k)
    tensor = peak * sustained_factor(g, flop / peak)
    wave = 2.0 * m * n / 16
    stall = wave / (132 * g.transfer.tma_reduce_Bps_per_sm)
    last = wave * tile_reduce_memory_weight(g) / g.hbm.effective_Bps
    h = g.tensor.epilogue_overlap
    assert last / h < flop / tensor / 16                    # the store-adds keep up
    expected = g.sync.stream_launch_s + flop / tensor + 16 * stall + last - h * stall
    rec = {"bench": "gemm_store_add", "time_s": 4e-4, "check": "ok",
           "params": {"epilogue": "store_add", "dests": 1, "m": m, "n": n, "k": k}}
    assert predict_time_s(shipped, rec) == pytest.approx(expected, rel=1e-9)
    # more outputs, more time; plain stores into several outputs: measured only
    times = [predict_time_s(shipped, {**rec, "params": {**rec["params"], "dests": d}})
             for d in (1, 2, 4, 8)]
    assert times == sorted(times) and times[-1] > 2 * times[0]
    many = {**rec, "params": {**rec["params"], "epilogue": "store_many"}}
    assert predict_time_s(shipped, many) is None
