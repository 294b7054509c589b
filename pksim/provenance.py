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
}
_ISSUE = {"tma": "gpu.transfer.tma_remote_per_sm_GBps",
          "register": "gpu.transfer.ldst_remote_per_sm_GBps",
          "multimem": "gpu.transfer.ldst_remote_per_sm_GBps",
          "copy-engine": "gpu.copy_engine.bandwidth_GBps"}
_TIERED = {"sw": "port_bandwidth_GBps", "up": "uplink_bandwidth_GBps",
           "down": "uplink_bandwidth_GBps", "nvls": "reduction_efficiency"}


def binding_figure(system: System, resource: str, mechanism: str = "tma",
                   dtype: str = "bf16") -> str:
    """The dotted key of the figure behind ``resource`` ('' when there is none)."""
    if resource in _FIGURES:
        return _FIGURES[resource]
    if resource == "issue":
        return _ISSUE.get(mechanism, "")
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
