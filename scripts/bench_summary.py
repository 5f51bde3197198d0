#!/usr/bin/env python3
"""Summarise gomutex's benchmarks (benches/, its own crate) as markdown tables (stdlib only).

Reads, from the bench crate's target dir (benches/target, or $CARGO_TARGET_DIR):
  * steady.json      `cargo bench --bench steady` (steady contention: threads loop until a
                     stop flag; medians of alternating rounds);
  * criterion/       `cargo bench --bench go_workloads` (grain-based, Go's RunParallel budget):
                     <group>/<line>/new/estimates.json, mean point estimate, ns/op; the
                     criterion dir is $CRITERION_HOME if set; plus criterion/fairness.json;
  * shm_locks.json   `cargo bench --bench shm_locks` (forked processes, steady loop).
Whatever is missing is left out ("—"). Prints:

  1. one table of Go's seven workloads, both harnesses side by side (ns/op, ratios
     gomutex/parking_lot and gomutex/std), Go's figures in a column with --go; then the
     Condvar producer/consumer rows of the steady harness (ns/item);
  2. the cross-process table: ShmMutex against process-shared pthread (plain, robust);
  3. the TestMutexFairness table, if go_workloads wrote it.

Usage: scripts/bench_summary.py [--go GO_BENCH_OUTPUT] [--target DIR] [--dir CRITERION_DIR]
                                [--steady JSON] [--shm JSON]
                                [--load-steady JSON...] [--load-shm JSON...]
  --go FILE   output of `go test -run XXX -bench Mutex sync -benchtime 0.5s`: adds a
              "Go" column and gomutex/Go (steady harness).
  --load-steady / --load-shm FILE...: instead of the tables above, one table per harness with a
              column group per file, headed by the load that file was taken under (its "busy"
              field: STEADY_BUSY / SHM_LOCKS_BUSY, busy-looping processes beside every round), e.g.
              idle, 1 busy, 2 busy. Every figure's load is in its column head.

The loaded table (issue 27; one file per load, same filters):
  cd benches && for b in 0 1 2; do STEADY_BUSY=$b STEADY_LOCKS=gomutex,parking_lot \
      STEADY_JSON=target/steady-busy$b.json cargo bench --bench steady -- =Mutex =MutexSlack \
      =MutexWork =MutexWorkSlack; SHM_LOCKS_BUSY=$b SHM_LOCKS_JSON=target/shm-busy$b.json \
      cargo bench --bench shm_locks -- --procs 2,8 gomutex-shm pthread/ floor atomic; done; cd .. \
    && python3 scripts/bench_summary.py --load-steady benches/target/steady-busy{0,1,2}.json \
      --load-shm benches/target/shm-busy{0,1,2}.json

The full table (about 7 minutes on 2 cores; take it on an idle machine, check `uptime`):
  cd benches && cargo bench --bench steady && cargo bench --bench go_workloads \
    && cargo bench --bench shm_locks && cd .. \
    && go test -run XXX -bench Mutex sync -benchtime 0.5s > benches/target/go-mutex.txt \
    && python3 scripts/bench_summary.py --go benches/target/go-mutex.txt
"""

import argparse
import json
import os
import re
import statistics
import sys
from pathlib import Path

WORKLOADS = [
    "Uncontended",
    "Mutex",
    "MutexSlack",
    "MutexWork",
    "MutexWorkSlack",
    "MutexNoSpin",
    "MutexSpin",
    "MutexPinned",  # not Go's: Mutex with each thread pinned to its own CPU
]
LOCKS = ["gomutex", "std", "parking_lot"]
# Measured beside the locks where there is work outside the lock: a private lock per thread or
# process (nobody waits), and one shared fetch_add per op in place of the lock.
FLOORS = ["floor", "atomic"]
ROOT = Path(__file__).resolve().parent.parent


def target_dir() -> Path:
    if os.environ.get("CARGO_TARGET_DIR"):
        return Path(os.environ["CARGO_TARGET_DIR"])
    return ROOT / "benches" / "target"


def load_json(path: Path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def criterion_mean(root: Path, group: str, line: str):
    data = load_json(root / group / line / "new" / "estimates.json")
    try:
        return float(data["mean"]["point_estimate"])
    except (TypeError, KeyError, ValueError):
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
            key = "Uncontended" if name == "MutexUncontended" else name
            out[key] = float(m.group(2))
    return out


def fmt(x):
    if x is None:
        return "—"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def ratio(a, b):
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def rt_range(samples) -> str:
    """The line round-trip probes of a row as "min–max" ns, "—" without any: on a VM the
    placement of the two vCPUs moves every contended figure, so each row says where it ran."""
    if not samples:
        return "—"
    return f"{min(samples):.0f}–{max(samples):.0f}"


def paired(a, b) -> str:
    """The median of the per-round ratios a[r] / b[r] (samples in round order), formatted: runs
    of one round are seconds apart and share the vCPU placement, which can flip within a
    sitting and move every contended figure; a ratio of two medians could pair one lock's
    near-placement runs with another's far ones."""
    if not a or not b:
        return "—"
    return f"{statistics.median(x / y for x, y in zip(a, b) if y):.2f}"


def steady_medians(data) -> dict:
    """{case name: (threads, {lock: median}, line round trips, {other: gomutex/other})} from
    steady.json; the floors (`FLOORS`) are among the locks, and the ratios are medians of
    per-round ratios (`paired`)."""
    out = {}
    for case in (data or {}).get("cases", []):
        meds = {lock: statistics.median(case[lock]) if case.get(lock) else None
                for lock in LOCKS + FLOORS}
        ratios = {other: paired(case.get("gomutex"), case.get(other))
                  for other in ["std", "parking_lot"] + FLOORS}
        out[case["name"]] = (case.get("threads", ""), meds, case.get("line_round_trip_ns"),
                             ratios)
    return out


def print_inprocess(steady, steady_meta, crit_root, go):
    have_crit = crit_root.is_dir()
    print("## In-process: Go's sync.Mutex workloads (ns/op)")
    print()
    if steady_meta:
        print(f"steady: threads loop until a stop flag, {steady_meta['duration_ms']} ms per run, "
              f"median of {steady_meta['rounds']} alternating rounds; "
              "grain: criterion, Go's RunParallel iteration budget in ~100 µs grains; "
              "floor: the steady loop with a lock per thread (nobody waits), atomic: with one shared "
              "fetch_add per op in place of the lock (the line moves, nobody waits), for the "
              "workloads with work outside the lock; steady ratios: medians of per-round "
              "ratios.")
        print(f"steady load: {load_label(steady_meta)}.")
        print()
    head = ["workload", "threads"]
    if go is not None:
        head += ["Go"]
    head += ["steady gomutex", "std", "parking_lot", "floor", "atomic", "gomutex/parking_lot",
             "gomutex/std", "gomutex/floor", "gomutex/atomic"]
    if go is not None:
        head += ["gomutex/Go"]
    head += ["grain gomutex", "std", "parking_lot", "gomutex/parking_lot", "gomutex/std"]
    head += ["steady line RT ns"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---", "---"] + ["---:"] * (len(head) - 2)) + "|")
    for w in WORKLOADS:
        threads, s, rt, rat = steady.get(w, ("", {}, None, {}))
        sg, ss, sp = (s.get(lock) for lock in LOCKS)
        if have_crit:
            cg, cs, cp = (criterion_mean(crit_root, w, lock) for lock in LOCKS)
        else:
            cg = cs = cp = None
        row = [w, threads or "—"]
        g = go.get(w) if go is not None else None
        if go is not None:
            row += [fmt(g)]
        row += [fmt(sg), fmt(ss), fmt(sp)] + [fmt(s.get(f)) for f in FLOORS]
        row += [rat.get(other, "—") for other in ["parking_lot", "std"] + FLOORS]
        if go is not None:
            row += [ratio(sg, g)]
        row += [fmt(cg), fmt(cs), fmt(cp), ratio(cg, cp), ratio(cg, cs), rt_range(rt)]
        print("| " + " | ".join(row) + " |")

    cv = [(name, v) for name, v in steady.items() if name.startswith("condvar/")]
    if cv:
        print()
        print("## In-process: Mutex + Condvar bounded queue, steady harness (ns/item)")
        print()
        print("case: producers p, consumers c, slots s; `one` = notify_one on every push/pop, "
              "`all` = notify_all on the empty/full transitions only.")
        print()
        print("| case | threads | gomutex | std | parking_lot | gomutex/parking_lot "
              "| gomutex/std | line RT ns |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for name, (threads, s, rt, rat) in cv:
            g, st, p = (s.get(lock) for lock in LOCKS)
            print(f"| {name.removeprefix('condvar/')} | {threads} | {fmt(g)} | {fmt(st)} | "
                  f"{fmt(p)} | {rat['parking_lot']} | {rat['std']} | {rt_range(rt)} |")


# shm_locks' mutex workloads.
MUTEX_WORK = ("none", "work")


def print_shm(data):
    runs = data.get("runs", [])
    by = {(r["lock"], r["procs"], r["work"]): r for r in runs}
    # The mutex workloads (the readers-writer ones, rw1/rw10, have their own table in the
    # bench's output).
    configs = sorted({(r["procs"], r["work"]) for r in runs if r["work"] in MUTEX_WORK},
                     key=lambda c: (c[1], c[0]))
    cols = ["gomutex-shm", "pthread", "pthread-robust"]

    def samples(lock, procs, work):
        r = by.get((lock, procs, work))
        return r and r.get("untimed_ns_per_op")

    def ns(lock, procs, work):
        r = by.get((lock, procs, work))
        if not r:
            return None
        s = samples(lock, procs, work)
        return statistics.median(s) if s else r["untimed"]["ns_per_op"]

    def vs(lock, other, procs, work):
        return paired(samples(lock, procs, work), samples(other, procs, work))

    def rt(procs, work):
        r = by.get((cols[0], procs, work))
        return rt_range(r and r.get("line_round_trip_ns"))

    def worst(lock, procs, work):
        r = by.get((lock, procs, work))
        t = r and r.get("timed")
        return t and t.get("worst_wait_us")

    print()
    print("## Across processes: forked processes on one MAP_SHARED mapping (ns/op)")
    print()
    print(f"{data.get('duration_ms')} ms per run, median of {data.get('rounds', 1)} alternating "
          "rounds; work = Go's MutexWork loop outside the lock; worst wait from one timed run; "
          "floor / atomic (with work): the same loop with a private lock per process / one shared "
          "fetch_add per op instead of a lock; ratios: medians of per-round ratios; "
          f"load: {load_label(data)}.")
    print()
    print("| procs | work | ShmMutex | pthread | pthread robust | floor | atomic "
          "| ShmMutex/pthread | ShmMutex/pthread robust | ShmMutex/floor | ShmMutex/atomic "
          "| worst wait µs ShmMutex | pthread | line RT ns |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for procs, work in configs:
        g, p, pr, f, a = (ns(lock, procs, work) for lock in cols + FLOORS)
        print(f"| {procs} | {work} | {fmt(g)} | {fmt(p)} | {fmt(pr)} | {fmt(f)} | {fmt(a)} | "
              f"{vs(cols[0], cols[1], procs, work)} | {vs(cols[0], cols[2], procs, work)} | "
              f"{vs(cols[0], 'floor', procs, work)} | {vs(cols[0], 'atomic', procs, work)} | "
              f"{fmt(worst(cols[0], procs, work))} | {fmt(worst(cols[1], procs, work))} | "
              f"{rt(procs, work)} |")


def load_label(data) -> str:
    """A JSON file's load as a column head: `idle` or `N busy` (+ ` own` when each busy loop had
    a scheduling group of its own)."""
    n = (data or {}).get("busy", 0)
    if not n:
        return "idle"
    own = " own" if data.get("busy_session") == "own" else ""
    return f"{n} busy{own}"


def print_load_steady(files):
    """One row per workload, a column group per file (load): ns/op of gomutex and parking_lot,
    gomutex/parking_lot, gomutex/floor and gomutex/atomic (work rows), line round trip."""
    tables = [(load_label(d), steady_medians(d)) for d in files]
    names = []
    for _, t in tables:
        names += [n for n in t if n not in names]
    print("## In-process under load: steady harness (ns/op; ratios: medians of per-round "
          "ratios)")
    print()
    print("Column groups: the load each file was taken under (`STEADY_BUSY`: busy-looping "
          "processes beside every round; idle = none of ours).")
    print()
    head = ["workload", "threads"]
    for label, _ in tables:
        head += [f"{label}: gomutex", "parking_lot", "gomutex/parking_lot", "gomutex/floor",
                 "gomutex/atomic", "line RT ns"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---", "---"] + ["---:"] * (len(head) - 2)) + "|")
    for n in names:
        threads = next((t[n][0] for _, t in tables if n in t), "")
        row = [n, threads or "—"]
        for _, t in tables:
            _, s, rt, rat = t.get(n, ("", {}, None, {}))
            row += [fmt(s.get("gomutex")), fmt(s.get("parking_lot")), rat.get("parking_lot", "—"),
                    rat.get("floor", "—"), rat.get("atomic", "—"), rt_range(rt)]
        print("| " + " | ".join(row) + " |")


def print_load_shm(files):
    """One row per (procs, work), a column group per file (load): ShmMutex and pthread ns/op,
    their ratio, ShmMutex/floor and /atomic (with work), worst waits, line round trip."""
    print()
    print("## Across processes under load: shm_locks (ns/op; ratios: medians of per-round "
          "ratios)")
    print()
    print("Column groups: the load each file was taken under (`SHM_LOCKS_BUSY`).")
    print()
    labels = [load_label(d) for d in files]
    idx = []
    for d in files:
        by = {(r["lock"], r["procs"], r["work"]): r for r in d.get("runs", [])}
        idx.append(by)
    configs = sorted({(p, w) for by in idx for (_, p, w) in by if w in MUTEX_WORK},
                     key=lambda c: (c[1], c[0]))
    head = ["procs", "work"]
    for label in labels:
        head += [f"{label}: ShmMutex", "pthread", "ShmMutex/pthread", "ShmMutex/floor",
                 "ShmMutex/atomic", "worst wait µs ShmMutex", "pthread", "line RT ns"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---:", "---"] + ["---:"] * (len(head) - 2)) + "|")
    for procs, work in configs:
        row = [str(procs), work]
        for by in idx:
            def smp(lock):
                r = by.get((lock, procs, work))
                return r and r.get("untimed_ns_per_op")

            def med(lock):
                v = smp(lock)
                return statistics.median(v) if v else None

            def worst(lock):
                r = by.get((lock, procs, work))
                t = r and r.get("timed")
                return t and t.get("worst_wait_us")

            g = by.get(("gomutex-shm", procs, work))
            row += [fmt(med("gomutex-shm")), fmt(med("pthread")),
                    paired(smp("gomutex-shm"), smp("pthread")),
                    paired(smp("gomutex-shm"), smp("floor")),
                    paired(smp("gomutex-shm"), smp("atomic")),
                    fmt(worst("gomutex-shm")), fmt(worst("pthread")),
                    rt_range(g and g.get("line_round_trip_ns"))]
        print("| " + " | ".join(row) + " |")


def print_fairness(rows):
    print()
    print("## TestMutexFairness scenario (victim: 10 × {sleep 100 µs; lock; unlock} against a "
          "greedy thread sleeping 100 µs inside the lock)")
    print()
    print("| lock | victim worst wait ms | mean of round worsts ms | total ms (max) "
          "| total ms (mean) | greedy locks/round | rounds | capped |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for lock, r in rows.items():
        print(f"| {lock} | {r['worst_ms']:.3f} | {r['worst_mean_ms']:.3f} | "
              f"{r['total_max_ms']:.3f} | {r['total_mean_ms']:.3f} | "
              f"{r['greedy_locks_mean']:.0f} | {r['rounds']} | {r['capped']} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--go", help="output of `go test -run XXX -bench Mutex sync -benchtime 0.5s`")
    ap.add_argument("--target", help="the bench crate's target dir (default: benches/target)")
    ap.add_argument("--dir", help="criterion output directory (default: <target>/criterion)")
    ap.add_argument("--steady", help="steady.json (default: <target>/steady.json)")
    ap.add_argument("--shm", help="shm_locks.json (default: <target>/shm_locks.json)")
    ap.add_argument("--load-steady", nargs="+", metavar="JSON",
                    help="steady.json files taken under different loads: one column group each")
    ap.add_argument("--load-shm", nargs="+", metavar="JSON",
                    help="shm_locks.json files taken under different loads: one column group each")
    args = ap.parse_args()

    if args.load_steady or args.load_shm:
        for path in (args.load_steady or []) + (args.load_shm or []):
            if load_json(Path(path)) is None:
                print(f"cannot read {path}", file=sys.stderr)
                return 1
        if args.load_steady:
            print_load_steady([load_json(Path(p)) for p in args.load_steady])
        if args.load_shm:
            print_load_shm([load_json(Path(p)) for p in args.load_shm])
        return 0

    target = Path(args.target) if args.target else target_dir()
    if args.dir:
        crit = Path(args.dir)
    elif os.environ.get("CRITERION_HOME"):
        crit = Path(os.environ["CRITERION_HOME"])
    else:
        crit = target / "criterion"
    steady_data = load_json(Path(args.steady) if args.steady else target / "steady.json")
    shm_data = load_json(Path(args.shm) if args.shm else target / "shm_locks.json")
    go = go_figures(args.go) if args.go else None

    if steady_data is None and not crit.is_dir() and shm_data is None:
        print(f"no results under {target}: run `cd benches && cargo bench` first",
              file=sys.stderr)
        return 1
    print_inprocess(steady_medians(steady_data), steady_data, crit, go)
    if shm_data is not None:
        print_shm(shm_data)
    fair = load_json(crit / "fairness.json")
    if fair:
        print_fairness(fair)
    return 0


if __name__ == "__main__":
    sys.exit(main())
