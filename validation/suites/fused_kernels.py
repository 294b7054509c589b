"""The runnable fused GEMM + communication kernels as validation knows them: every variant
(op, overlap, algorithm, mechanism) codegen.fused emits and kernels/fused runs, the collective
of each op's unfused baseline ("none": the GEMMs, then that collective), and the case records
validation/run/fused.py reads. The one place of these facts in validation (the suites, the
bundles and the runner read them here).
"""
from __future__ import annotations

from pksim_core.kernel_contract import FUSED_VARIANTS, VIRTUAL_BASELINE

# Every runnable fused variant (op, overlap, algorithm, mechanism) and the collective of each
# op's "none" baseline on virtual ranks: the kernels' contract, written once in pksim.
VARIANTS = list(FUSED_VARIANTS)
BASELINE = VIRTUAL_BASELINE


def short(op: str, overlap: str, mech: str) -> str:
    return f"{op}-{overlap}-{mech}"


def fused_case(libs: dict[str, str], variant: tuple[str, str, str, str],
               shape: tuple[int, int, int, int], comm: int = 0, order: int = -1, *,
               timed: bool = True, seed: int = 1, iters: int = 20, warmup: int = 3) -> dict:
    """One fused case: variant (op, overlap, algorithm, mechanism), shape (world, m, n, k),
    comm blocks per rank (0: the generated default) and tile order (-1, 0 or 1)."""
    op, ov, alg, mech = variant
    w, m, n, k = shape
    name = short(op, ov, mech)
    extra = (f"-c{comm}" if comm else "") + ("-seq" if order == 1 else "")
    return {"id": f"{name}{extra}-w{w}-{m}x{n}x{k}", "kind": "fused", "lib": libs[name],
            "op": op, "overlap": ov, "algorithm": alg, "mechanism": mech, "world": w, "m": m,
            "n": n, "k": k, "comm_blocks": comm, "tile_order": order, "check": True,
            "time": timed, "seed": seed, "iters": iters, "warmup": warmup}


def none_case(libs: dict[str, str], op: str, shape: tuple[int, int, int, int], *,
              timed: bool = True, seed: int = 1, iters: int = 20, warmup: int = 3) -> dict:
    """The unfused baseline of ``op`` at shape (world, m, n, k): GEMMs, then the collective."""
    w, m, n, k = shape
    cop, calg, cmech = BASELINE[op]
    return {"id": f"{op}-none-w{w}-{m}x{n}x{k}", "kind": "none", "op": op, "world": w, "m": m,
            "n": n, "k": k, "gemm_lib": libs["gemm"],
            "coll_lib": libs["/".join((cop, calg, cmech))],
            "collective": f"{cop} {calg}/{cmech}", "check": True, "time": timed,
            "seed": seed, "iters": iters, "warmup": warmup}
