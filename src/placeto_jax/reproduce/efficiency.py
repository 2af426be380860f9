"""Sample efficiency (issue 20 item 4, the paper's "up to 6.1x fewer training steps"): the RNN
placer and Placeto (the paper's configuration) trained on the same graph, cluster and budget of
simulator evaluations; on the graphs where the RNN placer learns (its final value more than 5%
below its first), the evaluations each needs to reach the better of the two final values. The
construct agent (`rl/construct_loop.py`, issue 45 item 7) trains on the same graph within the
same budget, and is counted against the same target.

Every method is charged every simulator call it makes: the RNN placer one per sampled
placement; Placeto one per step of each training episode (its per-step reward) plus, for each
greedy evaluation that gives its curve a point, that episode's steps and as many exact
simulations again (an upper bound on the distinct placements it ranks on the op graph); the
construct agent its teachers' simulations (`stages.teachers.teachers`), one per
sampled episode of each self-imitation update and one per greedy evaluation
(`reproduce.construct.training_simulations`); its imitation updates simulate nothing.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import jax
import numpy as np
from tqdm.auto import tqdm

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config, apply, make_config, to_dict
from placeto_jax.env.bank import prepare
from placeto_jax.graphs.benchmark import load_benchmark
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.placers import PlacerResult, run_method
from placeto_jax.placers.base import best_so_far
from placeto_jax.plotting import draw_learning_curves
from placeto_jax.reproduce import learned
from placeto_jax.reproduce.construct import construct_config, training_simulations
from placeto_jax.reproduce.output import Recorder, write_text
from placeto_jax.reproduce.placeto import PlacetoBench
from placeto_jax.rl import construct_loop
from placeto_jax.sim.api import simulate
from placeto_jax.sim.ranking import fits_memory, penalised_makespan
from placeto_jax.stages.teachers import teachers

MS = 1e3  # µs
TOLERANCE = 0.05  # "within 5%" of the target
DATA = "data:"  # a graph spec prefix: a benchmark file under --data
METHODS = ("rnn", "placeto (paper)")  # the paper's pair: its target and its ratio
CONSTRUCT = "construct"  # the construct agent, trained on the graph alone


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one preset runs."""

    graphs: tuple[str, ...]  # graph specs; `data:PATH` is a benchmark file under --data
    budget: int  # simulator evaluations of each method on each graph
    placeto: tuple[str, ...]  # overrides of the tiny preset (iterations follow from the budget)
    # overrides of the construct preset (iterations follow from the budget); its curve has a
    # point at every `run.eval_every` updates, so one that divides `train.imitation` gives a
    # point where imitation ends
    construct: tuple[str, ...] = ("train.imitation=100", "run.eval_every=10")
    devices: int = 4
    cluster: str = "placeto-k80"
    min_gain: float = 0.05  # a graph qualifies when the RNN placer's final value is this far
    # below its first
    seed: int = 0


LAYERS = "data:throughput-inputs/LayerGraphs/"
PRESETS = {
    "quick": Settings(
        graphs=(
            # family:nmt/0 and family:ptb/0 (thousands of ops) left out: the RNN placer alone
            # took over 6 minutes on family:nmt/0 at this budget on one core
            "zoo:nasnet",
            "zoo:nmt",
            "family:cifar10/0",
            f"{LAYERS}gnmt_inference.json",
            f"{LAYERS}resnet50_inference.json",
            f"{LAYERS}inceptionv3_inference.json",
        ),
        budget=4096,
        placeto=("train.episodes=8", "run.group_target=24", "run.eval_every=1"),
    ),
    "full": Settings(
        graphs=(
            "zoo:inception_v3",
            "zoo:nasnet",
            "zoo:nmt",
            "family:nmt/0",
            "family:ptb/0",
            "family:cifar10/0",
            f"{LAYERS}gnmt_inference.json",
            f"{LAYERS}resnet50_inference.json",
            f"{LAYERS}inceptionv3_inference.json",
            f"{LAYERS}bert24_inference.json",
        ),
        budget=65536,
        placeto=("train.episodes=32", "run.group_target=64", "run.eval_every=2"),
        construct=("train.imitation=300", "train.episodes=32", "run.eval_every=20"),
    ),
}


# ---------------------------------------------------------------------- counting
def evaluations_to_reach(evaluations, makespan, value: float) -> int | None:
    """Evaluations at the first point of a curve at or below `value` (None: never reached).
    The curve need not be monotone: the first point at or below `value` is where its running
    minimum gets there too."""
    evaluations, makespan = np.asarray(evaluations), np.asarray(makespan, np.float64)
    if evaluations.ndim != 1 or evaluations.shape != makespan.shape or not evaluations.size:
        raise ValueError("a curve needs equally long, non-empty 1-D evaluations and makespans")
    if np.any(np.diff(evaluations) < 0):
        raise ValueError("a curve's evaluations must not decrease")
    reached = np.flatnonzero(makespan <= value)
    return int(evaluations[reached[0]]) if reached.size else None


def placeto_cost(updates: int, episodes: int, steps: int, eval_every: int) -> int:
    """Simulator evaluations charged to `updates` Placeto updates of `episodes` episodes of
    `steps` steps, greedy-evaluated first and every `eval_every` updates (and at the end), each
    later evaluation also simulating the best placement training found on the op graph."""
    later = -(-updates // eval_every)
    return updates * episodes * steps + (1 + later) * 2 * steps + later


def placeto_iterations(budget: int, config: Config, groups: int) -> int:
    """The most Placeto updates whose charged evaluations fit in `budget` on a graph of
    `groups` nodes."""
    steps = config.env.passes * groups + 1

    def cost(updates: int) -> int:
        return placeto_cost(updates, config.train.episodes, steps, config.run.eval_every)

    if cost(1) > budget:
        raise ValueError(f"a budget of {budget} evaluations is less than one Placeto update "
                         f"({cost(1)})")  # fmt: skip
    updates = 1
    while cost(updates + 1) <= budget:
        updates += 1
    return updates


def construct_iterations(budget: int, config: Config) -> int:
    """The most self-imitation updates of a construct run of `config` on one graph whose
    simulations (`training_simulations`) fit in `budget`."""

    def cost(updates: int) -> int:
        return training_simulations(apply(config, {"train.iterations": updates}), 1)

    if cost(0) > budget:
        raise ValueError(f"a budget of {budget} evaluations is less than the construct agent's "
                         f"greedy evaluations during imitation ({cost(0)})")  # fmt: skip
    low, high = 0, budget  # each update simulates at least one episode
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if cost(middle) <= budget else (low, middle - 1)
    return low


@dataclasses.dataclass(frozen=True)
class Run:
    """One method's learning curve on one graph, in both units."""

    evaluations: np.ndarray  # [K] simulator evaluations charged so far
    placements: np.ndarray  # [K] complete placements sampled or greedily evaluated so far
    makespan: np.ndarray  # [K] µs best penalised makespan so far
    raw: np.ndarray  # [K] µs makespan of that best placement, without the memory penalty
    fits: np.ndarray  # [K] bool, that best placement fits device memory
    wall_s: float  # s of training, compilation included


# ---------------------------------------------------------------------- the experiment
def run_efficiency(
    root: str | Path,
    preset: str = "quick",
    progress: bool = True,
    data: str | None = None,
    settings: Settings | None = None,
) -> Path:
    """Every method on every graph of the preset; write results/efficiency/."""
    settings = settings or PRESETS[preset]
    graphs, skipped = load_graphs(settings.graphs, data)  # every graph read before any work
    cluster = Cluster.preset(settings.cluster, settings.devices)
    config = make_config("tiny", list(settings.placeto), n_devices=settings.devices)
    prepared = [prepare(s, g, config.run.group_target, cluster.delta1) for s, g in graphs.items()]
    config = placeto_config(config, settings, max(pg.graph.n_ops for pg in prepared))
    recorder = Recorder(root, "efficiency", preset)
    bench = PlacetoBench(config, prepared, cluster)
    key = jax.random.key(settings.seed)
    runs, single = {}, {}
    for i, (spec, graph) in enumerate(
        tqdm(graphs.items(), desc="efficiency", disable=not progress)
    ):
        single[spec] = run_method("single", graph, cluster, key)
        runs[spec] = {"rnn": _rnn(graph, cluster, key, settings.budget)}
        runs[spec][METHODS[1]] = _placeto(bench, i, key, settings.budget)
        runs[spec][CONSTRUCT], _ = construct_run(spec, graph, cluster, settings)
    candidates = [_candidate(s, graphs[s], bench, runs[s], settings) for s in graphs]
    candidates += [{"graph": s, "qualified": False, "why": why} for s, why in skipped.items()]
    qualified = [c["graph"] for c in candidates if c["qualified"]]
    rows = {
        u: [reach_row(s, runs[s], single[s].makespan, u) for s in qualified]
        for u in ("evaluations", "placements")
    }
    _write(recorder, candidates, rows, runs, single, settings)
    header = {
        "data": data,
        **dataclasses.asdict(settings),
        "placeto_config": to_dict(config),
        "construct_config": to_dict(_construct_config(settings)),
    }
    return recorder.finish(header, [settings.seed], NOTES)


def load_graphs(specs: tuple[str, ...], data: str | None) -> tuple[dict[str, Graph], dict]:
    """({spec: graph} of the specs that can run, {spec: why not} of the `data:` ones without
    --data); ValueError for an unknown graph or a missing benchmark file."""
    graphs, skipped = {}, {}
    for spec in specs:
        if not spec.startswith(DATA):
            graphs[spec] = resolve_graph(spec)
        elif data is None:
            skipped[spec] = "not run: needs --data DIR (the benchmark folder)"
        else:
            path = Path(data) / spec.removeprefix(DATA)
            if not path.is_file():
                raise ValueError(f"graph {spec!r}: no benchmark file {str(path)!r}")
            graphs[spec] = load_benchmark(path).graph
    if not graphs:
        raise ValueError("no graph to run (the benchmark graphs need --data DIR)")
    return graphs, skipped


def placeto_config(config: Config, settings: Settings, groups: int) -> Config:
    """`config` trained as long as the budget allows on a graph of `groups` nodes (the most
    groups of any graph; each graph then trains as long as the budget allows on it)."""
    config = apply(
        config, {"train.iterations": placeto_iterations(settings.budget, config, groups)}
    )
    return dataclasses.replace(config, cluster_preset=settings.cluster, seed=settings.seed)


def _rnn(graph: Graph, cluster: Cluster, key: jax.Array, budget: int) -> Run:
    _, curve = learned.train("rnn", graph, cluster, key, budget)
    return Run(
        curve.evaluations,
        curve.evaluations,
        curve.makespan,
        curve.raw,
        curve.fits,
        float(curve.wall_s[-1]),
    )


def _placeto(bench: PlacetoBench, i: int, key: jax.Array, budget: int) -> Run:
    """Placeto trained on graph `i` for as many updates as `budget` allows there, its curve
    charged as the module docstring says."""
    groups = bench.graphs[i].graph.n_ops
    updates = placeto_iterations(budget, bench.config, groups)
    curve = bench.fit(i, key, iterations=updates).curve
    steps = bench.config.env.passes * groups + 1
    greedy = np.arange(1, len(curve.evaluations) + 1)  # greedy episodes run up to each point
    return Run(
        curve.evaluations + greedy * 2 * steps,
        curve.evaluations // steps + greedy,
        curve.makespan,
        curve.raw,
        curve.fits,
        float(curve.wall_s[-1]),
    )


def _construct_config(settings: Settings) -> Config:
    """The construct preset with `settings.construct` (iterations: 0, set per graph)."""
    return construct_config(settings.construct, settings.devices, settings.cluster, settings.seed)


def construct_run(
    spec: str, graph: Graph, cluster: Cluster, settings: Settings
) -> tuple[Run, np.ndarray]:
    """The construct agent trained on `graph` alone: imitation of its best teacher, then as many
    self-imitation updates as the budget left after the teachers allows. Its curve has a point
    after the teachers (their placement) and at each greedy evaluation (`train_in`'s cadence:
    the greedy episode and the best sampled episode so far), charged as the module docstring
    says; and the final best placement [N]."""
    began = time.perf_counter()
    named = [(spec, graph)]
    taught = teachers(named, cluster, settings.seed)
    spent = sum(t.evaluations for t in taught)
    config = _construct_config(settings)
    config = apply(config, {"train.iterations": construct_iterations(settings.budget - spent,
                                                                     config)})  # fmt: skip
    run = construct_loop.Run.make(config, named, cluster, taught)
    state = construct_loop.initial_state(config, run.bank, np.asarray(run.teacher), run.reference)
    imitation, total = config.train.imitation, config.train.imitation + config.train.iterations
    offered, evaluations = [[taught[0].placement]], [spent]  # placements per point
    for update in range(1, total + 1):
        state, _ = run.update(state)
        spent += config.train.episodes if update > imitation else 0
        if update % config.run.eval_every == 0 or update == total:
            greedy = construct_loop.candidates(config, state.params, run.bank, 0,
                                               jax.random.key(settings.seed))[0]  # fmt: skip
            elite = run.bank.built[0].placement(np.asarray(state.elite[0]))
            offered.append([greedy, elite])  # the elite was simulated when it was sampled
            spent += 1
            evaluations.append(spent)
    return _curve(graph, cluster, offered, evaluations, time.perf_counter() - began)


def _curve(
    graph: Graph, cluster: Cluster, offered: list, evaluations: list[int], wall_s: float
) -> tuple[Run, np.ndarray]:
    """The best-so-far curve of the placements `offered` at each point (each already simulated
    and charged: simulated again here for its score), and the final best placement."""
    flat = np.stack([p for point in offered for p in point])
    sim = simulate(graph, cluster, flat)
    penalised = penalised_makespan(sim.makespan, sim.peak_memory, cluster)
    best, raw, fits = best_so_far(penalised, sim.makespan, fits_memory(sim.peak_memory, cluster))
    ends = np.cumsum([len(point) for point in offered]) - 1
    counted = np.asarray(evaluations)
    run = Run(counted, counted, best[ends], raw[ends], fits[ends], wall_s)
    return run, flat[int(np.argmin(penalised))]


def _candidate(spec: str, graph: Graph, bench: PlacetoBench, runs: dict, s: Settings) -> dict:
    """A graph's screening row: does the RNN placer learn on it?"""
    rnn = runs["rnn"].makespan
    gain = 1 - rnn[-1] / rnn[0]
    qualified = bool(gain > s.min_gain)
    why = "" if qualified else f"RNN placer's gain {gain:.1%} is not above {s.min_gain:.0%}"
    return {
        "graph": spec,
        "ops": graph.n_ops,
        "placeto groups": bench.graphs[bench.index(spec)].graph.n_ops,
        "rnn first ms": rnn[0] / MS,
        "rnn final ms": rnn[-1] / MS,
        "rnn gain": float(gain),
        "placeto first ms": runs[METHODS[1]].makespan[0] / MS,
        "placeto final ms": runs[METHODS[1]].makespan[-1] / MS,
        "construct first ms": runs[CONSTRUCT].makespan[0] / MS,
        "construct final ms": runs[CONSTRUCT].makespan[-1] / MS,
        "rnn wall s": runs["rnn"].wall_s,
        "placeto wall s": runs[METHODS[1]].wall_s,
        "construct wall s": runs[CONSTRUCT].wall_s,
        "qualified": qualified,
        "why": why,
    }


def reach_row(spec: str, runs: dict[str, Run], single: float, unit: str) -> dict:
    """Target (the better final value of the paper's pair `METHODS`; `single`: the
    single-device makespan), each method's `unit` count to within 5% of it and to it, the
    RNN / Placeto ratios (a bound where one method never got there), and where the construct
    agent ran, the RNN / construct and Placeto / construct ratios."""
    target = min(float(runs[m].makespan[-1]) for m in METHODS)
    row = {"graph": spec, "target ms": target / MS, "target / single": target / single}
    row["target from"] = next(m for m in METHODS if runs[m].makespan[-1] == target)
    if CONSTRUCT in runs:
        row["construct final / target"] = float(runs[CONSTRUCT].makespan[-1]) / target
    for goal, factor in (("5%", 1 + TOLERANCE), ("target", 1.0)):
        counts = {}
        for m, r in runs.items():
            counts[m] = evaluations_to_reach(getattr(r, unit), r.makespan, target * factor)
            row[f"{m} to {goal}"] = counts[m]
        totals = {m: int(getattr(r, unit)[-1]) for m, r in runs.items()}
        row[f"ratio to {goal}"], row[f"bound to {goal}"] = ratio(counts, totals)
        for m in METHODS if CONSTRUCT in runs else ():
            pair = f"{m} / {CONSTRUCT}"
            row[f"{pair} to {goal}"], row[f"{pair} bound to {goal}"] = ratio(
                counts, totals, (m, CONSTRUCT)
            )
    return row


def ratio(
    counts: dict[str, int | None], totals: dict[str, int], pair: tuple[str, str] = METHODS
) -> tuple[float | None, str]:
    """(first / second count of `pair`: RNN / Placeto, "=") where both reached; a bound from
    the total of the one that did not (">" or "<"); (None, "neither") where neither did."""
    first, second = (counts[m] for m in pair)
    if first is not None and second is not None:
        return first / max(second, 1), "="
    if second is not None:
        return totals[pair[0]] / max(second, 1), ">"
    if first is not None:
        return first / totals[pair[1]], "<"
    return None, "neither"


def _write(recorder, candidates, rows, runs, single, settings: Settings) -> None:
    recorder.table(
        "candidates",
        f"Candidate graphs: does the RNN placer improve by more than {settings.min_gain:.0%}?",
        candidates,
        note=f"{settings.budget} simulator evaluations per method, {settings.devices} "
        f"{settings.cluster} devices. `rnn first`: its first batch's best placement; `placeto "
        "first`: the greedy placement of its initial policy; `construct first`: its teacher "
        "(the best fast heuristic). Penalised makespans.",
    )
    recorder.table(
        "efficiency",
        "Simulator evaluations to reach the target (the better final value of the RNN placer "
        "and Placeto) and within 5% of it",
        rows["evaluations"],
        note="Empty: never reached within the budget. `ratio`: RNN placer / Placeto (the "
        "paper's up to 6.1x); `bound` `>`: the RNN placer never got there, so the ratio is "
        "above its whole budget over Placeto's count; `<`: Placeto never got there. `rnn / "
        "construct` and `placeto (paper) / construct`: the same against the construct agent, "
        "whose count starts at its teachers' simulations.",
    )
    recorder.table(
        "efficiency_placements",
        "The same in complete placements (Placeto: episodes, not steps)",
        rows["placements"],
        note="A Placeto episode evaluates one intermediate placement per step; counted here "
        "as one complete placement, as the RNN placer's sampled placements are. Every "
        "simulation charged to the construct agent is of a complete placement: its two counts "
        "are equal.",
    )
    curves = {s: {m: jax.tree.map(_listed, dataclasses.asdict(r)) for m, r in v.items()}
              for s, v in runs.items()}  # fmt: skip
    write_text(recorder.directory / "curves.json", json.dumps(curves))
    for row in rows["evaluations"]:
        spec = row["graph"]
        recorder.figure(
            "curve_"
            + spec.removeprefix(DATA).removesuffix(".json").replace(":", "_").replace("/", "_"),
            f"Best makespan against evaluations: {spec}",
            lambda fig, s=spec, t=row["target from"]: draw(fig, s, runs[s], t, single[s]),
        )


def _listed(x) -> list | float:
    return np.asarray(x).tolist()


def draw(figure, spec: str, runs: dict[str, Run], target_from: str, single: PlacerResult) -> None:
    """Every learning curve, the single-device makespan, and the target (the final best placement
    of method `target_from`) and target x 1.05, all without the memory penalty."""
    target = runs[target_from]
    makespan, fits = float(target.raw[-1]), bool(target.fits[-1])
    draw_learning_curves(
        figure,
        {m: (r.evaluations, r.raw, r.fits) for m, r in runs.items()},
        spec,
        (single.makespan, single.fits_memory),
        {"target": (makespan, fits), "target x 1.05": (makespan * (1 + TOLERANCE), fits)},
    )


NOTES = """
Sample efficiency (docs/agent.md, "Sample efficiency"). Every method trains on the same graph
(Placeto coarsened to `run.group_target` groups and scored exactly on the graph itself), cluster
and budget of simulator evaluations. The RNN placer is charged one evaluation per sampled
placement of the whole graph; Placeto one per step of each training episode (its per-step
reward simulates the coarsened graph), plus 2 x (steps of an episode) for each greedy
evaluation that gives its curve a point. The construct agent (`construct`: imitation of the
best of 5 fast heuristics on the op graph, then self-imitation, `construct` overrides, as many
self-imitation updates as the budget allows) is charged the heuristics' own simulations and
one scoring each (its curve's first point, at the best heuristic's placement), one per sampled
episode of each self-imitation update and one per greedy evaluation (every `run.eval_every`
updates, imitation included: a point of its curve, the best of the greedy episode and the best
episode sampled so far); its imitation updates simulate nothing. `efficiency_placements` counts
complete placements instead. A graph qualifies when the RNN placer's final value is more than
5% below its first; the target is the smaller of the RNN placer's and Placeto's final best
makespans (the paper's comparison), which the construct agent is counted against too.
"""
