"""Kernel profiles: what our own kernels cost beyond the hardware they run on.

A system file (``hwmodels/systems``) describes the machine. The fitted overheads of the
generated kernels' own routines (the collectives' moves, their epilogues and shifted
sources, the fused kernels' pull-reduce: ``block_moves``, ``epilogue_moves``, ``block_moves
--shift``, ``fused_pull``) are a *kernel profile*, one file per kernel generation and GPU
architecture in ``hwmodels/profiles/`` (docs/design/hardware.md, "Kernel profiles"). A profile keeps
its figures in terms that carry across the GPUs of an architecture: SM cycles (per KiB of
payload, per message, per element, per thread), L2 sectors per cycle, shares and knees, and
bytes. Loading a system converts them once, with that system's GPU (its ``gpu.sm.clock_MHz``),
into ``KernelSpec``: the same figures in seconds and bytes per second on that GPU, which is
what the cost path reads (``GpuSpec.kernel``).

Each ``KernelSpec`` field names two keys: ``key``, the figure on one GPU in the unit the fit
works in (``tma_move_base_ns_per_KiB``; the key a system file held before the split, which a
user's file may still give: ``hwmodels.catalog`` migrates it), with its SI factor; and
``portable``, the profile file's key (``tma_move_base_cycles_per_KiB``) with how it converts
(``per``): ``clock`` (local = portable x scale / clock in GHz), ``sectors`` (local GB/s =
portable x 32 B x clock in GHz), ``nvlink`` (local ns = portable x the GPU's NVLink one-way
latency) or none (the same number). The conversion from a fitted GPU's
figure to the portable one is exact: a converted figure is rounded to 12 significant digits,
and ``portable_value`` picks the shortest decimal that converts back to the very number the
fit wrote, so a profile written from a calibration predicts that GPU exactly as the fit did.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from hwmodels.errors import ConfigError
from hwmodels.files import read_toml
from hwmodels.resources import profiles_dir
from hwmodels.system import ARCHITECTURES, PROVENANCE_TAGS, GpuSpec, Provenance, split_figure

SECTOR_BYTES = 32          # an L2 sector: what one word load of a warp fetches per 32 B
LOCAL_DIGITS = 12          # significant digits of a figure converted to one GPU


def kfig(key: str, factor: float, portable: str, per: str = "", scale: float = 1.0, *,
         table: str, lo: float = 0.0, lo_open: bool = False, hi: float | None = None,
         doc: str = "") -> Any:
    """A kernel-profile figure: ``key`` (on one GPU, SI ``factor``), ``portable`` (the
    profile's key), its conversion ``per`` ("clock", "sectors", "nvlink" or ""), ``scale`` (local units
    per portable unit at 1 GHz: 1 for ns per cycle, 1000 for ps), the profile ``table`` it
    sits in and its allowed range (in the portable unit)."""
    return field(metadata={"key": key, "factor": factor, "portable": portable, "per": per,
                           "scale": scale, "table": table, "lo": lo, "lo_open": lo_open,
                           "hi": hi, "doc": doc})


_NS_KIB = 1e-9 / 1024
MOVES, EPILOGUE, SHIFTED, PULL = "collective_moves", "epilogue_moves", "shifted_moves", "fused_pull"
CROSSED = "crossed_sums"


@dataclass(frozen=True)
class KernelSpec:
    """The generated kernels' own routines on one GPU (SI units), from its kernel profile.
    Time per byte of payload of a move that reads S sources and writes D destinations is
    base + dest x D for a copy (S = 1), base + reduce + source x S + dest x D for a sum
    (pksim_core.mechanisms.move_time_per_B), measured inside one GPU by block_moves; they govern moves
    inside one GPU only (moves over NVLink: gpu.transfer_remote, docs/decisions/D38.md)."""
    tma_move_base_s_per_B: float = kfig(
        "tma_move_base_ns_per_KiB", _NS_KIB, "tma_move_base_cycles_per_KiB", "clock",
        table=MOVES, doc="TMA move: fixed SM cycles per KiB of payload")
    tma_move_dest_s_per_B: float = kfig(
        "tma_move_dest_ns_per_KiB", _NS_KIB, "tma_move_dest_cycles_per_KiB", "clock",
        table=MOVES, doc="TMA move: SM cycles per KiB per destination")
    tma_move_reduce_s_per_B: float = kfig(
        "tma_move_reduce_ns_per_KiB", _NS_KIB, "tma_move_reduce_cycles_per_KiB", "clock",
        table=MOVES, doc="TMA move: extra SM cycles per KiB of a sum")
    tma_move_source_s_per_B: float = kfig(
        "tma_move_source_ns_per_KiB", _NS_KIB, "tma_move_source_cycles_per_KiB", "clock",
        table=MOVES, doc="TMA move: SM cycles per KiB per summed source")
    tma_message_s: float = kfig(
        "tma_message_ns", 1e-9, "tma_message_cycles", "clock", table=MOVES,
        doc="TMA move: SM cycles per bulk load or store beyond its bytes; a sum of S sources "
            "cuts its stage into S + 1 slots, so its messages grow as S^2 "
            "(pksim_core.mechanisms.move_time_per_B)")
    ldst_move_base_s_per_B: float = kfig(
        "ldst_move_base_ns_per_KiB", _NS_KIB, "ldst_move_base_cycles_per_KiB", "clock",
        table=MOVES, lo_open=True, doc="ld/st move: fixed SM cycles per KiB of payload")
    ldst_move_dest_s_per_B: float = kfig(
        "ldst_move_dest_ns_per_KiB", _NS_KIB, "ldst_move_dest_cycles_per_KiB", "clock",
        table=MOVES, doc="ld/st move: SM cycles per KiB per destination")
    ldst_move_reduce_s_per_B: float = kfig(
        "ldst_move_reduce_ns_per_KiB", _NS_KIB, "ldst_move_reduce_cycles_per_KiB", "clock",
        table=MOVES, doc="ld/st move: extra SM cycles per KiB of a sum")
    ldst_move_source_s_per_B: float = kfig(
        "ldst_move_source_ns_per_KiB", _NS_KIB, "ldst_move_source_cycles_per_KiB", "clock",
        table=MOVES, doc="ld/st move: SM cycles per KiB per summed source")
    move_knee: float = kfig(
        "move_knee", 1.0, "move_knee", table=MOVES, lo_open=True,
        doc="the bend where the collectives' copies meet the memory (pksim_core.mechanisms.move_Bps)")
    tma_move_reduce_knee: float = kfig(
        "tma_move_reduce_knee", 1.0, "tma_move_reduce_knee", table=MOVES, lo_open=True,
        doc="the same bend for their TMA sums, which stay bound by the blocks closer to the "
            "memory's limit")
    move_buffer_latency_s: float = kfig(
        "move_buffer_latency_ns", 1e-9, "move_buffer_latency_cycles", "clock", table=MOVES,
        doc="latency each buffer a move touches beyond one source and one destination adds")
    dest_set_latency_s: float = kfig(
        "dest_set_latency_ns", 1e-9, "dest_set_latency_cycles", "clock", table=MOVES,
        doc="latency a move to several destinations adds: the generated kernels fill a set "
            "of them per peer, whose count the compiler does not know, where a move to one "
            "destination passes pkc::one (pksim_core.mechanisms.move_fixed_latency_s)")
    nvlink_buffer_latency_s: float = kfig(
        "nvlink_buffer_latency_ns", 1e-9, "nvlink_buffer_latency_hops", "nvlink", table=MOVES,
        doc="the same latency per buffer for a move across NVLink (a far source or "
            "destination), which the one-GPU fit does not govern (docs/decisions/D38.md), in "
            "NVLink one-way latencies (gpu.nvlink.latency_ns)")
    tma_shared_reuse_B: float = kfig(
        "tma_shared_reuse_MiB", 1024.0**2, "tma_shared_reuse_MiB", table=MOVES, lo_open=True,
        doc="payload per reader at which half of the repeat reads of a source shared by TMA "
            "readers miss the L2 (pksim_core.mechanisms.shared_reads)")
    ldst_fanout_write: float = kfig(
        "ldst_fanout_write", 1.0, "ldst_fanout_write", table=MOVES,
        doc="register moves to several destinations: extra memory use per destination byte "
            "and doubling of the destinations, at payloads far above the reach "
            "(pksim_core.mechanisms.dest_writes)")
    ldst_fanout_reach_B: float = kfig(
        "ldst_fanout_reach_MiB", 1024.0**2, "ldst_fanout_reach_MiB", table=MOVES, lo_open=True,
        doc="payload at which half of ldst_fanout_write applies")
    tma_shared_read: float = kfig(
        "tma_shared_read", 1.0, "tma_shared_read", table=MOVES, hi=1.0,
        doc="TMA move: share of the per-source SM time a source costs that another rank's "
            "move of the GPU reads too")
    ldst_shared_read: float = kfig(
        "ldst_shared_read", 1.0, "ldst_shared_read", table=MOVES, hi=1.0,
        doc="ld/st move: the same share for register moves")
    load_round_s: float = kfig(
        "load_round_ns", 1e-9, "load_round_cycles", "clock", table=MOVES,
        doc="what each further round of loads of a register sum that loads its sources in "
            "rounds (the two-shot all-reduce: 4 at a time) waits before its first store "
            "(block_moves_cross with load_batch 4)")
    # What a reduce op or a fused epilogue adds to those sums (kernels/collectives/epilogue.cuh;
    # pksim_core.mechanisms.epilogue_time_per_B), measured by validation/microbench/epilogue_moves.cu
    # (docs/decisions/D56.md).
    tma_move_bias_s: float = kfig(
        "tma_move_bias_ns", 1e-9, "tma_move_bias_cycles", "clock", table=EPILOGUE,
        doc="TMA sum with a bias: SM cycles per stage chunk (a sum of S sources cuts its "
            "stage into S + 1 chunks)")
    ldst_move_epilogue_s_per_B: float = kfig(
        "ldst_move_epilogue_ns_per_KiB", _NS_KIB, "ldst_move_epilogue_cycles_per_KiB", "clock",
        table=EPILOGUE, doc="register sum of S <= 4 sources through the epilogue routines: SM "
                            "cycles per KiB of payload x S (one vector a source in flight, "
                            "not two)")
    ldst_move_bias_s_per_elem: float = kfig(
        "ldst_move_bias_ps_per_element", 1e-12, "ldst_move_bias_cycles_per_element", "clock",
        1000.0, table=EPILOGUE,
        doc="register sum with a bias: SM cycles per output element (the bias read per "
            "element)")
    # What a source off the destinations' 16-byte grid adds (kernels/collectives/moves.cuh;
    # pksim_core.mechanisms.shift_time_per_B), measured by block_moves --shift (docs/decisions/D63.md).
    ldst_move_word_s_per_B: float = kfig(
        "ldst_move_word_ns_per_KiB", _NS_KIB, "ldst_move_word_cycles_per_KiB", "clock",
        table=SHIFTED, doc="register move from a shifted source: SM cycles per KiB per source "
                           "read, per further word load of a 16-byte vector (16 / word - 1)")
    ldst_word_l2_Bps: float = kfig(
        "ldst_word_l2_GBps", 1e9, "ldst_word_l2_sectors_per_cycle", "sectors", table=SHIFTED,
        lo_open=True,
        doc="register move from a shifted source: the 32-byte L2 sectors per cycle its word "
            "loads fetch, 16 / word times a source's bytes besides a byte per destination")
    tma_move_realign_s_per_B: float = kfig(
        "tma_move_realign_ns_per_KiB", _NS_KIB, "tma_move_realign_cycles_per_KiB", "clock",
        table=SHIFTED, doc="TMA move: SM cycles per KiB per shifted source, realigned in the "
                           "stage (a shifted copy costs the one-source sum besides)")
    # What a TMA sum whose groups read every source crossed (group g its part g of each: the
    # direct reduce-scatter's and the two-shot all-reduce's moves) adds to the same sum of
    # sources of its own, measured by block_moves' crossed sums (docs/decisions/D83.md).
    tma_move_cross_s_per_B: float = kfig(
        "tma_move_cross_ns_per_KiB", _NS_KIB, "tma_move_cross_cycles_per_KiB", "clock",
        table=CROSSED, doc="TMA sum read crossed: SM cycles per KiB per summed source")
    # The inter-SM fused kernels' pull-reduce (kernels/fused/comm.cuh), base + source x S +
    # dest x D per KiB of sums, by registers and in its TMA form (D54), measured by
    # validation/microbench/fused_pull.cu.
    pull_move_base_s_per_B: float = kfig(
        "pull_move_base_ns_per_KiB", _NS_KIB, "pull_move_base_cycles_per_KiB", "clock",
        table=PULL, doc="fused pull-reduce: fixed SM cycles per KiB of sums")
    pull_move_source_s_per_B: float = kfig(
        "pull_move_source_ns_per_KiB", _NS_KIB, "pull_move_source_cycles_per_KiB", "clock",
        table=PULL, doc="fused pull-reduce: SM cycles per KiB per partial")
    pull_move_dest_s_per_B: float = kfig(
        "pull_move_dest_ns_per_KiB", _NS_KIB, "pull_move_dest_cycles_per_KiB", "clock",
        table=PULL, doc="fused pull-reduce: SM cycles per KiB per output")
    pull_tma_move_base_s_per_B: float = kfig(
        "pull_tma_move_base_ns_per_KiB", _NS_KIB, "pull_tma_move_base_cycles_per_KiB", "clock",
        table=PULL, doc="fused TMA pull-reduce: fixed SM cycles per KiB of sums")
    pull_tma_move_source_s_per_B: float = kfig(
        "pull_tma_move_source_ns_per_KiB", _NS_KIB, "pull_tma_move_source_cycles_per_KiB",
        "clock", table=PULL, doc="fused TMA pull-reduce: SM cycles per KiB per partial")
    pull_tma_move_dest_s_per_B: float = kfig(
        "pull_tma_move_dest_ns_per_KiB", _NS_KIB, "pull_tma_move_dest_cycles_per_KiB", "clock",
        table=PULL, doc="fused TMA pull-reduce: SM cycles per KiB per output")


FIELDS = {f.metadata["portable"]: f for f in dataclasses.fields(KernelSpec)}
LOCAL_FIELDS = {f.metadata["key"]: f for f in dataclasses.fields(KernelSpec)}
TABLES = tuple(dict.fromkeys(f.metadata["table"] for f in dataclasses.fields(KernelSpec)))
_TOP_KEYS = ("name", "description", "architecture", "kernels", "fitted_on", "conversion",
             "calibration")


@dataclass(frozen=True)
class Profile:
    """A kernel-profile file as read: its figures in the portable units, by portable key."""
    name: str
    description: str
    architecture: str
    kernels: str                                   # the kernel generation it describes
    path: str
    fitted_on: Mapping[str, Any]                   # system, device, date, driver, clock_MHz
    conversion: str
    values: Mapping[str, float]
    provenance: Mapping[str, Provenance]
    calibration: Mapping[str, Any] | None = None

    @property
    def device(self) -> str:
        return str(self.fitted_on.get("device", ""))


@dataclass(frozen=True)
class ProfileUse:
    """Which profile a loaded system uses and why (its file's ``profile`` key), and whether
    the profile was fitted on another GPU than this system's (``carried``)."""
    name: str
    path: str
    why: str
    device: str
    carried: bool


# ---- the conversion -------------------------------------------------------------------
def _ghz(gpu: GpuSpec) -> float:
    return gpu.sm.clock_Hz / 1e9


def _plain(meta: Mapping[str, Any], gpu: GpuSpec) -> float:
    """One-GPU units per portable unit on ``gpu``."""
    if meta["per"] == "clock":                      # ns (or ps) per cycle
        return meta["scale"] / _ghz(gpu)
    if meta["per"] == "sectors":                    # GB/s per sector per cycle
        return SECTOR_BYTES * _ghz(gpu)
    if meta["per"] == "nvlink":                     # ns per NVLink one-way latency
        return gpu.nvlink.latency_s / 1e-9
    return 1.0


def local_value(meta: Mapping[str, Any], portable: float, gpu: GpuSpec) -> float:
    """A figure in its one-GPU unit (``meta["key"]``'s) on ``gpu`` from its portable value,
    to LOCAL_DIGITS significant digits (so that a fitted figure of fewer digits comes back
    as the very number the fit wrote)."""
    if not meta["per"]:
        return portable
    return float(f"{portable * _plain(meta, gpu):.{LOCAL_DIGITS}g}")


def portable_value(meta: Mapping[str, Any], local: float, gpu: GpuSpec) -> float:
    """The portable value of a one-GPU figure on ``gpu``: the shortest decimal of the plain
    conversion that ``local_value`` turns back into exactly ``local``."""
    if not meta["per"]:
        return local
    guess = local / _plain(meta, gpu)
    for digits in range(1, 18):
        value = float(f"{guess:.{digits}g}")
        if local_value(meta, value, gpu) == local:
            return value
    return guess


def conversion_text(gpu: GpuSpec) -> str:
    """How a profile's figures relate to the one-GPU figures of the GPU they were fitted on."""
    ghz = _ghz(gpu)
    hop = gpu.nvlink.latency_s / 1e-9
    return (f"cycles = ns x {ghz:g} GHz (the fitted GPU's gpu.sm.clock_MHz, {ghz * 1e3:g}); "
            f"cycles per element or thread = ps x {ghz:g} / 1000; L2 sectors per cycle = GB/s "
            f"/ ({SECTOR_BYTES} B x {ghz:g} GHz); NVLink hops = ns / gpu.nvlink.latency_ns "
            f"({hop:g}); knees, shares and MiB as they are")


def kernel_spec(profile: Profile, gpu: GpuSpec,
                local_overrides: Mapping[str, float] | None = None) -> KernelSpec:
    """The profile's figures on ``gpu`` in SI units; ``local_overrides`` (one-GPU keys, e.g.
    a user's old ``gpu.transfer.tma_move_base_ns_per_KiB``) replace the converted value of
    their figure."""
    local_overrides = local_overrides or {}
    kwargs = {}
    for f in dataclasses.fields(KernelSpec):
        meta = f.metadata
        if meta["key"] in local_overrides:
            local = float(local_overrides[meta["key"]])
        else:
            local = local_value(meta, profile.values[meta["portable"]], gpu)
        kwargs[f.name] = local * meta["factor"]
    return KernelSpec(**kwargs)


def portable_of(gpu: GpuSpec, portable_key: str) -> float:
    """A loaded figure of ``gpu.kernel`` in its profile's unit (cycles, sectors, ...)."""
    f = FIELDS[portable_key]
    return portable_value(f.metadata, getattr(gpu.kernel, f.name) / f.metadata["factor"], gpu)


# ---- the rule that picks a profile -------------------------------------------------------
def list_profiles() -> list[str]:
    return sorted(p.stem for p in profiles_dir().glob("*.toml"))


def nearest_profile(architecture: str) -> str:
    """The shipped profile a GPU of ``architecture`` takes (docs/design/hardware.md, "Kernel profiles",
    rule P1): the profile of its own architecture if one is measured, else that of the
    nearest architecture in ARCHITECTURES' order (ampere, hopper, blackwell, rubin), the
    earlier of two as near (its kernels are the ones a later GPU also runs). Of several
    profiles of one architecture the rule takes its reference profile, ``pk-<architecture>``
    (pk-hopper, fitted on the H200); another (pk-hopper-h100) serves the calibrated system
    fitted with it (rule P0) and ``pksim validate --ported`` (docs/decisions/D71.md)."""
    if architecture not in ARCHITECTURES:
        raise ConfigError(f"architecture {architecture!r} is not one of {', '.join(ARCHITECTURES)}")
    measured: dict[str, str] = {}
    for name in sorted(list_profiles()):
        arch = load_profile(name).architecture
        if name == f"pk-{arch}" or arch not in measured:
            measured[arch] = name
    if not measured:
        raise ConfigError(f"no kernel profile in {profiles_dir()}")
    here = ARCHITECTURES.index(architecture)
    best = min(measured, key=lambda arch: (abs(ARCHITECTURES.index(arch) - here),
                                           ARCHITECTURES.index(arch) > here))
    return measured[best]


# ---- reading a profile file ----------------------------------------------------------------
def profile_path(name_or_path: str, relative_to: Path | None = None) -> Path:
    """A shipped profile's file, or a path (relative to ``relative_to``: the system file that
    names it)."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or "/" in name_or_path:
        if not candidate.is_absolute() and relative_to is not None:
            candidate = relative_to / candidate
        if not candidate.exists():
            raise ConfigError(f"kernel profile {name_or_path}: no such file ({candidate})")
        return candidate
    shipped = profiles_dir() / f"{name_or_path}.toml"
    if not shipped.exists():
        raise ConfigError(f"unknown kernel profile {name_or_path!r} (shipped: "
                          f"{', '.join(list_profiles())})")
    return shipped


def check_range(where: str, dotted: str, meta: Mapping[str, Any], value: Any) -> float:
    """``value`` as a float, or a ConfigError naming ``where``, the key and the value (a
    figure's range holds in the portable and the one-GPU unit alike: they differ by a
    positive factor)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: {dotted} must be a finite number, got {value!r}")
    lo, hi = meta["lo"], meta["hi"]
    if value < lo or (meta["lo_open"] and value == lo):
        raise ConfigError(f"{where}: {dotted} = {value!r} must be "
                          f"{'above' if meta['lo_open'] else 'at least'} {lo:g}")
    if hi is not None and value > hi:
        raise ConfigError(f"{where}: {dotted} = {value!r} must be at most {hi:g}")
    return float(value)


def check_value(where: str, portable_key: str, value: Any) -> float:
    """A portable figure checked against its range (a ``--set profile.KEY=VALUE``)."""
    if portable_key not in FIELDS:
        raise ConfigError(f"{where}: unknown kernel-profile figure {portable_key!r}")
    return check_range(where, f"profile.{portable_key}", FIELDS[portable_key].metadata, value)


def load_profile(name_or_path: str, relative_to: Path | None = None) -> Profile:
    """Read and check a kernel-profile file: every figure of KernelSpec, in its table, with a
    source and a provenance tag (on the figure or its table); unknown or missing keys are
    errors that name the file and the key. Read once per version of the file (a frozen
    Profile: every system of a what-if shares it)."""
    path = profile_path(name_or_path, relative_to)
    try:
        st = path.stat()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    return _load_profile(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _load_profile(name: str, mtime_ns: int, size: int) -> Profile:
    path = Path(name)
    raw = read_toml(path, "kernel profile")
    for key in ("name", "description", "architecture", "kernels"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise ConfigError(f"{path}: missing key {key!r}")
    if raw["architecture"] not in ARCHITECTURES:
        raise ConfigError(f"{path}: architecture = {raw['architecture']!r} is not one of "
                          f"{', '.join(ARCHITECTURES)}")
    fitted = raw.get("fitted_on", {})
    if not isinstance(fitted, dict) or not fitted.get("device"):
        raise ConfigError(f"{path}: fitted_on must be a table naming the device it was "
                          f"fitted on (device, date, system, clock_MHz)")
    values: dict[str, float] = {}
    prov: dict[str, Provenance] = {}
    for key, item in raw.items():
        if key in _TOP_KEYS:
            continue
        if key not in TABLES:
            raise ConfigError(f"{path}: unknown key {key!r} (a profile holds "
                              f"{', '.join(TABLES)})")
        _read_table(path, key, item, values, prov)
    missing = [k for k in FIELDS if k not in values]
    if missing:
        table = FIELDS[missing[0]].metadata["table"]
        raise ConfigError(f"{path}: missing key {table}.{missing[0]!r}")
    calibration = raw.get("calibration")
    return Profile(raw["name"], raw["description"], raw["architecture"], raw["kernels"],
                   str(path), MappingProxyType(dict(fitted)), str(raw.get("conversion", "")),
                   MappingProxyType(values), MappingProxyType(prov),
                   MappingProxyType(calibration) if isinstance(calibration, dict) else None)


def _read_table(path: Path, table: str, raw: Any, values: dict, prov: dict) -> None:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: {table} must be a table, got {raw!r}")
    table_source, table_tag = raw.get("source"), raw.get("provenance")
    for key, item in raw.items():
        if key in ("source", "provenance", "note"):
            continue
        dotted = f"{table}.{key}"
        f = FIELDS.get(key)
        if f is None or f.metadata["table"] != table:
            hint = f" (it belongs in [{f.metadata['table']}])" if f is not None else ""
            raise ConfigError(f"{path}: unknown key {dotted!r}{hint}")
        item, source, tag = split_figure(str(path), dotted, item, table_source, table_tag)
        if tag not in PROVENANCE_TAGS:
            raise ConfigError(f"{path}: {dotted}: provenance {tag!r} is not one of "
                              f"{', '.join(PROVENANCE_TAGS)}")
        values[key] = check_range(str(path), dotted, f.metadata, item)
        prov[key] = Provenance(str(source), str(tag))
