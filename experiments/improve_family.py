"""Improve mode on one family with overrides of the family policy's config: the family part of
`placeto-jax reproduce improve --quick`, for trying one lever without running the others.

Trains the paper policy and the start-trained policy on the first 12 train graphs of the
family (the quick preset's tiny config plus `--set` overrides), places the 8 test graphs with
every variant of `reproduce.improve.VARIANTS` from `--start`, and prints, per variant, the
share of test graphs strictly faster than their start and the mean gain; writes JSON atomically.

Run: `python experiments/improve_family.py --family cifar10 --start best-op
--set env.reward_graph=ops`
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import jax

from placeto_jax.files import write_result
from placeto_jax.reproduce import improve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="cifar10", choices=("cifar10", "ptb", "nmt"))
    parser.add_argument("--start", default="best-op", choices=improve.IMPROVE_STARTS)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config overrides of the family policies")  # fmt: skip
    parser.add_argument("--out", default=None, help="JSON (default results/improve-family/)")
    args = parser.parse_args(argv)
    quick = improve.PRESETS["quick"]
    settings = dataclasses.replace(
        quick, families=(args.family,), start=args.start, family=(*quick.family, *args.set)
    )
    improve.family_config(settings)  # bad overrides fail here, before any work
    began = time.perf_counter()
    outcomes = improve.family_outcomes(args.family, settings, jax.random.key(settings.seed))
    seconds = time.perf_counter() - began
    summaries = {v.name: improve.summary(outcomes, v.name) for v in improve.VARIANTS}
    print(f"{args.family} from {args.start}, overrides {args.set or 'none'}: {seconds:.0f} s")
    print(f"{'variant':<42} {'strictly faster':>15} {'mean gain':>10}")
    for name, found in summaries.items():
        print(f"{name:<42} {found['strictly faster']:>15.0%} {found['mean gain']:>+10.2%}")
    tag = "-".join(s.replace("=", "-") for s in args.set) or "defaults"
    out = Path(args.out or f"results/improve-family/{args.family}-{args.start}-{tag}.json")
    rows = [
        {"graph": o.graph, "decisions": o.decisions, "start": o.start, "start ms": o.start_ms}
        | {v: p.makespan / improve.MS for v, p in o.placed.items()}
        for o in outcomes
    ]
    payload = {"family": args.family, "start": args.start, "overrides": args.set,
               "seconds": seconds, "summary": summaries, "rows": rows}  # fmt: skip
    write_result(out, payload)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
