"""A fused candidate, checked and planned (``Setup``): what every other part of the fused
simulation starts from."""
from __future__ import annotations

from hwmodels.errors import InfeasibleError
from hwmodels.system import System
from pksim_core import baseline
from pksim_core.mechanisms.flow import capacities, check_feasible
from pksim_core.fusion.des import compute_alone
from pksim_core.fusion.flows import mempath_caps, prepared_flows, tensor_caps
from pksim_core.fusion.plans import (count_chunks_per_peer, family, output_clear_s, plan_for,
                               shape_of, topology)
from pksim_core.schedule import Schedule
from pksim_core.workloads import fused_ops as fused_workload


class Setup:
    """A fused candidate, checked and planned: its topology, plan, SM split and the
    schedule its communication runs with."""

    def __init__(self, system: System, schedule: Schedule, reduced: bool = True):
        self.system, self.schedule, self.reduced = system, schedule, reduced
        topo = self.topo = topology(system, schedule)
        if system.gpu.tensor.flops(schedule.dtype) <= 0:
            raise InfeasibleError(f"{system.name} has no {schedule.dtype} tensor rate")
        fused_workload.check_shape(schedule.op, shape_of(schedule), topo.world)
        self.baseline = baseline.cached(system, topo, schedule)
        self.launch_s = system.gpu.sync.kernel_launch_s
        if schedule.overlap == "none":
            return
        self.clear_s = output_clear_s(system, topo, schedule)
        self.chunks_per_peer = count_chunks_per_peer(schedule, topo)
        plan = self.plan = plan_for(system, schedule, topo, self.chunks_per_peer)
        sms = topo.sms_per_rank()
        if schedule.overlap == "inter-sm":
            if schedule.comm_sms >= sms:
                raise InfeasibleError(f"inter-SM overlap with {schedule.comm_sms} communication "
                                      f"SMs leaves no SM to compute (a rank has {sms})")
            self.compute_sms, self.comm = sms - schedule.comm_sms, schedule
        else:
            if schedule.mechanism not in ("tma", "multimem"):
                raise InfeasibleError("intra-SM overlap sends from the compute SMs' "
                                      "communication warps with TMA (or multimem)")
            self.compute_sms, self.comm = sms, schedule.with_(comm_sms=sms)
        kinds = {t.kind for c in plan.chunks for t in c.transfers} | \
            {t.kind for step in plan.tail for t in step}
        check_feasible(topo, self.comm, kinds)
        self.family = family(system, topo, self.comm, self.chunks_per_peer, reduced)

    def compute_alone(self) -> list[float]:
        return compute_alone(self.system, self.topo, self.schedule, self.plan, self.chunks_per_peer,
                              self.compute_sms, self.reduced)

    def flows(self):
        return prepared_flows(self.system, self.topo, self.comm, self.plan, self.family, self.reduced)

    def class_caps(self, members: dict[str, str]) -> dict[str, float]:
        caps = capacities(self.topo, self.comm)
        caps.update(tensor_caps(self.system, self.topo, self.plan, self.comm.dtype,
                                 self.compute_sms))
        caps.update(mempath_caps(self.topo))
        return {name: caps[inst] for name, inst in members.items()}
