"""Per-device summary on the spec's worked example (hand-derived values)."""

from __future__ import annotations

import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax.graphs.generators import diamond
from placeto_jax.report import summarize, transfers

PLACEMENT = np.array([0, 1, 2, 0])


@pytest.mark.parametrize("broadcast", [True, False])
def test_worked_example(broadcast):
    cluster = pj.Cluster(n_devices=3, broadcast=broadcast)
    result = pj.simulate(diamond(), cluster, PLACEMENT)
    report = summarize(diamond(), cluster, PLACEMENT, result)
    makespan = 171.0 if broadcast else 186.0
    assert report.makespan_us == pytest.approx(makespan, abs=1e-9)
    assert report.op_count.tolist() == [2, 1, 1]
    assert report.compute_us.tolist() == [110.0, 50.0, 30.0]
    # busy adds the 5.7 µs gap after a, b and c (d ends the step: its gap is past the makespan;
    # without broadcast c still ends by 175, so its gap fits too)
    np.testing.assert_allclose(report.busy_us, [115.7, 55.7, 35.7], atol=1e-9)
    np.testing.assert_allclose(report.overhead_us, [5.7, 5.7, 5.7], atol=1e-9)
    np.testing.assert_allclose(report.utilisation, np.array([115.7, 55.7, 35.7]) / makespan)
    assert report.peak_memory_bytes.tolist() == [76000.0, 83600.0, 83600.0]
    assert report.fits_memory
    # a goes to devices 1 and 2 (one broadcast or two transfers), b and c back to device 0
    assert report.transfer_count.tolist() == ([1, 1, 1] if broadcast else [2, 1, 1])
    sent_a = 76000.0 if broadcast else 152000.0
    assert report.transfer_bytes.tolist() == [sent_a, 7600.0, 7600.0]
    # the same count as the simulator's transfers
    sent = ~np.isnan(result.transfer_start)
    assert report.transfer_count.sum() == (sent.any(axis=1).sum() if broadcast else sent.sum())


def test_busy_time_scales_with_speed_and_memory_overflow():
    cluster = pj.Cluster(n_devices=3, speed=(2.0, 1.0, 0.5), memory=80000.0)
    result = pj.simulate_reference(diamond(), cluster, PLACEMENT)
    report = summarize(diamond(), cluster, PLACEMENT, result)
    assert report.compute_us.tolist() == [55.0, 50.0, 60.0]
    assert not report.fits_memory


def test_transfers_are_producer_ops():
    assert transfers(diamond(), PLACEMENT, broadcast=True).tolist() == [0, 1, 2]
    assert transfers(diamond(), PLACEMENT, broadcast=False).tolist() == [0, 0, 1, 2]
    assert transfers(diamond(), np.zeros(4, dtype=np.int64), broadcast=True).tolist() == []


def test_rejects_a_batch():
    cluster = pj.Cluster(n_devices=3)
    result = pj.simulate_reference(diamond(), cluster, np.stack([PLACEMENT, PLACEMENT]))
    with pytest.raises(ValueError, match="not a batch"):
        summarize(diamond(), cluster, PLACEMENT, result)


def test_one_device_is_fully_busy_when_its_step_is_compute_and_overhead():
    # A chain of 3 ops of 100, 50 and 30 µs running 1, 3 and 2 kernels, on one device with
    # delta1 = 5.7 µs: a 0-100, gap to 105.7; b takes 50 + 2 x 5.7 = 61.4 (105.7-167.1), gap to
    # 172.8; c takes 30 + 5.7 = 35.7 (172.8-208.5). The device is never free: 100% busy,
    # compute 180 µs, overhead 5 gaps = 28.5 µs.
    graph = pj.Graph.from_edges([100.0, 50.0, 30.0], [0, 0, 0], [(0, 1), (1, 2)], kernels=[1, 3, 2])
    cluster = pj.Cluster.preset("placeto-k80", 1)
    assert cluster.delta1 == 5.7
    placement = np.zeros(3, dtype=np.int64)
    report = summarize(graph, cluster, placement, pj.simulate(graph, cluster, placement))
    assert report.makespan_us == pytest.approx(208.5, abs=1e-9)
    assert report.compute_us.tolist() == [180.0]
    assert report.overhead_us[0] == pytest.approx(28.5, abs=1e-9)
    assert report.busy_us[0] == pytest.approx(208.5, abs=1e-9)
    assert report.utilisation[0] == pytest.approx(1.0, abs=1e-12)


def test_an_idle_device_waits_and_zero_duration_ops_leave_no_gap():
    # a (10 µs) on 0 sends 25,000 bytes to b (20 µs) on 1: on the 1,000 bytes/µs bus of
    # `Cluster(bandwidth=1000)` the data arrives at 35, b runs 35-55, the makespan. Device 0:
    # 10 + 5.7 busy; device 1: 20 (its gap falls after the makespan). A zero-cost op (z, also
    # on 0, after a) adds no gap.
    graph = pj.Graph.from_edges([10.0, 20.0, 0.0], [25_000, 0, 0], [(0, 1), (0, 2)])
    cluster = pj.Cluster(n_devices=2, bandwidth=1000.0, delta1=5.7, delta2=0.0)
    placement = np.array([0, 1, 0])
    result = pj.simulate(graph, cluster, placement)
    report = summarize(graph, cluster, placement, result)
    assert report.makespan_us == pytest.approx(55.0, abs=1e-9)
    assert report.busy_us == pytest.approx([15.7, 20.0], abs=1e-9)
    assert report.overhead_us == pytest.approx([5.7, 0.0], abs=1e-9)
