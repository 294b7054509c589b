"""The fused reductions' check (validation/runtime/fused.py, docs/decisions/D62.md): the
tolerance follows the roundings of a bf16 running sum of the world partials, simulated here
in numpy as the store-add kernels make it (each partial rounded to bf16, then added to the bf16
output in a random order, rounding to nearest even after every add)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from validation.runtime.fused import RUN_Z, running_sum_sigma

K = 1024


def bf16(x: np.ndarray) -> np.ndarray:
    """Round fp32 to the nearest bf16 (ties to even), kept in fp32."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def running_sums(world: int, n: int, seed: int = 1, drop: int | None = None, total: float = 0.0):
    """(bf16 running sum, exact sum, sum of squares) of ``world`` partials of n elements, each
    ~ N(total / world, K) as a K-long dot product of unit normals is (plus an offset);
    ``drop``: a partial left out."""
    rng = np.random.default_rng(seed)
    p = rng.standard_normal((world, n), dtype=np.float32) * np.float32(math.sqrt(K))
    p += np.float32(total / world)
    ref, sq = p.astype(np.float64).sum(0), (p.astype(np.float64) ** 2).sum(0)
    pb = bf16(p)
    out = np.zeros(n, np.float32)
    for r in rng.permutation(world):
        if r != drop:
            out = bf16(out + pb[r])
    return out, ref, sq


def tolerance(ref, sq, world):
    return 2.0 ** -7 * np.abs(ref) + world * math.sqrt(K) / 64 + RUN_Z * running_sum_sigma(ref, sq, world)


def test_sigma_closed_form():
    # world 2, ref 0, sum of squares 6: 2^-14 / 12 x 3 x (6 / 6 + 0) = 2^-16, sigma 2^-8
    assert running_sum_sigma(0.0, 6.0, 2) == pytest.approx(2.0 ** -8)
    # ref 3: 3 x (6 / 6 + 9 / 3) = 12, 2^-14 / 12 x 12 = 2^-14, sigma 2^-7
    assert running_sum_sigma(3.0, 6.0, 2) == pytest.approx(2.0 ** -7)


@pytest.mark.parametrize("world", [8, 72])
def test_sigma_bounds_the_simulated_rounding_noise(world):
    out, ref, sq = running_sums(world, 200_000)
    err = out - ref
    rms_err = math.sqrt(float(np.mean(err ** 2)))
    rms_sigma = math.sqrt(float(np.mean(running_sum_sigma(ref, sq, world) ** 2)))
    # sigma takes every rounding's ulp as 2^-7 of the value, the largest it can be (a bf16
    # ulp is 2^-8 .. 2^-7 of it): the noise's variance lies between 1/4 and 1 of sigma's,
    # the partials' own roundings (not in sigma) adding a little
    assert 0.5 * rms_sigma < rms_err < 1.0 * rms_sigma


@pytest.mark.parametrize("world", [2, 8, 72])
def test_every_element_of_a_correct_sum_passes(world):
    out, ref, sq = running_sums(world, 200_000, seed=world)
    assert (np.abs(out - ref) <= tolerance(ref, sq, world)).all()


def test_large_sums_at_72_ranks_pass_where_the_bound_without_the_running_sum_failed():
    # elements near 1050, as those the H200 failed at 72 ranks (D62): the bound without the
    # running-sum term, 2^-7 x 1050 + 72 x 32 / 64 = 44.2, is exceeded; the tolerance holds
    out, ref, sq = running_sums(72, 200_000, seed=5, total=1050.0)
    err = np.abs(out - ref)
    assert (err > 2.0 ** -7 * np.abs(ref) + 72 * math.sqrt(K) / 64).any()
    assert (err <= tolerance(ref, sq, 72)).all()


@pytest.mark.parametrize("world", [2, 8, 72])
def test_a_lost_partial_fails_in_a_tile(world):
    # a 64 x 64 output tile without one rank's partial: a few per cent of its elements over
    # the tolerance, so the check (which fails on one element) fails
    out, ref, sq = running_sums(world, 64 * 64, seed=3, drop=0)
    over = np.abs(out - ref) > tolerance(ref, sq, world)
    assert over.mean() > 0.01
