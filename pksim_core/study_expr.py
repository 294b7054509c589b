"""Shape values of a study as expressions: ``k = "ceil(28672 / tp)"`` in ``tp`` (= ``world``)
and the other shape keys, with numbers, + - * / // % **, ceil, floor, min and max; strings
that read as sizes ("1GiB") are bytes. Every result must be a whole, positive number no larger
than MAX_SHAPE_VALUE, every exponent at most MAX_EXPONENT (``2 ** 10 ** 10`` would never end).
"""
from __future__ import annotations

import ast
import math
import operator
from typing import Any

from hwmodels.errors import ConfigError
from hwmodels.units import parse_bytes

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_FUNCS = {"ceil": math.ceil, "floor": math.floor, "min": min, "max": max}
MAX_EXPONENT = 64            # 2 ** 64 is past any shape; 2 ** 10 ** 10 would never finish
# A shape value past this is no workload (and past what a float holds exactly).
MAX_SHAPE_VALUE = 2 ** 53


def _eval_node(node: ast.AST, names: dict[str, float], text: str) -> float:
    if isinstance(node, ast.Expression):
        return _eval_node(node.body, names, text)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ConfigError(f"unknown name {node.id!r} in {text!r} "
                              f"(known: {', '.join(sorted(names))})")
        return names[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval_node(node.left, names, text), _eval_node(node.right, names, text)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ConfigError(f"{text!r}: an exponent of {right:g} (at most {MAX_EXPONENT})")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval_node(node.operand, names, text)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in _FUNCS and not node.keywords:
        return _FUNCS[node.func.id](*(_eval_node(a, names, text) for a in node.args))
    raise ConfigError(f"cannot read {text!r}: use numbers, + - * / // %, ceil/floor/min/max "
                      f"and the names tp, world and the shape keys")


def evaluate(raw: dict[str, Any], world: int, where: str) -> dict[str, int]:
    """Shape keys -> whole numbers; strings are sizes (bytes) or expressions."""
    out: dict[str, int] = {}
    names: dict[str, float] = {"tp": world, "world": world}
    pending = dict(raw)
    for key, value in list(pending.items()):
        if not isinstance(value, str):
            names[key] = value
    for _ in range(len(pending) + 1):
        for key, value in list(pending.items()):
            if not isinstance(value, str):
                out[key] = _whole(value, f"{where}: {key}")
                del pending[key]
                continue
            if key == "bytes":
                try:
                    out[key] = names[key] = parse_bytes(value, f"{where}: bytes")
                    del pending[key]
                    continue
                except ConfigError:
                    pass
            try:
                tree = ast.parse(value, mode="eval")
            except SyntaxError:
                raise ConfigError(f"{where}: {key} = {value!r} is not a size or an "
                                  f"expression") from None
            try:
                result = _eval_node(tree, names, value)
            except ConfigError as exc:
                if any(k in pending and k != key for k in _names_in(tree)):
                    continue          # depends on a key not evaluated yet
                raise ConfigError(f"{where}: {key}: {exc}") from None
            except (ZeroDivisionError, OverflowError, TypeError) as exc:
                raise ConfigError(f"{where}: {key} = {value!r}: {exc}") from None
            out[key] = names[key] = _whole(result, f"{where}: {key} = {value!r} (tp={world})")
            del pending[key]
        if not pending:
            break
    if pending:
        raise ConfigError(f"{where}: cannot evaluate {sorted(pending)} (circular?)")
    return {k: out[k] for k in raw}


def _names_in(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def _whole(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{what}: expected a number, got {value!r}")
    if not -MAX_SHAPE_VALUE <= value <= MAX_SHAPE_VALUE:          # nan and inf too
        raise ConfigError(f"{what} = {value:g} is not a size (at most 2^53)")
    if value != int(value):
        raise ConfigError(f"{what} = {value:g} is not a whole number (use ceil(...) or //)")
    if value <= 0:
        raise ConfigError(f"{what} must be positive, got {value:g}")
    return int(value)
