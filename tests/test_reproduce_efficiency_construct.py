"""The construct agent in the sample-efficiency experiment: its budget, its curve's charge (the
teachers' simulations first), an exact final makespan, and its columns of the reach table."""

from __future__ import annotations

import numpy as np
import pytest

from placeto_jax.cluster import Cluster
from placeto_jax.config import apply, make_config
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.reproduce import efficiency
from placeto_jax.reproduce.construct import training_simulations
from placeto_jax.reproduce.efficiency import CONSTRUCT, METHODS, Run, Settings
from placeto_jax.sim.api import simulate
from placeto_jax.sim.ranking import penalised_makespan
from placeto_jax.stages.teachers import teachers as teachers_of

TINY = ("train.imitation=4", "run.eval_every=2", "train.episodes=4", "policy.rounds=1")


def test_construct_iterations_fill_the_budget():
    config = make_config("construct", list(TINY))
    # u updates: 4 u episodes and a greedy evaluation at every even update and the last:
    # 0 -> 2, 1 -> 4 + 3 = 7, 2 -> 8 + 3 = 11, 3 -> 12 + 4 = 16
    assert efficiency.construct_iterations(11, config) == 2
    assert efficiency.construct_iterations(15, config) == 2
    assert efficiency.construct_iterations(16, config) == 3
    assert efficiency.construct_iterations(2, config) == 0
    with pytest.raises(ValueError, match="less than the construct agent's"):
        efficiency.construct_iterations(1, config)


def test_the_construct_curve_is_charged_and_capped_by_the_budget():
    graph, cluster = resolve_graph("layered:12"), Cluster.preset("placeto-k80", 2)
    settings = Settings(graphs=(), budget=64, placeto=(), construct=TINY, devices=2)
    run, placement = efficiency.construct_run("layered:12", graph, cluster, settings)
    taught = teachers_of([("layered:12", graph)], cluster, settings.seed)
    teachers = sum(t.evaluations for t in taught)
    config = make_config("construct", list(TINY))
    updates = efficiency.construct_iterations(settings.budget - teachers, config)
    assert updates > 0  # self-imitation ran
    spent = teachers + training_simulations(apply(config, {"train.iterations": updates}), 1)
    evaluations = run.evaluations
    assert evaluations[0] == teachers and evaluations[-1] == spent
    assert np.all(np.diff(evaluations) > 0) and evaluations[-1] <= settings.budget
    assert evaluations[-1] > settings.budget - 5  # no room for one more update (4 episodes + 1)
    assert np.array_equal(run.placements, evaluations)
    assert np.all(np.diff(run.makespan) <= 0)  # the best so far
    sim = simulate(graph, cluster, placement[None])
    assert run.makespan[-1] == penalised_makespan(sim.makespan, sim.peak_memory, cluster)[0]
    assert run.raw[-1] == sim.makespan[0] and np.isfinite(run.raw[-1]) and run.raw[-1] > 0


def test_reach_row_counts_the_construct_agent_against_the_papers_target():
    rnn, placeto = METHODS
    fits = np.ones(3, bool)

    def curve(evaluations, best):
        return Run(np.array(evaluations), np.array(evaluations), np.array(best),
                   np.array(best), fits, 1.0)  # fmt: skip

    runs = {
        rnn: curve([64, 128, 192], [30.0, 12.0, 10.0]),
        placeto: curve([50, 250, 450], [11.0, 9.0, 9.0]),
        CONSTRUCT: curve([7, 20, 100], [9.2, 8.0, 8.0]),  # better than the target
    }
    row = efficiency.reach_row("g", runs, 18_000.0, "evaluations")
    assert row["target ms"] == 9e-3 and row["target from"] == placeto  # the paper's pair only
    assert row["construct final / target"] == pytest.approx(8.0 / 9.0)
    assert (row[f"{CONSTRUCT} to 5%"], row[f"{CONSTRUCT} to target"]) == (7, 20)
    assert (row["ratio to 5%"], row["bound to 5%"]) == (192 / 250, ">")  # RNN / Placeto as before
    assert (row[f"{placeto} / {CONSTRUCT} to target"],
            row[f"{placeto} / {CONSTRUCT} bound to target"]) == (250 / 20, "=")  # fmt: skip
    assert (row[f"{rnn} / {CONSTRUCT} to target"],
            row[f"{rnn} / {CONSTRUCT} bound to target"]) == (192 / 20, ">")  # fmt: skip


def test_presets_give_the_construct_agent_overrides():
    for settings in efficiency.PRESETS.values():
        config = make_config("construct", list(settings.construct))
        assert config.train.imitation % config.run.eval_every == 0  # a point where imitation ends
