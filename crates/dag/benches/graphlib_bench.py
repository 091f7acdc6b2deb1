#!/usr/bin/env python3
# Not named graphlib.py: the script directory comes first on sys.path, and the module would import itself.
"""Python's graphlib.TopologicalSorter over a whole run of the random million-task graph of
the Lockstep graph benchmarks (crates/dag/benches/common/shapes.rs, `random`), for
comparison with the pull API (`lockstep_pull` in the group graph/random_1M).

The graph is generated here with the same splitmix64 generator and seed as the Rust
benches: task t depends on min(4, t) distinct tasks drawn uniformly from 0..t (repeats
rejected), 1,000,000 tasks and 3,999,990 edges.

The timed part is what the pull API's time covers: `add` of every task with its
dependencies (submission), `prepare`, then `get_ready` / `done` until nothing is left.
Generating the lists is not timed. The result is appended as one JSON line to the file
named by the first argument (default target/lockstep-bench/graphlib.jsonl):
{"group": "graph/random_1M", "impl": "python_graphlib", "value": <ns>, "unit": "ns", "note": ...}.
"""

import graphlib
import json
import os
import sys
import time

MASK = (1 << 64) - 1
SEED = 0x10C457E9
N = 1_000_000


def random_graph(n):
    state = SEED
    deps = []
    for t in range(n):
        mine = []
        k = min(4, t)
        while len(mine) < k:
            state = (state + 0x9E3779B97F4A7C15) & MASK
            z = state
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
            z ^= z >> 31
            d = z % t
            if d not in mine:
                mine.append(d)
        deps.append(mine)
    return deps


def whole_run(deps):
    ts = graphlib.TopologicalSorter()
    for t, mine in enumerate(deps):
        ts.add(t, *mine)
    ts.prepare()
    done = 0
    while ts.is_active():
        ready = ts.get_ready()
        done += len(ready)
        ts.done(*ready)
    return done


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "target/lockstep-bench/graphlib.jsonl"
    deps = random_graph(N)
    edges = sum(len(d) for d in deps)
    start = time.perf_counter_ns()
    done = whole_run(deps)
    ns = time.perf_counter_ns() - start
    assert done == N, done
    per = ns / (N + edges)
    note = (
        f"graphlib.TopologicalSorter, Python {sys.version.split()[0]}: add + prepare + "
        f"get_ready/done over V = {N}, E = {edges}: {ns / 1e9:.2f} s, {per:.1f} ns per (V + E); one run"
    )
    print(f"graphlib: {note}", file=sys.stderr)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps({"group": "graph/random_1M", "impl": "python_graphlib", "value": ns,
                            "unit": "ns", "note": note}) + "\n")


if __name__ == "__main__":
    main()
