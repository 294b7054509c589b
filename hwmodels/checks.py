"""Cross-field checks of a loaded system: facts that no single key can check."""
from __future__ import annotations

from hwmodels.errors import ConfigError
from hwmodels.system import System


def _where(system: System, key: str) -> str:
    """The ``--set`` that gave ``key``, or the system file."""
    prov = system.provenance.get(key)
    return prov.source if prov is not None and prov.tag == "override" else system.path


def check_system(system: System) -> None:
    where = system.path
    gpu, domain = system.gpu, system.domain
    if gpu.transfer.tma and gpu.architecture == "ampere":
        raise ConfigError(f"{where}: gpu.transfer.tma = true, but TMA arrived with Hopper "
                          f"(architecture = {gpu.architecture!r})")
    remote = gpu.transfer_remote
    if gpu.transfer.tma and (min(remote.tma_write_Bps_per_sm, remote.tma_read_Bps_per_sm,
                                 remote.tma_reduce_Bps_per_sm) <= 0
                             or gpu.transfer.tma_local_Bps_per_sm <= 0
                             or gpu.transfer.tma_reduce_Bps_per_sm <= 0):
        raise ConfigError(f"{where}: gpu.transfer.tma = true needs positive "
                          f"gpu.transfer.tma_local_per_sm_GBps and tma_reduce_per_sm_GBps and "
                          f"gpu.transfer_remote.tma_write_per_sm_GBps, tma_read_per_sm_GBps "
                          f"and tma_reduce_per_sm_GBps")
    if gpu.tensor.flops_bf16 <= 0:
        raise ConfigError(f"{where}: gpu.tensor.tflops_bf16 must be above 0")
    tiers = domain.switch_tiers
    if domain.fabric == "nvswitch":
        if not tiers and domain.gpus_per_domain > 1:
            raise ConfigError(f"{where}: domain.fabric = 'nvswitch' with "
                              f"{domain.gpus_per_domain} GPUs needs a [[domain.switch_tier]]")
        if gpu.nvlink.links <= 0 and domain.gpus_per_domain > 1:
            raise ConfigError(f"{_where(system, 'gpu.nvlink.links')}: gpu.nvlink.links must "
                              f"be above 0 for an NVLink domain")
        if gpu.nvlink.link_bandwidth_Bps <= 0 and domain.gpus_per_domain > 1:
            key = "gpu.nvlink.link_bandwidth_GBps"
            raise ConfigError(f"{_where(system, key)}: {key} = 0 must be above 0 for an "
                              f"NVLink domain of {domain.gpus_per_domain} GPUs")
    elif domain.fabric == "none" and domain.gpus_per_domain != 1:
        raise ConfigError(f"{where}: domain.fabric = 'none' needs domain.gpus_per_domain = 1, "
                          f"got {domain.gpus_per_domain}")
    below = 1
    for level, tier in enumerate(tiers, start=1):
        key = f"domain.switch_tier.{level - 1}"
        if tier.gpus_per_group % below or tier.gpus_per_group < below:
            raise ConfigError(f"{where}: {key}.gpus_per_group = {tier.gpus_per_group} is not a "
                              f"multiple of the tier below ({below})")
        if domain.gpus_per_domain % tier.gpus_per_group:
            raise ConfigError(f"{where}: {key}.gpus_per_group = {tier.gpus_per_group} does not "
                              f"divide domain.gpus_per_domain = {domain.gpus_per_domain}")
        top = level == len(tiers)
        if top and tier.gpus_per_group != domain.gpus_per_domain:
            raise ConfigError(f"{where}: the top switch tier ({key}) must span the domain: "
                              f"gpus_per_group = {tier.gpus_per_group}, domain has "
                              f"{domain.gpus_per_domain}")
        if not top and tier.uplink_bandwidth_Bps <= 0:
            raise ConfigError(f"{where}: {key}.uplink_bandwidth_GBps must be above 0 below "
                              f"the top tier")
        if level == 1:
            needed = tier.gpus_per_group * gpu.nvlink.links
            ports = tier.chips_per_group * tier.ports_per_chip
            if needed > ports:
                raise ConfigError(f"{where}: {key}: {tier.gpus_per_group} GPUs x "
                                  f"{gpu.nvlink.links} NVLink links = {needed} ports, but "
                                  f"{tier.chips_per_group} chips x {tier.ports_per_chip} = {ports}")
        below = tier.gpus_per_group
