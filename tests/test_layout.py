"""The architecture's import rules (docs/architecture.md), read from the source with `ast`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "placeto_jax"


def imported(path: Path) -> set[str]:
    """Every `placeto_jax...` module that `path` imports (absolute imports only)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
    return {n for n in names if n.startswith("placeto_jax")}


def modules(package: str) -> list[Path]:
    return sorted((SRC / package).rglob("*.py"))


@pytest.mark.parametrize(
    ("package", "allowed"),
    [
        ("placers", ("placers", "graphs", "sim", "cluster", "precision")),
        ("sim", ("sim", "graphs", "cluster", "precision")),
    ],
)
def test_a_package_imports_only_what_it_builds_on(package, allowed):
    prefixes = tuple(f"placeto_jax.{a}" for a in allowed)
    for path in modules(package):
        bad = {n for n in imported(path) if n != "placeto_jax" and not n.startswith(prefixes)}
        bad -= {f"placeto_jax.{a}" for a in allowed}
        assert not bad, f"{path.relative_to(SRC)} imports {sorted(bad)}"


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("rl", "placeto_jax.placers"),
        ("rl", "placeto_jax.stages"),
        ("rl", "placeto_jax.pipeline"),
        ("stages", "placeto_jax.pipeline"),
        ("stages", "placeto_jax.cli"),
        ("reproduce", "placeto_jax.cli"),
    ],
)
def test_a_package_does_not_import_what_builds_on_it(package, forbidden):
    for path in modules(package):
        bad = {n for n in imported(path) if n == forbidden or n.startswith(forbidden + ".")}
        assert not bad, f"{path.relative_to(SRC)} imports {sorted(bad)}"


def test_only_the_precision_module_touches_64_bit_mode():
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "precision.py":
            continue
        code = ast.unparse(ast.parse(path.read_text()))  # without comments and docstrings' text
        for needle in ("enable_x64(", "config.update('jax_enable_x64'", "jax_enable_x64 ="):
            assert needle not in code, f"{path.relative_to(SRC)} uses {needle}"


def test_no_removed_jax_tree_aliases():
    for path in sorted(SRC.rglob("*.py")):
        assert "jax.tree_map" not in path.read_text(), path.relative_to(SRC)
