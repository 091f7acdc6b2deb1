#!/usr/bin/env python3
# Not named graphlib.py: the script directory comes first on sys.path, and the module would import itself.
"""What `lockstep check FILE` does, done with Python's graphlib, for comparison: read the
file, parse it with a simple line parser, add every task to a graphlib.TopologicalSorter
and `prepare` it (which finds a cycle if there is one). With --run it then also takes the
whole run (`get_ready` / `done` until nothing is left), the work of `lockstep run` on a
graph without commands.

    graphlib_check.py FILE.dot|FILE.toml [--run]

The line parsers read only what random_graph_files.py writes (one statement or key per
line): DOT lines `a -> b;` (a depends on b) and `a;`, TOML lines `id = "a"` and
`deps = ["b", "c"]`. They check nothing else; that is what makes them a lower bound on a
real reader. Prints one line per phase with wall times (time.perf_counter) to stdout.
"""

import graphlib
import sys
import time


def parse_dot(text):
    tasks = {}
    for line in text.splitlines():
        line = line.strip().rstrip(";")
        if "->" in line:
            a, b = line.split("->")
            tasks.setdefault(a.strip(), []).append(b.strip())
        elif line and line != "}" and not line.startswith("digraph"):
            tasks.setdefault(line, [])
    return tasks


def parse_toml(text):
    tasks = {}
    current = None
    for line in text.splitlines():
        if line.startswith("id = "):
            current = line[5:].strip().strip('"')
            tasks[current] = []
        elif line.startswith("deps = ["):
            inner = line[len("deps = ["):].rstrip().rstrip("]")
            tasks[current] = [d.strip().strip('"') for d in inner.split(",") if d.strip()]
    return tasks


def main():
    if len(sys.argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} FILE.dot|FILE.toml [--run]")
    path = sys.argv[1]
    whole_run = "--run" in sys.argv[2:]
    t0 = time.perf_counter()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    t1 = time.perf_counter()
    tasks = parse_toml(text) if path.endswith(".toml") else parse_dot(text)
    t2 = time.perf_counter()
    ts = graphlib.TopologicalSorter()
    for t, deps in tasks.items():
        ts.add(t, *deps)
    t3 = time.perf_counter()
    ts.prepare()
    t4 = time.perf_counter()
    edges = sum(len(d) for d in tasks.values())
    print(f"read     {t1 - t0:8.3f} s  {len(text)} characters")
    print(f"parse    {t2 - t1:8.3f} s  {len(tasks)} tasks, {edges} edges")
    print(f"add      {t3 - t2:8.3f} s")
    print(f"prepare  {t4 - t3:8.3f} s  (finds a cycle, if any)")
    total = t4 - t0
    if whole_run:
        done = 0
        while ts.is_active():
            ready = ts.get_ready()
            done += len(ready)
            ts.done(*ready)
        t5 = time.perf_counter()
        assert done == len(tasks), done
        print(f"run      {t5 - t4:8.3f} s  get_ready/done over {done} tasks")
        total = t5 - t0
    print(f"total    {total:8.3f} s")


if __name__ == "__main__":
    main()
