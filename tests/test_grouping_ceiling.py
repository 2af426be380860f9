"""experiments/grouping_ceiling.py end to end on one small family graph."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "experiments" / "grouping_ceiling.py"


@pytest.mark.slow
def test_ceiling_rows_compare_grouped_heuristics_with_the_op_graph(tmp_path):
    spec = importlib.util.spec_from_file_location("grouping_ceiling", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "ceiling.json"
    argv = ["--family", "cifar10", "--tests", "1", "--targets", "4", "--parts", "3"]
    assert module.main([*argv, "--devices", "2", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    (row,) = doc["rows"]
    for grouping in ("cp4", "part3"):
        cell = row[grouping]
        assert cell["ratio"] == pytest.approx(cell["ms"] / row["op ms"])
        assert cell["decisions"] <= cell["nodes"]
    assert row["cp4"]["decisions"] <= 4 and row["part3"]["decisions"] == 3
    assert doc["geometric mean"]["cp4"] == pytest.approx(row["cp4"]["ratio"])
