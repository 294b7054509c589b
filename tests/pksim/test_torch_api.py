"""pksim.torch without a GPU: the import without torch, argument checks on stand-in tensors,
the system and kernel choice, and the CUDA IPC exchange between ranks run as threads."""
from __future__ import annotations

import subprocess
import sys

import pytest

from pksim.torch import checks, choice
from pksim.torch.errors import CommError
from pksim.torch.ipc import exchange, placement
from tests.pksim.torch_fakes import Device, Ipc, Tensor, run_ranks


def test_import_needs_no_torch_and_first_use_says_what_it_needs():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import pksim.torch as pt\n"
            "try:\n    pt.Communicator()\nexcept pt.CommError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ("pksim.torch needs torch with torch.distributed "
                                  "(pip install torch) and a CUDA GPU")


# ---- argument checks -------------------------------------------------------------------------

def test_a_contiguous_cuda_tensor_passes_with_its_bytes():
    assert checks.check_tensor("all_reduce", "x", Tensor((3, 5)), Device()) == 30


@pytest.mark.parametrize("t, words", [
    (Tensor(device=Device("cpu")), "x is on cpu; pksim.torch moves CUDA tensors only"),
    (Tensor(contiguous=False), "x is not contiguous"),
    (Tensor(device=Device("cuda", 1)), "x is on cuda:1, this communicator's device is cuda:0"),
    ([1, 2], "x must be a torch tensor, got list"),
])
def test_bad_tensors_are_one_line(t, words):
    with pytest.raises(CommError, match="^all_gather: ") as err:
        checks.check_tensor("all_gather", "x", t, Device())
    assert words in str(err.value) and "\n" not in str(err.value)


def test_reductions_add_bf16_and_fp32_only():
    assert checks.reduce_dtype("all_reduce", Tensor(dtype="torch.bfloat16")) == "bf16"
    assert checks.reduce_dtype("all_reduce", Tensor(dtype="torch.float32", itemsize=4)) == "fp32"
    assert checks.reduce_dtype("all_reduce", Tensor(dtype="torch.int64", itemsize=8)) is None


def test_reduce_ops_accept_torch_names():
    assert checks.check_reduce_op("all_reduce", "SUM") == "sum"
    assert checks.check_reduce_op("all_reduce", "ReduceOp.MAX") == "max"
    with pytest.raises(CommError, match="reduce op 'band' is not one of sum, avg, min, max, product"):
        checks.check_reduce_op("all_reduce", "band")


def test_copy_unit_is_the_widest_word_dividing_every_count():
    assert checks.copy_unit([8, 12, 0]) == 4
    assert checks.copy_unit([8, 6]) == 2
    assert checks.copy_unit([8, 3]) == 1


def test_splits_must_be_world_non_negative_ints_adding_up():
    assert checks.check_splits("all_to_all", "in_splits", [1, 0, 3], 3, 4) == [1, 0, 3]
    with pytest.raises(CommError, match="in_splits must be 3 non-negative ints, got \\[1, 2\\]"):
        checks.check_splits("all_to_all", "in_splits", [1, 2], 3)
    with pytest.raises(CommError, match="add up to 5 rows, the tensor has 4"):
        checks.check_splits("all_to_all", "in_splits", [1, 1, 3], 3, 4)
    with pytest.raises(CommError, match="must be a list of 3 ints"):
        checks.check_splits("all_to_all", "in_splits", None, 3)


def test_roots_and_row_counts():
    assert checks.check_root("broadcast", 3, 4) == 3
    for bad in (4, -1, True, "0"):
        with pytest.raises(CommError, match="is not a rank of this communicator \\(0..3\\)"):
            checks.check_root("broadcast", bad, 4)
    assert checks.check_divisible("reduce_scatter", "x", 12, 4) == 3
    with pytest.raises(CommError, match="x has 10 rows in dim 0, not a multiple of the world \\(4\\)"):
        checks.check_divisible("reduce_scatter", "x", 10, 4)
    assert checks.row_bytes(Tensor((6, 5))) == 10
    assert checks.row_bytes(Tensor((), itemsize=4)) == 4


def test_ranks_that_disagree_are_named():
    assert checks.agree("all_reduce", "sizes", [3, 3, 3]) == 3
    with pytest.raises(CommError, match="ranks disagree on sizes: rank 4 passed 3, rank 6 5"):
        checks.agree("all_reduce", "sizes", [3, 3, 5], ranks=[4, 5, 6])


# ---- system and kernel choice ----------------------------------------------------------------

def test_the_system_is_the_smallest_domain_of_the_gpu_that_holds_the_world():
    assert choice.system_for_device("NVIDIA H100 80GB HBM3", 8) == "dgx-h100"
    assert choice.system_for_device("NVIDIA H100 80GB HBM3", 64) == "h100-nvl256"
    assert choice.system_for_device("NVIDIA H200", 2) == "hgx-h200"
    with pytest.raises(CommError, match="no shipped system has the GPU 'Tesla T4'; pass system=NAME"):
        choice.system_for_device("Tesla T4", 2)


def test_buckets_are_powers_of_two_from_16_bytes():
    assert [choice.bucket(n) for n in (1, 16, 17, 4096, 4097)] == [16, 16, 32, 4096, 8192]


def test_one_kernel_serves_every_world_size_dtype_and_block_count():
    a = choice.choose("dgx-h100", "all-to-all", 4096, 8, "bf16")
    b = choice.choose("dgx-h100", "all-to-all", 1 << 20, 2, "fp32")
    assert a.schedule.world == 8 and b.schedule.world == 2
    assert (a.schedule.algorithm, a.schedule.mechanism) == (b.schedule.algorithm, b.schedule.mechanism)
    assert a.kernel == b.kernel and a.kernel.world == choice.KERNEL_WORLD
    assert a.blocks == a.schedule.comm_sms


def test_a_multimem_schedule_is_replaced_by_the_fastest_runnable_and_said():
    c = choice.choose("dgx-h100", "all-reduce", 1 << 20, 8, "bf16")
    assert choice.runnable(c.schedule)
    assert "needs NVLink multicast, which stays off; using " + c.schedule.label() in c.note
    assert c.note.startswith("all-reduce of 1048576 bytes at world 8: the fastest schedule, in-network/multimem")


def test_a_reduce_op_is_part_of_the_kernel():
    c = choice.choose("dgx-h100", "all-reduce", 4096, 4, "fp32", "max")
    assert dict(c.kernel.extra) == {"reduce_op": "max"}
    assert c.kernel != choice.choose("dgx-h100", "all-reduce", 4096, 4, "fp32").kernel


def test_fused_choices_run_without_multicast():
    for op in ("gemm-rs", "ag-gemm", "gemm-ar"):
        c = choice.choose_fused("dgx-h100", op, 1024, 1024, 512, 8)
        assert c.schedule.op == op and choice.runnable(c.schedule) and c.schedule.overlap != "none"


# ---- CUDA IPC exchange ------------------------------------------------------------------------

def test_every_rank_maps_every_peer_and_keeps_its_own_pointer():
    def rank(member):
        ipc = Ipc(member.rank)
        ptr = 0x10000000 * (member.rank + 1) + 0x40 * member.rank
        return exchange(member, ipc, ptr), ipc.opened

    got = run_ranks(3, rank)
    for r, (ptrs, opened) in enumerate(got):
        want = [0x10000000 * (q + 1) + 0x40 * q + (0 if q == r else 0x900000000000) for q in range(3)]
        assert ptrs == want
        assert len(opened) == 2


def test_ranks_on_one_gpu_are_shared():
    assert placement([("h", "GPU-a"), ("h", "GPU-a")]) == "shared"
    assert placement([("h", "GPU-a"), ("h", "GPU-b")]) == "separate"
    assert placement([("h1", "GPU-a"), ("h2", "GPU-a")]) == "separate"


def test_fused_blocks_on_a_shared_gpu_leave_three_quarters_to_the_gemm():
    from pksim.torch.fused import shared_comm_blocks
    # 132 SMs over 8 ranks: 16 each, a quarter (4) for communication; over 2 ranks 66 each,
    # the schedule's 16 fit; never below one
    assert shared_comm_blocks(16, 132, 8) == 4
    assert shared_comm_blocks(16, 132, 2) == 16
    assert shared_comm_blocks(16, 16, 8) == 1


def test_a_step_that_fails_on_one_rank_fails_on_every_rank():
    from types import SimpleNamespace

    from pksim.torch.comm import Communicator

    def rank(member):
        me = SimpleNamespace(host=member, ranks=[10, 11, 12])

        def step():
            if member.rank == 1:
                raise RuntimeError("launch failed")
        try:
            Communicator.together(me, "all_reduce", step)
        except CommError as exc:
            return str(exc)
        return "passed"

    assert run_ranks(3, rank) == ["all_reduce: rank 11 failed: RuntimeError: launch failed"] * 3
