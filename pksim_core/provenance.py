"""What an answer rests on: the system figure behind a prediction's binding resource,
and that figure's provenance tag (datasheet, microbenchmark, roadmap, estimate, ...), so
a what-if row shows whether its answer rests on a measurement or on a guess."""
from __future__ import annotations

from hwmodels.system import System

# Binding resource class -> the figure that sets its capacity (per mechanism where the
# issuing SMs bind). ``None``: no single figure (the NCCL baseline's own time).
_FIGURES = {
    "nvl_in": "gpu.nvlink.link_bandwidth_GBps",
    "nvl_out": "gpu.nvlink.link_bandwidth_GBps",
    "latency": "gpu.nvlink.latency_ns",
    "hbm": "gpu.hbm.bandwidth_GBps",
    "l2": "gpu.l2.bandwidth_GBps",
    "ce": "gpu.copy_engine.bandwidth_GBps",
    "cecmd": "gpu.copy_engine.command_us",
    "nic_in": "scaleout.nic_bandwidth_Gbps",
    "nic_out": "scaleout.nic_bandwidth_Gbps",
    "mempath": "gpu.hbm.bandwidth_GBps",
    # the terms of a program's roofline (pksim_core.programs.roofline) that the names above miss
    "nvlink": "gpu.nvlink.link_bandwidth_GBps",
    "vector": "gpu.tensor.tflops_fp32",
}
# The issuing SMs' per-SM rate: over NVLink the mechanism study's figure (write direction,
# gpu.transfer_remote, docs/decisions/D38.md); on virtual ranks (one GPU) the local fit's.
_ISSUE_REMOTE = {"tma": "gpu.transfer_remote.tma_write_per_sm_GBps",
                 "register": "gpu.transfer_remote.ldst_write_per_sm_GBps",
                 "multimem": "gpu.transfer_remote.multimem_per_sm_GBps",
                 "copy-engine": "gpu.copy_engine.bandwidth_GBps"}
_ISSUE_LOCAL = {"tma": "gpu.transfer.tma_local_per_sm_GBps",
                "register": "gpu.transfer.ldst_local_per_sm_GBps",
                "copy-engine": "gpu.copy_engine.bandwidth_GBps"}
_TIERED = {"sw": "port_bandwidth_GBps", "up": "uplink_bandwidth_GBps",
           "down": "uplink_bandwidth_GBps", "nvls": "reduction_efficiency"}


def binding_figure(system: System, resource: str, mechanism: str = "tma",
                   dtype: str = "bf16") -> str:
    """The dotted key of the figure behind ``resource`` ('' when there is none)."""
    if resource in _FIGURES:
        return _FIGURES[resource]
    if resource == "issue":
        local = system.domain.fabric == "shared-memory"
        return (_ISSUE_LOCAL if local else _ISSUE_REMOTE).get(mechanism, "")
    if resource == "tensor":
        return f"gpu.tensor.tflops_{dtype}"
    stem = resource.rstrip("0123456789")
    level = resource[len(stem):]
    if stem in _TIERED and level:
        return f"domain.switch_tier.{int(level) - 1}.{_TIERED[stem]}"
    return ""


def provenance_of(system: System, key: str) -> str:
    """The provenance tag of figure ``key`` ('' when unknown)."""
    prov = system.provenance.get(key)
    return prov.tag if prov is not None else ""
