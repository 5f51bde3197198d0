#!/usr/bin/env python3
"""Summarise `cargo bench --bench go_workloads` as a markdown table (stdlib only).

Reads <criterion dir>/<group>/<line>/new/estimates.json (mean point estimate, ns per op:
criterion's time per iteration, which the bench makes Go's wall time / all ops), where the
criterion dir is $CRITERION_HOME, else $CARGO_TARGET_DIR/criterion, else target/criterion at
the repository root. Prints:

    group | gomutex ns/op | std | parking_lot | gomutex/parking_lot | gomutex/std

and, if the bench wrote <criterion dir>/fairness.json, the TestMutexFairness table.

Usage: scripts/bench_summary.py [--go GO_BENCH_OUTPUT] [--dir CRITERION_DIR]
  --go FILE   output of `go test -run XXX -bench Mutex sync`: adds a "Go sync.Mutex" column
              and a gomutex/Go ratio.
"""

import argparse
import json
import os
import re
import sys
from pathlib import Path

GROUPS = [
    "Uncontended",
    "Mutex",
    "MutexSlack",
    "MutexWork",
    "MutexWorkSlack",
    "MutexNoSpin",
    "MutexSpin",
]
LINES = ["gomutex", "std", "parking_lot"]


def criterion_dir() -> Path:
    if os.environ.get("CRITERION_HOME"):
        return Path(os.environ["CRITERION_HOME"])
    if os.environ.get("CARGO_TARGET_DIR"):
        return Path(os.environ["CARGO_TARGET_DIR"]) / "criterion"
    return Path(__file__).resolve().parent.parent / "target" / "criterion"


def mean_ns(root: Path, group: str, line: str):
    path = root / group / line / "new" / "estimates.json"
    try:
        with open(path) as f:
            return float(json.load(f)["mean"]["point_estimate"])
    except (OSError, KeyError, ValueError):
        return None


def go_figures(path: str) -> dict:
    """BenchmarkMutexUncontended-2  195024422  5.708 ns/op  ->  {"Uncontended": 5.708}"""
    out = {}
    pat = re.compile(r"^Benchmark(\w+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op")
    with open(path) as f:
        for text in f:
            m = pat.match(text.strip())
            if not m:
                continue
            name = m.group(1)
            key = name[len("Mutex"):] if name == "MutexUncontended" else name
            out[key] = float(m.group(2))
    return out


def fmt(x):
    if x is None:
        return "—"
    return f"{x:.1f}" if x >= 100 else f"{x:.2f}"


def ratio(a, b):
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--go", help="output of `go test -run XXX -bench Mutex sync`")
    ap.add_argument("--dir", help="criterion output directory (default: see module doc)")
    args = ap.parse_args()

    root = Path(args.dir) if args.dir else criterion_dir()
    if not root.is_dir():
        print(f"no criterion results in {root} (run `cargo bench --bench go_workloads`)",
              file=sys.stderr)
        return 1
    go = go_figures(args.go) if args.go else None

    head = ["group", "gomutex ns/op", "std", "parking_lot", "gomutex/parking_lot",
            "gomutex/std"]
    if go is not None:
        head += ["Go sync.Mutex", "gomutex/Go"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    found = False
    for group in GROUPS:
        g, s, p = (mean_ns(root, group, line) for line in LINES)
        found |= any(v is not None for v in (g, s, p))
        row = [group, fmt(g), fmt(s), fmt(p), ratio(g, p), ratio(g, s)]
        if go is not None:
            row += [fmt(go.get(group)), ratio(g, go.get(group))]
        print("| " + " | ".join(row) + " |")
    if not found:
        print(f"(no estimates.json found under {root})", file=sys.stderr)

    fair = root / "fairness.json"
    if fair.is_file():
        with open(fair) as f:
            rows = json.load(f)
        print()
        print("TestMutexFairness scenario (victim: 10 × {sleep 100 µs; lock; unlock} "
              "against a greedy thread sleeping 100 µs inside the lock):")
        print()
        print("| lock | victim worst wait ms | mean of round worsts ms | total ms (max) "
              "| total ms (mean) | greedy locks/round | rounds | capped |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for lock, r in rows.items():
            print(f"| {lock} | {r['worst_ms']:.3f} | {r['worst_mean_ms']:.3f} | "
                  f"{r['total_max_ms']:.3f} | {r['total_mean_ms']:.3f} | "
                  f"{r['greedy_locks_mean']:.0f} | {r['rounds']} | {r['capped']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
