"""experiments/construct_zero_shot.py's timing protocol for search at equal wall time, with
scripted run times (no simulation)."""

from __future__ import annotations

from conftest import experiment


def _scripted(seconds: list[float]):
    """A `run(budget)` whose makespan is 1 / budget and whose calls take `seconds` in turn; the
    budgets it was called with are collected in `run.budgets`."""
    times = iter(seconds)

    def run(budget: int) -> tuple[float, int, float]:
        run.budgets.append(budget)
        return 1.0 / budget, budget, next(times)

    run.budgets = []
    return run


def test_search_gets_the_largest_doubled_budget_whose_median_warm_run_fits():
    module = experiment("construct_zero_shot")
    # budget 10: one run; 20: compile, then 0.5 and 0.6 (two of three under 1 s: fits);
    # 40: compile, then 0.9, 1.5, 0.8 (median 0.9: fits despite one slow run);
    # 80: compile, then 1.2 and 1.3 (two over: stops, does not fit).
    run = _scripted([9.0, 9.0, 0.5, 0.6, 9.0, 0.9, 1.5, 0.8, 9.0, 1.2, 1.3])
    same, timed = module.equal_and_timed(run, 10, 1.0)
    assert same == (0.1, 10, 9.0)
    assert timed[:2] == (1.0 / 40, 40)
    assert timed[2] == 0.9
    assert run.budgets == [10, 20, 20, 20, 40, 40, 40, 40, 80, 80, 80]


def test_one_slow_warm_run_does_not_decide_the_budget():
    module = experiment("construct_zero_shot")
    # budget 4: compile, then 0.2, 3.0, 0.3: the median (0.3) fits a 0.5 s policy;
    # budget 8: compile, then 3.0, 0.2, 0.9: the median (0.9) does not.
    run = _scripted([0.1, 5.0, 0.2, 3.0, 0.3, 5.0, 3.0, 0.2, 0.9])
    _, timed = module.equal_and_timed(run, 2, 0.5)
    assert timed == (0.25, 4, 0.3)


def test_when_no_doubled_budget_fits_search_keeps_the_equal_evaluations_run():
    module = experiment("construct_zero_shot")
    run = _scripted([0.4, 0.1, 0.6, 0.7])
    same, timed = module.equal_and_timed(run, 3, 0.5)
    assert timed == same == (1.0 / 3, 3, 0.4)
