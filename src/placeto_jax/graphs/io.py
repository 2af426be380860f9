"""The placeto-jax graph file format (version 1): `save_graph` and `load_graph`.

A graph file is one JSON object (UTF-8); a name ending in `.gz` (e.g. `model.json.gz`) means the
JSON is gzip-compressed. Op attributes are stored column by column, one list per field, all of
length N (the number of ops); op i is entry i of every list.

```json
{
  "format": "placeto-jax-graph",
  "version": 1,
  "ops": {
    "name":        ["a", "b", "c", "d"],
    "cost_us":     [100.0, 50.0, 30.0, 10.0],
    "out_bytes":   [76000.0, 7600.0, 7600.0, 0.0],
    "param_bytes": [0.0, 0.0, 0.0, 0.0],
    "op_type":     ["conv", "relu", "relu", "add"],
    "colocation":  [-1, 0, 0, -1]
  },
  "edges": [[0, 1], [0, 2], [1, 3], [2, 3]]
}
```

| field | type | meaning |
|---|---|---|
| `format` | string | always `"placeto-jax-graph"` |
| `version` | integer | `1`; readers reject versions they do not know |
| `ops.name` | N strings | unique op names |
| `ops.cost_us` | N numbers ≥ 0 | compute time in µs on a device of speed 1.0 |
| `ops.out_bytes` | N numbers ≥ 0 | bytes of the op's output tensor |
| `ops.param_bytes` | N numbers ≥ 0 | bytes resident on the op's device for the whole step |
| `ops.op_type` | N strings or null | op kind, e.g. `"dot_general"` (optional) |
| `ops.colocation` | N integers or null | co-location group (optional), see below |
| `ops.kernels` | N integers ≥ 0 or null | kernels each op runs back to back (optional, below) |
| `edges` | `[producer, consumer]` pairs | 0-based op indices; consumer reads producer's output |
| `costs_for` | `{"preset": P, "speed": s}` or null | optional: costs priced on preset P (below) |

Costs are always µs on a device of speed 1.0. `costs_for` says where they come from: a graph
traced with the roofline of preset P of speed s holds P's times x s, so that simulating it on P
gives P's times and on another preset rescales once, by the ratio of the speeds.

`op_type`, `colocation` and `kernels` may be null or left out. Ops that share a `colocation`
id ≥ 0 must be placed on one device; -1 means no group. `kernels` counts the kernels an op runs
back to back, `delta1` apart (null: one per op of nonzero cost, none for a zero-cost op); a
grouped op holds its members' kernels, so that on one device it takes as long as they do.

The graph must be a DAG: no self-loops or cycles; duplicate edges are merged. Other fields are
rejected. Numbers are written with Python's shortest round-trip repr, so save then load
reproduces every value exactly. Files are written atomically (temp file, fsync, rename).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import reprlib
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from placeto_jax.files import atomic_write
from placeto_jax.graphs.core import Graph

T = TypeVar("T")

FORMAT = "placeto-jax-graph"
MAX_FILE_BYTES = 2 * 2**30  # files are parsed whole: larger ones are refused before reading
VERSION = 1
_TOP_FIELDS = ("format", "version", "ops", "edges", "costs_for")
_OP_FIELDS = ("name", "cost_us", "out_bytes", "param_bytes", "op_type", "colocation", "kernels")
_JSON_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}


def save_graph(graph: Graph, path: str | os.PathLike) -> None:
    """Write `graph` to `path` in the format above (gzip when the name ends in `.gz`)."""
    if not isinstance(graph, Graph):
        raise TypeError(f"save_graph writes a placeto_jax.Graph, got {type(graph).__name__}")
    data = _dumps(graph_to_dict(graph)).encode()
    if _is_gzip(path):
        data = gzip.compress(data, mtime=0)
    with atomic_write(path) as file:
        file.write(data)


def load_graph(path: str | os.PathLike) -> Graph:
    """Read a graph file. Raises ValueError naming the file and the problem."""
    return parse_json_file(path, graph_from_dict)


def parse_json_file(path: str | os.PathLike, parse: Callable[[object], T]) -> T:
    """`parse` the JSON document in `path`; any ValueError gets the file name in front."""
    doc = read_json(path)
    try:
        return parse(doc)
    except ValueError as err:
        raise ValueError(f"{os.fspath(path)}: {err}") from None


def graph_to_dict(graph: Graph) -> dict:
    """The file's JSON object for `graph`."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "ops": {
            "name": list(graph.names),
            "cost_us": graph.cost.tolist(),
            "out_bytes": graph.out_bytes.tolist(),
            "param_bytes": graph.param_bytes.tolist(),
            "op_type": None if graph.op_types is None else list(graph.op_types),
            "colocation": None if graph.colocation is None else graph.colocation.tolist(),
            "kernels": None if graph.kernels is None else graph.kernels.tolist(),
        },
        "edges": graph.edges.tolist(),
        "costs_for": None
        if graph.costs_for is None
        else {"preset": graph.costs_for[0], "speed": graph.costs_for[1]},
    }


def graph_from_dict(doc: object) -> Graph:
    """Validate a parsed file and build its Graph; ValueError names the first problem."""
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object at the top level, got {_kind(doc)}")
    _check_fields(doc, _TOP_FIELDS, _TOP_FIELDS[:4], "")
    if doc.get("format") != FORMAT:
        raise ValueError(f'"format" is {_short(doc.get("format"))}, expected "{FORMAT}"')
    version = doc.get("version")
    if not _is_int(version) or version != VERSION:
        raise ValueError(f'unsupported "version" {_short(version)}; this reader reads {VERSION}')
    ops = doc.get("ops")
    if not isinstance(ops, dict):
        raise ValueError(f'"ops" must be an object of per-op lists, got {_kind(ops)}')
    _check_fields(ops, _OP_FIELDS, _OP_FIELDS[:4], "ops.")
    names = _column(ops, "name", "strings", _is_str)
    n = len(names)
    return Graph.from_edges(
        cost=_column(ops, "cost_us", "finite numbers", _is_number, n),
        out_bytes=_column(ops, "out_bytes", "finite numbers", _is_number, n),
        edges=_edges(doc.get("edges")),
        param_bytes=_column(ops, "param_bytes", "finite numbers", _is_number, n),
        names=names,
        op_types=_column(ops, "op_type", "strings", _is_str, n, optional=True),
        colocation=_column(ops, "colocation", "integers", _is_int, n, optional=True),
        costs_for=_costs_for(doc.get("costs_for")),
        kernels=_column(ops, "kernels", "integers", _is_int, n, optional=True),
    )


def _costs_for(value: object) -> tuple[str, float] | None:
    """The optional "costs_for" field: {"preset": name, "speed": number > 0} or null."""
    if value is None:
        return None
    if (
        not isinstance(value, dict)
        or set(value) != {"preset", "speed"}
        or not _is_str(value["preset"])
        or not _is_number(value["speed"])
    ):
        expected = '{"preset": name, "speed": number}'
        raise ValueError(f'"costs_for" must be {expected}, got {_short(value)}')
    return (value["preset"], float(value["speed"]))


# ---------------------------------------------------------------------- helpers
def _dumps(doc: dict) -> str:
    """JSON with one line per top-level field and per op column (readable, diff-friendly)."""

    def dump(x: object) -> str:
        return json.dumps(x, ensure_ascii=False, allow_nan=False, separators=(",", ":"))

    ops = ",\n".join(f"    {dump(k)}: {dump(v)}" for k, v in doc["ops"].items())
    return (
        f'{{\n  "format": {dump(doc["format"])},\n  "version": {dump(doc["version"])},\n'
        f'  "ops": {{\n{ops}\n  }},\n  "edges": {dump(doc["edges"])},\n'
        f'  "costs_for": {dump(doc["costs_for"])}\n}}\n'
    )


def read_json(path: str | os.PathLike) -> object:
    """Parse a JSON file (gzip-compressed when the name ends in `.gz`); ValueError names it."""
    try:
        size = Path(path).stat().st_size
        if size > MAX_FILE_BYTES:
            raise ValueError(
                f"{path}: {size / 2**30:.1f} GiB is more than the {MAX_FILE_BYTES / 2**30:.0f} GiB "
                "a graph or placement file may have"
            )
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except OSError as err:
        raise ValueError(f"{path}: cannot read the file ({err.strerror or err})") from None
    if _is_gzip(path):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise ValueError(f"{path}: not a valid gzip file ({err})") from None
    try:
        return json.loads(raw, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object as a dict; ValueError naming a key that appears twice (JSON would keep the
    last silently)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} appears twice in one object")
        out[key] = value
    return out


def _is_gzip(path: str | os.PathLike) -> bool:
    return os.fspath(path).endswith(".gz")


def _check_fields(
    obj: dict, known: tuple[str, ...], required: tuple[str, ...], prefix: str
) -> None:
    unknown = [k for k in obj if k not in known]
    if unknown:
        raise ValueError(f'unknown field "{prefix}{unknown[0]}"; expected {", ".join(known)}')
    missing = [k for k in required if k not in obj]
    if missing:
        raise ValueError(f'missing field "{prefix}{missing[0]}"')


def _column(
    ops: dict,
    key: str,
    label: str,
    check: Callable[[object], bool],
    n: int | None = None,
    optional: bool = False,
) -> list | None:
    values = ops.get(key)
    if values is None and optional:
        return None
    if not isinstance(values, list):
        raise ValueError(f'"ops.{key}" must be a list of {label}, got {_kind(values)}')
    bad = next((i for i, x in enumerate(values) if not check(x)), None)
    if bad is not None:
        raise ValueError(
            f'"ops.{key}" must be a list of {label}; entry {bad} is {_short(values[bad])}'
        )
    if n is not None and len(values) != n:
        raise ValueError(f'"ops.{key}" has {len(values)} entries; "ops.name" has {n}')
    return values


def _edges(edges: object) -> list:
    if not isinstance(edges, list):
        raise ValueError(
            f'"edges" must be a list of [producer, consumer] pairs, got {_kind(edges)}'
        )
    for i, e in enumerate(edges):
        if not (isinstance(e, list) and len(e) == 2 and all(_is_int(x) for x in e)):
            raise ValueError(
                f'"edges" entry {i} must be [producer, consumer] op indices, got {_short(e)}'
            )
    return edges


def _is_str(x: object) -> bool:
    return isinstance(x, str)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: object) -> bool:
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def _kind(x: object) -> str:
    """How JSON calls the value's type."""
    if x is None:
        return "null"
    return _JSON_KINDS.get(type(x), "a number")


def _short(x: object) -> str:
    return reprlib.repr(x)
