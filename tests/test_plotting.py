"""Gantt chart: lanes hand-derived from the spec's worked example; PNG written atomically.
Layer positions, learning curves and CDFs: the data drawn, by hand."""

from __future__ import annotations

import os

import numpy as np
import pytest
from matplotlib.figure import Figure

import placeto_jax as pj
from placeto_jax.graphs.generators import diamond
from placeto_jax.plotting import (
    draw_learning_curves,
    draw_relative_cdf,
    gantt,
    layer_positions,
    schedule_lanes,
)
from placeto_jax.sim.result import SimResult

PLACEMENT = np.array([0, 1, 2, 0])
PNG = b"\x89PNG\r\n\x1a\n"


def _case(broadcast: bool):
    cluster = pj.Cluster(n_devices=3, broadcast=broadcast)
    return diamond(), cluster, PLACEMENT, pj.simulate(diamond(), cluster, PLACEMENT)


def _lanes(broadcast: bool) -> dict[str, tuple[list, list]]:
    return {
        lane.label: (lane.ops.tolist(), lane.bars.tolist())
        for lane in schedule_lanes(*_case(broadcast))
    }


def test_lanes_with_broadcast():
    # spec, third row: a 0-100, b 110-160, c 110-140, d 161-171; a's one transfer 100-110,
    # c's 140-141 on bus 2, b's 160-161 on bus 1
    assert _lanes(True) == {
        "device 0": ([0, 3], [[0.0, 100.0], [161.0, 10.0]]),
        "device 1": ([1], [[110.0, 50.0]]),
        "device 2": ([2], [[110.0, 30.0]]),
        "bus 0": ([0], [[100.0, 10.0]]),
        "bus 1": ([1], [[160.0, 1.0]]),
        "bus 2": ([2], [[140.0, 1.0]]),
    }


def test_lanes_without_broadcast():
    # spec, fourth row: bus 0 sends a to device 1 (100-110), then to device 2 (135-145)
    lanes = _lanes(False)
    assert lanes["bus 0"] == ([0, 0], [[100.0, 10.0], [135.0, 10.0]])
    assert lanes["device 0"] == ([0, 3], [[0.0, 100.0], [176.0, 10.0]])


def test_gantt_writes_a_png(tmp_path):
    path = tmp_path / "chart.png"
    gantt(*_case(True), path)
    assert path.read_bytes().startswith(PNG)
    assert os.listdir(tmp_path) == ["chart.png"]


def test_gantt_renders_thousands_of_ops(tmp_path):
    n, d = 3000, 4
    graph = pj.Graph.from_edges(np.ones(n), np.ones(n), [(i, i + 1) for i in range(n - 1)])
    placement = np.arange(n) % d
    start = np.arange(n) * 10.0
    transfer = np.full((n, d), np.nan)
    transfer[np.arange(n), (placement + 1) % d] = start + 5.0
    result = SimResult(
        np.float64(n * 10.0), start, start + 5.0, np.zeros(d), transfer, transfer + 1
    )
    path = tmp_path / "big.png"
    gantt(graph, pj.Cluster(n_devices=d), placement, result, path)
    assert path.read_bytes().startswith(PNG)


def test_rejects_mismatched_inputs(tmp_path):
    graph, cluster, placement, result = _case(True)
    batch = pj.simulate_reference(graph, cluster, np.stack([placement, placement]))
    with pytest.raises(ValueError, match="one placement"):
        gantt(graph, cluster, placement, batch, tmp_path / "x.png")
    with pytest.raises(ValueError, match="4 ops"):
        gantt(graph, cluster, placement[:3], result, tmp_path / "x.png")
    with pytest.raises(ValueError, match="2 devices"):
        gantt(graph, pj.Cluster(n_devices=2), placement, result, tmp_path / "x.png")
    assert os.listdir(tmp_path) == []


def test_failed_write_leaves_no_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        gantt(*_case(True), tmp_path / "missing" / "chart.png")
    assert os.listdir(tmp_path) == []


def test_layer_positions_of_the_diamond():
    xy = layer_positions(diamond())
    assert xy.tolist() == [[0.0, 0.0], [1.0, -0.5], [1.0, 0.5], [2.0, 0.0]]


def test_learning_curves_draw_raw_makespans_mark_overflows_and_every_other_method():
    figure = Figure()
    fits = np.array([False, False, True])  # rnn's best so far fits from its third point on
    curves = {
        "rnn": (np.array([0, 10, 20]), np.array([3000.0, 2500.0, 2000.0]), fits),
        "placeto": (np.array([5]), np.array([1500.0]), np.array([True])),
    }
    draw_learning_curves(figure, curves, "g, 2 devices", (4000.0, False), {"heft": (1800.0, True)})
    (axes,) = figure.axes
    lines = {line.get_label(): line for line in axes.get_lines()}
    assert lines["rnn"].get_xdata().tolist() == [1, 10, 20]  # 0 evaluations drawn at 1 (log)
    assert lines["rnn"].get_ydata().tolist() == [3.0, 2.5, 2.0]
    assert lines["rnn"].get_drawstyle() == "steps-post"
    assert lines["placeto"].get_ydata().tolist() == [1.5]
    overflow = lines["_overflow"]  # hollow markers at rnn's first two points only
    assert (overflow.get_xdata().tolist(), overflow.get_ydata().tolist()) == ([1, 10], [3.0, 2.5])
    assert (overflow.get_marker(), overflow.get_markerfacecolor()) == ("o", "none")
    assert overflow.get_color() == lines["rnn"].get_color()
    single, heft = lines["single device 4 ms (does not fit)"], lines["heft 1.8 ms"]
    assert (list(single.get_ydata()), single.get_linestyle()) == ([4.0, 4.0], ":")
    assert (list(heft.get_ydata()), heft.get_linestyle()) == ([1.8, 1.8], "--")
    assert [t.get_text() for t in axes.get_legend().get_texts()] == [
        "rnn",
        "placeto",
        "single device 4 ms (does not fit)",
        "heft 1.8 ms",
        "best so far does not fit",
    ]
    assert (axes.get_xscale(), axes.get_title()) == ("log", "g, 2 devices")


def test_learning_curves_that_fit_have_no_overflow_markers():
    figure = Figure()
    curves = {"placeto": (np.array([5]), np.array([1500.0]), np.array([True]))}
    draw_learning_curves(figure, curves, "g", (2000.0, True), {})
    (axes,) = figure.axes
    assert [line.get_label() for line in axes.get_lines()] == ["placeto", "single device 2 ms"]


def test_relative_cdf_one_panel_per_family():
    figure = Figure()
    rows = [
        {"family": "ptb", "graph": "a", "placeto": 1.2, "heft": 1.0},
        {"family": "ptb", "graph": "b", "placeto": 0.8, "heft": 1.5},
    ]
    draw_relative_cdf(figure, rows, ["ptb", "nmt"], ["placeto", "heft"])
    ptb, nmt = figure.axes
    lines = {line.get_label(): line for line in ptb.get_lines()}
    assert lines["placeto"].get_xdata().tolist() == [0.8, 0.8, 1.2]
    assert lines["placeto"].get_ydata().tolist() == [0.0, 0.5, 1.0]
    assert lines["heft"].get_xdata().tolist() == [1.0, 1.0, 1.5]
    assert len(nmt.get_lines()) == 1  # no rows: only the line at 1.0
    assert (ptb.get_title(), nmt.get_title()) == ("ptb: 2 test graphs", "nmt: 0 test graphs")


def test_a_gantt_chart_explains_its_colours_and_lanes():
    from matplotlib.figure import Figure

    from placeto_jax.plotting import draw_gantt

    figure = Figure()
    draw_gantt(figure, *_case(True))
    texts = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert texts[:2] == ["op k with k mod 8 = 0", "op k with k mod 8 = 1"]  # 8 colours
    assert "lane 'device d': op k running on d" in texts
    assert "lane 'bus d': op k's output sent from d" in texts
