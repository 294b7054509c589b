"""The checks a program needs as a whole, and what they derive: every tensor an op names
exists, shapes agree (a GEMM's inner dimensions, a collective's input and output, splits that
sum), send/recv batches pair up, roots and groups exist, and the dependencies, explicit
(``after``) and inferred from tensor use in file order (read after write, write after read
or write), form no cycle. Each error is one line naming the file and the op.

Derived per op: FLOP (as torch's FlopCounterMode counts them, and the work a causal mask
leaves), HBM bytes, the GEMM shapes, the size as nccl-tests counts it, the element type, and
its dependencies. Ops are returned in issue order: file order, except where an ``after``
names a later op (a stable topological order).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import replace

from hwmodels.errors import ConfigError
from hwmodels.sm import causal_fraction
from pksim_core.programs.model import (COLLECTIVE_KINDS, DTYPE_BYTES, MEMORY_KINDS, REDUCING,
                                  ROOTED, Op, ProgramSpec, Tensor)


def check_program(program: ProgramSpec) -> ProgramSpec:
    ops = []
    for op in program.ops:
        where = f"{program.path}: op {op.name!r}"
        for name in op.reads + op.writes:
            if name not in program.tensors:
                raise ConfigError(f"{where}: unknown tensor {name!r}")
        if (op.is_comm or op.kind in ("gemm-rs", "gemm-ar", "ag-gemm")) and \
                op.group not in program.groups:
            raise ConfigError(f"{where}: group: unknown group {op.group!r} (groups: "
                              f"{', '.join(program.groups)})")
        ops.append(_derive(program, op, where))
    ops = _dependencies(program, ops)
    out = replace(program, ops=tuple(ops))
    out.op_index.update({op.name: i for i, op in enumerate(ops)})
    return out


# ---- per kind --------------------------------------------------------------------------------
def _derive(program: ProgramSpec, op: Op, where: str) -> Op:
    t = program.tensors
    if op.kind == "gemm":
        return _gemm(op, where, t)
    if op.kind == "grouped-gemm":
        return _grouped(op, where, t)
    if op.kind == "conv":
        return _conv(op, where, t)
    if op.kind == "attention":
        return _attention(op, where, t)
    if op.kind in MEMORY_KINDS:
        read = op.param("bytes_read", sum(t[n].nbytes for n in op.reads))
        written = op.param("bytes_written", sum(t[n].nbytes for n in op.writes))
        nbytes = read + written + op.param("bytes", 0)
        if op.param("kernels", 1) == 0:
            # no kernel: a Python rebinding (k = next_k) that only orders the ops around it
            if op.param("flops") or any(op.param(k) for k in ("bytes", "bytes_read",
                                                             "bytes_written")):
                raise ConfigError(f"{where}: kernels = 0 (a rebinding) moves no bytes and "
                                  f"does no FLOP")
            nbytes = 0
        dtype = t[op.writes[0]].dtype if op.writes else t[op.reads[0]].dtype if op.reads \
            else program.dtype
        return replace(op, nbytes=nbytes, vector_flops=float(op.param("flops", 0)), dtype=dtype)
    if op.kind == "host-sync":
        if op.param("count", 1) < 1:
            raise ConfigError(f"{where}: count must be at least 1")
        return op
    if op.kind == "sendrecv":
        return _sendrecv(program, op, where)
    return _collective(program, op, where)


def _shape_error(where: str, what: str) -> ConfigError:
    return ConfigError(f"{where}: shape mismatch: {what}")


def _gemm(op: Op, where: str, t: dict[str, Tensor]) -> Op:
    a, b, out = t[op.param("a")], t[op.param("b")], t[op.param("out")]
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise _shape_error(where, f"a {list(a.shape)} and b {list(b.shape)} need 2 dimensions "
                                  f"or more")
    if a.dtype != b.dtype:
        raise ConfigError(f"{where}: a is {a.dtype} and b is {b.dtype}: a GEMM takes one type")
    am, ak = (a.shape[-1], a.shape[-2]) if op.param("transpose_a") else a.shape[-2:]
    bk, n = (b.shape[-1], b.shape[-2]) if op.param("transpose_b") else b.shape[-2:]
    if ak != bk:
        raise _shape_error(where, f"a {list(a.shape)} @ b {list(b.shape)}: inner dimensions "
                                  f"{ak} and {bk} differ")
    if len(b.shape) == 2:                   # a weight: a's leading dimensions are rows
        batch, m = 1, math.prod(a.shape[:-2]) * am
    else:
        if a.shape[:-2] != b.shape[:-2]:
            raise _shape_error(where, f"a {list(a.shape)} and b {list(b.shape)}: batch "
                                      f"dimensions differ")
        batch, m = math.prod(a.shape[:-2]), am
    if out.elements != batch * m * n or out.shape[-1] != n:
        raise _shape_error(where, f"out {op.param('out')} is {list(out.shape)}, a @ b gives "
                                  f"{batch} x [{m}, {n}]")
    flops = 2.0 * batch * m * n * ak
    elem = DTYPE_BYTES[a.dtype]
    nbytes = elem * batch * (m * ak + ak * n + m * n)
    if op.param("bias"):
        nbytes += t[op.param("bias")].nbytes
    return replace(op, flops=flops, work_flops=flops, nbytes=nbytes, dtype=a.dtype,
                   gemm_shapes=((m, n, ak),) * batch)


def _grouped(op: Op, where: str, t: dict[str, Tensor]) -> Op:
    a, b, out = t[op.param("a")], t[op.param("b")], t[op.param("out")]
    splits = op.param("m_splits")
    if len(a.shape) != 2 or len(b.shape) != 3:
        raise _shape_error(where, f"a {list(a.shape)} must be [tokens, k] and b "
                                  f"{list(b.shape)} [groups, k, n]")
    k, n = (b.shape[2], b.shape[1]) if op.param("transpose_b") else b.shape[1:]
    if a.shape[1] != k or len(splits) != b.shape[0] or sum(splits) != a.shape[0]:
        raise _shape_error(where, f"a {list(a.shape)}, b {list(b.shape)}, m_splits {list(splits)}"
                                  f": need a's columns = k, one split per group, splits summing "
                                  f"to a's rows")
    if out.elements != a.shape[0] * n:
        raise _shape_error(where, f"out is {list(out.shape)}, expected [{a.shape[0]}, {n}]")
    flops = sum(2.0 * m * n * k for m in splits)
    nbytes = DTYPE_BYTES[a.dtype] * (a.elements + b.elements + out.elements)
    return replace(op, flops=flops, work_flops=flops, nbytes=nbytes, dtype=a.dtype,
                   gemm_shapes=tuple((m, n, k) for m in splits if m))


def _conv(op: Op, where: str, t: dict[str, Tensor]) -> Op:
    x, w, out = t[op.param("input")], t[op.param("weight")], t[op.param("out")]
    stride, pad, groups = op.param("stride", 1), op.param("padding", 0), op.param("groups", 1)
    dims = len(x.shape) - 2
    if dims < 1 or len(w.shape) != dims + 2 or len(out.shape) != dims + 2 or stride < 1 \
            or groups < 1:
        raise _shape_error(where, f"input {list(x.shape)}, weight {list(w.shape)}, out "
                                  f"{list(out.shape)}: need [N, C, *space], [O, C/groups, "
                                  f"*kernel], [N, O, *space]")
    channels, kernel = x.shape[1], w.shape[2:]
    pads = list(pad) if isinstance(pad, tuple) else [pad] * dims
    if len(pads) != dims:
        raise ConfigError(f"{where}: padding {list(pads)} needs one entry per spatial "
                          f"dimension ({dims})")
    space = [(s + 2 * p - k) // stride + 1 for s, k, p in zip(x.shape[2:], kernel, pads)]
    if channels % groups or w.shape[0] % groups or w.shape[1] * groups != channels \
            or list(out.shape) != [x.shape[0], w.shape[0], *space]:
        raise _shape_error(where, f"input {list(x.shape)} * weight {list(w.shape)} (stride "
                                  f"{stride}, padding {pads}, groups {groups}) gives "
                                  f"{[x.shape[0], w.shape[0], *space]}, out is {list(out.shape)}")
    m = x.shape[0] * math.prod(space)
    n, k = w.shape[0] // groups, w.shape[1] * math.prod(kernel)
    flops = 2.0 * m * n * k * groups
    nbytes = x.nbytes + w.nbytes + out.nbytes + (t[op.param("bias")].nbytes
                                                 if op.param("bias") else 0)
    return replace(op, flops=flops, work_flops=flops, nbytes=nbytes, dtype=x.dtype,
                   gemm_shapes=((m, n, k),) * groups)


def _attention(op: Op, where: str, t: dict[str, Tensor]) -> Op:
    q, k, v, out = (t[op.param(key)] for key in ("q", "k", "v", "out"))
    b, h, sq, d = (op.param(key) for key in ("batch", "heads", "q_seq", "head_dim"))
    hk, sk = op.param("kv_heads", h), op.param("kv_seq", sq)
    dv = op.param("v_head_dim", d)
    if min(b, h, sq, d, hk, sk, dv) < 1 or h % hk:
        raise ConfigError(f"{where}: batch, heads, sequences and head sizes must be >= 1 and "
                          f"heads ({h}) a multiple of kv_heads ({hk})")
    for tensor, want in ((q, b * h * sq * d), (k, b * hk * sk * d), (v, b * hk * sk * dv),
                         (out, b * h * sq * dv)):
        if tensor.elements != want:
            raise _shape_error(where, f"{tensor.name} {list(tensor.shape)} has {tensor.elements} "
                                      f"elements; batch {b}, heads {h}/{hk}, seq {sq}/{sk}, "
                                      f"head_dim {d}/{dv} need {want}")
    flops = 2.0 * b * h * sq * sk * (d + dv)
    work = flops * (causal_fraction(sq, sk) if op.param("causal") else 1.0)
    nbytes = q.nbytes + k.nbytes + v.nbytes + out.nbytes
    return replace(op, flops=flops, work_flops=work, nbytes=nbytes, dtype=q.dtype)


def _collective(program: ProgramSpec, op: Op, where: str) -> Op:
    t = program.tensors
    group = program.groups[op.group]
    n = group.size
    src = t[op.reads[0]]
    dst = t[op.writes[0]]
    kind = op.kind
    if src.dtype != dst.dtype:
        raise ConfigError(f"{where}: input is {src.dtype} and output {dst.dtype}: a collective "
                          f"moves one type")
    if kind in REDUCING and op.param("reduce") is None:
        op = replace(op, params=tuple(sorted(op.params + (("reduce", "sum"),))))
    if kind in ROOTED:
        root = op.param("root", 0)
        if not 0 <= root < n:
            raise ConfigError(f"{where}: root {root} is not a member of its group of {n}")
    want = {"all-reduce": (1, 1), "broadcast": (1, 1), "reduce": (1, 1), "all-to-all": (1, 1),
            "all-gather": (1, n), "gather": (1, n), "reduce-scatter": (n, 1),
            "scatter": (n, 1)}.get(kind)
    if want is not None and src.elements * want[1] != dst.elements * want[0]:
        raise _shape_error(where, f"{kind} over {n} ranks takes input {src.name} "
                                  f"{list(src.shape)} to output {dst.name} {list(dst.shape)}: "
                                  f"elements must be in the ratio {want[0]}:{want[1]}")
    if kind == "all-to-all" and src.elements % n:
        raise _shape_error(where, f"all-to-all input {list(src.shape)} does not split over {n}")
    size = {"all-gather": dst.nbytes, "gather": dst.nbytes, "all-gather-v": dst.nbytes}.get(
        kind, src.nbytes)
    if kind == "all-gather-v":
        _splits(where, "splits", op.param("splits"), n, dst)
        rank_rows = op.param("splits")[group.of(program.rank).index(program.rank)]
        if src.shape[0] != rank_rows or src.row_elements != dst.row_elements:
            raise _shape_error(where, f"input {list(src.shape)} must be rank {program.rank}'s "
                                      f"{rank_rows} rows of output {list(dst.shape)}")
    if kind == "all-to-all-v":
        _splits(where, "in_splits", op.param("in_splits"), n, src)
        _splits(where, "out_splits", op.param("out_splits"), n, dst)
        if src.row_elements != dst.row_elements:
            raise _shape_error(where, f"input rows ({list(src.shape)}) and output rows "
                                      f"({list(dst.shape)}) differ")
    if kind == "all-gather-object":
        size = n * 8 + n * op.param("object_bytes")
    return replace(op, comm_bytes=int(size), dtype=src.dtype)


def _splits(where: str, key: str, splits: tuple[int, ...], n: int, tensor: Tensor) -> None:
    if len(splits) != n:
        raise ConfigError(f"{where}: {key} has {len(splits)} entries for a group of {n}")
    if sum(splits) != tensor.shape[0]:
        raise ConfigError(f"{where}: {key} {list(splits)} sum to {sum(splits)}, not the "
                          f"{tensor.shape[0]} rows of {tensor.name} {list(tensor.shape)}")


def _sendrecv(program: ProgramSpec, op: Op, where: str) -> Op:
    t = program.tensors
    n = program.groups[op.group].size
    sends: dict[tuple[int, int], int] = {}
    for e in op.p2p:
        if abs(e.offset) >= n:
            raise ConfigError(f"{where}: offset {e.offset:+d} leaves its group of {n}")
        key = (e.offset if e.send else -e.offset, t[e.tensor].nbytes)
        sends[key] = sends.get(key, 0) + (1 if e.send else -1)
    for (offset, nbytes), count in sends.items():
        if count:
            what = "send to" if count > 0 else "recv from"
            other = "recv from" if count > 0 else "send to"
            d = offset if count > 0 else -offset
            raise ConfigError(f"{where}: a {what} {d:+d} of {nbytes} bytes has no matching "
                              f"{other} {-d:+d}")
    mine = program.groups[op.group].of(program.rank)
    size = sum(t[e.tensor].nbytes for e in op.p2p
               if e.send and peer_position(mine.index(program.rank), e.offset, n,
                                           op.param("wrap", True)) is not None)
    dtypes = {t[e.tensor].dtype for e in op.p2p}
    return replace(op, comm_bytes=size, dtype=sorted(dtypes)[0])


def peer_position(position: int, offset: int, n: int, wrap: bool) -> int | None:
    """The group position ``offset`` places from ``position``; None past an end without wrap."""
    q = position + offset
    if wrap:
        return q % n
    return q if 0 <= q < n else None


# ---- dependencies --------------------------------------------------------------------------
def _dependencies(program: ProgramSpec, ops: list[Op]) -> list[Op]:
    names = {op.name: i for i, op in enumerate(ops)}
    last_writer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    deps: list[set[int]] = []
    for i, op in enumerate(ops):
        mine: set[int] = set()
        for name in op.after:
            if name not in names:
                raise ConfigError(f"{program.path}: op {op.name!r}: after: unknown op {name!r}")
            if name == op.name:
                raise ConfigError(f"{program.path}: op {op.name!r}: after names the op itself")
            mine.add(names[name])
        reads = [program.base(t) for t in op.reads]
        writes = [program.base(t) for t in op.writes]
        for name in reads:
            if name in last_writer:
                mine.add(last_writer[name])
        for name in writes:
            if name in last_writer:
                mine.add(last_writer[name])
            mine.update(readers.get(name, []))
        for name in reads:
            readers.setdefault(name, []).append(i)
        for name in writes:
            last_writer[name] = i
            readers[name] = []
        mine.discard(i)
        deps.append(mine)
    order = _issue_order(program, ops, deps)
    return [replace(ops[i], deps=tuple(ops[d].name for d in sorted(deps[i], key=order.index)))
            for i in order]


def _issue_order(program: ProgramSpec, ops: list[Op], deps: list[set[int]]) -> list[int]:
    """File order where the dependencies allow it (Kahn's algorithm taking the earliest op
    first); a cycle is an error naming an op on it."""
    waiting = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in ops]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(ops):
        stuck = [i for i in range(len(ops)) if waiting[i] > 0]
        cycle = _cycle(stuck, deps)
        names = " -> ".join(ops[i].name for i in cycle)
        raise ConfigError(f"{program.path}: op {ops[cycle[0]].name!r}: dependency cycle {names}")
    return order


def _cycle(stuck: list[int], deps: list[set[int]]) -> list[int]:
    """A cycle among the ops that never became ready: follow dependencies until one repeats."""
    alive = set(stuck)
    path = [stuck[0]]
    while True:
        nxt = min(d for d in deps[path[-1]] if d in alive)
        if nxt in path:
            cycle = path[path.index(nxt):]
            return list(reversed(cycle)) + [cycle[-1]]
        path.append(nxt)
