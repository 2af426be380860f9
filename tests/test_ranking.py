"""The ranking order of simulated placements (`sim.ranking`), by hand."""

from __future__ import annotations

import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.sim.ranking import first_ranked

CLUSTER = Cluster(2, memory=100.0)  # 100 bytes per device


def test_the_first_ranked_fits_first_then_is_fastest_then_comes_first():
    makespan = [5.0, 3.0, 4.0, 3.0, 2.0]  # µs
    peak = np.array([[50, 50], [150, 50], [50, 50], [100, 100], [101, 50]], float)
    assert first_ranked(makespan, peak, CLUSTER) == 3  # 1 and 4 are faster but overflow
    assert first_ranked([3.0, 3.0], np.full((2, 2), 10.0), CLUSTER) == 0  # the first of equals


def test_among_placements_that_overflow_the_least_overflow_ranks_first():
    peak = np.array([[150, 50], [101, 50]], float)  # overflow 0.5 and 0.01
    assert first_ranked([2.0, 9.0], peak, CLUSTER) == 1
