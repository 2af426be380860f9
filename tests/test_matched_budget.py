"""experiments/matched_budget.py: the verdict by hand, the refining and polishing arguments, and one
benchmark file end to end."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "experiments" / "matched_budget.py"
MSR_FIDDLE = Path("/work/shared/benchmarks/msr-fiddle")


def _module():
    spec = importlib.util.spec_from_file_location("matched_budget", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def _row(placeto, heuristic, local, cem, fits=(True, True, True, True), overflow=None):
    names = ("placeto", "best_heuristic", "local-search", "cross-entropy")
    overflow = overflow or tuple(0.0 if f else 1.0 for f in fits)
    row = {f"{n}_ms": ms for n, ms in zip(names, (placeto, heuristic, local, cem), strict=True)}
    row.update({f"{n}_fits": f for n, f in zip(names, fits, strict=True)})
    row.update({f"{n}_overflow": o for n, o in zip(names, overflow, strict=True)})
    return row


def test_placeto_must_be_at_most_every_method_and_fitting_memory_comes_first():
    verdict = _module().verdict
    assert verdict(_row(10.0, 10.0, 12.0, 11.0))  # a tie with the heuristic is "at most"
    assert not verdict(_row(10.0, 11.0, 9.9, 12.0))  # local search is faster
    # the heuristic's placement does not fit memory, Placeto's does: Placeto ranks first
    assert verdict(_row(10.0, 8.0, 12.0, 11.0, fits=(True, False, True, True)))
    # Placeto's does not fit, so any fitting placement beats it, however slow
    assert not verdict(_row(8.0, 20.0, 30.0, 40.0, fits=(False, True, True, True)))
    # when nothing fits, the least memory overflow ranks first, not the shortest makespan
    none_fit = (False, False, False, False)
    assert verdict(_row(30.0, 10.0, 12.0, 11.0, none_fit, overflow=(0.1, 2.0, 0.5, 0.2)))
    assert not verdict(_row(10.0, 30.0, 12.0, 11.0, none_fit, overflow=(0.2, 2.0, 0.5, 0.1)))
    # at equal overflow, the makespan decides
    assert not verdict(_row(12.0, 30.0, 11.0, 40.0, none_fit, overflow=(0.5, 0.5, 0.5, 0.5)))


@pytest.mark.slow
def test_one_benchmark_file_end_to_end(tmp_path):
    if not MSR_FIDDLE.is_dir():
        pytest.skip(f"{MSR_FIDDLE} is not here")
    out = tmp_path / "matched.json"
    argv = ["--data", str(MSR_FIDDLE), "--only", "benchmarks", "--limit", "1", "--out", str(out)]
    assert _module().main(argv) == 0
    (row,) = json.loads(out.read_text())["rows"]
    # improve mode keeps the start among its candidates, so it is never slower than it
    assert row["placeto_ms"] <= row["best_heuristic_ms"] * (1 + 1e-9)
    assert row["heuristics"][row["best_heuristic"]] == [
        row["best_heuristic_ms"],
        row["best_heuristic_fits"],
    ]
    for name in ("local-search", "cross-entropy"):
        assert row[f"{name}_evaluations"] <= row["placeto_evaluations"]


def test_refine_reads_groups_and_updates_and_names_a_bad_value():
    module = _module()
    assert module.Refine.parse("128:3") == module.Refine(128, 3)
    for bad in ("128", "128:x", "0:3", "128:0"):
        with pytest.raises(argparse.ArgumentTypeError, match=repr(bad)):
            module.Refine.parse(bad)


def test_polish_reads_passes_and_names_a_bad_value():
    module = _module()
    assert module.passes("2") == 2 and module.passes("0") == 0
    assert module.passes("all") == module.ALL_DEVICES  # D - 1 passes, per case
    with pytest.raises(argparse.ArgumentTypeError, match="'two'"):
        module.passes("two")
    with pytest.raises(argparse.ArgumentTypeError, match="must be >= 0, got -1"):
        module.passes("-1")
    row = {"unpolished_ms": 10.0, "random_polish_ms": 9.5}
    expected = {"unpolished": "10", "random polish": "9.5", "second start": "-"}
    assert module.polish_columns(row) == expected
    row["second_start"] = "single 9.25"
    assert module.polish_columns(row)["second start"] == "single 9.25"
    assert module.polish_columns({}) == {}


def test_a_second_start_needs_the_op_level_search(capsys):
    with pytest.raises(SystemExit) as exit_:
        _module().main(["--from-fastest"])
    assert exit_.value.code == 2
    assert "--from-fastest runs the op-level search (--polish) from a second start" in (
        capsys.readouterr().err
    )


def test_polishing_groups_takes_a_number_not_all(capsys):
    with pytest.raises(SystemExit) as exit_:
        _module().main(["--polish-groups", "all"])
    assert exit_.value.code == 2
    assert "--polish-groups takes a number of passes, not all" in capsys.readouterr().err


def test_polishing_groups_after_refining_is_refused_before_any_work(capsys):
    with pytest.raises(SystemExit) as exit_:
        _module().main(["--refine", "128:3", "--polish-groups", "2"])
    assert exit_.value.code == 2
    assert "--polish-groups searches the first stage's groups: not with --refine" in (
        capsys.readouterr().err
    )


def test_graphs_named_on_the_command_line_replace_the_scope(capsys):
    module = _module()
    (case,) = module.spec_cases("layered:12", 3)
    assert case.label == "layered:12 d3" and case.cluster.n_devices == 3
    assert case.graph.n_ops == 12
    for argv, message in (
        (["--graphs", "layered:12", "--only", "dev"], "--graphs replaces the scope"),
        (["--graphs", "layered:12", "--devices", "0"], "--devices must be >= 1, got 0"),
    ):
        with pytest.raises(SystemExit) as exit_:
            module.main(argv)
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_the_squeeze_column_shows_only_where_it_ran():
    module = _module()
    base = {"graph": "g", "nodes": 5, "devices": 2, "decisions": 5, "best_heuristic": "single",
            "best_heuristic_ms": 10.0, "placeto_evaluations": 9,
            "placeto_at_most_all": True}  # fmt: skip
    fits = {**base, **_row(9.0, 10.0, 11.0, 12.0)}
    assert "squeeze" not in module.report([fits]).splitlines()[0]
    over = {**base, **_row(9.0, 10.0, 11.0, 12.0, (False,) * 4, (0.2, 0.3, 0.3, 0.3))}
    over["squeeze"] = "0.2009 -> 0.2003"
    lines = module.report([fits, over]).splitlines()
    assert "squeeze" in lines[0] and "0.2009 -> 0.2003" in lines[2] and " - " in lines[1]


def test_random_passes_follow_the_op_level_search(capsys):
    for argv, message in (
        (["--then-random", "3"], "--then-random follows the op-level search (--polish)"),
        (["--polish", "all", "--then-random", "-1"], "--then-random must be >= 0, got -1"),
    ):
        with pytest.raises(SystemExit) as exit_:
            _module().main(argv)
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err
