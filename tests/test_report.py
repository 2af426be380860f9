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
    assert report.busy_us.tolist() == [110.0, 50.0, 30.0]
    np.testing.assert_allclose(report.utilisation, np.array([110.0, 50.0, 30.0]) / makespan)
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
    assert report.busy_us.tolist() == [55.0, 50.0, 60.0]
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
