"""Policy-guided search (`Trainer.polish`, `evaluate.polish_with`): a move is kept only when the
simulated runtime drops, by hand on two chains and against a NumPy re-implementation of the same
rule on a random graph."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from placeto_jax import Cluster, Graph, simulate
from placeto_jax.config import Config, EnvConfig, PolicyConfig, RunConfig
from placeto_jax.env import build_bank, prepare
from placeto_jax.env.start import with_start
from placeto_jax.graphs import generators
from placeto_jax.rl import train as train_module
from placeto_jax.rl.evaluate import Placement
from placeto_jax.rl.train import make_train
from placeto_jax.sim.ranking import memory_overflow, rank_keys
from placeto_jax.stages.policy_search import polish_buckets, polish_placements, polish_with

# Fast buses, no overheads: makespans by hand.
CLUSTER = Cluster(n_devices=2, speed=1.0, bandwidth=1000.0, delta1=0.0, delta2=0.0)


def two_chains() -> Graph:
    """a -> b and c -> d, 100 µs each: 400 µs on one device, 200 µs with a chain on each."""
    return Graph.from_edges([100.0] * 4, [10.0] * 4, [(0, 1), (2, 3)], names=list("abcd"))


def _zeroed(run):
    """Parameters with every logit equal: the proposal is the lowest allowed other device."""
    params = run.init(jax.random.key(1), run.env_params).params
    return jax.tree.map(jnp.zeros_like, params)


def test_moves_that_help_are_kept_and_the_rest_undone():
    # From everything on device 0 (400 µs), in topological order: moving a (or c) to device 1
    # gives 300 µs, moving its successor after it gives 200 µs; every later move would give
    # 300 µs and is undone, so two moves are kept and the chains end on different devices.
    config = Config(n_devices=2, env=EnvConfig(initial_placement="given"),
                    policy=PolicyConfig(rounds=1))  # fmt: skip
    pg = with_start(prepare("chains", two_chains()), np.zeros(4, int), "single", 2)
    run = make_train(config, build_bank([pg]), CLUSTER)
    out = jax.device_get(run.polish(_zeroed(run), run.env_params))
    assert int(out["kept"][0]) == 2
    placement = out["placement"][0, :4]
    assert placement[0] == placement[1] != placement[2] == placement[3]
    # runtimes in the env's units: divided by the initial runtime
    assert float(out["runtime"][0]) == pytest.approx(0.5)
    assert float(out["initial_runtime"][0]) == pytest.approx(1.0)
    (placed,) = polish_with(run, _zeroed(run), run.env_params, [pg], CLUSTER)
    assert placed.makespan == pytest.approx(200.0) and placed.initial_makespan == pytest.approx(400)
    assert placed.start == "single" and placed.polish_steps == 5  # 4 steps and the initial one


def _host_search(
    graph: Graph,
    cluster: Cluster,
    start: np.ndarray,
    passes: int,
    units=None,
    ranked: bool = False,
) -> tuple[np.ndarray, int]:
    """The same rule on the host in float64: ops in topological order, `passes` times; propose
    the lowest device other than the op's own (`ranked`: on pass p the (p mod (D - 1))-th
    lowest, as the "ranked" proposer does when every logit is equal; when the op's device is
    over its memory: `relief`), keep it if it ranks
    before the current one (`rank_key`: the makespan drops, or the memory overflow when either
    overflows). (The final placement, the moves kept.) `units`: the ops moved together at each
    step instead, in order (default: each op alone)."""

    def rank(placement):
        run = simulate(graph, cluster, placement)
        return rank_keys(run.makespan[None], run.peak_memory[None], cluster)[0], run.peak_memory

    capacity = cluster.memory_array
    edges = graph.edges

    def relief(ops: np.ndarray, placement: np.ndarray, peak: np.ndarray) -> int:
        """Off an overfull device: to a device with room for the unit's bytes holding the most
        bytes of its edges (ties: the largest free fraction, then the lowest index), else the
        largest free fraction."""
        own, inside = placement[ops[0]], np.isin(np.arange(graph.n_ops), ops)
        near = np.zeros(cluster.n_devices)
        for u, v in edges:
            if inside[u] != inside[v]:
                near[placement[v] if inside[u] else placement[u]] += graph.out_bytes[u]
        need = (graph.param_bytes[ops] + graph.out_bytes[ops]).sum()
        others = [d for d in range(cluster.n_devices) if d != own]
        room = [d for d in others if capacity[d] - peak[d] >= need]
        if room:
            most = max(near[d] for d in room)
            others = [d for d in room if near[d] == most]
        return max(others, key=lambda d: ((capacity[d] - peak[d]) / capacity[d], -d))

    def proposal(ops: np.ndarray, placement: np.ndarray, peak: np.ndarray, done: int) -> int:
        own = placement[ops[0]]
        if peak[own] > capacity[own]:
            return relief(ops, placement, peak)
        others = [d for d in range(cluster.n_devices) if d != own]
        return others[done % len(others) if ranked else 0]

    placement, kept = start.copy(), 0
    best, peak = rank(placement)
    if units is None:
        units = [np.array([op]) for op in graph.topological_order]
    for done in range(passes):
        for ops in units:
            trial = placement.copy()
            trial[ops] = proposal(ops, placement, peak, done)
            key, trial_peak = rank(trial)
            if key < best:
                placement, best, peak, kept = trial, key, trial_peak, kept + 1
    return placement, kept


def _reference(graph: Graph, cluster: Cluster, start: np.ndarray, passes: int) -> np.ndarray:
    """The placement `_host_search` ends with."""
    return _host_search(graph, cluster, start, passes)[0]


def _search_a_layered_graph(n_ops: int, devices: int, passes: int, seed: int, **polish):
    """(graph, cluster, random start, `Train.polish`'s output) of `passes` passes of the search
    with equal logits on a layered graph, float64."""
    graph = generators.layered(n_ops, seed=seed)
    cluster = Cluster(n_devices=devices, speed=1.0, bandwidth=2.0, delta1=0.0, delta2=0.0)
    start = np.random.default_rng(seed).integers(0, devices, graph.n_ops)
    config = Config(n_devices=devices, env=EnvConfig(initial_placement="given", passes=passes),
                    policy=PolicyConfig(rounds=1))  # fmt: skip
    pg = with_start(prepare("layered", graph), start, "random", devices)
    run = make_train(config, build_bank([pg]), cluster, float_dtype=jnp.float64)
    assert run.trainer.n_steps == passes * n_ops
    return graph, cluster, start, jax.device_get(run.polish(_zeroed(run), run.env_params, **polish))


@pytest.mark.parametrize("chunk", [None, 7])
def test_the_search_matches_a_host_reference_of_the_same_rule(chunk, monkeypatch, capsys):
    # 2 passes x 30 ops = 60 steps; with 7 per call: 9 calls of 7 steps, the last 3 of them
    # padding that keeps nothing. The same moves as the host rule, and a bar that ends at 60.
    if chunk is not None:
        monkeypatch.setattr(train_module, "POLISH_CHUNK", chunk)
    graph, cluster, start, out = _search_a_layered_graph(30, 3, 2, seed=0, progress=True)
    expected, kept = _host_search(graph, cluster, start, passes=2)
    np.testing.assert_array_equal(out["placement"][0, : graph.n_ops], expected)
    assert int(out["kept"][0]) == kept > 0
    assert simulate(graph, cluster, expected).makespan < simulate(graph, cluster, start).makespan
    bar = capsys.readouterr().err
    assert "polish: 100%" in bar and "60/60" in bar


def test_ranked_proposals_try_the_next_likeliest_device_on_each_pass():
    # Equal logits rank the other devices by index: pass 0 proposes the lowest, pass 1 the
    # second lowest, pass 2 the lowest again. Three passes on 4 devices keep moves that the
    # plain proposer (always the lowest) never proposes.
    graph, cluster, start, out = _search_a_layered_graph(24, 4, 3, seed=1, proposer="ranked")
    expected, kept = _host_search(graph, cluster, start, passes=3, ranked=True)
    np.testing.assert_array_equal(out["placement"][0, : graph.n_ops], expected)
    assert int(out["kept"][0]) == kept > 0
    plain, _ = _host_search(graph, cluster, start, passes=3)
    assert not np.array_equal(plain, expected)


def _search_a_memory_bound_chain(n_devices: int, memory: float):
    """30 ops of 1 GB of parameters in a chain, all on device 0 of `n_devices` devices of
    `memory` bytes: (start, the JAX search's output after one pass with every logit equal, the
    host rule's placement and moves kept, the graph, the cluster)."""
    n = 30
    graph = Graph.from_edges([50.0] * n, [1e3] * n, [(i, i + 1) for i in range(n - 1)],
                             param_bytes=[1e9] * n)  # fmt: skip
    cluster = Cluster(n_devices=n_devices, memory=memory, speed=1.0, bandwidth=1e3,
                      delta1=0.0, delta2=0.0)  # fmt: skip
    start = np.zeros(n, np.int64)
    config = Config(n_devices=n_devices, env=EnvConfig(initial_placement="given", passes=1),
                    policy=PolicyConfig(rounds=1))  # fmt: skip
    pg = with_start(prepare("chain", graph), start, "single", n_devices)
    run = make_train(config, build_bank([pg]), cluster, float_dtype=jnp.float64)
    out = jax.device_get(run.polish(_zeroed(run), run.env_params))
    expected, kept = _host_search(graph, cluster, start, passes=1)
    return start, out, expected, kept, graph, cluster


def test_when_memory_binds_the_search_ranks_by_overflow_not_the_envs_capped_penalty():
    # A chain of 30 ops of 1 GB of parameters each, all on device 0 of two 20.5 GB devices:
    # 9.5 GB over, past the env's penalty cap (10 s at 2 s per GB), so its reward sees only
    # the makespan, which every split of a chain lengthens. Ranked as `rank_key`, each of the
    # first 10 moves to device 1 lowers the overflow and is kept; then it fits.
    start, out, expected, kept, graph, cluster = _search_a_memory_bound_chain(2, 20.5e9)
    np.testing.assert_array_equal(out["placement"][0, :30], expected)
    assert int(out["kept"][0]) == kept >= 10
    peaks = simulate(graph, cluster, np.stack([start, expected])).peak_memory
    assert memory_overflow(peaks, cluster).tolist() == [pytest.approx(9.5e9 / 20.5e9), 0.0]
    assert (expected == 1).sum() >= 10


def test_a_device_over_its_memory_is_relieved_next_to_its_neighbours():
    # 30 ops of 1 GB on device 0 of three 12.5 GB devices. The policy (every logit equal)
    # proposes device 1 for an op on device 0, never device 2, so 30 GB on two devices could
    # never fit. Relief moves an op of an overfull device to a device with room for its 1 GB
    # that holds its neighbour: op 0 to device 1 (both empty: the lowest index), ops 1 to 11
    # after it while 1 GB fits there (12 GB of 12.5), ops 12 to 17 to device 2, which has room,
    # and their successors after them; then device 0's 12 GB fit and the search stops moving.
    # Two transfers in all, where moving each op to the freest device alternated between them.
    start, out, expected, kept, graph, cluster = _search_a_memory_bound_chain(3, 12.5e9)
    np.testing.assert_array_equal(out["placement"][0, :30], expected)
    assert int(out["kept"][0]) == kept == 18
    np.testing.assert_array_equal(expected, [1] * 12 + [2] * 6 + [0] * 12)
    peaks = simulate(graph, cluster, np.stack([start, expected])).peak_memory
    assert memory_overflow(peaks, cluster).tolist() == [pytest.approx(17.5 / 12.5), 0.0]


def test_random_proposals_never_make_it_worse_and_a_bad_proposer_is_named():
    graph = generators.layered(30, seed=4)
    cluster = Cluster(n_devices=3, speed=1.0, bandwidth=2.0, delta1=0.0, delta2=0.0)
    start = np.zeros(graph.n_ops, int)
    config = Config(n_devices=3, env=EnvConfig(initial_placement="given"),
                    policy=PolicyConfig(rounds=1))  # fmt: skip
    pg = with_start(prepare("layered", graph), start, "single", 3)
    run = make_train(config, build_bank([pg]), cluster)
    (placed,) = polish_with(run, _zeroed(run), run.env_params, [pg], cluster, "random")
    assert placed.makespan <= placed.initial_makespan
    assert placed.makespan == pytest.approx(simulate(graph, cluster, placed.placement).makespan)
    with pytest.raises(ValueError, match="proposer must be one of"):
        run.polish(_zeroed(run), run.env_params, proposer="best")


def test_polishing_an_op_graph_larger_than_every_bucket_of_the_run():
    # The run trained on groups (buckets up to 32 nodes); its 40-op graphs are searched as ops,
    # in a bucket added for them: fine_bucket(40) = 64. Larger graphs round up to an eighth of
    # their power of two, at least 64: 100 -> 128, 600 -> 640.
    config = Config(n_devices=2, run=RunConfig(buckets=(16, 32)), policy=PolicyConfig(rounds=1))
    graph = generators.layered(40, seed=5)
    pg = prepare("layered", graph, group_target=8)
    assert pg.graph.n_ops <= 8 and pg.op_graph is graph
    alone = [prepare(f"g{n}", generators.layered(n, seed=1)) for n in (20, 100, 600)]
    assert polish_buckets(config, alone[:1]) == (16, 32)
    assert polish_buckets(config, alone[:2]) == (16, 32, 128)
    assert polish_buckets(config, alone) == (16, 32, 640)
    assert polish_buckets(config, [prepare("ops", graph)]) == (16, 32, 64)
    # End to end: a single-device start polished on the op graph, equal to the host rule.
    run = make_train(config, build_bank([pg]), CLUSTER)
    start = np.zeros(graph.n_ops, int)
    placed = Placement(graph="layered", placement=start, makespan=0.0,
                       single_device_makespan=0.0, initial_makespan=0.0,
                       peak_memory=np.zeros(2), fits_memory=True, n_nodes=pg.graph.n_ops,
                       n_units=pg.n_units, evaluations=1, start="single")  # fmt: skip
    (polished,) = polish_placements(config, _zeroed(run), [pg], [placed], CLUSTER, passes=1)
    expected = _reference(graph, CLUSTER, start, passes=1)
    assert polished.makespan == pytest.approx(simulate(graph, CLUSTER, expected).makespan)
    assert polished.polish_steps == graph.n_ops + 1


def test_polishing_groups_moves_whole_groups_as_a_host_reference_does():
    # The policy placed 8 groups of a 40-op graph; two passes over the groups (in topological
    # order), each moved whole to the other device and kept if the op graph's makespan drops:
    # the host rule over groups, in float64, keeps the same moves.
    config = Config(n_devices=2, run=RunConfig(buckets=(16, 32)), policy=PolicyConfig(rounds=1))
    graph = generators.layered(40, seed=5)
    cluster = Cluster(n_devices=2, speed=1.0, bandwidth=2.0, delta1=0.0, delta2=0.0)
    pg = prepare("layered", graph, group_target=8)
    start = pg.expand(np.random.default_rng(2).integers(0, 2, pg.graph.n_ops))
    run = make_train(config, build_bank([pg]), cluster)
    (polished,) = polish_placements(config, _zeroed(run), [pg], [_placed(pg, start, 2)],
                                    cluster, passes=2, on_groups=True)  # fmt: skip
    groups = [np.flatnonzero(pg.op_to_group == g) for g in pg.graph.topological_order]
    expected, kept = _host_search(graph, cluster, start, passes=2, units=groups)
    assert kept > 0
    np.testing.assert_array_equal(polished.placement, expected)
    assert polished.makespan == pytest.approx(simulate(graph, cluster, expected).makespan)
    assert polished.polish_steps == 2 * pg.n_units + 1
    # the op-level search moves single ops: another placement from the same start
    (ops,) = polish_placements(config, _zeroed(run), [pg], [_placed(pg, start, 2)], cluster, 2)
    assert ops.polish_steps == 2 * graph.n_ops + 1


def _placed(pg, start: np.ndarray, devices: int) -> Placement:
    """A placement of `pg` as `polish_placements` takes it: `start` on the op graph."""
    return Placement(graph=pg.name, placement=start, makespan=0.0,
                     single_device_makespan=0.0, initial_makespan=0.0,
                     peak_memory=np.zeros(devices), fits_memory=True, n_nodes=pg.graph.n_ops,
                     n_units=pg.n_units, evaluations=1, start="single")  # fmt: skip
