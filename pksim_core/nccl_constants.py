"""NCCL's tuner constants, per NCCL version (pure data).

Every figure is quoted from shared/reference/nccl-model.md (NVIDIA/nccl ``src/graph/tuning.cc``
at v2.30.7-1 unless a line says otherwise; "tuning.cc:N" is that file's line N). Protocol order
is (LL, LL128, Simple); latencies in us, bandwidths in GB/s; "arch" is NCCL's arch row, chosen
by compute capability (tuning.cc:263-266): ampere (>= 80), hopper (>= 90), blackwell (>= 100;
Rubin too, as NCCL would index it). Per-node-count rows are [1 node, 2 nodes, >= 4 nodes]
(column index min(nNodes - 1, 2), tuning.cc:267).

``VERSIONS`` holds what changed between releases (nccl-model.md section 1.8): ``constants(v)``
applies every change up to ``v`` on top of the oldest row (v2.18.3), so a corpus entry or a
caller that declares "2.30.4" gets the table of the newest listed release not after it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from hwmodels.errors import ConfigError

PROTOS = ("LL", "LL128", "Simple")
ALGOS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")


@dataclass(frozen=True)
class Constants:
    version: str
    # baseLatencies (tuning.cc:150-155), hwLatencies (tuning.cc:157-176) per link type
    base_lat: dict
    hw_lat: dict                         # {"NVLINK"|"PCI"|"NET": {algo: (LL, LL128, Simple)}}
    ll_max_bw: dict                      # llMaxBws [arch] (tuning.cc:178-183)
    ring_ll128_bw: dict                  # perChMaxRingLL128Bws (tuning.cc:185-190)
    tree_ll128_bw: dict                  # perChMaxTreeLL128Bws (tuning.cc:192-197)
    tree_bw: dict                        # perChMaxTreeBws (tuning.cc:199-204)
    nvls_tree_bw: dict                   # perChMaxNVLSTreeBws (tuning.cc:206-211)
    nvls_efficiency: dict | None         # nvlsEfficiency (tuning.cc:139-144); None: pre-2.28 model
    nvlink_bw: dict                      # NVLink GB/s per link NCCL assumes (src/graph/topo.h:19-24)
    net_overhead_us: float = 1.0         # NCCL_NET_OVERHEAD, Intel CPUs (tuning.cc:225-233)


_HW_2_30 = {
    "NVLINK": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "collnet_direct": (0, 0, 3.7),
               "collnet_chain": (0, 0, 2.8), "nvls": (0, 0, 25.0), "nvls_tree": (0, 0, 25.0),
               "pat": (0, 0, 4.0)},
    "PCI": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "collnet_direct": (0, 0, 3.7),
            "collnet_chain": (0, 0, 2.8), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0),
            "pat": (0, 0, 4.0)},
    "NET": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "collnet_direct": (0, 0, 31.0),
            "collnet_chain": (0, 0, 30.0), "nvls": (0, 0, 18.0), "nvls_tree": (0, 0, 20.9),
            "pat": (0, 0, 14.0)},
}
_BASE_2_30 = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "collnet_direct": (0, 0, 0),
              "collnet_chain": (0, 0, 0), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0),
              "pat": (8.0, 8.0, 8.0)}

# v2.30.7-1 (nccl-model.md section 1.1).
NEWEST = Constants(
    version="2.30.7",
    base_lat=_BASE_2_30,
    hw_lat=_HW_2_30,
    ll_max_bw={"ampere": (87.7, 22.5, 19.0), "hopper": (141.0, 45.0, 35.0),
               "blackwell": (282.0, 90.0, 70.0)},
    ring_ll128_bw={"ampere": (20.0,) * 3, "hopper": (36.7,) * 3, "blackwell": (40.0,) * 3},
    tree_ll128_bw={"ampere": (20.0,) * 3, "hopper": (36.7, 36.7, 29.0),
                   "blackwell": (55.6, 31.67, 20.0)},
    tree_bw={"ampere": (24.0, 23.6, 17.8), "hopper": (38.7, 41.4, 36.0),
             "blackwell": (70.0, 42.8, 24.0)},
    nvls_tree_bw={"ampere": (0.0, 0.0, 0.0), "hopper": (0.0, 57.7, 45.5),
                  "blackwell": (0.0, 96.0, 80.0)},
    nvls_efficiency={"ampere": 0.0, "hopper": 0.85, "blackwell": 0.74},
    nvlink_bw={"ampere": 20.0, "hopper": 20.6, "blackwell": 40.1},
)


def _with_lat(c: Constants, table: str, link: str | None, algo: str, values) -> dict:
    if table == "base":
        return {**c.base_lat, algo: values}
    return {**c.hw_lat, link: {**c.hw_lat[link], algo: values}}


def _twice_hopper(c: Constants, name: str) -> dict:
    hop = getattr(c, name)["hopper"]
    return {**getattr(c, name), "blackwell": tuple(2 * v for v in hop)}


# Going back in time from v2.30.7: what each older release had (section 1.8). Applied newest
# first, so the table for version v is NEWEST with every undo of a release after v.
def _undo_2_30(c):      # v2.30.7: Blackwell NVLSTree N4 = 80.0 (was 43.8 in 2.28.9-2.29.7)
    bw = {**c.nvls_tree_bw, "blackwell": (0.0, 96.0, 43.8)}
    # SM100_NVLINK_BW 40.1 at v2.30.7, 40.0 at v2.26.2 (topo.h); the releases between were
    # not read: 40.0 is kept up to 2.29.
    return replace(c, nvls_tree_bw=bw, nvlink_bw={**c.nvlink_bw, "blackwell": 40.0})


def _undo_2_29(c):      # v2.29.7: Blackwell ring LL128 40.0 for N1/N2/N4 (2.28.9: N2 34.6)
    return replace(c, ring_ll128_bw={**c.ring_ll128_bw, "blackwell": (40.0, 34.6, 40.0)})


def _undo_2_28_9(c):    # v2.28.9: NET NVLSTree latency 20.9 (was 14); NVLSTree N4 43.8 (43.1)
    return replace(c, hw_lat=_with_lat(c, "hw", "NET", "nvls_tree", (0, 0, 14.0)),
                   nvls_tree_bw={**c.nvls_tree_bw, "blackwell": (0.0, 96.0, 43.1)})


def _undo_2_28_3(c):    # v2.28.3: nvlsEfficiency model; before it Blackwell rows = 2x Hopper
    c = replace(c, nvls_efficiency=None)
    for name in ("ll_max_bw", "tree_ll128_bw", "tree_bw", "nvls_tree_bw", "ring_ll128_bw"):
        c = replace(c, **{name: _twice_hopper(c, name)})
    return c


def _undo_2_23(c):      # v2.23.4: Tree Simple base 8.4 / hwLat 4.0; before: base 0, hwLat 28
    c = replace(c, base_lat={**c.base_lat, "tree": c.base_lat["tree"][:2] + (0.0,)})
    for link in ("NVLINK", "PCI", "NET"):
        c = replace(c, hw_lat=_with_lat(c, "hw", link, "tree",
                                        c.hw_lat[link]["tree"][:2] + (28.0,)))
    return c


def _undo_2_21(c):      # v2.21.5: NVLS NVLINK latency 25 (2.19-2.20: 23); SM90 link 20.6 (20.0)
    c = replace(c, hw_lat=_with_lat(c, "hw", "NVLINK", "nvls", (0, 0, 23.0)))
    return replace(c, nvlink_bw={**c.nvlink_bw, "hopper": 20.0})


def _undo_2_19(c):      # v2.19.3: NVLS latency moved from baseLat 23 to hwLat NVLINK 23;
    # v2.18.3 also had hwLat NVLINK Tree Simple 4 with base 0.
    c = replace(c, base_lat={**c.base_lat, "nvls": (0, 0, 23.0), "nvls_tree": (0, 0, 23.0)})
    c = replace(c, hw_lat=_with_lat(c, "hw", "NVLINK", "nvls", (0, 0, 0.0)))
    return replace(c, hw_lat=_with_lat(c, "hw", "NVLINK", "tree",
                                       c.hw_lat["NVLINK"]["tree"][:2] + (4.0,)))


VERSIONS = (("2.30.7", _undo_2_30), ("2.29.7", _undo_2_29), ("2.28.9", _undo_2_28_9),
            ("2.28.3", _undo_2_28_3), ("2.23.4", _undo_2_23), ("2.21.5", _undo_2_21),
            ("2.19.3", _undo_2_19), ("2.18.3", None))


def parse_version(text: str) -> tuple[int, ...]:
    try:
        parts = tuple(int(p) for p in str(text).split("-")[0].split("."))
    except ValueError:
        raise ConfigError(f"--nccl-version {text!r}: not like 2.30.7 (an NCCL release)"
                          ) from None
    if len(parts) < 2 or parts[0] != 2:
        raise ConfigError(f"--nccl-version {text!r}: not a 2.x release")
    return parts


def constants(version: str | None = None) -> Constants:
    """The constants of the newest release in VERSIONS not after ``version`` (default: the
    newest). Versions before 2.18.3 are refused: their tables were not read."""
    if version is None:
        return NEWEST
    want = parse_version(version)
    if want < parse_version(VERSIONS[-1][0]):
        raise ConfigError(f"NCCL {version}: tables before {VERSIONS[-1][0]} were not read "
                          f"(nccl-model.md section 1.8)")
    c = NEWEST
    for i, (release, _undo) in enumerate(VERSIONS):
        if parse_version(release) <= want:
            return replace(c, version=release)
        c = VERSIONS[i][1](c)
    return c
