"""The folds a solution makes in its reference: neighbouring element-wise work run inside the
generated collective instead of as a torch launch of its own (docs/decisions/D85.md).

One fold is generated so far, the epilogue that divides a reduction's sum by the group's size:
two consecutive statements of the reference

    dist.all_reduce(X, op=dist.ReduceOp.SUM, group=G)   # op SUM or left out
    X.div_(E)                  # or X /= E, or X = X / E where X is no parameter of the function

become ``dist.all_reduce_div(X, E, op=..., group=G)`` (``PksimDist.all_reduce_div``), which
runs the generated all-reduce with the average's epilogue (the reduce op ``avg`` of
collectives/epilogue.cuh: the sum in fp32 scaled by 1 / world in the kernel's last pass, one
rounding) when E is the group's size at run time, and the two calls as written otherwise;
``dist.reduce_scatter_tensor(OUT, IN, ...)`` followed by ``OUT.div_(E)`` likewise becomes
``dist.reduce_scatter_tensor_div(OUT, IN, E, ...)`` (the generated reduce-scatter with ``avg``).

``folded_source`` rewrites the reference's text as the solution loads it (no PKB code is
copied into a solution); ``program_folds`` names the program's ops that the same fold removes
from the solution's plan (``pksim.pkb.predict``): a one-kernel elementwise op reading only the
tensor the all-reduce or reduce-scatter (sum) just before it writes, and writing it (or one
tensor of its shape and type), in a problem whose reference has the fold.
"""
from __future__ import annotations

import ast

# torch.distributed call -> (the shim's folded call, its positional tensors: the first is the
# one divided, the fold's name)
FOLDS = {"all_reduce": ("all_reduce_div", 1, "all-reduce + divide"),
         "reduce_scatter_tensor": ("reduce_scatter_tensor_div", 2, "reduce-scatter + divide")}
PROGRAM_KINDS = ("all-reduce", "reduce-scatter")     # the program ops those calls are


def _dist_call(node: ast.stmt) -> tuple[ast.Call, str] | None:
    """(the call, its name) of a statement ``dist.<one of FOLDS>(...)``."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        f = node.value.func
        if isinstance(f, ast.Attribute) and f.attr in FOLDS and isinstance(f.value, ast.Name) \
                and f.value.id == "dist":
            return node.value, f.attr
    return None


def _sum_op(call: ast.Call) -> bool:
    """A sum: op=...SUM or op left out (the call's tensors only positional, checked apart)."""
    for k in call.keywords:
        if k.arg == "op":
            return isinstance(k.value, ast.Attribute) and k.value.attr == "SUM"
    return True


def _divides(node: ast.stmt, target: str, local: bool) -> ast.expr | None:
    """E of ``target.div_(E)``, ``target /= E`` or (``local``: target is no parameter of the
    function, so that dividing it in place changes no tensor of the caller) ``target = target
    / E``; None otherwise."""
    if local and isinstance(node, ast.Assign) and len(node.targets) == 1 \
            and isinstance(node.targets[0], ast.Name) and node.targets[0].id == target \
            and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Div) \
            and isinstance(node.value.left, ast.Name) and node.value.left.id == target:
        return node.value.right
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div) \
            and isinstance(node.target, ast.Name) and node.target.id == target:
        return node.value
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        f = node.value.func
        if isinstance(f, ast.Attribute) and f.attr == "div_" and isinstance(f.value, ast.Name) \
                and f.value.id == target and len(node.value.args) == 1 and not node.value.keywords:
            return node.value.args[0]
    return None


class _Folder(ast.NodeTransformer):
    def __init__(self):
        self.sites: list[tuple[int, str]] = []     # (line, fold) of each folded call
        self.params: list[set[str]] = [set()]   # the parameters of the functions entered

    def visit_FunctionDef(self, node):
        a = node.args
        self.params.append({x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
                           | {x.arg for x in (a.vararg, a.kwarg) if x is not None})
        try:
            return self.generic_visit(node)
        finally:
            self.params.pop()

    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                setattr(node, field, self._fold(stmts))
        return node

    def _fold(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out, i = [], 0
        while i < len(stmts):
            found = _dist_call(stmts[i])
            call, fname = found if found else (None, "")
            folded, nargs, label = FOLDS.get(fname, ("", 0, ""))
            if call is not None and len(call.args) == nargs and isinstance(call.args[0], ast.Name) \
                    and _sum_op(call) and i + 1 < len(stmts):
                name = call.args[0].id
                divisor = _divides(stmts[i + 1], name, name not in self.params[-1])
                if divisor is not None:
                    new = ast.Call(
                        func=ast.Attribute(value=ast.Name("dist", ast.Load()), attr=folded,
                                           ctx=ast.Load()),
                        args=[*call.args, divisor], keywords=call.keywords)
                    out.append(ast.copy_location(ast.Expr(new), stmts[i]))
                    self.sites.append((stmts[i].lineno, label))
                    i += 2
                    continue
            out.append(stmts[i])
            i += 1
        return out


def folded_source(text: str) -> tuple[str, list[tuple[int, str]]]:
    """The reference's text with the folds made (see the module), and (line, fold) of each
    call folded; the text unchanged when there is none."""
    tree = ast.parse(text)
    folder = _Folder()
    tree = folder.visit(tree)
    if not folder.sites:
        return text, []
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n", sorted(folder.sites)


def _alike(program, a: str, b: str) -> bool:
    ta, tb = program.tensors[a], program.tensors[b]
    return ta.shape == tb.shape and ta.dtype == tb.dtype


def program_folds(program) -> set[str]:
    """The elementwise ops of ``program`` that the fold removes (see the module)."""
    folded = set()
    ops = program.ops
    for prev, op in zip(ops, ops[1:]):
        target = prev.writes[0] if prev.writes else ""
        if prev.kind in PROGRAM_KINDS and prev.param("reduce", "sum") == "sum" \
                and op.kind == "elementwise" and op.reads == (target,) and len(op.writes) == 1 \
                and _alike(program, op.writes[0], target) and op.param("kernels", 1) == 1:
            folded.add(op.name)
    return folded
