"""Generate docs/results.md, the index of results/: per folder, each JSON result file with the
commit it measured (from its "provenance" block, or an older block that recorded the commit;
otherwise labelled "not recorded" with the commit that last changed the file), the command that
produced it when recorded, and a one-line summary. The output depends only on results/ and git
history (sorted, no generation time), so a rerun without new results changes nothing.

Run: `make results-doc` (or `python experiments/results_doc.py [--results DIR] [--out FILE]`)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

from placeto_jax.files import atomic_write

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = {"checkpoints", "tb"}  # run artifacts (ignored by git), not results
KEYS_SHOWN = 8


def git_last_commit(path: Path) -> str | None:
    """'<short hash> <date>' of the last commit that changed `path`, or None (never committed,
    or no git)."""
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%h %ad", "--date=short", "--", path.name],
            cwd=path.parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def code(text: str) -> str:
    """`text` as Markdown inline code (a longer fence when it holds backticks)."""
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


def measured(doc: object, path: Path) -> tuple[str, str | None]:
    """(what the index says about the commit `doc` measured, its command line or None)."""
    if isinstance(doc, dict):
        prov = doc.get("provenance")
        if isinstance(prov, dict):
            sha = prov.get("commit")
            where = code(sha[:7]) if sha else "none (written outside a git checkout)"
            dirty = " with uncommitted changes" if prov.get("dirty") else ""
            return f"{where}{dirty} (recorded)", prov.get("command")
        # older blocks that kept the commit only: `placeto-jax reproduce`'s run header ("git",
        # with the files modified since it) and the benchmarks' "machine"
        for name, key in (("git", "commit"), ("machine", "git_commit")):
            block = doc.get(name)
            if isinstance(block, dict) and block.get(key):
                dirty = " with uncommitted changes" if block.get("modified") else ""
                note = f"recorded in its `{name}` block; no command line"
                return f"{code(block[key][:7])}{dirty} ({note})", None
    last = git_last_commit(path)
    if last is None:
        return "not recorded; not committed", None
    sha, date = last.split(" ", 1)
    return f"not recorded; last committed at {code(sha)} ({date})", None


def summary(doc: object) -> str:
    """One line about what `doc` holds: its rows, or its top-level keys."""
    if isinstance(doc, list):
        first = doc[0] if doc and isinstance(doc[0], dict) else None
        columns = f": {', '.join(list(first)[:KEYS_SHOWN])}" if first else ""
        return f"{rows(len(doc))}{columns}"
    if not isinstance(doc, dict):
        return f"a JSON {type(doc).__name__}"
    if "experiment" in doc and "preset" in doc:
        return f"run header: experiment `{doc['experiment']}`, preset `{doc['preset']}`"
    keys = [k for k in doc if k != "provenance"]
    shown = ", ".join(keys[:KEYS_SHOWN]) + (", ..." if len(keys) > KEYS_SHOWN else "")
    table = doc.get("rows")
    return (f"{rows(len(table))}; " if isinstance(table, list) else "") + f"keys: {shown}"


def rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def readme_line(folder: Path) -> str | None:
    """The first non-blank line of `folder/README.md` without its heading marks, or None."""
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    for line in readme.read_text().splitlines():
        if line.strip():
            return line.lstrip("#").strip()
    return None


def result_files(folder: Path) -> list[Path]:
    """The JSON files under `folder` (sorted), run artifacts left out."""
    found = (p for p in folder.rglob("*.json") if p.is_file())
    return sorted(p for p in found if not ARTIFACTS & set(p.relative_to(folder).parts))


def entry(path: Path, folder: Path, out_dir: Path) -> list[str]:
    """The Markdown lines about one result file."""
    link = Path(os.path.relpath(path, out_dir)).as_posix()
    name = path.relative_to(folder).as_posix()
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return [f"- [`{name}`]({link}): not readable as JSON"]
    commit, command = measured(doc, path)
    lines = [f"- [`{name}`]({link}): {summary(doc)}", f"  - measured: {commit}"]
    if command:
        lines.append(f"  - command: {code(command)}")
    return lines


def render(results: Path, out: Path) -> str:
    """docs/results.md's text for the folder `results`, linked relative to `out`."""
    out_dir = out.parent.resolve()
    results = results.resolve()
    lines = [
        "# Results",
        "",
        "Generated by `make results-doc` (experiments/results_doc.py) from results/: do not edit",
        "by hand; rerun it after adding or changing results.",
        "",
        "Each JSON result is listed with the commit it measured. *(recorded)*: the file's own",
        '"provenance" block (commit, command line, library versions), written by',
        "`placeto_jax.files.write_result`; *recorded in its `git`/`machine` block*: an older",
        "file that kept only the commit; *not recorded*: the file does not say, and the commit",
        "that last changed it is only an upper bound on the code it measured.",
    ]
    sections = [(f, result_files(f)) for f in sorted(results.iterdir()) if f.is_dir()]
    top = [p for p in sorted(results.glob("*.json")) if p.is_file()]
    if top:
        sections.insert(0, (results, top))
    for folder, files in sections:
        title = "results/" if folder == results else f"results/{folder.name}/"
        lines += ["", f"## {title}", ""]
        about = readme_line(folder) if folder != results else None
        if about:
            link = Path(os.path.relpath(folder / "README.md", out_dir)).as_posix()
            lines += [f"[README]({link}): {about}", ""]
        if not files:
            lines.append("(no JSON files)")
        for path in files:
            lines += entry(path, folder, out_dir)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results.md")
    args = parser.parse_args(argv)
    text = render(args.results, args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(args.out) as file:
        file.write(text.encode())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
