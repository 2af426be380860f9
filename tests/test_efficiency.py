"""The sample-efficiency experiment: evaluations to reach a value on a curve (values by hand),
Placeto's evaluation charge, the ratio bounds, and one tiny end-to-end run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from matplotlib.figure import Figure

from placeto_jax.cli import main
from placeto_jax.config import make_config
from placeto_jax.placers import PlacerResult
from placeto_jax.reproduce import efficiency
from placeto_jax.reproduce.efficiency import (
    Run,
    Settings,
    evaluations_to_reach,
    placeto_cost,
    placeto_iterations,
    ratio,
)


def test_evaluations_to_reach_a_value_on_a_best_so_far_curve():
    evaluations, best = [64, 128, 192, 256], [10.0, 8.0, 8.0, 5.0]
    assert evaluations_to_reach(evaluations, best, 10.0) == 64  # the first point already
    assert evaluations_to_reach(evaluations, best, 9.0) == 128
    assert evaluations_to_reach(evaluations, best, 8.0) == 128  # reaching means <=
    assert evaluations_to_reach(evaluations, best, 5.0) == 256
    assert evaluations_to_reach(evaluations, best, 4.9) is None  # never reached


def test_evaluations_to_reach_on_a_curve_that_is_not_monotone():
    # raw scores, not a running minimum: 7 at 20 evaluations is the first at or below 7.5,
    # whatever comes after
    assert evaluations_to_reach([0, 10, 20, 30, 40], [9.0, 12.0, 7.0, 11.0, 6.0], 7.5) == 20
    assert evaluations_to_reach([0, 10, 20], [9.0, 12.0, 9.5], 9.2) == 0
    assert evaluations_to_reach([0, 0, 5], [3.0, 2.0, 1.0], 2.0) == 0  # repeated counts


@pytest.mark.parametrize(
    "evaluations, best",
    [([], []), ([1, 2], [1.0]), ([2, 1], [1.0, 1.0]), ([[1]], [[1.0]])],
)
def test_evaluations_to_reach_rejects_bad_curves(evaluations, best):
    with pytest.raises(ValueError):
        evaluations_to_reach(evaluations, best, 1.0)


def test_placeto_is_charged_its_steps_and_its_greedy_evaluations():
    # 3 updates of 4 episodes of 11 steps = 132; greedy at 0, 2 and 3 updates: 3 x 2 x 11 = 66;
    # the evaluations after updates also simulate training's best placement: 2
    assert placeto_cost(3, 4, 11, 2) == 132 + 66 + 2
    config = make_config("tiny", ["train.episodes=4", "run.eval_every=1"])
    # 10 groups: 11 steps; u updates cost 44 u + 22 (u + 1) + u = 67 u + 22
    assert placeto_iterations(22 + 67 * 5, config, 10) == 5
    assert placeto_iterations(22 + 67 * 5 - 1, config, 10) == 4
    with pytest.raises(ValueError, match="less than one Placeto update"):
        placeto_iterations(88, config, 10)


def test_ratio_and_its_bounds():
    rnn, placeto = efficiency.METHODS
    totals = {rnn: 4096, placeto: 4000}
    assert ratio({rnn: 2048, placeto: 512}, totals) == (4.0, "=")
    assert ratio({rnn: None, placeto: 1024}, totals) == (4.0, ">")
    assert ratio({rnn: 1000, placeto: None}, totals) == (0.25, "<")
    assert ratio({rnn: None, placeto: None}, totals) == (None, "neither")


def test_unknown_graphs_fail_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="nosuch"):
        efficiency.load_graphs(("example:diamond", "zoo:nosuch"), None)
    with pytest.raises(ValueError, match="no benchmark file"):
        efficiency.load_graphs(("data:missing.json",), str(tmp_path))
    graphs, skipped = efficiency.load_graphs(("example:diamond", "data:x.json"), None)
    assert list(graphs) == ["example:diamond"] and list(skipped) == ["data:x.json"]
    assert main(["reproduce", "efficiency", "--data", str(tmp_path / "no")]) == 2


def test_reach_row_by_hand():
    rnn, placeto = efficiency.METHODS
    fits = np.ones(3, bool)
    rnn_best, placeto_best = np.array([30.0, 12.0, 10.0]), np.array([11.0, 9.0, 9.0])
    runs = {
        rnn: Run(np.array([64, 128, 192]), np.array([64, 128, 192]), rnn_best, rnn_best, fits, 1.0),
        placeto: Run(
            np.array([50, 250, 450]), np.array([1, 9, 17]), placeto_best, placeto_best, fits, 1.0
        ),
    }
    row = efficiency.reach_row("g", runs, 18_000.0, "evaluations")
    # target 9 us (Placeto's final), within 5%: 9.45; the RNN placer ends at 10: never reached
    assert row["target ms"] == 9e-3 and row["target from"] == placeto
    assert row["target / single"] == 9.0 / 18_000.0
    assert (row[f"{rnn} to 5%"], row[f"{placeto} to 5%"]) == (None, 250)
    assert (row["ratio to 5%"], row["bound to 5%"]) == (192 / 250, ">")
    assert (row[f"{rnn} to target"], row[f"{placeto} to target"]) == (None, 250)
    row = efficiency.reach_row("g", runs, 18_000.0, "placements")
    assert (row[f"{placeto} to target"], row["ratio to target"]) == (9, 192 / 9)


def test_the_figure_draws_raw_makespans_and_the_target_of_the_method_it_came_from():
    rnn, placeto = efficiency.METHODS
    evaluations = np.array([64, 128])
    runs = {  # the RNN placer's first best overflows memory (penalised by 1e9 µs)
        rnn: Run(evaluations, evaluations, np.array([1e9, 4e3]), np.array([5e3, 4e3]),
                 np.array([False, True]), 1.0),
        placeto: Run(evaluations, evaluations, np.array([4.5e3, 4.2e3]), np.array([4.5e3, 4.2e3]),
                     np.array([True, True]), 1.0),
    }  # fmt: skip
    single = PlacerResult("single", np.zeros(3, np.int64), 6e3, np.zeros(2), False, 0, 0.0)
    figure = Figure()
    efficiency.draw(figure, "g", runs, rnn, single)
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    assert lines[rnn].get_ydata().tolist() == [5.0, 4.0]  # ms, without the penalty
    assert lines["_overflow"].get_ydata().tolist() == [5.0]
    assert list(lines["target 4 ms"].get_ydata()) == [4.0, 4.0]
    assert "target x 1.05 4.2 ms" in lines and "single device 6 ms (does not fit)" in lines


@pytest.mark.slow  # about 40 s (two compiles)
def test_efficiency_end_to_end_on_a_tiny_graph(tmp_path):
    settings = Settings(
        graphs=("layered:12", "data:absent.json"),
        budget=256,
        placeto=("train.episodes=2", "run.group_target=6", "run.eval_every=1", "policy.rounds=1"),
        devices=2,
        min_gain=-1.0,  # every graph qualifies, so every table has a row
    )
    efficiency.run_efficiency(tmp_path, "quick", progress=False, settings=settings)
    out = tmp_path / "efficiency"
    candidates = json.loads((out / "candidates.json").read_text())
    assert [c["graph"] for c in candidates] == ["layered:12", "data:absent.json"]
    assert [c["qualified"] for c in candidates] == [True, False]
    curves = json.loads((out / "curves.json").read_text())["layered:12"]
    finals = {m: c["makespan"][-1] / 1e3 for m, c in curves.items()}
    for unit, table in (("evaluations", "efficiency"), ("placements", "efficiency_placements")):
        (row,) = json.loads((out / f"{table}.json").read_text())
        # the target is the paper's pair's better final; the construct agent is measured on it
        assert row["target ms"] == pytest.approx(min(finals[m] for m in efficiency.METHODS))
        assert curves[row["target from"]]["makespan"][-1] / 1e3 == pytest.approx(row["target ms"])
        for m, c in curves.items():
            assert c["evaluations"][-1] <= settings.budget
            for goal in ("5%", "target"):
                count = row[f"{m} to {goal}"]
                assert count is None or count in c[unit]
            five, hit = row[f"{m} to 5%"], row[f"{m} to target"]
            assert hit is None or (five is not None and five <= hit)
        assert row[f"{row['target from']} to target"] is not None
    assert (out / "curve_layered_12.png").stat().st_size > 0
    assert "layered:12" in (out / "README.md").read_text()


def test_presets_name_real_graphs_only():
    for settings in efficiency.PRESETS.values():
        assert all(g.startswith(("zoo:", "family:", "data:")) for g in settings.graphs)
        assert settings.devices == 4
