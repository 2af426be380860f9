"""The matched-budget experiment (`placeto_jax.reproduce.matched`): the verdict by hand, its
pipeline and table, and one benchmark file end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placeto_jax.reproduce import matched

MSR_FIDDLE = Path("/work/shared/benchmarks/msr-fiddle")


def _row(placeto, heuristic, local, cem, fits=(True, True, True, True), overflow=None):
    names = ("placeto", "best_heuristic", "local-search", "cross-entropy")
    overflow = overflow or tuple(0.0 if f else 1.0 for f in fits)
    row = {f"{n}_ms": ms for n, ms in zip(names, (placeto, heuristic, local, cem), strict=True)}
    row.update({f"{n}_fits": f for n, f in zip(names, fits, strict=True)})
    row.update({f"{n}_overflow": o for n, o in zip(names, overflow, strict=True)})
    return row


def test_placeto_must_be_at_most_every_method_and_fitting_memory_comes_first():
    verdict = matched.verdict
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
    assert matched.main(argv) == 0
    (row,) = json.loads(out.read_text())["rows"]
    # improve mode keeps the start among its candidates, so it is never slower than it
    assert row["placeto_ms"] <= row["best_heuristic_ms"] * (1 + 1e-9)
    assert row["heuristics"][row["best_heuristic"]] == [
        row["best_heuristic_ms"],
        row["best_heuristic_fits"],
    ]
    for name in ("local-search", "cross-entropy"):
        assert row[f"{name}_evaluations"] <= row["placeto_evaluations"]


def test_the_pipeline_must_start_from_a_start_and_reads_its_fields(capsys):
    for argv, message in (
        (["--pipeline", "heuristics"], "must start Placeto's episodes from a start"),
        (["--set", "pipeline.start="], "must start Placeto's episodes from a start"),
    ):
        with pytest.raises(SystemExit) as exit_:
            matched.main(argv)
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"pipeline\.search_ops must be in"):
        matched.main(["--set", "pipeline.search_ops=-5"])


def test_graphs_named_on_the_command_line_replace_the_scope(capsys):
    (case,) = matched.spec_cases("layered:12", 3)
    assert case.label == "layered:12 d3" and case.cluster.n_devices == 3
    assert case.graph.n_ops == 12
    for argv, message in (
        (["--graphs", "layered:12", "--only", "dev"], "--graphs replaces the scope"),
        (["--graphs", "layered:12", "--devices", "0"], "--devices must be >= 1, got 0"),
    ):
        with pytest.raises(SystemExit) as exit_:
            matched.main(argv)
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_search_columns_show_each_stage_where_any_ran():
    base = {"graph": "g", "nodes": 5, "devices": 2, "decisions": 5, "best_heuristic": "single",
            "best_heuristic_ms": 10.0, "placeto_evaluations": 9,
            "placeto_at_most_all": True, "stages": []}  # fmt: skip
    plain = {**base, **_row(9.0, 10.0, 11.0, 12.0)}
    assert "stage evals" not in matched.report([plain]).splitlines()[0]
    stages = [{"stage": "search-ops", "evaluations": 49}, {"stage": "squeeze", "evaluations": 3}]
    searched = {**plain, "unpolished_ms": 9.5, "random_polish_ms": 9.25, "stages": stages}
    assert matched.search_columns(searched) == {
        "unsearched": "9.5", "random search": "9.25", "stage evals": "- 49 - - 3",
    }  # fmt: skip
    lines = matched.report([plain, searched]).splitlines()
    assert "stage evals" in lines[0] and "- 49 - - 3" in lines[2]
    assert "0.9000" in lines[1]  # placeto / best heuristic: 9.0 / 10.0
    assert "mean placeto / best heuristic 0.9000 on the 2" in lines[-1]
