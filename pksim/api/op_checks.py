"""Which of predict's, search's and trace's options apply to the op and implementation asked
for: one that would be ignored is an error naming it, so that no answer comes from a request
other than the one typed (an --m on a collective, a --launch on pk's kernels, a --comm-sms on
NCCL's own choice). With --impl nccl, --algorithm forces NCCL's algorithm as NCCL_ALGO does."""
from __future__ import annotations

from hwmodels.errors import ConfigError
from pksim_core.algorithms import PEER_ORDERED
from pksim_core.nccl import P2P_OPS
from pksim_core.workloads.fused_ops import FUSED_OPS, SHAPE_KEYS

# The shape options (click's parameter names) and how the user typed them.
SHAPE_OPTIONS = {key: "--" + key.replace("_", "-") for keys in SHAPE_KEYS.values()
                 for key in keys}
ROOTED = ("broadcast", "reduce", "gather", "scatter")
# pksim's algorithm names -> NCCL's (NCCL_ALGO): in-network is NVLS, hierarchical NVLSTree.
NCCL_ALGO = {"ring": "ring", "tree": "tree", "nvls": "nvls", "in-network": "nvls",
             "hierarchical": "nvls_tree"}
_NCCL_ONLY = ("launch", "nvls", "nccl_version")
_PK_ONLY = ("mechanism", "comm_sms", "chunk_bytes", "peer_order", "overlap")
_COLLECTIVE_ONLY = ("splits", "peers", "reduce_op", "epilogue", "peer_order")


def _flag(key: str) -> str:
    return SHAPE_OPTIONS.get(key, "--" + key.replace("_", "-"))


def _given(kw: dict, key: str) -> bool:
    return kw.get("n_" if key == "n" else key) is not None


def check_applies(kw: dict) -> None:
    """ConfigError for the first given option that ``kw["op"]`` and ``kw["impl"]`` ignore
    (codegen, which has no --impl, emits pk's kernels)."""
    op, impl = kw["op"], kw.get("impl", "pk")
    fused = op in FUSED_OPS
    if fused:
        if kw.get("size") is not None:
            raise ConfigError(f"--bytes: {op} takes {_shape_flags(op)}, not --bytes")
        other = [k for k in SHAPE_OPTIONS if k not in SHAPE_KEYS[op] and _given(kw, k)]
        other += [k for k in _COLLECTIVE_ONLY if kw.get(k) is not None]
        if other:
            raise ConfigError(f"{_flag(other[0])}: {op} takes {_shape_flags(op)}; "
                              f"{_flag(other[0])} is for other ops")
        if kw.get("cold"):
            raise ConfigError(f"--cold-l2: only collectives take it, not {op}")
    else:
        fused_only = [k for k in list(SHAPE_OPTIONS) + ["overlap"] if _given(kw, k)]
        if fused_only:
            flag = _flag(fused_only[0])
            raise ConfigError(f"{flag}: {op} takes --bytes; {flag} is for the fused ops "
                              f"({', '.join(FUSED_OPS)})")
        if kw.get("skew"):
            raise ConfigError(f"--skew {kw['skew']:g}: only the MoE ops route tokens, not {op}")
    if kw.get("root") and op not in ROOTED:
        raise ConfigError(f"--root {kw['root']}: {op} has no root (rooted ops: "
                          f"{', '.join(ROOTED)})")
    if kw.get("peer_order") and kw.get("algorithm") not in (None, *PEER_ORDERED):
        raise ConfigError(f"--peer-order {kw['peer_order']}: only the direct algorithms "
                          f"({', '.join(PEER_ORDERED)}) order their peers, not {kw['algorithm']}")
    if impl == "pk":
        for key in _NCCL_ONLY:
            if kw.get(key) is not None:
                raise ConfigError(f"{_flag(key)} {kw[key]}: only --impl nccl takes it (pk's "
                                  f"kernels are predicted launched on a stream)")
        return
    for key in _PK_ONLY:
        if kw.get(key) is not None:
            raise ConfigError(f"{_flag(key)} {kw[key]}: with --impl nccl NCCL picks its own "
                              f"channels, protocol and chunk (--algorithm forces NCCL_ALGO; "
                              f"--nvls, --launch and --nccl-version set the rest)")
    if fused:
        for key in ("algorithm",) + _NCCL_ONLY:
            if kw.get(key) is not None:
                raise ConfigError(f"{_flag(key)} {kw[key]}: --impl nccl of {op} is the library "
                                  f"kernel, then NCCL's own pick; {_flag(key)} applies to "
                                  f"collectives")


def _shape_flags(op: str) -> str:
    return " ".join(SHAPE_OPTIONS[k] for k in SHAPE_KEYS[op])


def nccl_algo(kw: dict, op: str) -> str | None:
    """The NCCL_ALGO that --algorithm forces with --impl nccl (None: NCCL's own pick);
    ConfigError for an algorithm NCCL has not, or an op it runs outside its tuner."""
    alg = kw.get("algorithm")
    if alg is None:
        return None
    if op in P2P_OPS:
        raise ConfigError(f"--algorithm {alg}: NCCL runs {op} as point-to-point sends, outside "
                          f"its tuner (NCCL_ALGO does not apply)")
    if alg == "collnet":
        raise ConfigError("--algorithm collnet: NCCL's CollNet needs SHARP-capable InfiniBand "
                          "switches, which pksim does not model")
    if alg not in NCCL_ALGO:
        names = ", ".join(f"{k} ({v})" if k != v else k for k, v in NCCL_ALGO.items())
        raise ConfigError(f"--algorithm {alg}: NCCL has no such algorithm; with --impl nccl "
                          f"--algorithm forces NCCL_ALGO, one of {names}")
    if kw.get("nvls") == "off" and NCCL_ALGO[alg] in ("nvls", "nvls_tree"):
        raise ConfigError(f"--algorithm {alg} with --nvls off: NCCL_NVLS_ENABLE=0 leaves NCCL "
                          f"no NVLS")
    return NCCL_ALGO[alg]
