"""Kernel costs measured under the profiler (`from_jax(cost_model="measure")` at the HLO level).

The aggregation of profile events is checked by hand on the hand-written module of
`test_hlo.py`; the measured graphs are checked against the roofline graph of the same program
(same ops, edges and sizes) and for an ordering no machine should reverse (a 2,048-cubed matmul
against an add of 16 numbers).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from placeto_jax.graphs import hlo, profiled
from placeto_jax.graphs.trace import from_jax
from test_hlo import MODULE

S, F32 = jax.ShapeDtypeStruct, jnp.float32


def test_entry_times_from_events_by_hand():
    """Entry ops fusion, copy, neg and a 3-trip while loop, whose condition (`lt`) runs 4 times
    and whose body runs `next` and `e` 3 times each; its own event (`loop`) is not used."""
    module = hlo.parse_module(MODULE)
    assert hlo.nested_kernels(module, _entry(module)["loop"]) == {"lt", "next", "e"}
    inner = {"lt": [0.5] * 4, "next": [1.0] * 3}
    runs = [
        {"fusion": [10.0], "copy": [2.0], "neg": [3.0], "loop": [99.0], **inner, "e": [2.0] * 3},
        {"fusion": [14.0], "copy": [6.0], "neg": [5.0], "loop": [99.0], **inner, "e": [4.0] * 3},
        {"fusion": [12.0], "copy": [4.0], "loop": [99.0], **inner, "e": [3.0] * 3},
    ]
    times, unseen = profiled.entry_times_us(module, runs, inner_overhead_us=2.0)
    # loop: 4 x 0.5 + 3 x 1 + 3 x e + 2.0 x 10 inner events = 31, 37, 34 µs in the three runs;
    # neg is missing from the last run (0 µs there). Under four runs every run is typical.
    np.testing.assert_allclose(times, [12.0, 4.0, 8.0 / 3.0, 34.0], rtol=1e-12)
    assert unseen == 0
    # Four runs: totals 46, 62, 50 and 1,046 µs; the middle two by total (50 and 62) are kept.
    slow = {**runs[0], "fusion": [1010.0]}
    times, _ = profiled.entry_times_us(module, [*runs, slow], inner_overhead_us=2.0)
    np.testing.assert_allclose(times, [13.0, 5.0, 2.5, 35.5], rtol=1e-12)
    times, unseen = profiled.entry_times_us(module, [{"fusion": [1.0]}], inner_overhead_us=2.0)
    assert times == [1.0, 0.0, 0.0, 0.0] and unseen == 3  # copy, neg and the loop
    # A loop that XLA ran as one kernel (no inner events) costs its own event.
    times, _ = profiled.entry_times_us(module, [{"loop": [7.0]}], inner_overhead_us=2.0)
    assert times == [0.0, 0.0, 0.0, 7.0]


def _entry(module: hlo.Module) -> dict[str, hlo.Instruction]:
    return {i.name: i for i in module.computations[module.entry]}


def big_and_small(a, b, c):
    return a @ b, c + 1.0


def test_measured_graph_is_the_roofline_graph_with_measured_costs():
    # A kernel descheduled by another process on a shared machine records a few ms more (the
    # add once recorded 1.7 ms on average over 3 runs): a 2,048-cubed matmul takes tens of ms
    # even on a fast CPU, and with 4 runs the ones with the highest and lowest totals are left out.
    args = (S((2048, 2048), F32), S((2048, 2048), F32), S((16,), F32))
    measured = from_jax(big_and_small, *args, cost_model="measure", measure_repeats=4)
    roofline = from_jax(big_and_small, *args)
    assert measured.names == roofline.names and measured.n_ops == 2
    np.testing.assert_array_equal(measured.out_bytes, roofline.out_bytes)
    np.testing.assert_array_equal(measured.edges, roofline.edges)
    assert measured.costs_for == (f"measured on {jax.default_backend()}", 1.0)
    matmul, add = (measured.index(n) for n in ("dot_general", "add"))
    assert measured.cost[add] > 0
    assert measured.cost[matmul] > 20 * measured.cost[add]  # 17 GFLOP against 16 adds


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")  # g, on purpose
def test_donated_arguments_run_as_a_training_loop():
    """`w`'s update reuses its buffer and is fed back as `w`; `g`, donated too, is reused by no
    output and gets a fresh copy each run; the caller's arrays are never donated."""

    def update(w, g):
        return w - 0.1 * g

    w, g = jnp.ones((256, 256), F32), jnp.ones((256, 256), F32)
    _, text, _ = hlo.compile_program(update, (w, g), (0, 1))
    assert hlo.parse_module(text).aliases == {0: 0}
    graph = from_jax(update, w, g, cost_model="measure", measure_repeats=3, donate_argnums=(0, 1))
    assert graph.n_ops == 1 and graph.cost[0] > 0
    assert not w.is_deleted() and not g.is_deleted()
    np.testing.assert_array_equal(w, 1.0)


def test_a_profile_already_running_is_named(tmp_path):
    jax.profiler.start_trace(str(tmp_path))
    try:
        with pytest.raises(RuntimeError, match="cannot profile the program to measure"):
            from_jax(jnp.sin, S((3,), F32), cost_model="measure", measure_repeats=1)
    finally:
        jax.profiler.stop_trace()


def test_each_run_is_profiled_on_its_own_and_returned_in_order():
    """A while loop whose trip count is an input: calls of 2, 4,000,000 and 2 trips come back
    as three runs in that order (XLA runs this small loop as one kernel: its event is timed)."""

    def loop(n, x):
        return jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, jnp.sin(c[1])), (0, x))

    compiled, text, _ = hlo.compile_program(loop, (jnp.int32(0), jnp.ones(8, F32)), ())
    module = hlo.parse_module(text)
    trips = iter([2, 4_000_000, 2])

    def run():
        jax.block_until_ready(compiled(jnp.int32(next(trips)), jnp.ones(8, F32)))

    runs = profiled.profiled_runs(run, 3, module)
    small, big, small_again = (profiled.entry_times_us(module, [r], 0.0)[0] for r in runs)
    assert sum(big) > 10 * max(sum(small), sum(small_again))  # 4,000,000 trips: over 15 ms


def test_threads_share_the_cores_while_their_kernels_overlap():
    """Thread 0 runs a loop (0-100 ns, not working) holding a kernel (0-40); thread 1 runs a
    kernel (20-60) and thread 2 one (30-50). Segments 0-20: one working thread; 20-30: two;
    30-40: three; 40-50: two; 50-60: one; 60-100: none."""
    threads, begin, end = (
        np.array([0, 0, 1, 2]),
        np.array([0, 0, 20, 30.0]),
        np.array([100, 40, 60, 50.0]),
    )
    working = np.array([False, True, True, True])
    one = profiled.shared_times_ns(threads, begin, end, working, cores=1)
    # kernel 0-40: 20 + 10/2 + 10/3; kernel 20-60: 10/2 + 10/3 + 10/2 + 10; 30-50: 10/3 + 10/2
    # the loop (not working): 20 + 5 + 10/3 + 5 + 10 + 40 (each segment shared by the others)
    np.testing.assert_allclose(one, [83 + 1 / 3, 28 + 1 / 3, 23 + 1 / 3, 8 + 1 / 3])
    two = profiled.shared_times_ns(threads, begin, end, working, cores=2)
    np.testing.assert_allclose(two, [100 - 10 / 3, 40 - 10 / 3, 40 - 10 / 3, 20 - 10 / 3])
    # with as many cores as threads every event keeps its duration
    np.testing.assert_allclose(
        profiled.shared_times_ns(threads, begin, end, working, 3), end - begin
    )
