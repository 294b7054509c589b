"""``pksim env``: what this machine offers pksim (GPU and driver, nvcc, torch, simpy, NVLink
and multicast support, the kernel sources and cache) and what each command needs. The probes
live in ``validation.environment``; the GPU commands call its ``require`` before building."""
from __future__ import annotations

import click

from pksim_cli.output import emit_json, table
from validation.environment import NEEDS, missing_for, probe_all


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def env(as_json: bool) -> None:
    """What this machine offers pksim, and what each command needs."""
    probes = probe_all()
    commands = {cmd: {"needs": list(needs), "missing": missing_for(cmd, probes)}
                for cmd, needs in NEEDS.items()}
    if as_json:
        emit_json({"machine": probes, "commands": commands})
        return
    table("this machine", ["what", "", "found"],
          [[name, "ok" if p["ok"] else "-", p["detail"]] for name, p in probes.items()])
    table("what each command needs", ["command", "needs", "here"],
          [[cmd, ", ".join(c["needs"]) or "-", "ready" if not c["missing"]
            else "missing: " + "; ".join(c["missing"])] for cmd, c in commands.items()])
