"""Placement files: the device of every op of a graph, by op name (host-side, JSON).

```json
{"format": "placeto-jax-placement", "version": 1, "n_devices": 4,
 "placement": {"embed/w": 0, "embed/lookup": 0, "block_0/attn": 1}}
```

`placement` maps every op name of the graph to a device in [0, n_devices); ops appear in the
graph's op order, but a reader matches them by name, so a placement made on one copy of a model
reads onto another op graph of the same model whatever its op order. A placement of a coarsened
graph is expanded to the op graph before it is written (`PlacementGraph.expand`), so files always
name ops. Readers also accept the older unnamed forms, a list of N devices or
`{"placement": [...]}`, in the graph's op order.

Reading checks, naming the file and the op: every op of the graph is placed exactly once, no
name is unknown, every device is in range, and every co-location class of the graph is on one
device. Files are written atomically.
"""

from __future__ import annotations

import json
import os

import numpy as np

from placeto_jax.files import atomic_write
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.io import parse_json_file

FORMAT = "placeto-jax-placement"
VERSION = 1
FILE_KEYS = {"format", "version", "n_devices", "placement"}


def placement_to_dict(graph: Graph, placement, n_devices: int) -> dict:
    """The file's JSON object for `placement` ([N] ints) of `graph`."""
    devices = np.asarray(placement, dtype=np.int64)
    check_placement_of(graph, devices, n_devices)
    return {
        "format": FORMAT,
        "version": VERSION,
        "n_devices": int(n_devices),
        "placement": dict(zip(graph.names, devices.tolist(), strict=True)),
    }


def save_placement(path: str | os.PathLike, graph: Graph, placement, n_devices: int) -> None:
    """Write `placement` ([N] ints) of `graph` to `path`, ops by name."""
    data = json.dumps(placement_to_dict(graph, placement, n_devices), indent=1)
    with atomic_write(path) as file:
        file.write(data.encode())


REPORT_KEYS = {"placement", "n_devices", "makespan_us"}  # of `place`/`simulate --json` output


def load_placement(path: str | os.PathLike, graph: Graph, n_devices: int) -> np.ndarray:
    """[N] int64 device per op of `graph` from a placement file (named or in op order).
    ValueError names the file and the problem."""
    return parse_json_file(path, lambda doc: placement_from_dict(doc, graph, n_devices))


def placement_from_dict(doc: object, graph: Graph, n_devices: int) -> np.ndarray:
    """`load_placement` on a parsed document."""
    if isinstance(doc, dict) and "format" in doc:
        if doc.get("format") != FORMAT or doc.get("version") != VERSION:
            raise ValueError(
                f'expected "format": "{FORMAT}", "version": {VERSION}; got '
                f"{doc.get('format')!r}, version {doc.get('version')!r}"
            )
        extra = sorted(set(doc) - FILE_KEYS)
        if extra:
            raise ValueError(f"unknown field {extra[0]!r} in a placement file")
        if "n_devices" in doc and doc["n_devices"] != n_devices:
            raise ValueError(f"the placement is for {doc['n_devices']!r} devices, not {n_devices}")
        doc = doc.get("placement")
        if not isinstance(doc, dict):
            raise ValueError('"placement" must be an object of op name -> device')
    elif isinstance(doc, dict) and set(doc) == {"placement"}:
        doc = doc["placement"]
    elif isinstance(doc, dict) and set(doc) >= REPORT_KEYS:  # `place`/`simulate --json` output
        if doc["n_devices"] != n_devices:
            raise ValueError(f"the placement is for {doc['n_devices']!r} devices, not {n_devices}")
        doc = doc["placement"]
    if isinstance(doc, dict):
        devices = _by_name(doc, graph)
    elif isinstance(doc, list) and not all(_is_int(x) for x in doc):
        i = next(i for i, x in enumerate(doc) if not _is_int(x))
        raise ValueError(f"entry {i} of the placement list is {doc[i]!r}, not a device index")
    elif isinstance(doc, list):
        if len(doc) != graph.n_ops:
            raise ValueError(f"placement has {len(doc)} entries; the graph has {graph.n_ops} ops")
        devices = np.asarray(doc, dtype=np.int64)
    else:
        raise ValueError(
            "expected a placement file: an object of op name -> device, or a list of device "
            "indices in op order"
        )
    check_placement_of(graph, devices, n_devices)
    return devices


def check_placement_of(graph: Graph, devices: np.ndarray, n_devices: int) -> None:
    """ValueError naming the op for a device outside [0, n_devices), or naming the class and two
    of its ops for a co-location class split over devices."""
    bad = np.flatnonzero((devices < 0) | (devices >= n_devices))
    if bad.size:
        v = int(bad[0])
        raise ValueError(
            f"op {graph.names[v]!r} is placed on device {int(devices[v])}, outside [0, {n_devices})"
        )
    split = colocation_split(graph, devices)
    if split is not None:
        raise ValueError(split_message(graph, devices, split))


def colocation_split(graph: Graph, devices: np.ndarray) -> tuple[int, int] | None:
    """Two ops of one co-location class on different devices in placement(s) [..., N] (the
    class's smallest op and the first op apart from it, in the first such placement), or None."""
    classes = graph.colocation_classes
    first = np.full(int(classes.max()) + 1, -1, dtype=np.int64)
    first[classes[::-1]] = np.arange(graph.n_ops)[::-1]  # smallest op of every class
    leader = first[classes]
    apart = np.argwhere(devices != devices[..., leader])
    if apart.size == 0:
        return None
    v = int(apart[0][-1])
    return int(leader[v]), v


def split_message(graph: Graph, devices: np.ndarray, split: tuple[int, int]) -> str:
    """One line naming the two ops of `split` (from `colocation_split`) and their devices."""
    a, b = split
    rows = devices.reshape(-1, graph.n_ops)
    row = rows[np.flatnonzero(rows[:, a] != rows[:, b])[0]]
    return (
        f"ops {graph.names[a]!r} (device {int(row[a])}) and {graph.names[b]!r} (device "
        f"{int(row[b])}) are co-located (colocation class {int(graph.colocation[a])}) but "
        "placed on different devices"
    )


def _by_name(doc: dict, graph: Graph) -> np.ndarray:
    index = {name: v for v, name in enumerate(graph.names)}
    devices = np.zeros(graph.n_ops, dtype=np.int64)
    seen = np.zeros(graph.n_ops, dtype=bool)
    for name, device in doc.items():
        if name not in index:
            raise ValueError(f"op {name!r} is not in the graph ({graph.n_ops} ops)")
        if not _is_int(device):
            raise ValueError(f"op {name!r}: device must be an integer, got {device!r}")
        devices[index[name]] = device
        seen[index[name]] = True
    missing = [graph.names[v] for v in np.flatnonzero(~seen)[:3]]
    if missing:
        count = int(np.sum(~seen))
        raise ValueError(
            f"{count} ops of the graph have no device, e.g. {', '.join(map(repr, missing))}"
        )
    return devices


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
