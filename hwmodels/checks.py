"""Cross-field checks of a loaded system: facts that no single key can check.

Every error names where its values came from (``where_of``: the ``--set`` that gave a key,
else the file that holds it, a parent's for an inherited key): the ``--set`` options among
the keys a check reads when there are any (they are what changed the shipped file), else
each file that gave one of them."""
from __future__ import annotations

from typing import Callable

from hwmodels.errors import ConfigError
from hwmodels.system import System

WhereOf = Callable[[str], str]


def _default_where(system: System) -> WhereOf:
    """Without the loader's origins: the ``--set`` that gave a key, else the system file."""
    def where_of(key: str) -> str:
        prov = system.provenance.get(key)
        return prov.source if prov is not None and prov.tag == "override" else system.path
    return where_of


def blame(where_of: WhereOf, keys: tuple[str, ...], files: tuple[str, ...]) -> str:
    """Where the values of ``keys`` came from, as an error's prefix: the ``--set`` options
    among them (what changed the file), else the first of ``files`` (the loaded file, then
    its parents) that gave one of them: it changed what it inherits."""
    places = list(dict.fromkeys(where_of(k) for k in keys))
    given = [p for p in places if p.startswith("--set ")]
    if given:
        return ", ".join(given)
    return next((f for f in files if f in places), ", ".join(places))


def check_system(system: System, where_of: WhereOf | None = None,
                 files: tuple[str, ...] = ()) -> None:
    """Raise ConfigError naming where the values came from (``where_of``: key -> a
    ``--set`` or a file; ``files``: the loaded file, then its parents)."""
    where_of = where_of or _default_where(system)
    files = files or (system.path,)

    def fail(keys: tuple[str, ...], message: str) -> None:
        raise ConfigError(f"{blame(where_of, keys, files)}: {message}")

    gpu, domain = system.gpu, system.domain
    if gpu.transfer.tma and gpu.architecture == "ampere":
        fail(("gpu.transfer.tma", "gpu.architecture"),
             f"gpu.transfer.tma = true, but TMA arrived with Hopper "
             f"(architecture = {gpu.architecture!r})")
    remote = gpu.transfer_remote
    rates = {"gpu.transfer.tma_local_per_sm_GBps": gpu.transfer.tma_local_Bps_per_sm,
             "gpu.transfer.tma_reduce_per_sm_GBps": gpu.transfer.tma_reduce_Bps_per_sm,
             "gpu.transfer_remote.tma_write_per_sm_GBps": remote.tma_write_Bps_per_sm,
             "gpu.transfer_remote.tma_read_per_sm_GBps": remote.tma_read_Bps_per_sm,
             "gpu.transfer_remote.tma_reduce_per_sm_GBps": remote.tma_reduce_Bps_per_sm}
    zero = [key for key, value in rates.items() if value <= 0]
    if gpu.transfer.tma and zero:
        fail(tuple(zero) + ("gpu.transfer.tma",),
             f"gpu.transfer.tma = true needs positive {', '.join(rates)} "
             f"({', '.join(zero)} = 0)")
    if gpu.tensor.flops_bf16 <= 0:
        fail(("gpu.tensor.tflops_bf16",), "gpu.tensor.tflops_bf16 must be above 0")
    tiers = domain.switch_tiers
    size = ("domain.gpus_per_domain",)
    if domain.fabric == "nvswitch":
        if not tiers and domain.gpus_per_domain > 1:
            fail(("domain.fabric",) + size,
                 f"domain.fabric = 'nvswitch' with {domain.gpus_per_domain} GPUs needs a "
                 f"[[domain.switch_tier]]")
        if gpu.nvlink.links <= 0 and domain.gpus_per_domain > 1:
            fail(("gpu.nvlink.links",) + size,
                 f"gpu.nvlink.links must be above 0 for an NVLink domain of "
                 f"{domain.gpus_per_domain} GPUs")
        if gpu.nvlink.link_bandwidth_Bps <= 0 and domain.gpus_per_domain > 1:
            key = "gpu.nvlink.link_bandwidth_GBps"
            fail((key,) + size, f"{key} = 0 must be above 0 for an NVLink domain of "
                                f"{domain.gpus_per_domain} GPUs")
    elif domain.fabric == "none" and domain.gpus_per_domain != 1:
        fail(("domain.fabric",) + size,
             f"domain.fabric = 'none' needs domain.gpus_per_domain = 1, got "
             f"{domain.gpus_per_domain}")
    below, below_key = 1, ()
    for level, tier in enumerate(tiers, start=1):
        key = f"domain.switch_tier.{level - 1}"
        group = (f"{key}.gpus_per_group",)
        if tier.gpus_per_group % below or tier.gpus_per_group < below:
            fail(group + below_key, f"{key}.gpus_per_group = {tier.gpus_per_group} is not a "
                                    f"multiple of the tier below ({below})")
        if domain.gpus_per_domain % tier.gpus_per_group:
            fail(group + size, f"{key}.gpus_per_group = {tier.gpus_per_group} does not "
                               f"divide domain.gpus_per_domain = {domain.gpus_per_domain}")
        top = level == len(tiers)
        if top and tier.gpus_per_group != domain.gpus_per_domain:
            fail(group + size, f"the top switch tier ({key}) must span the domain: "
                               f"gpus_per_group = {tier.gpus_per_group}, domain has "
                               f"{domain.gpus_per_domain}")
        if not top and tier.uplink_bandwidth_Bps <= 0:
            fail((f"{key}.uplink_bandwidth_GBps",),
                 f"{key}.uplink_bandwidth_GBps must be above 0 below the top tier")
        if level == 1:
            needed = tier.gpus_per_group * gpu.nvlink.links
            ports = tier.chips_per_group * tier.ports_per_chip
            if needed > ports:
                fail(group + ("gpu.nvlink.links", f"{key}.chips_per_group",
                              f"{key}.ports_per_chip"),
                     f"{key}: {tier.gpus_per_group} GPUs x {gpu.nvlink.links} NVLink links = "
                     f"{needed} ports, but {tier.chips_per_group} chips x "
                     f"{tier.ports_per_chip} = {ports}")
        below, below_key = tier.gpus_per_group, group
