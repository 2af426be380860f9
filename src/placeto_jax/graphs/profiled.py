"""Kernel times of a compiled program, measured where it runs: under the JAX profiler (host-side).

`kernel_times_us` runs the compiled program a few times under the JAX profiler (Python calls not
traced) and reads the events XLA's runtime records for every kernel it executes (the `hlo_op`
and `hlo_module` stats of the profile's events; checked on XLA's CPU runtime: a backend whose
profile has no such events is refused with an error). Each kernel is timed in its real
context (inputs where the program leaves them, caches as the program leaves them), which timing
it alone cannot give. An entry op's time is the mean of its event's durations over the typical
runs: those whose total kernel time ranks in the middle half (all of them for fewer than four
runs), so that a run disturbed as a whole is left out and the costs add up to a typical run's
kernel time. Per-op medians would not add up: in each run a different few kernels are slow, and
on a reduced Inception-V3 step the kernels' medians sum to 11.4 ms where a run's kernels take
15.0 ms (the step's wall time 15.9 ms).
The first runs of a freshly compiled program are slower (up to 7x: its buffers are new), so
`WARMUP_RUNS` runs go first, unprofiled. Each run is profiled in a profile of its own: within
one profile, on one core, the runs after the first recorded kernels up to 1.4x slower than the
first and than the unprofiled step (a reduced GNMT step: 6.1 to 6.6 ms against 4.4, in 3 of 3
processes), and one-run profiles came within 0.95 to 1.17 of the step.

A `while`, `conditional` or `call` is timed by the kernels it runs: the summed durations of its
inner kernels' events plus `inner_overhead_us` for each of them (the per-kernel overhead that the
cluster's `delta1` charges between top-level ops). Its own event is not used: it also holds the
profiler's cost of recording every inner event. Where XLA runs the whole op as one kernel (a
small loop: no inner events in the run), its own event is its time.

XLA's CPU runtime may run independent kernels of one program at once, on several threads. On
fewer cores than threads those kernels take turns, and each event's duration holds its
neighbours' time too. So a kernel's time is its share of the processors (`shared_times_ns`):
while k threads are inside kernels on c cores, each gets min(1, c / k) of that time. Where
kernels truly ran in parallel (k <= c), each keeps its whole duration, and the simulator (one
kernel at a time per device) is slower than the program by as much as they overlapped. Each
recorded duration also holds some of the profiler's own cost, which the costs keep: on one CPU
core, a chain of 800 tiny kernels takes 0.05 µs per kernel unprofiled and records 0.55 µs per event.
"""

from __future__ import annotations

import collections
import os
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.profiler import ProfileData

from placeto_jax.graphs import hlo

WARMUP_RUNS = 3  # a freshly compiled program's first runs are slower (its buffers are new)


def kernel_times_us(
    compiled: Any,
    args: Sequence[Any],
    module: hlo.Module,
    *,
    repeats: int,
    inner_overhead_us: float,
    donated: Sequence[bool] = (),
) -> list[float]:
    """µs of every op of `module`'s entry computation (in `hlo.module_ops`'s order), from
    `repeats` profiled runs of `compiled` (`training_loop`) after `WARMUP_RUNS` unprofiled
    ones. Raises RuntimeError if a profile is already being taken."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    run = training_loop(compiled, args, module, donated)
    for _ in range(WARMUP_RUNS):
        run()
    times, unseen = entry_times_us(module, profiled_runs(run, repeats, module), inner_overhead_us)
    if unseen:
        warnings.warn(
            f"{unseen} kernels of {module.name} did not appear in the profile; they cost 0 µs",
            stacklevel=2,
        )
    return times


def training_loop(
    compiled: Any, args: Sequence[Any], module: hlo.Module, donated: Sequence[bool] = ()
) -> Callable[[], None]:
    """A function running `compiled` once on the loop's inputs, first `args`, and waiting for it.
    `donated[i]` says whether flat input leaf i is donated: the runs then go as a training loop
    goes, each output that reuses a donated input's buffer (`module.aliases`) fed back as that
    input, and a fresh copy for a donated input no output reuses (the caller's arrays are never
    donated)."""
    given, treedef = jax.tree.flatten(args)
    donated = list(donated) or [False] * len(given)
    inputs = [jnp.copy(x) if d else x for x, d in zip(given, donated, strict=True)]
    refilled = set(module.aliases.values())

    def run() -> None:
        outputs = jax.tree.leaves(jax.block_until_ready(compiled(*treedef.unflatten(inputs))))
        for position, param in module.aliases.items():
            inputs[param] = outputs[position]
        for i, d in enumerate(donated):
            if d and i not in refilled:
                inputs[i] = jnp.copy(given[i])

    return run


def entry_times_us(
    module: hlo.Module, runs: Sequence[Mapping[str, Sequence[float]]], inner_overhead_us: float
) -> tuple[list[float], int]:
    """The entry ops' µs from the runs' event durations (kernel name -> µs of each event): each
    op's mean over the typical runs (module docstring), and how many ops no run recorded."""
    per_op, unseen = [], 0
    for ins in (i for i in module.computations[module.entry] if i.is_op):
        inner = sorted(hlo.nested_kernels(module, ins))
        per_run = []
        for durations in runs:
            events = [d for name in inner for d in durations.get(name, ())]
            own = sum(durations.get(ins.name, ()))
            per_run.append(sum(events) + inner_overhead_us * len(events) if events else own)
        unseen += not any(name in durations for durations in runs for name in (ins.name, *inner))
        per_op.append(per_run)
    if not per_op:
        return [], 0
    times = np.asarray(per_op)  # [ops, runs] µs
    ranked = np.argsort(times.sum(axis=0), kind="stable")
    typical = ranked[len(runs) // 4 : len(runs) - len(runs) // 4]
    return [float(t) for t in times[:, typical].mean(axis=1)], unseen


def profiled_runs(
    run: Callable[[], None], repeats: int, module: hlo.Module, cores: int | None = None
) -> list[dict[str, list[float]]]:
    """For each of `repeats` calls of `run`, each in a profile of its own: kernel name -> µs of
    each event `module`'s kernels recorded, as its share of `cores` processors
    (`shared_times_ns`). Raises RuntimeError if a profile is already being taken, or if a
    profile records no kernel events (a backend that does not) or more than one run."""
    containers = _containers(module)
    return [_profiled_run(run, module, containers, cores) for _ in range(repeats)]


def _profiled_run(
    run: Callable[[], None], module: hlo.Module, containers: frozenset[str], cores: int | None
) -> dict[str, list[float]]:
    """One call of `run` under the profiler: kernel name -> µs of each of its events (the
    events of `containers` do not make their thread busy, `shared_times_ns`)."""
    with tempfile.TemporaryDirectory(prefix="placeto_jax_profile_") as folder:
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0  # kernels only: no tracing of Python calls
        options.enable_hlo_proto = False
        try:
            jax.profiler.start_trace(folder, profiler_options=options)
        except RuntimeError as error:
            raise RuntimeError(
                f"cannot profile the program to measure its kernels: {error} "
                "(stop the other trace, or use cost_model='roofline')"
            ) from error
        try:
            run()
        finally:
            jax.profiler.stop_trace()
        (path,) = Path(folder).rglob("*.xplane.pb")
        profile = ProfileData.from_file(str(path))
    recorded, run_ids = [], set()
    lines = (line for plane in profile.planes for line in plane.lines)
    for thread, line in enumerate(lines):
        for event in line.events:
            stats = dict(event.stats)
            if stats.get("hlo_module") == module.name and "hlo_op" in stats:
                recorded.append((stats["hlo_op"], thread, event.start_ns, event.duration_ns))
                run_ids.add(stats.get("run_id", 0))
    if not recorded:
        raise RuntimeError(
            f"the profile of {module.name} on {jax.default_backend()} records no kernel events: "
            "its kernels cannot be measured here (use cost_model='roofline')"
        )
    if len(run_ids) > 1:
        raise RuntimeError(f"one call of {module.name} ran it {len(run_ids)} times")
    names, threads, begin, duration = zip(*recorded, strict=True)
    begin = np.asarray(begin, np.float64)
    working = np.asarray([name not in containers for name in names])
    times = shared_times_ns(np.asarray(threads), begin, begin + duration, working, cores)
    durations: dict[str, list[float]] = collections.defaultdict(list)
    for name, ns in zip(names, times, strict=True):
        durations[name].append(float(ns) / 1e3)
    return durations


def _containers(module: hlo.Module) -> frozenset[str]:
    """Ops whose kernels run inside them (a loop's thread may wait while others run those)."""
    return frozenset(
        i.name
        for computation in module.computations.values()
        for i in computation
        if i.is_op and hlo.nested_kernels(module, i)
    )


def shared_times_ns(
    threads: np.ndarray,
    begin: np.ndarray,
    end: np.ndarray,
    working: np.ndarray,
    cores: int | None = None,
) -> np.ndarray:
    """[E] ns of processor time of each event [E] (thread, begin ns, end ns) when the threads
    share `cores` processors (default: those this process may run on) fairly: at an instant
    when k threads are inside a `working` event, each event then gets min(1, cores / k) of it.
    A thread inside nested events counts once; one inside only events that are not `working`
    (a loop's, whose kernels may run on other threads while it waits) does not count."""
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    cuts = np.unique(np.concatenate([begin, end]))  # [S + 1] segment boundaries
    first, last = np.searchsorted(cuts, begin), np.searchsorted(cuts, end)
    names, row = np.unique(threads, return_inverse=True)
    entered = np.zeros((len(names), len(cuts)), np.int64)  # [threads, S + 1] events begun - ended
    np.add.at(entered, (row[working], first[working]), 1)
    np.add.at(entered, (row[working], last[working]), -1)
    active = (np.cumsum(entered, axis=1)[:, :-1] > 0).sum(axis=0)  # [S] threads in an event
    share = np.diff(cuts) * np.minimum(1.0, cores / np.maximum(active, 1))
    cumulative = np.concatenate([[0.0], np.cumsum(share)])
    return cumulative[last] - cumulative[first]
