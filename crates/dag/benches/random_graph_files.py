#!/usr/bin/env python3
"""Writes the random task graph of the Lockstep graph benchmarks as input files for the
`lockstep` command: the same DAG as Graphviz DOT and as our TOML task file.

The graph is the one of crates/dag/benches/common/shapes.rs (`random`) and of
graphlib_bench.py: the same splitmix64 generator and seed; task t depends on min(4, t)
distinct tasks drawn uniformly from 0..t (repeats rejected), in draw order, so N tasks
have 4N - 10 edges. Task t is named `t<t>`.

    random_graph_files.py N OUT_PREFIX      # writes OUT_PREFIX.dot and OUT_PREFIX.toml

DOT: `digraph random {`, then per task either `t0;` (no dependencies) or one line
`tA -> tB;` per dependency (A depends on B, the direction `lockstep` reads), then `}`.
TOML: one `[[task]]` table per task with `id` and, when it has any, `deps`.
Both list tasks in the same order, so `lockstep check` prints the same summary for both.
"""

import sys

MASK = (1 << 64) - 1
SEED = 0x10C457E9


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


def main():
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} N OUT_PREFIX")
    n = int(sys.argv[1])
    prefix = sys.argv[2]
    deps = random_graph(n)
    with open(prefix + ".dot", "w", encoding="utf-8") as f:
        f.write("digraph random {\n")
        for t, mine in enumerate(deps):
            if mine:
                f.write("".join(f"  t{t} -> t{d};\n" for d in mine))
            else:
                f.write(f"  t{t};\n")
        f.write("}\n")
    with open(prefix + ".toml", "w", encoding="utf-8") as f:
        for t, mine in enumerate(deps):
            if mine:
                ds = ", ".join(f'"t{d}"' for d in mine)
                f.write(f'[[task]]\nid = "t{t}"\ndeps = [{ds}]\n\n')
            else:
                f.write(f'[[task]]\nid = "t{t}"\n\n')
    edges = sum(len(d) for d in deps)
    print(f"{prefix}.dot, {prefix}.toml: {n} tasks, {edges} edges", file=sys.stderr)


if __name__ == "__main__":
    main()
