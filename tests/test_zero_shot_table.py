"""experiments/zero_shot_table.py: item 2's ratios, geometric means and verdicts by hand."""

from __future__ import annotations

import json

import pytest

from conftest import experiment


def _entry(graph: str, placeto_us: float, heuristic_us: float) -> dict:
    return {"graph": graph, "decisions": 48, "makespan_us": placeto_us, "polish_steps": 0,
            "best_heuristic": {"method": "m-sct", "makespan_us": heuristic_us}}  # fmt: skip


def test_ratios_geometric_means_and_the_verdict(tmp_path, capsys):
    # ptb: 0.8 and 1.25 -> geomean 1.0, max 1.25 (not met); nmt: 0.9 and 1.0 -> 0.9487 (met)
    doc = [_entry("family:ptb/24", 800, 1000), _entry("family:ptb/25", 2500, 2000)]
    other = [_entry("family:nmt/24", 900, 1000), _entry("family:nmt/25", 1000, 1000)]
    (tmp_path / "a.json").write_text(json.dumps(doc))
    (tmp_path / "b.json").write_text(json.dumps(other))
    out = tmp_path / "table.json"
    argv = [f"x={tmp_path / 'a.json'}", f"x={tmp_path / 'b.json'}", "--out", str(out)]
    assert experiment("zero_shot_table").main(argv) == 0
    summary = {s["family"]: s for s in json.loads(out.read_text())["summary"]}
    assert summary["family:ptb"]["geomean"] == pytest.approx(1.0)
    assert summary["family:ptb"]["max"] == pytest.approx(1.25)
    assert not summary["family:ptb"]["met"]
    assert summary["family:nmt"]["geomean"] == pytest.approx(0.9**0.5)
    # within both bounds, but on 2 of the family's 8 test graphs: no verdict
    assert summary["family:nmt"]["within_bounds"]
    assert not summary["family:nmt"]["met"]
    printed = capsys.readouterr().out
    assert "family:ptb/25" in printed
    assert "2 of 8 graphs only" in printed


def test_the_item_is_met_only_on_all_eight_test_graphs(tmp_path, capsys):
    # ratios 0.9 (x7) and 1.04: geomean 0.9^(7/8) * 1.04^(1/8) = 0.9117, max 1.04
    doc = [_entry(f"family:nmt/{i}", 900, 1000) for i in range(24, 31)]
    doc.append(_entry("family:nmt/31", 1040, 1000))
    (tmp_path / "a.json").write_text(json.dumps(doc))
    out = tmp_path / "table.json"
    assert experiment("zero_shot_table").main([f"x={tmp_path / 'a.json'}", "--out", str(out)]) == 0
    (total,) = json.loads(out.read_text())["summary"]
    assert total["geomean"] == pytest.approx(0.9**0.875 * 1.04**0.125)
    assert total["graphs"] == 8 and total["met"]
    assert capsys.readouterr().out.splitlines()[-2].split()[-1] == "yes"


def test_an_eval_without_heuristics_is_named():
    entry = _entry("family:ptb/24", 800, 1000)
    entry["best_heuristic"] = None
    with pytest.raises(ValueError, match="family:ptb/24: the eval ran with --no-heuristics"):
        experiment("zero_shot_table").rows_of("x", [entry])


def test_the_plot_draws_one_bar_per_graph_and_variant_and_both_bounds(tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from placeto_jax.plotting import draw_ratio_bars

    module = experiment("zero_shot_table")
    rows = module.rows_of("plain", [_entry("family:ptb/24", 800, 1000),
                                    _entry("family:ptb/25", 2500, 2000)])  # fmt: skip
    rows += module.rows_of("polish", [_entry("family:ptb/25", 1800, 2000)])
    rows += module.rows_of("plain", [_entry("family:nmt/24", 900, 1000)])
    figure = Figure()
    FigureCanvasAgg(figure)
    draw_ratio_bars(figure, rows, module.LIMITS)
    nmt, ptb = figure.axes  # families in name order
    # bars drawn from 1: their tops are the ratios
    tops = sorted(round(p.get_y() + p.get_height(), 6) for p in ptb.patches)
    assert tops == [0.8, 0.9, 1.25]
    (bar,) = nmt.patches
    assert (bar.get_y(), bar.get_height()) == pytest.approx((1.0, -0.1))
    assert sorted(line.get_ydata()[0] for line in ptb.lines) == [1.0, 1.05]
    assert [t.get_text() for t in ptb.get_xticklabels()] == ["24", "25"]
    # the legend (first panel) names every variant in its bars' colour, though the first
    # panel has no "polish" bar
    legend = nmt.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["plain", "polish"]
    (polish_bar,) = next(c for c in ptb.containers if c.get_label() == "polish").patches
    handles = {
        t.get_text(): h for t, h in zip(legend.get_texts(), legend.legend_handles, strict=True)
    }
    assert handles["polish"].get_facecolor() == polish_bar.get_facecolor()
    assert handles["plain"].get_facecolor() != polish_bar.get_facecolor()
    (tmp_path / "a.json").write_text(json.dumps([_entry("family:ptb/24", 800, 1000)]))
    png = tmp_path / "ratios.png"
    assert module.main([f"x={tmp_path / 'a.json'}", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
