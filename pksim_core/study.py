"""Studies as files: a small TOML file names systems, workloads and what to vary.

A study (``pksim_core/studies/default.toml`` is the one ``pksim whatif`` runs)::

    name = "my-study"                      # names the output folder
    title = "..."                          # optional
    systems = ["dgx-h100", "my-box.toml"]  # shipped names or system files (relative
                                           # to the study file; they may ``inherits``)
    set = ["gpu.hbm.efficiency=0.9"]       # overrides applied to every system
    impls = ["pk", "nccl"]                 # pk: searched best; nccl: the baseline
    nvls = "off"                           # NCCL with NVLink SHARP off (NCCL_NVLS_ENABLE=0);
                                           # default "on" (where the switches reduce)
    [vary]                                 # one change at a time, against the unchanged system
    "gpu.nvlink.link_bandwidth_GBps" = ["2x"]          # "2x": times the system's own figure
    programs = ["gemm-reducescatter"]     # whole programs (pksim programs list, or files)
    [[workload]]
    name = "tp-ar"
    op = "all-reduce"
    m = [1024, 4096]                       # list values expand into one case each
    n = 8192                               # collectives: bytes, or count, or m x n elements
    world = [8, 72]                        # ranks; "domain" = the whole NVLink domain
    [plots]
    kinds = ["time", "speedup", "breakdown", "roofline", "timeline", "sensitivity",
             "program-roofline", "program-gain"]
    timeline = { system = "dgx-h100", workload = "tp-ar" }

Shape values may be expressions in ``tp`` (= ``world``) and the other shape keys,
e.g. ``k = "ceil(28672 / tp)"``. Collectives take ``bytes``, ``count`` or ``m`` x ``n``;
fused compute + communication ops take their own keys (``pksim_core.workloads.fused_ops``:
``m, n, k`` for gemm-rs, gemm-ar, ag-gemm). A workload may narrow the schedule space
with ``search = { comm_sms = [16, 32], overlaps = ["inter-sm"] }``. An op listed in
``PLANNED_OPS`` (named, not simulated yet) loads and expands like any other; running
it gives a "not supported yet" row (see ``pksim_core.runner.best_prediction``). A program
(``pksim_core.study_programs``) gives two rows per system and variant: ``nccl``, the baseline as
PyTorch + NCCL run it, and ``pk``, pksim's best, each with the program's roofline.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from hwmodels import profile as kernel_profile
from hwmodels.catalog import is_bare_name, load_system
from hwmodels.errors import ConfigError
from hwmodels.files import read_toml
from hwmodels.resources import studies_dir
from hwmodels.system import System
from hwmodels.units import UNIT_SUFFIXES, format_bytes
from pksim_core.inputs import check_skew, check_unique_systems, even_bytes
from pksim_core.schedule import ALGORITHMS, DTYPES, IMPLS, MECHANISMS, OVERLAPS
from pksim_core.study_expr import evaluate
from pksim_core.study_programs import PROGRAM_OP, ProgramEntry, load_entries
from pksim_core.workloads.collectives import COLLECTIVES, algorithms_for
from pksim_core.workloads.fused_ops import ALGORITHMS as FUSED_ALGORITHMS
from pksim_core.workloads.fused_ops import FUSED_OPS, SHAPE_KEYS

STUDIES_DIR = studies_dir()
# Ops a study may name that the simulator does not model yet (name -> what it is): they
# load and expand like any other and give "not supported yet" rows. When one lands in
# the simulator, it moves out of here and into ``pksim_core.runner.best_prediction``.
PLANNED_OPS: dict[str, str] = {}
KNOWN_OPS = COLLECTIVES + FUSED_OPS + tuple(PLANNED_OPS)
PLOT_KINDS = ("time", "speedup", "breakdown", "roofline", "timeline", "sensitivity",
              "program-roofline", "program-gain")
_TOP_KEYS = {"name", "title", "description", "systems", "set", "impls", "baseline", "vary",
             "workload", "programs", "plots", "nvls"}
NVLS = ("on", "off")             # NCCL_NVLS_ENABLE as the nccl rows of collectives run it
_WORKLOAD_KEYS = {"name", "op", "dtype", "world", "domains", "root", "note", "search", "skew"}
_COLLECTIVE_SHAPES = ({"bytes"}, {"count"}, {"m", "n"})
# A workload's ``search`` table narrows the schedule space (pksim_core.search.space and
# fused_space take the same names).
SEARCH_KEYS = {"algorithms": str, "mechanisms": str, "comm_sms": int, "overlaps": str}


@dataclass(frozen=True)
class Case:
    """One workload point: an op, its evaluated shape, and where it runs."""
    workload: str
    op: str
    shape: tuple[tuple[str, int], ...]
    dtype: str = "bf16"
    world: int = 8
    domains: int = 1
    root: int = 0
    search: tuple[tuple[str, tuple], ...] = ()     # narrows the schedule space
    skew: float = 0.0                              # MoE routing skew (Zipf exponent)
    program: str = ""                              # a program's shipped name or file

    @classmethod
    def of_program(cls, entry: ProgramEntry) -> "Case":
        """A program's case: its name, its own world, no shape."""
        return cls(entry.name, PROGRAM_OP, (), entry.dtype, entry.world, program=entry.ref)

    @property
    def is_program(self) -> bool:
        return self.op == PROGRAM_OP

    def dim(self, key: str) -> int:
        return dict(self.shape)[key]

    @property
    def is_collective(self) -> bool:
        return self.op in COLLECTIVES

    @property
    def given_bytes(self) -> int:
        """Bytes as nccl-tests counts them (collectives only), as the shape gives them."""
        shape = dict(self.shape)
        if "bytes" in shape:
            return shape["bytes"]
        elements = shape["count"] if "count" in shape else shape["m"] * shape["n"]
        return int(elements * DTYPES[self.dtype])

    @property
    def nbytes(self) -> int:
        """The bytes the case runs: ``given_bytes``, cut into whole elements per rank where
        the op splits its buffer (pksim_core.inputs.even_bytes: as nccl-tests runs it)."""
        return even_bytes(self.op, self.given_bytes, self.dtype, self.world)[0]

    def shape_text(self) -> str:
        if set(dict(self.shape)) == {"bytes"}:
            return format_bytes(self.dim("bytes"))
        return " ".join(f"{k}={v}" for k, v in self.shape)

    def label(self) -> str:
        if self.is_program:
            return f"program {self.workload} x{self.world}"
        return f"{self.workload} {self.shape_text()} x{self.world}"


@dataclass(frozen=True)
class Workload:
    """A ``[[workload]]`` entry before expansion: every value is a tuple of choices."""
    name: str
    op: str
    shape: tuple[tuple[str, tuple[Any, ...]], ...]
    dtype: str = "bf16"
    world: tuple[int | str, ...] = ("domain",)
    domains: int = 1
    root: int = 0
    note: str = ""
    search: tuple[tuple[str, tuple], ...] = ()
    skew: float = 0.0

    def expand(self, system: System, where: str = "") -> tuple[list[Case], list[str]]:
        """The cases on ``system``, and a note per world size the system cannot hold."""
        capacity = system.domain.gpus_per_domain * self.domains
        cases, skipped = [], []
        for world in self.world:
            n = capacity if world == "domain" else int(world)
            if n > capacity:
                skipped.append(f"{self.name}: world {n} > {capacity} GPUs of {system.name}")
                continue
            keys = [k for k, _ in self.shape]
            for combo in itertools.product(*(values for _, values in self.shape)):
                raw = dict(zip(keys, combo))
                shape = evaluate(raw, n, f"{where}workload {self.name!r}")
                cases.append(Case(self.name, self.op, tuple(shape.items()), self.dtype, n,
                                  self.domains, self.root, self.search, self.skew))
        return cases, skipped


@dataclass(frozen=True)
class Study:
    name: str
    workloads: tuple[Workload, ...]
    systems: tuple[str, ...] = ()
    title: str = ""
    description: str = ""
    path: str = ""
    overrides: tuple[str, ...] = ()
    vary: tuple[tuple[str, tuple[str, ...]], ...] = ()
    impls: tuple[str, ...] = IMPLS
    baseline: str = "nccl"
    plots: tuple[str, ...] = PLOT_KINDS
    timeline: tuple[str, str] | None = None          # (system, workload)
    programs: tuple[ProgramEntry, ...] = ()
    nvls: str = "on"                                 # NCCL_NVLS_ENABLE for the nccl rows

    def with_options(self, systems: tuple[str, ...] = (), overrides: tuple[str, ...] = (),
                     vary: tuple[str, ...] = (), nvls: str | None = None) -> "Study":
        """Apply the command line: ``--systems`` replaces, ``--set``/``--vary`` add,
        ``--nvls`` replaces the study's."""
        changes: dict[str, Any] = {"overrides": self.overrides + tuple(overrides)}
        if nvls is not None:
            changes["nvls"] = check_nvls(nvls, "--nvls")
        if systems:
            changes["systems"] = tuple(systems)
        if vary:
            changes["vary"] = self.vary + tuple(parse_vary(v) for v in vary)
        return replace(self, **changes)


@dataclass(frozen=True)
class SystemVariant:
    """One system as a study runs it: a reference, overrides, and the what-if label."""
    ref: str
    overrides: tuple[str, ...] = ()
    label: str = "base"

    def load(self) -> System:
        return load_system(self.ref, self.overrides)


# ---- loading -------------------------------------------------------------------------
def _as_tuple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, list) else (value,)


def _text(data: dict, key: str, where: str, default: str = "") -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key} must be text, got {value!r}")
    return value


def _texts(data: dict, key: str, where: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {key} must be a list of text, got {value!r}")
    return tuple(value)


def _workload(raw: Any, index: int, where: str) -> Workload:
    at = f"{where}: workload[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{at} must be a table ([[workload]])")
    name = _text(raw, "name", at, f"w{index}")
    at = f"{where}: workload {name!r}"
    op = _text(raw, "op", at)
    if op not in KNOWN_OPS:
        raise ConfigError(f"{at}: op {op!r} is not one of {', '.join(KNOWN_OPS)}")
    dtype = _text(raw, "dtype", at, "bf16")
    if dtype not in DTYPES:
        raise ConfigError(f"{at}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    world = _as_tuple(raw.get("world", "domain"))
    for w in world:
        if w != "domain" and (isinstance(w, bool) or not isinstance(w, int) or w < 2):
            raise ConfigError(f"{at}: world must be \"domain\" or a whole number of ranks, at "
                              f"least 2 (a multi-GPU operation), got {w!r}")
    domains, root = raw.get("domains", 1), raw.get("root", 0)
    for key, value in (("domains", domains), ("root", root)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (key == "domains"):
            raise ConfigError(f"{at}: {key} must be a whole number, got {value!r}")
    shape = []
    for key, value in raw.items():
        if key in _WORKLOAD_KEYS:
            continue
        values = _as_tuple(value)
        if not values or not all(isinstance(v, (int, float, str)) and not isinstance(v, bool)
                                 for v in values):
            raise ConfigError(f"{at}: {key} must be a number, a text expression or a list of "
                              f"them, got {value!r}")
        shape.append((key, values))
    keys = {k for k, _ in shape}
    if op in COLLECTIVES and keys not in _COLLECTIVE_SHAPES:
        raise ConfigError(f"{at}: a collective takes one of: bytes; count; m and n "
                          f"(got {', '.join(sorted(keys)) or 'no shape'})")
    if op in FUSED_OPS and keys != set(SHAPE_KEYS[op]):
        raise ConfigError(f"{at}: {op} takes the shape keys {', '.join(SHAPE_KEYS[op])} "
                          f"(got {', '.join(sorted(keys)) or 'none'})")
    if op in PLANNED_OPS and not keys:
        raise ConfigError(f"{at}: {op} needs shape keys (e.g. m, n, k)")
    skew = raw.get("skew", 0.0)
    if isinstance(skew, bool) or not isinstance(skew, (int, float)):
        raise ConfigError(f"{at}: skew must be a number, got {skew!r}")
    check_skew(skew, f"{at}: skew")
    if skew and not op.startswith("moe"):
        raise ConfigError(f"{at}: skew {skew:g}: only the MoE ops route tokens, not {op}")
    return Workload(name, op, tuple(shape), dtype, world, domains, root,
                    _text(raw, "note", at), _search(raw.get("search", {}), at, op), float(skew))


def _search(raw: Any, at: str, op: str) -> tuple[tuple[str, tuple], ...]:
    """``search = { comm_sms = [16, 32], overlaps = ["inter-sm"] }`` -> sorted pairs, each
    value one the op can take (the SM counts' upper end is the system's: checked per case)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{at}: search must be a table, e.g. {{ comm_sms = [16, 32] }}")
    out = []
    for key, values in sorted(raw.items()):
        if key not in SEARCH_KEYS:
            raise ConfigError(f"{at}: search: unknown key {key!r} "
                              f"(takes {', '.join(sorted(SEARCH_KEYS))})")
        values = _as_tuple(values)
        kind = SEARCH_KEYS[key]
        if not values or not all(isinstance(v, kind) and not isinstance(v, bool)
                                 for v in values):
            raise ConfigError(f"{at}: search.{key} must be a list of "
                              f"{'whole numbers' if kind is int else 'names'}, got {values!r}")
        allowed = _search_choices(key, op)
        bad = [v for v in values if (v < 1 if kind is int else v not in allowed)]
        if bad:
            takes = "at least 1" if kind is int else f"one of {', '.join(allowed)}"
            raise ConfigError(f"{at}: search.{key} = {bad[0]!r}: {op} takes {takes}")
        out.append((key, values))
    return tuple(out)


def _search_choices(key: str, op: str) -> tuple:
    """The names a workload's ``search.<key>`` may give for ``op`` (() for comm_sms)."""
    if key == "algorithms":
        return FUSED_ALGORITHMS[op] if op in FUSED_OPS else \
            algorithms_for(op) if op in COLLECTIVES else ALGORITHMS
    if key == "mechanisms":
        return MECHANISMS
    if key == "overlaps":
        return OVERLAPS if op in FUSED_OPS else ()
    return ()


def parse_vary(text: str, what: str = "--vary") -> tuple[str, tuple[str, ...]]:
    """``gpu.nvlink.link_bandwidth_GBps=2x,3x`` -> (key, ("2x", "3x"))."""
    key, sep, values = text.partition("=")
    key = key.strip()
    choices = tuple(v.strip() for v in values.split(",") if v.strip())
    if not sep or not key or not choices:
        raise ConfigError(f"{what}: expected KEY=V1,V2,..., got {text!r}")
    return key, choices


def load_study(path: str | Path) -> Study:
    """Read and check a study file; every error names the file and the key."""
    path = Path(path)
    raw = read_toml(path, "study file")
    where = str(path)
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r} "
                          f"(a study takes {', '.join(sorted(_TOP_KEYS))})")
    name = _text(raw, "name", where, path.stem)
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ConfigError(f"{where}: name must be a non-empty folder name, got {name!r}")
    systems = tuple(_resolve_system(s, path.parent) for s in _texts(raw, "systems", where))
    impls = _texts(raw, "impls", where) or IMPLS
    for impl in impls:
        if impl not in IMPLS:
            raise ConfigError(f"{where}: impls: {impl!r} is not one of {', '.join(IMPLS)}")
    baseline = _text(raw, "baseline", where, "nccl")
    if baseline not in IMPLS:
        raise ConfigError(f"{where}: baseline {baseline!r} is not one of {', '.join(IMPLS)}")
    nvls = check_nvls(raw.get("nvls", "on"), f"{where}: nvls")
    vary_raw = raw.get("vary", {})
    if not isinstance(vary_raw, dict):
        raise ConfigError(f"{where}: vary must be a table of key = [values]")
    vary = tuple((k, tuple(str(v) for v in _as_tuple(vs))) for k, vs in vary_raw.items())
    entries = raw.get("workload", [])
    programs = load_entries(raw, where, path.parent)
    if not isinstance(entries, list) or not (entries or programs):
        raise ConfigError(f"{where}: a study needs at least one [[workload]] or programs")
    workloads = tuple(_workload(w, i, where) for i, w in enumerate(entries))
    names = [w.name for w in workloads]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: workload names must differ, got {names}")
    for entry in programs:
        if entry.name in names:
            raise ConfigError(f"{where}: programs: {entry.given!r} is named {entry.name!r}, "
                              f"as a [[workload]] is")
    plots, timeline = _plots(raw.get("plots", {}), where, names)
    return Study(name=name, workloads=workloads, systems=systems,
                 title=_text(raw, "title", where), description=_text(raw, "description", where),
                 path=str(path), overrides=_texts(raw, "set", where), vary=vary, impls=impls,
                 baseline=baseline, plots=plots, timeline=timeline, programs=programs,
                 nvls=nvls)


def check_nvls(value: Any, what: str) -> str:
    """``on`` or ``off`` (NCCL_NVLS_ENABLE=1/0); anything else is an error naming ``what``."""
    if value not in NVLS:
        raise ConfigError(f"{what} {value!r}: must be \"on\" or \"off\" (NCCL_NVLS_ENABLE)")
    return value


def _plots(raw: Any, where: str, workloads: list[str]):
    if not isinstance(raw, dict) or set(raw) - {"kinds", "timeline"}:
        raise ConfigError(f"{where}: plots takes kinds and timeline, got {raw!r}")
    kinds = _texts(raw, "kinds", where + ": plots") if "kinds" in raw else PLOT_KINDS
    for kind in kinds:
        if kind not in PLOT_KINDS:
            raise ConfigError(f"{where}: plots.kinds: {kind!r} is not one of "
                              f"{', '.join(PLOT_KINDS)}")
    timeline = raw.get("timeline")
    if timeline is not None:
        if not isinstance(timeline, dict) or set(timeline) != {"system", "workload"}:
            raise ConfigError(f"{where}: plots.timeline must be {{ system = ..., workload = ... }}")
        if timeline["workload"] not in workloads:
            raise ConfigError(f"{where}: plots.timeline: no workload {timeline['workload']!r}")
        timeline = (str(timeline["system"]), str(timeline["workload"]))
    return kinds, timeline


def _resolve_system(ref: str, base: Path) -> str:
    """A system file named relative to the study file becomes an absolute path."""
    if ref.endswith(".toml") or "/" in ref:
        candidate = Path(ref)
        if not candidate.is_absolute() and (base / candidate).exists():
            return str((base / candidate).resolve())
    return ref


def default_study() -> Study:
    return load_study(STUDIES_DIR / "default.toml")


def list_studies() -> list[str]:
    return sorted(p.stem for p in STUDIES_DIR.glob("*.toml"))


def find_study(name_or_path: str) -> Study:
    """The name of a shipped study, or a path to a study file. A bare name (no ``/``, no
    ``.toml``) is the shipped study of that name even where a file or folder of that name is
    here (``-o default`` makes one): ``./default`` names that instead."""
    if not name_or_path.strip():
        raise ConfigError(f"--study {name_or_path!r}: give a study's name or file (shipped: "
                          f"{', '.join(list_studies())})")
    path = Path(name_or_path)
    shipped = STUDIES_DIR / f"{name_or_path}.toml"
    if is_bare_name(name_or_path) and shipped.exists():
        path = shipped
    if path.is_dir():
        raise ConfigError(f"--study {name_or_path}: is a folder, not a study file (shipped "
                          f"studies: {', '.join(list_studies())})")
    if not path.exists():
        raise ConfigError(f"study file {name_or_path}: no such file "
                          f"(shipped studies: {', '.join(list_studies())})")
    return load_study(path)


def split_note(cases) -> str:
    """What a run says of its collectives whose buffer does not divide over their ranks (cut
    into whole elements per rank, as nccl-tests runs them: pksim_core.inputs.even_bytes); "" if
    none."""
    cut = sorted({c for c in cases if c.is_collective and c.nbytes != c.given_bytes},
                 key=lambda c: (c.workload, c.world, c.shape))
    if not cut:
        return ""
    c = cut[0]
    return (f"{len(cut)} case(s) cut a buffer that does not divide over their ranks into "
            f"whole elements per rank, as nccl-tests does, e.g. {c.label()}: "
            f"{c.given_bytes} -> {c.nbytes} bytes")


# ---- what to vary --------------------------------------------------------------------
def figure(system: System, key: str, what: str = "--vary") -> Any:
    """A system figure in its file's units (e.g. GBps), found by its dotted key; a kernel-
    profile figure (``profile.KEY``) in the profile's unit (cycles, sectors per cycle, ...)."""
    parts = key.split(".")
    if parts[0] == "profile" and len(parts) == 2:
        if parts[1] not in kernel_profile.FIELDS:
            raise ConfigError(f"{what}: unknown key {key!r}")
        return kernel_profile.portable_of(system.gpu, parts[1])
    node: Any = system
    for i, part in enumerate(parts):
        if isinstance(node, tuple):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"{what}: {key!r}: no entry {part!r}")
            node = node[int(part)]
            continue
        if i == 0:
            if part not in ("gpu", "domain", "scaleout"):
                raise ConfigError(f"{what}: unknown key {key!r}")
            node = getattr(system, part)
            continue
        match = [f for f in fields(node) if f.metadata.get("key") == part]
        if not match:
            raise ConfigError(f"{what}: unknown key {key!r}")
        value = getattr(node, match[0].name)
        if i == len(parts) - 1:
            if match[0].metadata.get("table"):
                raise ConfigError(f"{what}: {key!r} is a table, not a figure")
            factor = match[0].metadata.get("factor", 1.0)
            if isinstance(value, bool) or isinstance(value, str):
                return value
            return value / factor if factor != 1.0 else value
        node = value
    raise ConfigError(f"{what}: {key!r} is a table, not a figure")


def _short(key: str) -> str:
    """'gpu.nvlink.link_bandwidth_GBps' -> 'nvlink.link_bandwidth' (a what-if label)."""
    parts = key.split(".")
    if parts[0] == "gpu" and len(parts) > 2:
        parts = parts[1:]
    last = parts[-1]
    for unit in UNIT_SUFFIXES:
        if last.endswith("_" + unit):
            last = last[: -len(unit) - 1]
    return ".".join(parts[:-1] + [last])


def variants(study: Study, systems: dict[str, System]) -> list[tuple[str, SystemVariant]]:
    """(system ref, variant) pairs: each system unchanged, then one change at a time."""
    out = []
    for ref in study.systems:
        system = systems[ref]
        out.append((ref, SystemVariant(ref, study.overrides, "base")))
        for key, choices in study.vary:
            for choice in choices:
                if choice.endswith("x"):
                    base = figure(system, key)
                    try:
                        factor = float(choice[:-1])
                    except ValueError:
                        raise ConfigError(f"--vary {key}: cannot read {choice!r} (use a value "
                                          f"or a factor like 2x)") from None
                    if isinstance(base, (bool, str)):
                        raise ConfigError(f"--vary {key}: {choice!r}: a factor needs a number")
                    if not math.isfinite(factor) or factor < 0:
                        raise ConfigError(f"--vary {key}={choice}: a factor must be a finite "
                                          f"number at least 0")
                    value = base * factor
                    value = int(round(value)) if isinstance(base, int) else float(f"{value:.12g}")
                    label = f"{_short(key)} x{factor:g}"
                else:
                    figure(system, key)
                    value, label = choice, f"{_short(key)}={choice}"
                out.append((ref, SystemVariant(ref, study.overrides + (f"{key}={value}",), label)))
    return out


def load_variants(study: Study, what: str = "") -> list[tuple[SystemVariant, System]]:
    """Load every system of the study as each variant (so bad keys fail before running);
    ``what`` names where the systems were given (default: the study file's ``systems``)."""
    if not study.systems:
        raise ConfigError(f"{study.path or study.name}: no systems (give systems = [...] "
                          f"or --systems)")
    bases = {ref: load_system(ref, study.overrides) for ref in study.systems}
    check_unique_systems([(ref, bases[ref]) for ref in study.systems],
                         what or f"{study.path or study.name}: systems")
    return [(v, _load_variant(v) if v.overrides != study.overrides else bases[ref])
            for ref, v in variants(study, bases)]


def _load_variant(variant: SystemVariant) -> System:
    """A what-if system; an impossible value names the --vary that made it."""
    try:
        return variant.load()
    except ConfigError as exc:
        change = variant.overrides[-1]
        message = str(exc).replace(f"--set {change}: ", "")
        raise ConfigError(f"--vary {variant.label} ({change}) on {variant.ref}: "
                          f"{message}") from None


__all__ = ["Case", "Workload", "Study", "Variant", "load_study", "default_study",
           "find_study", "parse_vary", "figure", "variants", "load_variants", "split_note",
           "KNOWN_OPS",
           "PLANNED_OPS", "PLOT_KINDS"]
