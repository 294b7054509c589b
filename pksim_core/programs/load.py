"""Reading program files strictly, as system files are read (hwmodels.catalog): an unknown
key, a wrong type or a bad value is a ``ConfigError`` naming the file, the op and the key, in
one line. Loops are unrolled and the fused ops written as their GEMM and collective here; the
checks that need the whole program (tensors, shapes, splits, dependencies) are
``pksim_core.programs.check``'s.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from hwmodels.errors import ConfigError
from hwmodels.files import read_toml
from hwmodels.resources import package_dir
from pksim_core.programs.check import check_program
from pksim_core.programs.model import (COLLECTIVE_KINDS, DTYPE_BYTES, FUSED_KINDS, IN_PLACE, KINDS,
                                  MEMORY_KINDS, REDUCE_OPS, REDUCING, ROOTED, ProcessGroup, Op, P2P,
                                  ProgramSpec, Tensor)

PROGRAMS_DIR = package_dir("pksim_core", "programs", "shipped")
_TOP_KEYS = {"name": "str", "description": "str", "covers": "ints", "world": "int", "rank": "int",
             "dtype": "dtype", "source": "str", "notes": "strs", "tensors": "table",
             "groups": "table", "op": "ops", "loop": "loops"}
_COMMON = {"name": "str", "kind": "str", "after": "strs", "note": "str"}
_GEMM = {"a": "tensor", "b": "tensor", "out": "tensor", "bias": "tensor", "transpose_a": "bool",
         "transpose_b": "bool"}
_MEMORY = {"reads": "tensors", "writes": "tensors", "bytes_read": "int", "bytes_written": "int",
           "bytes": "int", "flops": "num", "kernels": "int"}
_COLL = {"input": "tensor", "output": "tensor", "group": "str", "async": "bool"}
# Per kind: its keys and their types ("tensor": a tensor's name); required ones follow.
_KEYS: dict[str, dict[str, str]] = {
    "gemm": _GEMM,
    "grouped-gemm": {**_GEMM, "m_splits": "ints"},
    "conv": {"input": "tensor", "weight": "tensor", "out": "tensor", "bias": "tensor",
             "stride": "int", "padding": "pad", "groups": "int"},
    "attention": {"q": "tensor", "k": "tensor", "v": "tensor", "out": "tensor", "batch": "int",
                  "heads": "int", "kv_heads": "int", "q_seq": "int", "kv_seq": "int",
                  "head_dim": "int", "v_head_dim": "int", "causal": "bool"},
    **{kind: _MEMORY for kind in MEMORY_KINDS},
    "host-sync": {"reads": "tensors", "count": "int"},
    **{kind: _COLL for kind in COLLECTIVE_KINDS},
    "sendrecv": {"group": "str", "wrap": "bool", "p2p": "p2p", "async": "bool"},
    **{kind: {**_GEMM, "group": "str", "reduce": "str"} for kind in FUSED_KINDS},
}
for _kind in REDUCING + ("gemm-rs", "gemm-ar"):
    _KEYS[_kind] = {**_KEYS[_kind], "reduce": "str"}
for _kind in ROOTED:
    _KEYS[_kind] = {**_KEYS[_kind], "root": "root"}
_KEYS["all-gather-v"] = {**_COLL, "splits": "ints"}
_KEYS["all-to-all-v"] = {**_COLL, "in_splits": "ints", "out_splits": "ints"}
_KEYS["all-gather-object"] = {**_COLL, "object_bytes": "int"}
_REQUIRED = {
    "gemm": ("a", "b", "out"), "grouped-gemm": ("a", "b", "out", "m_splits"),
    "conv": ("input", "weight", "out"),
    "attention": ("q", "k", "v", "out", "batch", "heads", "q_seq", "head_dim"),
    **{kind: ("reads", "writes") for kind in MEMORY_KINDS},
    "host-sync": (), "sendrecv": ("p2p",),
    **{kind: ("input",) if kind in IN_PLACE else ("input", "output") for kind in COLLECTIVE_KINDS},
    "all-gather-v": ("input", "output", "splits"),
    "all-to-all-v": ("input", "output", "in_splits", "out_splits"),
    "all-gather-object": ("input", "output", "object_bytes"),
    **{kind: ("a", "b", "out") for kind in FUSED_KINDS},
}


def list_programs() -> list[str]:
    """Names of the shipped programs, sorted."""
    return sorted(p.stem for p in PROGRAMS_DIR.glob("*.toml"))


def program_path(name_or_path: str) -> Path:
    """A shipped program's file, or a path to a user's. A bare name (no ``/``, no ``.toml``)
    that is shipped means the shipped program even where a file or folder of that name is
    here (``./name`` names that)."""
    if not name_or_path.strip():
        raise ConfigError(f"program {name_or_path!r}: give a shipped program's name or a "
                          f"program file (pksim programs list)")
    candidate = Path(name_or_path)
    shipped = PROGRAMS_DIR / f"{name_or_path}.toml"
    bare = candidate.suffix != ".toml" and "/" not in name_or_path
    if not (bare and shipped.is_file()) and (not bare or candidate.exists()):
        if candidate.is_dir():
            raise ConfigError(f"program file {name_or_path}: is a folder, not a .toml file")
        if not candidate.is_file():
            raise ConfigError(f"program file {name_or_path}: no such file")
        return candidate
    if not shipped.exists():
        names = list_programs()
        raise ConfigError(f"unknown program {name_or_path!r} ({len(names)} shipped: "
                          f"pksim programs list)")
    return shipped


def load_program(name_or_path: str) -> ProgramSpec:
    """Read, unroll and check a program; ``ConfigError`` names what is wrong."""
    path = program_path(name_or_path)
    return parse_program(read_toml(path, "program file"), str(path))


def parse_program(raw: dict[str, Any], path: str = "<program>") -> ProgramSpec:
    """A program from its parsed TOML (``path`` names it in errors)."""
    for key, value in raw.items():
        if key not in _TOP_KEYS:
            raise ConfigError(f"{path}: unknown key {key!r} (a program takes "
                              f"{', '.join(_TOP_KEYS)})")
        _typed(path, key, value, _TOP_KEYS[key])
    for key in ("name", "world", "op"):
        if key not in raw:
            raise ConfigError(f"{path}: missing key {key!r}")
    world = raw["world"]
    if world < 1:
        raise ConfigError(f"{path}: world must be at least 1, got {world}")
    rank = raw.get("rank", 0)
    if not 0 <= rank < world:
        raise ConfigError(f"{path}: rank {rank} is not a rank of world {world}")
    dtype = raw.get("dtype", "bf16")
    tensors = {name: _tensor(path, name, spec, dtype)
               for name, spec in raw.get("tensors", {}).items()}
    for t in tensors.values():
        base = tensors.get(t.view_of)
        if t.view_of and (base is None or base.view_of or t.nbytes > base.nbytes):
            raise ConfigError(f"{path}: tensors.{t.name}: view_of {t.view_of!r} must name a "
                              f"tensor that is no view itself and holds at least its "
                              f"{t.nbytes} bytes")
    groups = {"world": ProcessGroup("world", (tuple(range(world)),))}
    for name, spec in raw.get("groups", {}).items():
        if name == "world":
            raise ConfigError(f"{path}: groups.world: 'world' is the whole world already")
        groups[name] = _group(path, name, spec, world)
    ops = [_op(path, index, spec) for index, spec in enumerate(raw["op"])]
    ops = _unroll(path, ops, raw.get("loop", []))
    ops = _expand_fused(path, ops, tensors)
    covers = raw.get("covers", [])
    if any(c < 1 for c in covers):
        raise ConfigError(f"{path}: covers: problem numbers are positive, got {covers}")
    program = ProgramSpec(name=raw["name"], description=raw.get("description", ""),
                      covers=tuple(covers), world=world, dtype=dtype, tensors=tensors,
                      groups=groups, ops=tuple(ops), path=path, source=raw.get("source", ""),
                      notes=tuple(raw.get("notes", ())), rank=rank)
    return check_program(program)


# ---- values ------------------------------------------------------------------------------
def _typed(where: str, key: str, value: Any, kind: str) -> Any:
    """``value`` if it has type ``kind``, else a ConfigError naming ``where`` and ``key``."""
    def fail(what: str) -> ConfigError:
        return ConfigError(f"{where}: {key} must be {what}, got {value!r}")

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if kind in ("str", "tensor") and not isinstance(value, str):
        raise fail("a string")
    if kind == "int" and not is_int(value):
        raise fail("an integer")
    if kind == "num" and not (is_int(value) or isinstance(value, float)):
        raise fail("a number")
    if kind == "bool" and not isinstance(value, bool):
        raise fail("true or false")
    if kind == "ints" and not (isinstance(value, list) and all(is_int(v) for v in value)):
        raise fail("a list of integers")
    if kind in ("strs", "tensors") and not (isinstance(value, list) and
                                             all(isinstance(v, str) for v in value)):
        raise fail("a list of strings")
    if kind == "table" and not isinstance(value, dict):
        raise fail("a table")
    if kind in ("ops", "loops", "p2p") and not (isinstance(value, list) and
                                                 all(isinstance(v, dict) for v in value)):
        raise fail("an array of tables")
    if kind == "dtype" and value not in DTYPE_BYTES:
        raise ConfigError(f"{where}: {key} {value!r} is not one of {', '.join(DTYPE_BYTES)}")
    if kind == "pad" and not (is_int(value) or isinstance(value, list) and all(
            is_int(v) for v in value)):
        raise fail("an integer or a list of integers (one per spatial dimension)")
    if kind == "pad" and min([value] if is_int(value) else value + [0]) < 0:
        raise fail("at least 0")
    if kind == "root" and not (is_int(value) or value == "iteration"):
        raise fail("a group member's index or \"iteration\"")
    if kind in ("int", "num") and value < 0:
        raise fail("at least 0")
    if kind == "ints" and any(v < 0 for v in value):
        raise fail("a list of integers >= 0")
    return value


def _tensor(path: str, name: str, spec: Any, dtype: str) -> Tensor:
    where = f"{path}: tensors.{name}"
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a table {{ shape = [...], dtype = ... }}, got {spec!r}")
    for key in spec:
        if key not in ("shape", "dtype", "view_of", "note"):
            raise ConfigError(f"{where}: unknown key {key!r} (a tensor takes shape, dtype, "
                              f"view_of, note)")
    if "shape" not in spec:
        raise ConfigError(f"{where}: missing key 'shape'")
    shape = _typed(where, "shape", spec["shape"], "ints")
    if any(d < 1 for d in shape):
        raise ConfigError(f"{where}: shape must have dimensions >= 1, got {shape}")
    return Tensor(name, tuple(shape), _typed(where, "dtype", spec.get("dtype", dtype), "dtype"),
                  _typed(where, "view_of", spec.get("view_of", ""), "str"))


def _group(path: str, name: str, spec: Any, world: int) -> ProcessGroup:
    where = f"{path}: groups.{name}"
    if not isinstance(spec, dict) or len(spec) != 1 and set(spec) != {"grid", "along"}:
        raise ConfigError(f"{where} must be {{ grid = [rows, columns], along = \"row\" | "
                          f"\"column\" }} or {{ ranks = [[...], ...] }}, got {spec!r}")
    if "ranks" in spec:
        parts = spec["ranks"]
        if not (isinstance(parts, list) and parts and all(
                isinstance(p, list) and p and all(isinstance(r, int) and not isinstance(r, bool)
                                                  for r in p) for p in parts)):
            raise ConfigError(f"{where}: ranks must be a list of lists of ranks, got {parts!r}")
    elif set(spec) == {"grid", "along"}:
        grid = _typed(where, "grid", spec["grid"], "ints")
        if len(grid) != 2 or grid[0] * grid[1] != world:
            raise ConfigError(f"{where}: grid {grid} must be [rows, columns] with rows x columns "
                              f"= world ({world})")
        rows, cols = grid
        if spec["along"] == "row":       # rank = row x columns + column
            parts = [[r * cols + c for c in range(cols)] for r in range(rows)]
        elif spec["along"] == "column":
            parts = [[r * cols + c for r in range(rows)] for c in range(cols)]
        else:
            raise ConfigError(f"{where}: along must be \"row\" or \"column\", got "
                              f"{spec['along']!r}")
    else:
        raise ConfigError(f"{where}: unknown key(s) {sorted(spec)} (a group takes grid and "
                          f"along, or ranks)")
    flat = [r for p in parts for r in p]
    if any(not 0 <= r < world for r in flat):
        raise ConfigError(f"{where}: ranks must be in 0..{world - 1}, got {parts}")
    if len(set(flat)) != len(flat):
        raise ConfigError(f"{where}: a rank is in two of its groups ({parts})")
    if len({len(p) for p in parts}) != 1:
        raise ConfigError(f"{where}: its groups must have one size, got {parts}")
    return ProcessGroup(name, tuple(tuple(p) for p in parts))


def _op(path: str, index: int, spec: dict) -> dict:
    """One [[op]] table checked against its kind's keys: a dict of its values."""
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{path}: op #{index + 1}: missing key 'name' (a string)")
    where = f"{path}: op {name!r}"
    kind = spec.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
    keys = {**_COMMON, **_KEYS[kind]}
    for key, value in spec.items():
        if key not in keys:
            raise ConfigError(f"{where}: unknown key {key!r} for kind {kind} (it takes "
                              f"{', '.join(k for k in keys if k not in ('name', 'kind'))})")
        _typed(where, key, value, keys[key])
    for key in _REQUIRED[kind]:
        if key not in spec:
            raise ConfigError(f"{where}: missing key {key!r} for kind {kind}")
    if "reduce" in spec and spec["reduce"] not in REDUCE_OPS:
        raise ConfigError(f"{where}: reduce {spec['reduce']!r} is not one of "
                          f"{', '.join(REDUCE_OPS)}")
    if kind == "sendrecv":
        spec = {**spec, "p2p": [_p2p(where, i, e) for i, e in enumerate(spec["p2p"])]}
    return dict(spec)


def _p2p(where: str, index: int, entry: dict) -> P2P:
    keys = set(entry)
    if keys not in ({"send", "to"}, {"recv", "from"}):
        raise ConfigError(f"{where}: p2p entry {index + 1} must be {{ send = tensor, to = "
                          f"offset }} or {{ recv = tensor, from = offset }}, got {entry!r}")
    send = "send" in entry
    tensor = _typed(where, f"p2p[{index}].{'send' if send else 'recv'}",
                    entry["send" if send else "recv"], "tensor")
    offset = entry["to" if send else "from"]
    if not isinstance(offset, int) or isinstance(offset, bool) or offset == 0:
        raise ConfigError(f"{where}: p2p[{index}].{'to' if send else 'from'} must be a nonzero "
                          f"offset along the group, got {offset!r}")
    return P2P(send, tensor, offset)


# ---- loops and fused ops -------------------------------------------------------------------
def _unroll(path: str, ops: list[dict], loops: list[dict]) -> list[dict]:
    """Each [[loop]] repeats its consecutive ops ``times`` times; iteration i (from ``start``,
    default 0) names its copy of op X ``X.i`` and gives a ``root = "iteration"`` the root i;
    ``after`` inside the loop names the same iteration's copy, after it the last."""
    names = [op["name"] for op in ops]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ConfigError(f"{path}: op {dup!r}: two ops have this name")
    spans = []
    for index, loop in enumerate(loops):
        where = f"{path}: loop #{index + 1}"
        for key, value in loop.items():
            if key not in ("name", "ops", "times", "start"):
                raise ConfigError(f"{where}: unknown key {key!r} (a loop takes name, ops, times, "
                                  f"start)")
        for key, kind in (("ops", "strs"), ("times", "int")):
            if key not in loop:
                raise ConfigError(f"{where}: missing key {key!r}")
            _typed(where, key, loop[key], kind)
        if loop["times"] < 1:
            raise ConfigError(f"{where}: times must be at least 1, got {loop['times']}")
        first_iteration = _typed(where, "start", loop.get("start", 0), "int")
        members = loop["ops"]
        for member in members:
            if member not in names:
                raise ConfigError(f"{where}: op {member!r}: no such op")
        first = names.index(members[0]) if members else -1
        if not members or names[first:first + len(members)] != members:
            raise ConfigError(f"{where}: ops {members} must be consecutive ops in file order")
        spans.append((first, first + len(members), loop["times"], first_iteration))
    spans.sort()
    for (a0, a1, _, _), (b0, _, _, _) in zip(spans, spans[1:]):
        if b0 < a1:
            raise ConfigError(f"{path}: two loops share op {names[b0]!r}")
    out: list[dict] = []
    alias: dict[str, str] = {}
    cursor = 0
    for first, end, times, start in spans + [(len(ops), len(ops), 0, 0)]:
        for op in ops[cursor:first]:
            out.append({**op, "after": [alias.get(a, a) for a in op.get("after", [])]})
        inside = set(names[first:end])
        for i in range(start, start + times):
            for op in ops[first:end]:
                copy = {**op, "name": f"{op['name']}.{i}", "_loop": (op["name"], i),
                        "after": [f"{a}.{i}" if a in inside else alias.get(a, a)
                                  for a in op.get("after", [])]}
                if copy.get("root") == "iteration":
                    copy["root"] = i
                out.append(copy)
        for name in inside:
            alias[name] = f"{name}.{start + times - 1}"
        cursor = end
    for op in out:
        if op.get("root") == "iteration":
            raise ConfigError(f"{path}: op {op['name']!r}: root = \"iteration\" is for ops "
                              f"inside a loop")
    return out


def _expand_fused(path: str, ops: list[dict], tensors: dict[str, Tensor]) -> list[Op]:
    """Every op as an ``Op``; a fused op (gemm-rs, gemm-ar, ag-gemm) as its GEMM and its
    collective, through a tensor named after it."""
    out: list[Op] = []
    alias: dict[str, str] = {}
    for spec in ops:
        kind, name = spec["kind"], spec["name"]
        after = tuple(alias.get(a, a) for a in spec.get("after", []))
        if kind not in FUSED_KINDS:
            out.append(_as_op(spec, after))
            continue
        for key in ("a", "b", "out"):
            if spec[key] not in tensors:
                raise ConfigError(f"{path}: op {name!r}: {key}: unknown tensor {spec[key]!r}")
        a, b, result = tensors[spec["a"]], tensors[spec["b"]], tensors[spec["out"]]
        group = spec.get("group", "world")
        n_cols = b.shape[0] if spec.get("transpose_b") else b.shape[-1]
        gemm = {k: spec[k] for k in ("a", "b", "transpose_a", "transpose_b", "bias") if k in spec}
        if kind == "ag-gemm":
            whole = f"{name}.gathered"
            rows = result.elements // n_cols
            tensors[whole] = Tensor(whole, (rows, a.elements // a.shape[0] if a.shape else 1),
                                    a.dtype)
            out.append(_as_op({"name": f"{name}.ag", "kind": "all-gather", "input": a.name,
                               "output": whole, "group": group}, after))
            out.append(_as_op({**gemm, "name": f"{name}.gemm", "kind": "gemm", "a": whole,
                               "out": result.name}, ()))
            alias[name] = f"{name}.gemm"
            continue
        partial = f"{name}.partial"
        rows = a.elements // (a.shape[0] if spec.get("transpose_a") else a.shape[-1])
        tensors[partial] = Tensor(partial, (rows, n_cols), result.dtype)
        coll = "reduce-scatter" if kind == "gemm-rs" else "all-reduce"
        out.append(_as_op({**gemm, "name": f"{name}.gemm", "kind": "gemm", "out": partial},
                          after))
        out.append(_as_op({"name": f"{name}.{'rs' if kind == 'gemm-rs' else 'ar'}",
                           "kind": coll, "input": partial, "output": result.name,
                           "group": group, "reduce": spec.get("reduce", "sum")}, ()))
        alias[name] = out[-1].name
    return out


def _as_op(spec: dict, after: tuple[str, ...]) -> Op:
    kind = spec["kind"]
    reads: list[str] = []
    writes: list[str] = []
    p2p: tuple[P2P, ...] = ()
    if kind in ("gemm", "grouped-gemm"):
        reads, writes = [spec["a"], spec["b"]] + ([spec["bias"]] if "bias" in spec else []), \
            [spec["out"]]
    elif kind == "conv":
        reads = [spec["input"], spec["weight"]] + ([spec["bias"]] if "bias" in spec else [])
        writes = [spec["out"]]
    elif kind == "attention":
        reads, writes = [spec["q"], spec["k"], spec["v"]], [spec["out"]]
    elif kind in MEMORY_KINDS:
        reads, writes = list(spec["reads"]), list(spec["writes"])
    elif kind == "host-sync":
        reads = list(spec.get("reads", []))
    elif kind == "sendrecv":
        p2p = tuple(spec["p2p"])
        reads = [e.tensor for e in p2p if e.send]
        writes = [e.tensor for e in p2p if not e.send]
    else:                                   # a collective
        reads = [spec["input"]]
        writes = [spec.get("output", spec["input"])]
    skip = {"name", "kind", "after", "note", "group", "p2p", "_loop"}
    params = tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                          for k, v in spec.items() if k not in skip))
    return Op(name=spec["name"], kind=kind, reads=tuple(dict.fromkeys(reads)),
              writes=tuple(dict.fromkeys(writes)), after=after,
              group=spec.get("group", "world"), params=params, p2p=p2p,
              loop=spec.get("_loop"))
