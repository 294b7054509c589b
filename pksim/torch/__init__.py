"""pksim.torch: the generated collectives and fused GEMM kernels, called on torch tensors.

    import torch.distributed as dist
    import pksim.torch as pt
    dist.init_process_group("gloo")          # or nccl; one process per rank (torchrun)
    comm = pt.Communicator()                 # every rank of the group, once
    y = comm.all_reduce(x)                   # on the current stream

Ops: all_reduce, all_gather, reduce_scatter, all_to_all (with split sizes: -v), broadcast,
reduce, gather, scatter, send_recv (batch point-to-point), and the fused gemm_rs, ag_gemm,
gemm_ar. Every bad argument raises ``CommError`` with one line. Importing this package needs
neither torch nor a GPU; making a Communicator needs both and says so when either is missing.
The modules: ``comm`` (the communicator), ``fused`` (its fused ops), ``choice`` (system and
kernel choice), ``kernels`` (emit, build, load), ``ipc`` (CUDA IPC), ``checks`` (arguments).
"""
from __future__ import annotations

from pksim.torch.comm import Communicator
from pksim.torch.errors import CommError

__all__ = ["Communicator", "CommError"]
