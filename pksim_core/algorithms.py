"""The algorithms of the collectives: one frozen row per (op, algorithm), read by every part
that needs to know one.

A row says what the schedule space holds of it (world requirements, the search's peer orders
and pipelined chunks), which function models its data movement (``transfers``, in
pksim_core.workloads.collectives: which data ends where) and which its generated kernel
(``phases``, in pksim_core.workloads.phases: the moves of each phase), what codegen emits for it
(header, C++ name and struct, the mechanisms it runs on, the epilogue form of a reducing
kernel), what the kernel contract says of it (sums of every rank's buffer, power-of-two worlds,
the streamed in-network kernels, blocks that wait on other ranks') and which validation suite
runs it. Rows without mechanisms are modelled only (NCCL's tree, a pairwise all-to-all, ...).

The model's functions are named, not referenced: the modules that hold them import this one
(the schedule, the kernel contract and codegen read it too), so each resolves its own names
(tests/pksim_core/test_algorithms.py checks that every name resolves). Adding an algorithm:
docs/design/codegen.md, "Adding an algorithm".
"""
from __future__ import annotations

from dataclasses import dataclass

# The mechanisms of a kernel that runs on SMs (TMA, registers) and on copy engines.
SM_CE = ("tma", "register", "copy-engine")
SM = ("tma", "register")
MULTIMEM = ("multimem",)
# NCCL's own algorithms (pksim_core.nccl): schedule names besides the rows'. "hierarchical" is
# NCCL's NVLSTree (NVLS inside each domain, a tree across): pksim's hierarchical program runs it.
NCCL_ALGORITHMS = ("ring", "tree", "nvls", "hierarchical", "collnet")
# Validation suites: the correctness matrix (validation/prepare/collectives.py, with the
# emulated builds of the streamed in-network kernels) and the communication kernels' suite
# (validation/suites/comm.toml).
SUITES = ("matrix", "comm")


@dataclass(frozen=True)
class Algorithm:
    """One (op, algorithm): everything the model, codegen and validation know of it."""
    op: str
    algorithm: str                      # the schedule's name
    transfers: str                      # pksim_core.workloads.collectives: the data's movement
    phases: str = ""                    # pksim_core.workloads.phases: the kernel's moves ("": none)
    mechanisms: tuple[str, ...] = ()    # the generated kernel's (): modelled only
    header: str = ""                    # kernels/collectives/<header>
    kernel: str = ""                    # C++ name: pk_<op>_<kernel>_<mech>, pkc::<op>_<kernel>
    struct: str = ""                    # the pkc:: struct when it is not <op>_<kernel>
    # extended kernels: their config names a reduce op and an epilogue, their globals add the
    # split table and the epilogue's terms (codegen.render Extended)
    extended: bool = False
    reduces: bool = False               # takes a reduce op and an epilogue (Schedule.extra)
    epilogue_kernel: str = ""           # ... from epilogue.cuh: pkc::<op>_<epilogue_kernel>
    world_sum: bool = False             # one move sums every rank's buffer (sources = world)
    power_of_two: bool = False          # needs a power-of-two world
    streamed: bool = False              # in-network, streamed in chunks (chunk_bytes)
    scale_out: str = ""                 # hierarchical: NCCL's op across domains
    # the search's choices: peer orders (ring and sequential: the direct algorithms, which
    # move to or from every peer and are left out past search.LARGE_WORLD ranks) and
    # pipelined chunks (the transfers of ring, tree and hierarchical, cut into lanes)
    peer_order: bool = False
    pipelined: bool = False
    waits: bool = False                 # its blocks wait on other ranks' (kSync ring, pairs)
    suite: str = ""                     # SUITES: the validation suite that runs it ("": none)

    def __post_init__(self) -> None:
        if bool(self.mechanisms) != bool(self.header and self.kernel):
            raise ValueError(f"{self.op} {self.algorithm}: a kernel has mechanisms, a header "
                             f"and a C++ name, or none of them")
        if self.suite and self.suite not in SUITES:
            raise ValueError(f"{self.op} {self.algorithm}: suite {self.suite!r} is not one of "
                             f"{', '.join(SUITES)}")

    @property
    def key(self) -> tuple[str, str]:
        return (self.op, self.algorithm)

    @property
    def cpp_struct(self) -> str:
        """The kernel's pkc:: struct (without the namespace)."""
        return self.struct or f"{self.op.replace('-', '_')}_{self.kernel}"


_EXTENDED = dict(extended=True, suite="comm")   # the extended kernels of the comm suite
_SUMS = dict(reduces=True, world_sum=True)
_SIZED = "_sized_direct"     # the split-size ops' transfers (pksim_core.workloads.varsize_ops)

# In codegen's order (its listings and validation's case lists follow it).
ROWS: tuple[Algorithm, ...] = (
    Algorithm("all-gather", "direct", "_ag_direct", "_ag_direct", SM_CE, "all_gather.cuh", "direct",
              suite="matrix", peer_order=True),
    Algorithm("all-gather", "ring", "_ag_ring", "_ag_ring", SM_CE, "all_gather.cuh", "ring",
              suite="matrix", pipelined=True, waits=True),
    Algorithm("all-gather", "in-network", "_ag_in_network", "", MULTIMEM, "in_network.cuh",
              "in_network", streamed=True, suite="matrix"),
    Algorithm("all-gather", "rhd", "_ag_rhd", "_ag_rhd", SM, "rhd.cuh", "rhd", power_of_two=True,
              suite="matrix", waits=True),
    Algorithm("all-gather", "hierarchical", "_hier_ag", scale_out="all-gather", pipelined=True),
    Algorithm("reduce-scatter", "direct", "_rs_direct", "_rs_direct", SM_CE, "reduce_scatter.cuh",
              "direct", epilogue_kernel="direct_ep", suite="matrix", **_SUMS, peer_order=True),
    Algorithm("reduce-scatter", "ring", "_rs_ring", "_rs_ring", SM_CE, "reduce_scatter.cuh", "ring",
              suite="matrix", pipelined=True, waits=True),
    Algorithm("reduce-scatter", "in-network", "_rs_in_network", "", MULTIMEM, "in_network.cuh",
              "in_network", streamed=True, suite="matrix"),
    Algorithm("reduce-scatter", "rhd", "_rs_rhd", "_rs_rhd", SM, "rhd.cuh", "rhd",
              power_of_two=True, suite="matrix", waits=True),
    Algorithm("reduce-scatter", "hierarchical", "_hier_rs", scale_out="reduce-scatter",
              pipelined=True),
    Algorithm("all-reduce", "direct", "_ar_direct", "_ar_one_shot", SM_CE, "all_reduce.cuh",
              "one_shot", epilogue_kernel="one_shot_ep", suite="matrix", **_SUMS, peer_order=True),
    Algorithm("all-reduce", "two-shot", "_ar_two_shot", "_ar_two_shot", SM_CE, "all_reduce.cuh",
              "two_shot", epilogue_kernel="two_shot_ep", suite="matrix", **_SUMS, peer_order=True),
    Algorithm("all-reduce", "ring", "_ar_ring", "_ar_ring", SM_CE, "all_reduce.cuh", "ring",
              suite="matrix", pipelined=True, waits=True),
    Algorithm("all-reduce", "in-network", "_ar_in_network", "", MULTIMEM, "in_network.cuh",
              "in_network", streamed=True, suite="matrix"),
    Algorithm("all-reduce", "rhd", "_ar_rhd", "_ar_rhd", SM, "rhd.cuh", "rhd", power_of_two=True,
              suite="matrix", waits=True),
    Algorithm("all-reduce", "tree", "_ar_tree", pipelined=True),
    Algorithm("all-reduce", "hierarchical", "_hier_ar", scale_out="all-reduce", pipelined=True),
    Algorithm("all-to-all", "direct", "_a2a_direct", "_a2a_direct", SM_CE, "all_to_all.cuh",
              "direct", suite="matrix", peer_order=True),
    Algorithm("all-to-all", "pairwise", "_a2a_pairwise"),
    Algorithm("broadcast", "direct", "_bcast_direct", "_bcast_direct", SM_CE, "broadcast.cuh",
              "direct", suite="matrix", peer_order=True),
    # compile-only (NVLink multicast is never run here, and it has no emulated build)
    Algorithm("broadcast", "in-network", "_bcast_in_network", "", MULTIMEM, "in_network.cuh",
              "in_network"),
    Algorithm("broadcast", "ring", "_bcast_ring", pipelined=True),
    Algorithm("reduce", "direct", "_reduce_direct", "_reduce_direct", SM, "rooted.cuh", "direct",
              **_EXTENDED, **_SUMS, peer_order=True),
    Algorithm("reduce", "two-shot", "_reduce_two_shot", "_reduce_two_shot", SM, "rooted.cuh",
              "two_shot", **_EXTENDED, **_SUMS, peer_order=True),
    Algorithm("reduce", "ring", "_reduce_ring", pipelined=True),
    Algorithm("reduce", "in-network", "_reduce_in_network"),
    Algorithm("gather", "direct", "_gather_direct", "_gather_direct", SM_CE, "rooted.cuh",
              "direct", **_EXTENDED, peer_order=True),
    Algorithm("scatter", "direct", "_scatter_direct", "_scatter_direct", SM_CE, "rooted.cuh",
              "direct", **_EXTENDED, peer_order=True),
    Algorithm("all-to-all-v", "direct", _SIZED, "_a2av_direct", SM_CE, "varsize.cuh", "direct",
              **_EXTENDED, peer_order=True),
    Algorithm("all-gather-v", "direct", _SIZED, "_agv_direct", SM_CE, "varsize.cuh", "direct",
              **_EXTENDED, peer_order=True),
    Algorithm("reduce-scatter-v", "direct", _SIZED, "_rsv_direct", SM, "varsize.cuh", "direct",
              **_EXTENDED, **_SUMS, peer_order=True),
    # the same kernel as all-to-all-v's (a matrix of messages), under its own entry point
    Algorithm("send-recv", "direct", _SIZED, "_send_recv_direct", SM_CE, "varsize.cuh", "direct",
              struct="all_to_all_v_direct", **_EXTENDED, peer_order=True),
)
_BY_KEY = {r.key: r for r in ROWS}
if len(_BY_KEY) != len(ROWS):
    raise ValueError("pksim_core.algorithms: an (op, algorithm) has two rows")

# The schedule's algorithm names: the rows', then NCCL's own.
NAMES = tuple(dict.fromkeys([r.algorithm for r in ROWS] + list(NCCL_ALGORITHMS)))
# The names of the algorithms that order their peers (--peer-order).
PEER_ORDERED = tuple(dict.fromkeys(r.algorithm for r in ROWS if r.peer_order))


def find(op: str, algorithm: str) -> Algorithm | None:
    """The row of (op, algorithm), or None."""
    return _BY_KEY.get((op, algorithm))


def of_op(op: str) -> tuple[Algorithm, ...]:
    """The rows of ``op``, in ROWS' order."""
    return tuple(r for r in ROWS if r.op == op)


def kernels() -> tuple[Algorithm, ...]:
    """The rows that codegen emits a kernel for."""
    return tuple(r for r in ROWS if r.mechanisms)


def keys(**facts) -> tuple[tuple[str, str], ...]:
    """(op, algorithm) of the rows whose fields equal ``facts`` (e.g. reduces=True)."""
    return tuple(r.key for r in ROWS if all(getattr(r, k) == v for k, v in facts.items()))


def resolve(namespace: dict, name: str, row: Algorithm, what: str):
    """The function ``name`` of a module's ``namespace`` (its globals()): how the modules that
    hold the model's functions read a row's names."""
    fn = namespace.get(name)
    if not callable(fn):
        raise KeyError(f"{row.op} {row.algorithm}: no {what} function {name!r}")
    return fn
