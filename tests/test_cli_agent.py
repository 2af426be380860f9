"""`placeto-jax train`, `place` and `eval` end to end on tiny graphs, and their errors."""

from __future__ import annotations

import json
import math

import jax
import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax.cli import main
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.placers import FAST_HEURISTICS, run_method
from placeto_jax.sim.ranking import rank_keys

TINY = [
    "--set",
    "train.iterations=2",
    "--set",
    "train.episodes=4",
    "--set",
    "policy.rounds=1",
    "--set",
    "run.eval_every=1",
    "--set",
    "run.checkpoint_every=1",
]


PLACE_SINGLE = ["place", "example:diamond", "--method", "single", "--devices", "2"]
PLACE_POLICY = ["place", "example:diamond", "--checkpoint", "{run}"]  # {run}: the trained run
TRAIN_DIAMOND = ["train", "--graphs", "example:diamond", "--devices", "2", "--workdir", "{tmp}/w"]
POLICY_ONLY = "--method takes pipeline.squeeze only"  # any other pipeline field with --method


def _train(workdir) -> int:
    graphs = "example:diamond,layered:12"
    argv = ["train", "--graphs", graphs, "--devices", "2", "--workdir", str(workdir)]
    return main([*argv, "--no-progress", *TINY])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("cli") / "run"
    assert _train(workdir) == 0
    return workdir


def test_train_prints_a_table_and_resumes(run_dir, capsys):
    assert _train(run_dir) == 0
    out = capsys.readouterr().out
    assert "example:diamond" in out and "layered:12" in out and str(run_dir) in out
    assert (run_dir / "learning_curve.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_place_json_has_the_documented_fields(run_dir, capsys, tmp_path):
    output = tmp_path / "placement.json"
    assert (
        main(["place", "layered:16:3", "--checkpoint", str(run_dir), "--json", "-o", str(output)])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    for key in (
        "graph",
        "makespan_us",
        "single_device_makespan_us",
        "initial_makespan_us",
        "peak_memory_bytes",
        "placement",
        "evaluations",
    ):
        assert key in doc
    assert len(doc["placement"]) == 16 and set(doc["placement"]) <= {0, 1}
    assert doc["makespan_us"] <= doc["initial_makespan_us"]  # the initial placement is a candidate
    names = [f"op{v}" for v in range(len(doc["placement"]))]  # layered:16:3's op names
    written = json.loads(output.read_text())["placement"]
    assert written == dict(zip(names, doc["placement"], strict=True))
    # the written placement simulates to the reported makespan
    assert (
        main(["simulate", "layered:16:3", "--devices", "2", "--placement", str(output), "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["makespan_us"] == pytest.approx(doc["makespan_us"])
    # the comparison a user reads: the best fast heuristic on the same graph, run independently
    graph, cluster = resolve_graph("layered:16:3"), pj.Cluster.preset("placeto-k80", 2)
    runs = {m: run_method(m, graph, cluster, jax.random.key(0)) for m in FAST_HEURISTICS}
    best = min(runs.values(), key=lambda r: (not r.fits_memory, r.makespan))
    assert doc["best_heuristic"] == {
        "method": best.method,
        "makespan_us": pytest.approx(best.makespan),
        "fits_memory": best.fits_memory,
    }


@pytest.mark.slow
def test_eval_prints_one_row_per_graph(run_dir, capsys):
    assert (
        main(["eval", "--checkpoint", str(run_dir), "--graphs", "example:diamond,layered:9"]) == 0
    )
    out = capsys.readouterr().out
    assert "single ms" in out and "example:diamond" in out and "layered:9" in out
    assert "best heuristic ms" in out and "/ best" in out
    argv = ["eval", "--checkpoint", str(run_dir), "--graphs", "layered:9", "--no-heuristics"]
    assert main(argv) == 0
    assert "best heuristic" not in capsys.readouterr().out


def test_eval_control_places_with_the_untrained_policy_and_averages_the_ratios(run_dir, capsys):
    graphs = "example:diamond,layered:9"
    argv = ["eval", "--checkpoint", str(run_dir), "--graphs", graphs, "--json", "--control"]
    assert main(argv) == 0
    docs = json.loads(capsys.readouterr().out)
    assert main([*argv[:-2], "--control"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-4:] == ["untrained", "ms", "/", "best"]
    means = lines[-1].split()
    assert means[:2] == ["geometric", "mean"]
    mine = [d["makespan_us"] / d["best_heuristic"]["makespan_us"] for d in docs]
    control = [d["untrained_makespan_us"] / d["best_heuristic"]["makespan_us"] for d in docs]
    assert float(means[-2]) == pytest.approx(math.sqrt(mine[0] * mine[1]), abs=5e-4)
    assert float(means[-1]) == pytest.approx(math.sqrt(control[0] * control[1]), abs=5e-4)


def test_train_and_place_compare_with_the_best_heuristic(run_dir, capsys):
    assert _train(run_dir) == 0  # the run is complete: only its summary is printed
    out = capsys.readouterr().out
    assert "the policy's own placement" in out and "against single device and the best" in out
    header, *rows = (line.split() for line in out.splitlines() if line.startswith(("graph", "l")))
    assert header[-4:] == ["visited", "ms", "/", "best"]
    (layered,) = [row for row in rows if row[0] == "layered:12"]
    # the policy's own column is what `place` returns for the graph alone (a greedy episode
    # starts from a random placement drawn from the graph's content, not from the bank); the
    # best placement training visited is never slower than it (the greedy episode is among its
    # candidates)
    argv = ["place", "layered:12", "--checkpoint", str(run_dir), "--json"]
    assert main(argv) == 0
    placed = json.loads(capsys.readouterr().out)
    own_ms, visited_ms = float(layered[6]), float(layered[9])  # after "1.717 heft"
    assert own_ms == pytest.approx(placed["makespan_us"] / 1e3, abs=5e-4)
    assert visited_ms <= own_ms
    assert int(layered[2]) == placed["evaluations"]  # the table's evals: every simulation
    assert main(["place", "example:diamond", "--checkpoint", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "best heuristic (" in out and "/ best heuristic" in out


def _simulated(spec: str, cluster: str, devices: int, placement: list[int]):
    """The exact simulation of `placement` of graph `spec` on `devices` of preset `cluster`."""
    return pj.simulate(
        resolve_graph(spec), pj.Cluster.preset(cluster, devices), np.array(placement)
    )


def test_place_on_another_cluster_than_trained(run_dir, capsys):
    argv = ["place", "layered:16:3", "--checkpoint", str(run_dir), "--cluster", "v100"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["cluster"], doc["n_devices"]) == ("v100", 2)
    on_v100 = _simulated("layered:16:3", "v100", 2, doc["placement"])
    on_k80 = _simulated("layered:16:3", "placeto-k80", 2, doc["placement"])  # trained there
    assert doc["makespan_us"] == pytest.approx(float(on_v100.makespan))
    assert doc["makespan_us"] < 0.9 * float(on_k80.makespan)
    assert doc["peak_memory_bytes"] == pytest.approx(np.asarray(on_v100.peak_memory).tolist())
    assert main(argv) == 0
    assert "devices  2 x v100" in capsys.readouterr().out.splitlines()


def test_place_and_eval_default_to_the_checkpoint_cluster(run_dir, capsys):
    assert main(["place", "example:diamond", "--checkpoint", str(run_dir)]) == 0
    assert "devices  2 x placeto-k80" in capsys.readouterr().out.splitlines()
    argv = ["eval", "--checkpoint", str(run_dir), "--graphs", "example:diamond", "--json"]
    assert main(argv) == 0
    (k80,) = json.loads(capsys.readouterr().out)
    assert main([*argv, "--cluster", "p100"]) == 0
    (p100,) = json.loads(capsys.readouterr().out)
    assert (k80["cluster"], p100["cluster"]) == ("placeto-k80", "p100")
    for row, cluster in ((k80, "placeto-k80"), (p100, "p100")):
        simulated = _simulated("example:diamond", cluster, 2, row["placement"])
        assert row["makespan_us"] == pytest.approx(float(simulated.makespan))


def test_eval_coarsens_to_another_group_target_than_the_run(run_dir, capsys):
    # The run placed layered:12 as its 12 ops; with group_targets=4 the policy decides for at
    # most 4 groups, and the placement and makespan are still the op graph's.
    argv = ["eval", "--checkpoint", str(run_dir), "--graphs", "layered:12", "--json"]
    assert main(argv) == 0
    (ops,) = json.loads(capsys.readouterr().out)
    assert main([*argv, "--set", "pipeline.group_targets=4"]) == 0
    (grouped,) = json.loads(capsys.readouterr().out)
    assert ops["decisions"] == 12 and grouped["decisions"] <= 4
    assert len(grouped["placement"]) == 12
    simulated = _simulated("layered:12", "placeto-k80", 2, grouped["placement"])
    assert grouped["makespan_us"] == pytest.approx(float(simulated.makespan))
    # Both: each grouping plays its episode from the same key, and the faster placement is kept
    # (the 4-group one on a tie), with both rankings' simulations counted.
    assert main([*argv, "--set", "pipeline.group_targets=4,0"]) == 0
    (both,) = json.loads(capsys.readouterr().out)
    faster = ops if ops["makespan_us"] < grouped["makespan_us"] else grouped
    assert both["makespan_us"] == faster["makespan_us"] and both["nodes"] == faster["nodes"]
    assert both["placement"] == faster["placement"]
    assert both["evaluations"] == ops["evaluations"] + grouped["evaluations"]
    assert both["episodes"] == 2


def test_place_with_a_baseline_method(capsys):
    assert main(["place", "example:diamond", "--method", "heft", "--devices", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["method"] == "heft" and len(doc["placement"]) == 4 and doc["wall_s"] >= 0
    assert doc["cluster"] == "placeto-k80"
    simulated = _simulated("example:diamond", "placeto-k80", 2, doc["placement"])
    assert doc["makespan_us"] == pytest.approx(float(simulated.makespan))
    assert doc["peak_memory_bytes"] == np.asarray(simulated.peak_memory).tolist()


def test_place_and_eval_improve_from_a_start(run_dir, capsys):
    argv = ["place", "layered:12", "--checkpoint", str(run_dir), "--set", "pipeline.start=best"]
    more = ["--set", "pipeline.samples=2", "--set", "pipeline.temperature=2", "--json"]
    assert main([*argv, *more]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["start"].endswith("(best)") and doc["episodes"] == 3 and doc["temperature"] == 2
    assert doc["makespan_us"] <= doc["initial_makespan_us"]
    eval_argv = ["eval", "--checkpoint", str(run_dir), "--graphs", "layered:12"]
    assert main([*eval_argv, "--set", "pipeline.start=best-op", "--no-heuristics"]) == 0
    out = capsys.readouterr().out
    assert "start ms" in out and "(best-op)" in out


def test_place_polishes_on_the_op_graph_and_counts_its_steps(run_dir, capsys):
    argv = ["place", "layered:24", "--checkpoint", str(run_dir), "--json"]
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*argv, "--set", "pipeline.search_ops=2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["polish_steps"] == 2 * 24  # every op twice, one simulation each
    # every simulation counts, in one field: the episode's 24 steps and its exact ranking, then
    # the search's 48 (it starts from the ranking's simulation of its start)
    assert plain["evaluations"] == 24 + plain["ranked_evaluations"]
    assert doc["evaluations"] == plain["evaluations"] + 2 * 24
    assert doc["evaluations"] == sum(s["evaluations"] for s in doc["stages"])
    assert doc["makespan_us"] <= plain["makespan_us"]
    assert doc["initial_makespan_us"] == pytest.approx(plain["initial_makespan_us"])
    simulated = _simulated("layered:24", "placeto-k80", 2, doc["placement"])
    assert doc["makespan_us"] == pytest.approx(float(simulated.makespan))
    # Ranked proposals on 2 devices: the one other device on every pass, as without.
    assert main([*argv, "--set", "pipeline.search_ops=2", "--set", "pipeline.proposer=ranked"]) == 0
    ranked = json.loads(capsys.readouterr().out)
    assert ranked["placement"] == doc["placement"] and ranked["polish_steps"] == 2 * 24


def test_place_squeezes_only_a_placement_that_overflows(run_dir, capsys, tmp_path):
    # a -> b1..b4 -> c, outputs of 5 GB: c needs all four b outputs at once (20 GB) on one
    # 12 GB device, so every placement overflows and the squeeze runs (its start counted);
    # layered:24 fits, and the squeeze leaves it alone.
    wide = tmp_path / "wide.json"
    edges = [(0, i) for i in range(1, 5)] + [(i, 5) for i in range(1, 5)]
    pj.save_graph(pj.Graph.from_edges([10.0] * 6, [5e9] * 5 + [0.0], edges), wide)
    argv = ["place", str(wide), "--checkpoint", str(run_dir), "--json"]
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*argv, "--set", "pipeline.squeeze=true"]) == 0
    squeezed = json.loads(capsys.readouterr().out)
    assert squeezed["squeeze_steps"] >= 1
    assert squeezed["evaluations"] == plain["evaluations"] + squeezed["squeeze_steps"]
    cluster = pj.Cluster.preset("placeto-k80", 2)
    runs = [
        pj.simulate(pj.load_graph(wide), cluster, np.array(d["placement"]))
        for d in (plain, squeezed)
    ]
    before, after = (rank_keys(r.makespan[None], r.peak_memory[None], cluster)[0] for r in runs)
    assert after <= before
    fits = ["place", "layered:24", "--checkpoint", str(run_dir), "--json"]
    assert main(fits) == 0
    fitting = json.loads(capsys.readouterr().out)
    assert main([*fits, "--set", "pipeline.squeeze=true"]) == 0
    left = json.loads(capsys.readouterr().out)
    assert left["squeeze_steps"] == 0 and left["placement"] == fitting["placement"]


def test_place_method_squeezes_when_it_overflows(capsys, tmp_path):
    # The wide graph above, single device: a's output and all four b outputs are live as b4
    # starts (25 GB on a 12 GB device); the squeeze moves work to the other device. The result
    # is named after the method, its evaluations include the squeeze's, and it ranks before
    # single device (scored by the reference simulator); a placement that fits is left alone.
    wide = tmp_path / "wide.json"
    edges = [(0, i) for i in range(1, 5)] + [(i, 5) for i in range(1, 5)]
    graph = pj.Graph.from_edges([10.0] * 6, [5e9] * 5 + [0.0], edges)
    pj.save_graph(graph, wide)
    argv = ["place", str(wide), "--method", "single", "--devices", "2", "--json"]
    assert main([*argv, "--set", "pipeline.squeeze=true"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["method"] == "single+squeeze" and doc["evaluations"] > 1
    method, squeezed = doc["stages"]  # the method, then the squeeze: their evaluations add up
    assert (method["stage"], squeezed["stage"]) == ("single", "squeeze")
    assert method["evaluations"] + squeezed["evaluations"] == doc["evaluations"]
    assert squeezed["makespan_us"] == doc["makespan_us"]
    cluster = pj.Cluster.preset("placeto-k80", 2)
    alone, squeezed = (
        pj.simulate_reference(graph, cluster, np.array(p)) for p in ([0] * 6, doc["placement"])
    )
    assert alone.peak_memory[0] == 25e9
    before, after = (
        rank_keys(np.atleast_1d(r.makespan), np.atleast_2d(r.peak_memory), cluster)[0]
        for r in (alone, squeezed)
    )
    assert after < before
    assert main([*PLACE_SINGLE, "--json", "--set", "pipeline.squeeze=true"]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == "single"


def test_place_polishes_groups_before_ops(run_dir, capsys):
    # At most 4 groups of the 24 ops: two passes over the groups (one simulation each), then
    # two over the ops; the counts add up.
    argv = ["place", "layered:24", "--checkpoint", str(run_dir), "--json"]
    argv += ["--set", "pipeline.group_targets=4"]
    assert main([*argv, "--set", "pipeline.search_groups=2"]) == 0
    groups = json.loads(capsys.readouterr().out)
    assert groups["nodes"] <= 4 and groups["polish_steps"] == 2 * groups["decisions"]
    assert groups["makespan_us"] <= groups["initial_makespan_us"]
    assert main([*argv, "--set", "pipeline.search_groups=2", "--set", "pipeline.search_ops=2"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert both["polish_steps"] == groups["polish_steps"] + 2 * 24
    assert both["makespan_us"] <= groups["makespan_us"]
    simulated = _simulated("layered:24", "placeto-k80", 2, both["placement"])
    assert both["makespan_us"] == pytest.approx(float(simulated.makespan))


def test_a_start_file_for_other_ops_is_one_clear_line(run_dir, tmp_path, capsys):
    start = tmp_path / "start.json"
    start.write_text(json.dumps([0, 1]))
    argv = [
        "place",
        "example:diamond",
        "--checkpoint",
        str(run_dir),
        "--set",
        f"pipeline.start={start}",
    ]
    assert main(argv) == 2
    assert "placement has 2 entries; the graph has 4 ops" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [*PLACE_POLICY, "--devices", "3"],
            "places on 2 devices, not 3",
        ),
        (["place", "example:diamond", "--checkpoint", "{tmp}/nothing"], "does not exist"),
        (
            [*PLACE_POLICY, "--cluster", "k81"],
            "unknown cluster 'k81'",
        ),
        (
            ["eval", "--checkpoint", "{run}", "--graphs", "example:diamond", "--cluster", "k81"],
            "unknown cluster 'k81'",
        ),
        (
            ["place", "example:diamond", "--method", "magic", "--devices", "2"],
            "unknown placement method 'magic'",
        ),
        (
            ["place", "example:diamond", "--method", "expert", "--devices", "2"],
            "expert: no naming rules know this graph",
        ),
        (
            [
                "train",
                "--graphs",
                "layered:100",
                "--devices",
                "2",
                "--workdir",
                "{tmp}/w",
                "--set",
                "run.buckets=32,64",
            ],
            "larger than every bucket",
        ),
        (
            [
                "train",
                "--graphs",
                "example:diamond",
                "--devices",
                "2",
                "--workdir",
                "{tmp}/w",
                "--set",
                "train.episodes=zero",
            ],
            "bad value 'zero' for config train.episodes",
        ),
        (
            [*PLACE_POLICY, "--set", "pipeline.start=bogus"],
            "unknown start 'bogus': choose one of random, single, metis",
        ),
        ([*TRAIN_DIAMOND, "--start", "bogus"], "unknown start 'bogus'"),
        ([*PLACE_SINGLE, "--set", "pipeline.start=best"], POLICY_ONLY),
        ([*PLACE_SINGLE, "--set", "pipeline.search_ops=1"], POLICY_ONLY),
        ([*PLACE_SINGLE, "--pipeline", "search"], "not with --pipeline"),
        (
            ["place", "example:diamond", "--pipeline", "search", "--devices", "2"],
            "this pipeline places with a policy",
        ),
        (["place", "example:diamond", "--pipeline", "heuristics"], "needs --devices"),
        ([*PLACE_POLICY, "--budget", "8"], "--budget is for --method's search methods"),
        (
            [*PLACE_POLICY, "--set", "pipeline.search_ops=-2"],
            "pipeline.search_ops must be in [0, 64], or -1",
        ),
        (
            [*PLACE_POLICY, "--set", "pipeline.search_groups=-1"],
            "pipeline.search_groups must be in [0, 64]",
        ),
        ([*PLACE_POLICY, "--set", "pipeline.samples=-1"], "pipeline.samples must be in [0, 4096]"),
        (
            [*PLACE_POLICY, "--set", "pipeline.group_targets=8,-2"],
            "pipeline.group_targets must be >= 0",
        ),
        (
            [*PLACE_POLICY, "--set", "pipeline.group_targets=8;16"],
            "bad value '8;16' for config pipeline.group_targets",
        ),
        (
            [*PLACE_POLICY, "--set", "pipeline.temperature=0"],
            "pipeline.temperature must be > 0",
        ),
        (
            [*PLACE_POLICY, "--set", "pipeline.temperature=2"],
            "pipeline.temperature sets the sampled episodes: set samples too",
        ),
        ([*PLACE_POLICY, "--set", "samples=2"], "expected pipeline.FIELD=VALUE"),
        ([*PLACE_POLICY, "--set", "pipeline.colour=red"], "unknown config key 'pipeline.colour'"),
        (
            [*PLACE_POLICY, "--set", "pipeline.samples=1", "--set", "pipeline.samples=2"],
            "--set pipeline.samples is given twice",
        ),
        (
            [*PLACE_POLICY, "--set", "pipeline.proposer=best"],
            "pipeline.proposer='best' is not one of policy, ranked, random",
        ),
    ],
)
def test_bad_input_is_one_clear_line(run_dir, tmp_path, capsys, argv, message):
    argv = [a.format(run=run_dir, tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("placeto-jax: error:") and message in err
    assert not (tmp_path / "w").exists()  # nothing half-written


def test_every_json_output_carries_its_pipeline_and_stages(run_dir, capsys):
    argv = ["place", "example:diamond", "--pipeline", "heuristics", "--devices", "2", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pipeline"]["source"] == "heuristics" and doc["method"] == "heuristics"
    (stage,) = doc["stages"]
    assert stage["stage"] == "heuristics" and stage["makespan_us"] == doc["makespan_us"]
    assert doc["best_heuristic"]["makespan_us"] == doc["makespan_us"]
    assert main([*PLACE_SINGLE, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pipeline"] == {"method": "single", "budget": None, "squeeze": False}
    assert [s["stage"] for s in doc["stages"]] == ["single"]
    argv = ["eval", "--checkpoint", str(run_dir), "--graphs", "example:diamond", "--json"]
    assert main([*argv, "--set", "pipeline.search_ops=1"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["pipeline"]["search_ops"] == 1
    assert [s["stage"] for s in row["stages"]] == ["episodes", "search-ops"]


def test_place_json_output_is_a_placement_file(tmp_path, capsys):
    argv = ["place", "layered:16:3", "--pipeline", "heuristics", "--devices", "2", "--json"]
    assert main(argv) == 0
    out = tmp_path / "placed.json"
    out.write_text(capsys.readouterr().out)
    placed = json.loads(out.read_text())
    simulate = ["simulate", "layered:16:3", "--devices", "2", "--placement", str(out), "--json"]
    assert main(simulate) == 0
    assert json.loads(capsys.readouterr().out)["makespan_us"] == placed["makespan_us"]
    simulate[3] = "3"  # another device count than the one it was placed for
    assert main(simulate) == 2
    assert "the placement is for 2 devices, not 3" in capsys.readouterr().err


def test_trained_on_one_graph_the_summary_is_what_place_returns(tmp_path, capsys):
    workdir = tmp_path / "one"
    argv = ["train", "--graphs", "layered:12", "--devices", "2", "--workdir", str(workdir)]
    assert main([*argv, "--no-progress", *TINY]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    (row,) = [r for r in rows if r and r[0] == "layered:12"]
    assert main(["place", "layered:12", "--checkpoint", str(workdir), "--json"]) == 0
    placed = json.loads(capsys.readouterr().out)
    assert float(row[6]) == pytest.approx(placed["makespan_us"] / 1e3, abs=5e-4)
    assert int(row[2]) == placed["evaluations"]
