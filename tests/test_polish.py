"""Guided search (`placers.guided`) and the policy's proposals to it (`rl.train.Trainer.proposals`,
`stages.policy_search.search_placements`): a move is kept only when the placement then ranks
first, by hand on small chains and against a host NumPy re-implementation of the rule; every
step is one simulation, counted."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

from placeto_jax import Cluster, Graph, simulate
from placeto_jax.config import Config, EnvConfig, PolicyConfig, RunConfig, apply
from placeto_jax.env import build_bank, prepare
from placeto_jax.env.start import with_start
from placeto_jax.graphs import generators
from placeto_jax.placers import guided
from placeto_jax.placers.guided import Searched, Units, guided_search
from placeto_jax.rl.evaluate import rank_visited
from placeto_jax.rl.train import make_train
from placeto_jax.sim.ranking import memory_overflow, rank_keys
from placeto_jax.stages.policy_search import node_placement, search_buckets, search_placements

# Fast buses, no overheads: makespans by hand.
CLUSTER = Cluster(n_devices=2, speed=1.0, bandwidth=1000.0, delta1=0.0, delta2=0.0)


def two_chains() -> Graph:
    """a -> b and c -> d, 100 µs each: 400 µs on one device, 200 µs with a chain on each."""
    return Graph.from_edges([100.0] * 4, [10.0] * 4, [(0, 1), (2, 3)], names=list("abcd"))


def simulated(graph: Graph, cluster: Cluster, placement: np.ndarray) -> Searched:
    """`placement` as the search starts from it: simulated, nothing spent."""
    run = simulate(graph, cluster, placement)
    overflow = float(memory_overflow(run.peak_memory[None], cluster)[0])
    return Searched(placement, float(run.makespan), run.peak_memory, overflow == 0, overflow)


def op_units(graph: Graph) -> Units:
    """Every op its own unit, visited in topological order."""
    return Units(np.arange(graph.n_ops), graph.topological_order)


# ---------------------------------------------------------------------- the search, by hand
def test_op_units_are_co_location_classes_in_topological_order():
    # A chain 0 -> 1 -> 2 -> 3 with ops 1 and 3 one class: units {0}, {1, 3}, {2}, numbered
    # and visited in topological order of their first op.
    graph = Graph.from_edges(cost=[1.0] * 4, out_bytes=[0.0] * 4,
                             edges=[(0, 1), (1, 2), (2, 3)], colocation=[-1, 5, -1, 5])  # fmt: skip
    units = Units.of_ops(graph)
    np.testing.assert_array_equal(units.of_op, [0, 1, 2, 1])
    np.testing.assert_array_equal(units.order, [0, 1, 2])
    chain = Graph.from_edges(cost=[1.0] * 3, out_bytes=[0.0] * 3, edges=[(2, 0), (0, 1)])
    free = Units.of_ops(chain)  # no classes: one unit per op, along the chain 2 -> 0 -> 1
    np.testing.assert_array_equal(free.of_op, [1, 2, 0])
    np.testing.assert_array_equal(free.order, [0, 1, 2])


def test_moves_that_help_are_kept_and_the_rest_undone():
    # From everything on device 0 (400 µs), every op proposed device 1, in topological order:
    # a to 1 gives 300 µs, b after it 200 µs; c or d to 1 would give 300 µs: undone. Then a
    # second pass proposing device 0 everywhere: every move gives 300 µs, none kept.
    graph = two_chains()
    start = simulated(graph, CLUSTER, np.zeros(4, int))
    out = guided_search(graph, CLUSTER, op_units(graph), start, np.ones((1, 4), int))
    assert out.placement.tolist() == [1, 1, 0, 0] and out.makespan == 200.0
    assert (out.kept, out.evaluations) == (2, 4) and out.fits_memory
    again = guided_search(graph, CLUSTER, op_units(graph), out, np.zeros((1, 4), int))
    assert again.placement.tolist() == [1, 1, 0, 0] and (again.kept, again.evaluations) == (2, 8)


def test_a_unit_moves_whole_and_passes_read_their_own_row():
    # Units {a, b} and {c, d}, visited c-d first. Pass 0 proposes device 0 for both (their
    # own: no change, 2 simulations); pass 1 proposes 1 for {a, b}: 200 µs, kept.
    graph = two_chains()
    units = Units(np.array([0, 0, 1, 1]), np.array([1, 0]))
    start = simulated(graph, CLUSTER, np.zeros(4, int))
    out = guided_search(graph, CLUSTER, units, start, np.array([[0, 0], [1, 0]]))
    assert out.placement.tolist() == [1, 1, 0, 0] and out.makespan == 200.0
    assert (out.kept, out.evaluations) == (1, 4)


def test_proposals_of_the_wrong_shape_or_device_are_named():
    graph = two_chains()
    start = simulated(graph, CLUSTER, np.zeros(4, int))
    with pytest.raises(ValueError, match=r"proposals must be \[passes, 4\]"):
        guided_search(graph, CLUSTER, op_units(graph), start, np.ones((1, 3), int))
    with pytest.raises(ValueError, match=r"devices in \[0, 2\)"):
        guided_search(graph, CLUSTER, op_units(graph), start, np.full((1, 4), 2))


def test_every_step_is_one_simulation_counted(monkeypatch):
    # The simulations the jitted loop runs, counted on the host as they run: 3 passes x 4.
    ran = []

    def counting(graph, cluster, placement, broadcast=True):
        io_callback(lambda: ran.append(1), None, ordered=True)
        return simulate_padded(graph, cluster, placement, broadcast)

    simulate_padded = guided.simulate_padded
    monkeypatch.setattr(guided, "simulate_padded", counting)
    jax.clear_caches()
    graph = two_chains()
    start = simulated(graph, CLUSTER, np.zeros(4, int))
    out = guided_search(graph, CLUSTER, op_units(graph), start, np.ones((3, 4), int))
    jax.clear_caches()
    assert out.evaluations == len(ran) == 12


# ---------------------------------------------------------------------- a host reference
def _host_search(graph, cluster, start, units, proposal, passes):
    """The rule on the host in float64, each step simulated with `simulate`: `units` (op arrays,
    in visiting order) `passes` times; propose `proposal(done, index, own)` for unit `index`
    on device `own`, or, when `own` is over its memory, relieve it (to a device with room
    for the unit's bytes holding the most bytes of its edges; ties: the largest free
    fraction, then the lowest index; with no room, the largest free fraction); keep the
    move if the placement then ranks before (`rank_keys`). (The placement, moves kept,
    simulations.)"""

    def rank(placement):
        run = simulate(graph, cluster, placement)
        return rank_keys(run.makespan[None], run.peak_memory[None], cluster)[0], run.peak_memory

    capacity = cluster.memory_array

    def relief(ops, placement, peak):
        own, inside = placement[ops[0]], np.isin(np.arange(graph.n_ops), ops)
        near = np.zeros(cluster.n_devices)
        for u, v in graph.edges:
            if inside[u] != inside[v]:
                near[placement[v] if inside[u] else placement[u]] += graph.out_bytes[u]
        need = (graph.param_bytes[ops] + graph.out_bytes[ops]).sum()
        others = [d for d in range(cluster.n_devices) if d != own]
        room = [d for d in others if capacity[d] - peak[d] >= need]
        if room:
            most = max(near[d] for d in room)
            others = [d for d in room if near[d] == most]
        return max(others, key=lambda d: ((capacity[d] - peak[d]) / capacity[d], -d))

    placement, kept, simulations = np.array(start), 0, 0
    best, peak = rank(placement)
    for done in range(passes):
        for index, ops in enumerate(units):
            own = placement[ops[0]]
            over = peak[own] > capacity[own]
            trial = placement.copy()
            trial[ops] = relief(ops, placement, peak) if over else proposal(done, index, own)
            key, trial_peak = rank(trial)
            simulations += 1
            if key < best:
                placement, best, peak, kept = trial, key, trial_peak, kept + 1
    return placement, kept, simulations


def _ops_in_order(graph: Graph) -> list[np.ndarray]:
    return [np.array([op]) for op in graph.topological_order]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_search_matches_a_host_reference_with_any_proposals(seed):
    # Random proposals on a layered graph, some of them the unit's own device (a no-op, still
    # one simulation), from a random start: the same moves and counts as the host rule.
    graph = generators.layered(30, seed=seed)
    cluster = Cluster(n_devices=3, speed=1.0, bandwidth=2.0, delta1=0.0, delta2=0.0)
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 3, graph.n_ops)
    proposals = rng.integers(0, 3, (2, graph.n_ops))  # [pass, op] (each op its own unit)
    out = guided_search(graph, cluster, op_units(graph), simulated(graph, cluster, start),
                        proposals)  # fmt: skip
    order = graph.topological_order
    expected, kept, simulations = _host_search(
        graph, cluster, start, _ops_in_order(graph),
        lambda done, index, own: proposals[done, order[index]], passes=2,
    )  # fmt: skip
    np.testing.assert_array_equal(out.placement, expected)
    assert out.kept == kept > 0 and out.evaluations == simulations == 60
    assert (
        out.makespan
        == simulate(graph, cluster, expected).makespan
        < simulate(graph, cluster, start).makespan
    )


def _memory_bound_chain(n_devices: int, memory: float) -> tuple[Graph, Cluster]:
    """30 ops of 1 GB of parameters in a chain, on `n_devices` devices of `memory` bytes."""
    n = 30
    graph = Graph.from_edges([50.0] * n, [1e3] * n, [(i, i + 1) for i in range(n - 1)],
                             param_bytes=[1e9] * n)  # fmt: skip
    cluster = Cluster(n_devices=n_devices, memory=memory, speed=1.0, bandwidth=1e3,
                      delta1=0.0, delta2=0.0)  # fmt: skip
    return graph, cluster


def test_when_memory_binds_the_search_ranks_by_overflow():
    # All 30 GB on device 0 of two 20.5 GB devices: 9.5 GB over. Every split of a chain
    # lengthens it, but ranked as `rank_key` each of the first 10 moves to device 1 lowers
    # the overflow and is kept; then it fits.
    graph, cluster = _memory_bound_chain(2, 20.5e9)
    start = np.zeros(30, int)
    out = guided_search(graph, cluster, op_units(graph), simulated(graph, cluster, start),
                        np.ones((1, 30), int))  # fmt: skip
    expected, kept, _ = _host_search(graph, cluster, start, _ops_in_order(graph),
                                     lambda *_: 1, passes=1)  # fmt: skip
    np.testing.assert_array_equal(out.placement, expected)
    assert out.kept == kept >= 10 and (expected == 1).sum() >= 10
    peaks = simulate(graph, cluster, np.stack([start, expected])).peak_memory
    assert memory_overflow(peaks, cluster).tolist() == [pytest.approx(9.5 / 20.5), 0.0]
    assert out.fits_memory and out.overflow == 0.0


def test_a_device_over_its_memory_is_relieved_next_to_its_neighbours():
    # 30 ops of 1 GB on device 0 of three 12.5 GB devices, every op proposed device 1, never
    # 2, so 30 GB on two devices could never fit. Relief moves an op of an overfull device to
    # a device with room for its 1 GB that holds its neighbour: op 0 to device 1 (both empty:
    # the lowest index), ops 1 to 11 after it while 1 GB fits there (12 GB of 12.5), ops 12 to
    # 17 to device 2, which has room; then device 0's 12 GB fit and the search stops moving.
    graph, cluster = _memory_bound_chain(3, 12.5e9)
    start = np.zeros(30, int)
    out = guided_search(graph, cluster, op_units(graph), simulated(graph, cluster, start),
                        np.ones((1, 30), int))  # fmt: skip
    assert out.placement.tolist() == [1] * 12 + [2] * 6 + [0] * 12
    assert (out.kept, out.evaluations) == (18, 30) and out.fits_memory
    expected, kept, _ = _host_search(graph, cluster, start, _ops_in_order(graph),
                                     lambda *_: 1, passes=1)  # fmt: skip
    np.testing.assert_array_equal(out.placement, expected)
    assert kept == 18


# ---------------------------------------------------------------------- the policy's proposals
def _zeroed(run):
    """Parameters with every logit equal: the proposal is the lowest allowed other device."""
    params = run.init(jax.random.key(1), run.env_params).params
    return jax.tree.map(jnp.zeros_like, params)


def _given(devices: int, **run) -> Config:
    return Config(n_devices=devices, env=EnvConfig(initial_placement="given"),
                  policy=PolicyConfig(rounds=1), run=RunConfig(**run))  # fmt: skip


def test_proposals_are_the_policy_run_once_per_unit_on_the_pass_start():
    # Trained-looking (random) parameters: the batched proposals of pass 1 equal the policy
    # observed one unit at a time on the same placement, the unit current at step n + i.
    graph = generators.layered(20, seed=3)
    config = apply(_given(3), {"env.passes": 2})
    start = np.random.default_rng(3).integers(0, 3, graph.n_ops)
    pg = with_start(prepare("layered", graph), start, "random", 3)
    cluster = Cluster(n_devices=3, speed=1.0, bandwidth=2.0, delta1=0.0, delta2=0.0)
    run = make_train(config, build_bank([pg]), cluster)
    params = run.init(jax.random.key(7), run.env_params).params
    nodes = node_placement(pg, start, run.trainer.n_pad)[None]
    for proposer in ("policy", "ranked"):
        got = np.asarray(run.proposals(params, run.env_params, nodes, 1, jax.random.key(0),
                                       proposer=proposer))  # fmt: skip
        state, _ = run.trainer.env.reset(jax.random.key(0), run.env_params.on_graph(0))
        for i, unit in enumerate(np.asarray(state.order[: graph.n_ops])):
            obs = run.trainer.env.observe(
                dataclasses.replace(state, t=graph.n_ops + i), run.env_params
            )
            logits = np.array(run.trainer.policy.apply(params, obs))
            logits[start[unit]] = -np.inf  # the unit's own device
            by_likelihood = np.argsort(-logits, kind="stable")
            assert got[0, unit] == by_likelihood[1 if proposer == "ranked" else 0]
    random = np.asarray(run.proposals(params, run.env_params, nodes, 0, jax.random.key(0),
                                      proposer="random"))[0, : graph.n_ops]  # fmt: skip
    assert (random != start).all() and set(random.tolist()) == {0, 1, 2}
    with pytest.raises(ValueError, match="proposer must be one of"):
        run.proposals(params, run.env_params, nodes, 0, jax.random.key(0), proposer="best")


def _search_a_layered_graph(n_ops: int, devices: int, passes: int, seed: int, **search):
    """(graph, cluster, random start, the stage's placement) after `passes` passes of the
    search with equal logits on a layered graph."""
    graph = generators.layered(n_ops, seed=seed)
    cluster = Cluster(n_devices=devices, speed=1.0, bandwidth=2.0, delta1=0.0, delta2=0.0)
    start = np.random.default_rng(seed).integers(0, devices, graph.n_ops)
    pg = prepare("layered", graph)
    config = _given(devices)
    run = make_train(config, build_bank([with_start(pg, start, "random", devices)]), cluster)
    placed = rank_visited(pg, cluster, start[None], "random")
    (out,) = search_placements(config, _zeroed(run), [pg], [placed], cluster, passes, **search)
    assert out.start == "random" and out.initial_makespan == placed.makespan
    assert out.polish_steps == passes * n_ops and out.evaluations == placed.evaluations
    return graph, cluster, start, out


def test_the_stage_with_equal_logits_proposes_the_lowest_other_device(capsys):
    graph, cluster, start, out = _search_a_layered_graph(30, 3, 2, seed=0, progress=True)
    devices = np.arange(3)
    expected, _, _ = _host_search(graph, cluster, start, _ops_in_order(graph),
                                  lambda done, i, own: devices[devices != own][0], 2)  # fmt: skip
    np.testing.assert_array_equal(out.placement, expected)
    assert out.makespan == simulate(graph, cluster, expected).makespan
    assert "search: 100%" in capsys.readouterr().err


def test_ranked_proposals_try_the_next_likeliest_device_on_each_pass():
    # Equal logits rank the other devices by index: pass 0 proposes the lowest, pass 1 the
    # second lowest, pass 2 the lowest again; the plain proposer always the lowest.
    graph, cluster, start, out = _search_a_layered_graph(24, 4, 3, seed=1, proposer="ranked")
    devices = np.arange(4)

    def ranked(done, index, own):
        others = devices[devices != own]
        return others[done % 3]

    expected, kept, _ = _host_search(graph, cluster, start, _ops_in_order(graph), ranked, 3)
    np.testing.assert_array_equal(out.placement, expected)
    plain, _, _ = _host_search(graph, cluster, start, _ops_in_order(graph),
                               lambda done, i, own: devices[devices != own][0], 3)  # fmt: skip
    assert kept > 0 and not np.array_equal(plain, expected)


def test_random_proposals_never_make_it_worse():
    graph, cluster, _, out = _search_a_layered_graph(30, 3, 2, seed=4, proposer="random",
                                                     key=jax.random.key(5))  # fmt: skip
    assert out.makespan < out.initial_makespan
    assert out.makespan == simulate(graph, cluster, out.placement).makespan
    _, _, _, again = _search_a_layered_graph(30, 3, 2, seed=4, proposer="random",
                                             key=jax.random.key(5))  # fmt: skip
    np.testing.assert_array_equal(again.placement, out.placement)  # the key decides


def test_searching_an_op_graph_larger_than_every_bucket_of_the_run():
    # The run trained on groups (buckets up to 32 nodes); its 40-op graph is searched as ops,
    # its policy observing them in a bucket added for them: fine_bucket(40) = 64. Larger
    # graphs round up to an eighth of their power of two, at least 64: 100 -> 128, 600 -> 640.
    config = _given(2, buckets=(16, 32))
    alone = [prepare(f"g{n}", generators.layered(n, seed=1)) for n in (20, 100, 600)]
    assert search_buckets(config, alone[:1]) == (16, 32)
    assert search_buckets(config, alone[:2]) == (16, 32, 128)
    assert search_buckets(config, alone) == (16, 32, 640)
    graph = generators.layered(40, seed=5)
    pg = prepare("layered", graph, group_target=8)
    assert pg.graph.n_ops <= 8 and pg.op_graph is graph
    assert search_buckets(config, [prepare("ops", graph)]) == (16, 32, 64)
    start = np.zeros(graph.n_ops, int)
    run = make_train(config, build_bank([with_start(pg, start, "single", 2)]), CLUSTER)
    placed = rank_visited(prepare("layered", graph), CLUSTER, start[None], "single")
    (out,) = search_placements(config, _zeroed(run), [pg], [placed], CLUSTER, passes=1)
    expected, _, _ = _host_search(graph, CLUSTER, start, _ops_in_order(graph),
                                  lambda done, i, own: 1 - own, passes=1)  # fmt: skip
    np.testing.assert_array_equal(out.placement, expected)
    assert out.polish_steps == graph.n_ops


def test_searching_groups_moves_whole_groups_as_a_host_reference_does():
    # The policy placed 8 groups of a 40-op graph; two passes over the groups (in topological
    # order), each moved whole to the other device and kept if the op graph then ranks
    # first: the host rule over groups keeps the same moves.
    config = _given(2, buckets=(16, 32))
    graph = generators.layered(40, seed=5)
    cluster = Cluster(n_devices=2, speed=1.0, bandwidth=2.0, delta1=0.0, delta2=0.0)
    pg = prepare("layered", graph, group_target=8)
    start = pg.expand(np.random.default_rng(2).integers(0, 2, pg.graph.n_ops))
    run = make_train(config, build_bank([with_start(pg, start, "random", 2)]), cluster)
    placed = rank_visited(prepare("layered", graph), cluster, start[None], "random")
    (out,) = search_placements(config, _zeroed(run), [pg], [placed], cluster, passes=2,
                               on_groups=True)  # fmt: skip
    groups = [np.flatnonzero(pg.op_to_group == g) for g in pg.graph.topological_order]
    expected, kept, _ = _host_search(graph, cluster, start, groups,
                                     lambda done, i, own: 1 - own, passes=2)  # fmt: skip
    assert kept > 0
    np.testing.assert_array_equal(out.placement, expected)
    assert out.polish_steps == 2 * pg.n_units
    # the op-level search moves single ops: another count from the same start
    (ops,) = search_placements(config, _zeroed(run), [pg], [placed], cluster, passes=2)
    assert ops.polish_steps == 2 * graph.n_ops
