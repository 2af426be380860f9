"""The matched-budget experiment (`placeto_jax.reproduce.matched`): Placeto trained on each
Table 1 cell and benchmark file, then placed by a named pipeline, against the best fast heuristic,
local search and the cross-entropy method at Placeto's number of evaluations.

Run: `python experiments/matched_budget.py --data ../shared/benchmarks/msr-fiddle` (`--help`).
"""

from placeto_jax.reproduce.matched import main

if __name__ == "__main__":
    raise SystemExit(main())
