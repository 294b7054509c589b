"""``pksim systems list|show|check``: the hardware catalog."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click

from hwmodels.catalog import SYSTEMS_DIR, list_systems, load_system
from hwmodels.errors import ConfigError
from hwmodels.system import System
from hwmodels.topology import Topology
from pksim_cli.output import emit_json, table
from pksim_core.study import figure
from pksim_core.vocabulary import renamed


def summary(system: System) -> dict:
    gpu, domain = system.gpu, system.domain
    return {
        "name": system.name,
        "gpu": gpu.model,
        "gpus_per_domain": domain.gpus_per_domain,
        "dies_per_gpu": gpu.dies_per_gpu,
        "bf16_dense_PFLOPs": gpu.tensor.flops_bf16 / 1e15,
        "hbm_TBps": gpu.hbm.bandwidth_Bps / 1e12,
        "nvlink_GBps_per_direction": gpu.nvlink.bandwidth_Bps / 1e9,
        "switch_tiers": len(domain.switch_tiers),
        "in_switch_reduction": any(t.in_switch_reduction for t in domain.switch_tiers),
        "assumed_figures": len(system.assumed_keys()),
    }


@click.group()
def systems() -> None:
    """The hardware catalog: list, show and check system files."""


@systems.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_cmd(as_json: bool) -> None:
    """One line per shipped system."""
    rows = [summary(load_system(name)) for name in list_systems()]
    if as_json:
        emit_json(rows)
        return
    table("pksim systems", ["system", "GPU", "GPUs/domain", "BF16 PFLOP/s", "HBM TB/s",
                            "NVLink GB/s/dir", "in-switch reduction"],
          [[r["name"], r["gpu"], r["gpus_per_domain"], f"{r['bf16_dense_PFLOPs']:.3g}",
            f"{r['hbm_TBps']:.3g}", f"{r['nvlink_GBps_per_direction']:.0f}",
            "yes" if r["in_switch_reduction"] else "no"] for r in rows])


def _detail(system: System) -> dict:
    topo = Topology.build(system)
    return {"summary": summary(system), "path": system.path, "inherits": system.inherits,
            "description": system.description, "topology": topo.counts(),
            "gpu": _si_keys(asdict(system.gpu)), "domain": _si_keys(asdict(system.domain)),
            "scaleout": _si_keys(asdict(system.scaleout)),
            "provenance": {k: {"value": _value(system, k), "source": v.source, "tag": v.tag}
                           for k, v in sorted(system.provenance.items())},
            "assumed": system.assumed_keys(), "calibrated": system.calibrated,
            "profile": asdict(system.profile)}


def _si_keys(node):
    """The loaded figures (SI units, the unit in the name) as docs/outputs.md names them:
    a size ``*_bytes`` (the field's ``*_B``), a cost per byte ``*_s_per_byte``; the field's
    own name stays after them for one release."""
    if isinstance(node, list):
        return [_si_keys(v) for v in node]
    if not isinstance(node, dict):
        return node
    names = {k: k[:-8] + "_s_per_byte" if k.endswith("_s_per_B") else
             k[:-2] + "_bytes" if k.endswith("_B") else k for k in node}
    return renamed({k: _si_keys(v) for k, v in node.items()},
                   {k: v for k, v in names.items() if k != v})


def _value(system: System, key: str):
    """A figure in its file's units (the unit is in the key's name); None if the key
    names no figure."""
    try:
        return figure(system, key, "systems show")
    except ConfigError:
        return None


@systems.command("show")
@click.argument("name")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a figure, e.g. gpu.nvlink.link_bandwidth_GBps=50.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(name: str, overrides: tuple[str, ...], as_json: bool) -> None:
    """Every figure of system NAME (a shipped name or a .toml path), with its source."""
    system = load_system(name, overrides)
    detail = _detail(system)
    if as_json:
        emit_json(detail)
        return
    click.echo(f"{system.name}: {system.description}")
    click.echo(f"file: {system.path}" + (f" (inherits {system.inherits})" if system.inherits else ""))
    use = system.profile
    click.echo(f"kernel profile: {use.name} ({use.path}; fitted on {use.device}"
               f"{', carried' if use.carried else ''}): {use.why}")
    click.echo("topology: " + ", ".join(f"{k} {v}" for k, v in detail["topology"].items()))
    table("figures", ["key", "value", "provenance", "source"],
          [[k, _text(v["value"]), v["tag"], v["source"]]
           for k, v in detail["provenance"].items()])


def _text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@systems.command("check")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def check(path: str, as_json: bool) -> None:
    """Validate a user's system file; exit 2 with the problem named if it is bad (a file
    named like a shipped system other than that one is: their results could not be told
    apart)."""
    system = load_system(path)
    shipped = SYSTEMS_DIR / f"{system.name}.toml"
    if shipped.exists() and Path(system.path).resolve() != shipped.resolve():
        raise ConfigError(f"{system.path}: name = {system.name!r} is the name of a shipped "
                          f"system ({shipped}); give this file its own name, so that its "
                          f"results can be told apart")
    topo = Topology.build(system)
    result = {"ok": True, "name": system.name, "path": system.path,
              "topology": topo.counts(), "assumed": system.assumed_keys()}
    if as_json:
        emit_json(result)
    else:
        click.echo(f"{path}: ok ({system.name}, {topo.counts()['ranks']} GPUs per domain, "
                   f"{len(result['assumed'])} assumed figures)")
