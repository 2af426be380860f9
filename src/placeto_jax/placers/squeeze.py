"""`squeeze`: lower the memory overflow of a placement that does not fit, with short chains of
moves aimed at the tensors live at the fullest device's peak.

A search over single moves stalls where relieving the peak takes several: an output copied to
the full device for a consumer that waits there behind the peak op is live at the peak; moving
that consumer away sends its own output back for a later consumer, which arrives during the peak
in turn, so the single move is worse and only the pair or triple is better. Here each round takes
the most overflowing device's peak (`sim.liveness.peak`) and proposes, for every tensor live
then: its producer off that device (or onto it, for a received copy, so that it is made after
the peak op), and its consumers there that have not started off it; and every op there with
parameters off it. All proposals are simulated in one batch. Chains extend the `BEAM` best
proposals that add tensors to the same device's peak, with proposals for those added tensors
alone, up to `DEPTH` moves, or until one fits. The best placement seen in `rank_key` order
(fitting first, then the least overflow, then makespan) is taken if it beats the round's start;
rounds repeat until none does, the placement fits, or the budget is spent.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers.base import Solution
from placeto_jax.placers.simple import colocate
from placeto_jax.sim.api import simulate
from placeto_jax.sim.liveness import Peak, allocations, peak
from placeto_jax.sim.ranking import rank_keys
from placeto_jax.sim.result import SimResult

BEAM = 6  # chains extended per level
DEPTH = 3  # moves per chain
DEFAULT_BUDGET = 4096  # simulator evaluations when none is given
CHUNK = 256  # placements simulated per call


@dataclasses.dataclass(frozen=True)
class State:
    """A simulated placement and its `rank_key` (first field true: it overflows)."""

    placement: np.ndarray  # [N] int64
    result: SimResult
    key: tuple[bool, float]


def squeeze(
    graph: Graph, cluster: Cluster, placement: np.ndarray, budget: int | None = None
) -> Solution:
    """The placement [N] improved by chains of peak-relieving moves (module docstring);
    evaluations: the placements simulated, the start's included. A placement that fits comes
    back as it is, for one evaluation."""
    budget = DEFAULT_BUDGET if budget is None else budget
    if budget < 1:
        raise ValueError(f"budget must be at least 1 evaluation, got {budget}")
    leader = colocate(graph, np.arange(graph.n_ops))
    (current,) = _simulated(graph, cluster, colocate(graph, np.asarray(placement))[None])
    used = 1
    while current.key[0] and used < budget:
        best, spent = _best_chain(graph, cluster, current, leader, budget - used)
        used += spent
        if not best.key < current.key:
            break
        current = best
    return Solution(current.placement, used)


def _best_chain(
    graph: Graph, cluster: Cluster, start: State, leader: np.ndarray, budget: int
) -> tuple[State, int]:
    """(the best placement of one round's chains from `start`, evaluations spent)."""
    best, used = start, 0
    start_peak = _fullest_peak(graph, cluster, start)
    base = set(start_peak.tensors.tolist())
    frontier = [(start, start_peak, start_peak.tensors)]  # states, their peaks, tensors to relieve
    for depth in range(DEPTH):
        grown: list[State] = []
        for state, at_peak, tensors in frontier:
            moves = _moves(graph, state, at_peak, tensors, leader, with_parameters=depth == 0)
            moves = moves[: budget - used]
            if not moves:
                continue
            rows = np.repeat(state.placement[None], len(moves), axis=0)
            for row, (op, device) in zip(rows, moves, strict=True):
                row[op] = device
            grown += _simulated(graph, cluster, colocate(graph, rows))
            used += len(moves)
        if not grown:
            break
        grown.sort(key=lambda s: s.key)
        best = min(best, grown[0], key=lambda s: s.key)
        if not best.key[0]:
            break  # it fits: the chains' work is done
        frontier = []
        for state in grown:  # best first; peaks found only for the states looked at
            at_peak = _fullest_peak(graph, cluster, state)
            if at_peak.device != start_peak.device:
                continue
            added = np.array([t for t in at_peak.tensors.tolist() if t not in base], np.int64)
            if added.size:
                frontier.append((state, at_peak, added))
            if len(frontier) == BEAM:
                break
        if not frontier:
            break
    return best, used


def _moves(
    graph: Graph,
    state: State,
    at_peak: Peak,
    tensors: np.ndarray,
    leader: np.ndarray,
    with_parameters: bool,
) -> list[tuple[int, int]]:
    """Distinct (op, device) moves that could take `tensors` off `at_peak`, the peak of
    `state`'s fullest device d: each tensor's producer off d, or onto d where it is a received
    copy; its consumers on d that start at or after the peak, off d; with `with_parameters`,
    every op on d with parameters, off d. An op stands for its co-location group (`leader`)."""
    place, start = state.placement, state.result.start
    d, instant = at_peak.device, at_peak.instant
    others = [o for o in range(len(state.result.peak_memory)) if o != d]
    to_move_off: set[int] = set()
    moves: set[tuple[int, int]] = set()
    for tensor in tensors.tolist():
        if place[tensor] == d:
            to_move_off.add(tensor)
        else:
            moves.add((int(leader[tensor]), d))
        consumers = graph.children(tensor)
        waiting = consumers[(place[consumers] == d) & (start[consumers] >= instant)]
        to_move_off.update(waiting.tolist())
    if with_parameters:
        to_move_off.update(np.nonzero((place == d) & (graph.param_bytes > 0))[0].tolist())
    moves.update((int(leader[op]), o) for op in to_move_off for o in others)
    return sorted((op, o) for op, o in moves if place[op] != o)


def _simulated(graph: Graph, cluster: Cluster, rows: np.ndarray) -> list[State]:
    """Each placement of rows [B, N] simulated (`CHUNK` at a time: a result holds [B, N, D]
    transfer times) and ranked."""
    states = []
    for lo in range(0, len(rows), CHUNK):
        chunk = rows[lo : lo + CHUNK]
        results = simulate(graph, cluster, chunk)
        keys = rank_keys(results.makespan, results.peak_memory, cluster)
        states += [
            State(row, results[b], key)
            for b, (row, key) in enumerate(zip(chunk, keys, strict=True))
        ]
    return states


def _fullest_peak(graph: Graph, cluster: Cluster, state: State) -> Peak:
    """The peak of the device of `state` (one that overflows) that overflows most, relative
    to its memory."""
    over = np.asarray(state.result.peak_memory, np.float64) - cluster.memory_array
    device = int(np.argmax(over / cluster.memory_array))
    return peak(graph, allocations(graph, state.placement, state.result), device)
