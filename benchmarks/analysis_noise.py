"""Issue 39: the analysis-noise scenarios on the committed TFX fixtures, each checked `--rounds` times.

    .venv/bin/python benchmarks/analysis_noise.py --rounds 3

Per scenario (fixtures/scenarios/tfx_penguin_*, tfx_module_reanalyzed_noise, tfx_raw_fare_one_in_a_million):
the exit code, the records per tier (matched, within tolerance and how many of those only analysis noise
explains, diverged by cause), each feature's noise bound, and every round's wall time and CPU seconds (the
`parity check` process and its children, from `os.wait4`). The counts must be the same in every round (they
are the report's; a difference stops the run). Nothing is compared with a baseline here: the wall time is the
check's own, on a shared machine, so every round is printed with the spread.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fresh_check import fresh_check  # noqa: E402 (beside this script)
SCENARIOS = ("tfx_penguin_reanalyzed_vs_served", "tfx_penguin_reanalyzed_vs_bug", "tfx_penguin_served_vs_served_bug",
             "tfx_penguin_eval_split", "tfx_module_reanalyzed_noise", "tfx_raw_fare_one_in_a_million")


def _check(name: str, out_dir: str) -> tuple[int, float, float, dict]:
    """(exit code, wall seconds, CPU seconds, report.json) of one scenario's `parity check` in a fresh process."""
    return fresh_check(os.path.join(ROOT, "fixtures", "scenarios", name, "parity.yaml"), out_dir)


def _tiers(report: dict) -> dict:
    records, noise = report["records"], report.get("analysis_noise") or {}
    return {"paired": records["paired"], "matched": records["matched"],
            "within_tolerance": records["within_tolerance"], "analysis_noise": noise.get("records", 0),
            "diverged": records["diverged"], "causes": {c["cause"]: c["records"] for c in report["causes"]},
            "bounds": {f["name"]: (f["abs"], f["rel"], f["records"]) for f in noise.get("features", [])}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="checks per scenario, fixed before the run")
    args = parser.parse_args()
    print("| scenario | exit | paired | matched | within tolerance (noise) | diverged (causes) | noise bound per "
          "feature: abs + rel·|y| (values) | wall s per round | CPU s per round |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="parity-noise-bench-") as work:
        for name in SCENARIOS:
            walls, cpus, seen = [], [], None
            for _ in range(args.rounds):
                code, wall, cpu, report = _check(name, os.path.join(work, name))
                tiers = _tiers(report)
                if seen is not None and (code, tiers) != seen:
                    raise SystemExit(f"{name}: a round gave other counts: {tiers} after {seen[1]}")
                seen = (code, tiers)
                walls.append(wall)
                cpus.append(cpu)
            code, tiers = seen  # type: ignore[misc]
            causes = ", ".join(f"{c} {n}" for c, n in tiers["causes"].items()) or "none"
            bounds = "; ".join(f"{f}: {a:.3g} + {r:.3g} ({n})" for f, (a, r, n) in tiers["bounds"].items()) or "none"
            spread = f" (median {statistics.median(walls):.1f})"
            print(f"| {name} | {code} | {tiers['paired']} | {tiers['matched']} | {tiers['within_tolerance']} "
                  f"({tiers['analysis_noise']}) | {tiers['diverged']} ({causes}) | {bounds} | "
                  f"{', '.join(f'{w:.1f}' for w in walls)}{spread} | {', '.join(f'{c:.1f}' for c in cpus)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
