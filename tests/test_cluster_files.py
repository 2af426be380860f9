"""Clusters of your own devices: cluster files (`--cluster FILE`), and runs that train for one,
record it in run.json and place on it."""

from __future__ import annotations

import json

import pytest

import placeto_jax as pj
from placeto_jax.cli import main
from placeto_jax.cluster import CUSTOM, GB, GBPS, Cluster, resolve_cluster
from placeto_jax.config import make_config
from placeto_jax.graphs.placements import load_placement
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.pipeline import untrained
from placeto_jax.rl.checkpoint import write_run

# Two devices four times a K80, 1 GB each, 50 GB/s buses: every op runs cost / 4 µs.
RIG = {"name": "rig", "n_devices": 2, "speed": 4, "memory_gb": 1, "bandwidth_gb_per_s": 50}
CONSTRUCT = ["--preset", "construct", "--set", "train.imitation=2", "--no-progress"]


def _file(tmp_path, doc: dict, name: str = "rig.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_cluster_file_is_in_gb_gbps_and_us_and_reads_back_what_it_writes(tmp_path):
    doc = {"n_devices": 3, "speed": [1, 3.2, 3.2], "memory_gb": [12, 16, 16],
           "bandwidth_gb_per_s": 12, "delta1_us": 4, "delta2_us": 10}  # fmt: skip
    cluster = pj.read_cluster(_file(tmp_path, doc))
    assert cluster == Cluster(n_devices=3, speed=(1.0, 3.2, 3.2), memory=(12e9, 16e9, 16e9),
                              bandwidth=12e3, delta1=4.0, delta2=10.0, name=CUSTOM)  # fmt: skip
    assert cluster.preset_name() == CUSTOM
    pj.write_cluster(tmp_path / "again.json", cluster)
    assert pj.read_cluster(tmp_path / "again.json") == cluster
    assert json.loads((tmp_path / "again.json").read_text())["memory_gb"] == [12.0, 16.0, 16.0]


def test_a_cluster_file_starts_from_a_preset_and_is_that_preset_when_it_changes_nothing(tmp_path):
    same = pj.read_cluster(_file(tmp_path, {"preset": "v100", "n_devices": 2}))
    assert same == Cluster.preset("v100", 2) and same.preset_name() == "v100"
    slower = Cluster.from_document({"preset": "v100", "n_devices": 2, "bandwidth_gb_per_s": 1})
    assert slower.bandwidth == (1 * GBPS,) * 2 and slower.memory == (16 * GB,) * 2
    assert slower.name == CUSTOM and slower.preset_name() == CUSTOM
    assert Cluster.preset("v100", 2, broadcast=False).preset_name() == CUSTOM


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([2], "a cluster is a JSON object, got list"),
        ({"n_devices": 2, "memory": 3}, "unknown key 'memory'; the keys are name, preset"),
        ({"speed": 2}, "n_devices is missing"),
        ({"n_devices": 2, "preset": "k81"}, "preset must be one of placeto-k80"),
        ({"n_devices": 2, "speed": [1, 2, 3]}, r"speed needs one value or 2 \(one per device"),
        ({"n_devices": 2, "memory_gb": -1}, "memory must be finite and > 0"),
        ({"n_devices": 2, "speed": "fast"}, "speed must be numbers"),
        ({"n_devices": 2, "broadcast": 1}, "broadcast must be true or false"),
        ({"n_devices": 2, "name": ""}, "name must be a non-empty string"),
        ({"n_devices": 0}, "n_devices must be at least 1"),
    ],
)
def test_a_bad_cluster_file_names_the_file_and_the_key(tmp_path, doc, message):
    path = _file(tmp_path, doc)
    with pytest.raises(ValueError, match=f"cluster file '{path}': {message}"):
        pj.read_cluster(path)


def test_a_cluster_spec_is_a_preset_with_a_count_or_a_file_with_its_own(tmp_path):
    path = _file(tmp_path, RIG)
    assert resolve_cluster(path, None) == resolve_cluster(path, 2) == pj.read_cluster(path)
    assert resolve_cluster("p100", 3) == Cluster.preset("p100", 3)
    with pytest.raises(ValueError, match="describes 2 devices, not 3"):
        resolve_cluster(path, 3)
    with pytest.raises(ValueError, match="cluster preset 'p100' needs a device count"):
        resolve_cluster("p100", None)
    with pytest.raises(ValueError, match="unknown cluster 'k81': give a preset"):
        resolve_cluster("k81", 2)
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match=r"broken\.json' does not read"):
        resolve_cluster(str(tmp_path / "broken.json"), None)
    with pytest.raises(ValueError, match=r"none\.json' does not exist"):
        resolve_cluster(str(tmp_path / "none.json"), None)


def test_train_for_a_cluster_file_records_it_and_place_runs_on_it(tmp_path, capsys):
    rig_file, workdir = _file(tmp_path, RIG), str(tmp_path / "run")
    rig = pj.read_cluster(rig_file)
    argv = ["train", "--graphs", "example:diamond", "--cluster", rig_file, "--workdir", workdir]
    assert main([*argv, *CONSTRUCT]) == 0
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["cluster"] == rig.document() and run["config"]["cluster_preset"] == CUSTOM
    assert pj.Policy.load(workdir).cluster() == rig
    capsys.readouterr()
    placed = str(tmp_path / "placed.json")
    assert main(["place", "example:diamond", "--checkpoint", workdir, "-o", placed]) == 0
    out = capsys.readouterr().out
    assert "devices  2 (rig): speed 4, memory_gb 1, bandwidth_gb_per_s 50" in out
    graph = resolve_graph("example:diamond")
    placement = load_placement(placed, graph, 2)
    assert main(["place", "example:diamond", "--checkpoint", workdir, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cluster_spec"] == rig.document()
    makespan = doc["makespan_us"]
    on_rig = float(pj.simulate(graph, rig, placement).makespan)
    on_k80s = float(pj.simulate(graph, Cluster.preset("placeto-k80", 2), placement).makespan)
    assert makespan == pytest.approx(on_rig) and on_rig < on_k80s  # the rig's, 4x faster ops
    other = _file(tmp_path, {**RIG, "speed": 2}, "other.json")  # the same run, another cluster
    with pytest.raises(ValueError, match=r"holds a run for another cluster \(rig, 2 devices\)"):
        pj.train([("example:diamond", graph)], pj.read_cluster(other), workdir, "construct",
                 ["train.imitation=2"])  # fmt: skip


def test_a_policy_for_a_custom_cluster_keeps_it_and_needs_one_for_another_count(tmp_path):
    rig, workdir = Cluster.from_document(RIG), str(tmp_path / "run")
    graph = resolve_graph("example:diamond")
    policy = pj.train(graph, rig, workdir, "tiny", ["train.iterations=1", "policy.rounds=1"])
    assert policy.cluster() == rig and untrained(policy).cluster() == rig
    assert pj.Policy.load(workdir).cluster() == rig
    assert pj.Policy.load(workdir, cluster="v100").cluster() == Cluster.preset("v100", 2)
    with pytest.raises(ValueError, match="places on 2 devices, not 3"):
        pj.Policy.load(workdir, devices=3, cluster="v100")  # the paper agent: its count only
    construct = str(tmp_path / "construct")
    pj.train(graph, rig, construct, "construct", ["train.imitation=1"])
    with pytest.raises(ValueError, match="custom cluster of 2 devices; give a cluster"):
        pj.Policy.load(construct, devices=3)
    assert pj.Policy.load(construct, 3, "p100").cluster() == Cluster.preset("p100", 3)


def test_a_run_recorded_before_clusters_were_places_on_its_preset(tmp_path):
    workdir = str(tmp_path / "run")
    pj.train(resolve_graph("example:diamond"), Cluster.preset("v100", 2), workdir, "construct",
             ["train.imitation=1"])  # fmt: skip
    run_json = tmp_path / "run" / "run.json"
    doc = json.loads(run_json.read_text())
    del doc["cluster"]
    run_json.write_text(json.dumps(doc))
    assert pj.Policy.load(workdir).cluster() == Cluster.preset("v100", 2)
    assert pj.Policy.load(workdir, devices=4).cluster() == Cluster.preset("v100", 4)


def test_a_run_whose_config_names_another_cluster_is_refused_before_any_write(tmp_path):
    config = make_config("construct", [], n_devices=2)  # cluster_preset placeto-k80
    with pytest.raises(ValueError, match="names cluster 'placeto-k80', but the run trains for"):
        write_run(tmp_path, config, ["g"], ["digest"], Cluster.from_document(RIG))
    assert not (tmp_path / "run.json").exists()


def test_simulate_and_graphs_show_run_on_a_cluster_file(tmp_path, capsys):
    rig_file = _file(tmp_path, {**RIG, "speed": [4, 1]})  # the first device 4x a K80
    graph = resolve_graph("example:diamond")  # 190 µs of compute in 4 kernels
    assert main(["simulate", "example:diamond", "--cluster", rig_file, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["makespan_us"] == pytest.approx(190 / 4 + 3 * 5.7)  # all on device 0 (single)
    assert main(["graphs", "show", "example:diamond", "--cluster", rig_file, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["one_device_ms"] * 1e3 == pytest.approx(190 / 4 + 3 * 5.7)
    assert graph.cost.sum() == pytest.approx(190.0)
