"""Graphs by name: a graph file path or a built-in graph spec (see `BUILTIN_GRAPHS`).

Graph files are the project's own format (`placeto_jax.graphs.io`, told apart by its `format`
field) or benchmark graphs (`placeto_jax.graphs.benchmark`, by a `nodes` or `maxFPGAs` field)."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from pathlib import Path

from placeto_jax.graphs import generators
from placeto_jax.graphs.benchmark import benchmark_from_dict
from placeto_jax.graphs.core import MAX_OPS, Graph
from placeto_jax.graphs.io import graph_from_dict, parse_json_file

BUILTIN_GRAPHS = """\
built-in graphs:
  example:diamond        the 4-op worked example of the simulator spec
  layered:N[:SEED]       random layered DAG of N ops (seed 0 by default)
  cnn[:MODULES[:SEED]]   Inception-like training graph (10 modules, seed 0 by default)
  zoo:MODEL              a traced Flax training step, grouped to 500 nodes and cached
                         (resnet50, transformer, bert_base, inception_v3, nmt, gnmt,
                         nasnet)
  family:F/I[:SEED]      graph I (0-31) of the ENAS-style family F (cifar10, ptb, nmt);
                         indices 0-23 are the train split, 24-31 the test split
                         (`load` also takes family:F[/SPLIT][:SEED] for a list of graphs)
anything else is read as a graph file (.json, or .json.gz for gzip): the placeto-jax format
(placeto_jax.graphs.io) or a benchmark graph (placeto_jax.graphs.benchmark)"""

_FORMS = (
    "example:diamond, layered:N[:SEED], cnn[:MODULES[:SEED]], zoo:MODEL, family:F/I[:SEED], "
    "or a graph file path"
)


def load(path_or_name: str | os.PathLike) -> Graph | list[tuple[str, Graph]]:
    """One loader: a path object is a graph file; a family or split name
    (`family:F[/SPLIT][:SEED]`, SPLIT one of train, test, all) is a list of (name, graph) in
    index order; any other string is one graph, resolved by `resolve_graph`."""
    if isinstance(path_or_name, os.PathLike):
        return load_file(path_or_name)
    if not isinstance(path_or_name, str):
        raise TypeError(f"a graph is named by a str or a path, got {type(path_or_name).__name__}")
    match = _GROUP.fullmatch(path_or_name)
    if match:
        return _family_group(path_or_name, *match.groups())
    return resolve_graph(path_or_name)


def names() -> list[str]:
    """Every built-in name without arguments: `example:diamond`, `zoo:MODEL`, and per family
    `family:F`, its splits `family:F/SPLIT` and its graphs `family:F/0` .. `family:F/31`."""
    from placeto_jax.graphs import families, zoo  # import Flax and optax

    listed = ["example:diamond", *(f"zoo:{model}" for model in zoo.ZOO_MODELS)]
    for family in families.FAMILIES:
        listed.append(f"family:{family}")
        listed += [f"family:{family}/{split}" for split in families.SPLITS if split != "all"]
        listed += [f"family:{family}/{i}" for i in range(families.FAMILY_SIZE)]
    return listed


def load_file(path: str | os.PathLike) -> Graph:
    """A graph file of either format. ValueError names the file and the problem."""
    return parse_json_file(path, _graph_from_any)


def _graph_from_any(doc: object) -> Graph:
    """A parsed graph file of either format (told apart by its fields)."""
    if isinstance(doc, dict) and "format" not in doc and ("nodes" in doc or "maxFPGAs" in doc):
        return benchmark_from_dict(doc).graph
    return graph_from_dict(doc)


def resolve_graph(spec: str) -> Graph:
    """The graph named by `spec`: a built-in form (which takes precedence; write `./cnn` for a
    file called `cnn`) or a graph file. ValueError names the spec and lists the forms."""
    if not isinstance(spec, str):
        raise TypeError(f"a graph spec must be a str, got {type(spec).__name__}")
    kind, colon, rest = spec.partition(":")
    if kind in _BUILDERS:
        args = rest.split(":") if colon else []
        try:
            return _BUILDERS[kind](args)
        except ValueError as err:
            raise _bad(spec, err) from None
    if not Path(spec).is_file():
        raise ValueError(f"graph {spec!r} is not a built-in graph or an existing file; {_FORMS}")
    return load_file(spec)


def _family_group(
    spec: str, family: str, split: str | None, seed: str | None
) -> list[tuple[str, Graph]]:
    from placeto_jax.graphs import families  # imports Flax and optax, so only when asked

    try:
        return families.family_graphs(family, split or "all", int(seed or 0))
    except ValueError as err:
        raise _bad(spec, err) from None


def _bad(spec: str, err: ValueError) -> ValueError:
    """The error for a malformed built-in spec; zoo and family names suggest close matches."""
    message = f"bad graph {spec!r}: {err}; expected {_FORMS}"
    if spec.startswith(("zoo:", "family:")):
        close = difflib.get_close_matches(spec, [n for n in names() if n != spec], n=3)
        if close:
            message += f"; did you mean {', '.join(close)}?"
    return ValueError(message)


def _example(args: list[str]) -> Graph:
    if args != ["diamond"]:
        raise ValueError("the only example is example:diamond")
    return generators.diamond()


def _layered(args: list[str]) -> Graph:
    if len(args) not in (1, 2):
        raise ValueError("layered takes N and an optional SEED")
    seed = _integer(args[1], "SEED", 0) if len(args) == 2 else 0
    n = _integer(args[0], "N", 1)
    if n > MAX_OPS:
        raise ValueError(f"N must be at most {MAX_OPS:,} (the largest graph), got {n:,}")
    return generators.layered(n, seed=seed)


def _cnn(args: list[str]) -> Graph:
    if len(args) > 2:
        raise ValueError("cnn takes an optional MODULES and SEED")
    modules = _integer(args[0], "MODULES", 1) if args else 10
    if modules > MAX_CNN_MODULES:
        raise ValueError(f"MODULES must be at most {MAX_CNN_MODULES:,}, got {modules:,}")
    seed = _integer(args[1], "SEED", 0) if len(args) == 2 else 0
    return generators.branchy_cnn(modules, seed)


def _zoo(args: list[str]) -> Graph:
    from placeto_jax.graphs import zoo  # imports Flax and optax, so only when asked

    if len(args) != 1:
        raise ValueError(f"zoo takes one model name: {', '.join(zoo.ZOO_MODELS)}")
    return zoo.zoo_graph(args[0])


def _family(args: list[str]) -> Graph:
    from placeto_jax.graphs import families  # imports Flax and optax, so only when asked

    group = _GROUP.fullmatch("family:" + ":".join(args))
    if group and group[2] in (None, *families.SPLITS):
        raise ValueError(
            f"{'family:' + ':'.join(args)} names a list of graphs: name one, family:F/I with I "
            "in 0..31 (or load the list from Python with placeto_jax.graphs.load)"
        )
    family, slash, index = args[0].partition("/") if args else ("", "", "")
    if not slash or len(args) > 2:
        raise ValueError(f"family takes F/I[:SEED] with F one of {', '.join(families.FAMILIES)}")
    seed = _integer(args[1], "SEED", 0) if len(args) == 2 else 0
    return families.family_graph(family, _integer(index, "I", 0), seed=seed)


def _integer(text: str, what: str, minimum: int) -> int:
    if not re.fullmatch(r"[0-9]+", text) or int(text) < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {text!r}")
    return int(text)


MAX_CNN_MODULES = 10_000  # about 200,000 ops with the backward pass
_GROUP = re.compile(r"family:([^/:]+)(?:/([a-z]+))?(?::([0-9]+))?")
_BUILDERS: dict[str, Callable[[list[str]], Graph]] = {
    "example": _example,
    "layered": _layered,
    "cnn": _cnn,
    "zoo": _zoo,
    "family": _family,
}
