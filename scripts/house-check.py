#!/usr/bin/env python3
"""The shape of the house, checked in CI. Exits 1 when any rule is broken, naming each breach.

Rules:
- no import cycle between the top-level modules of a crate (`crate::a` used in `b` and `crate::b` in `a`,
  directly or through others);
- no source file over 600 lines (`main.rs` over 300): split it by responsibility;
- README.md + docs/*.md + BENCHMARKS.md + conformance/real/*.md under 100 KB together;
- no hex commit hash in those documents (git keeps the history; the documents state what is true now).
Run from anywhere: paths are taken from the repository root above this script.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_LINES, MAX_MAIN_LINES = 600, 300
MAX_DOC_BYTES = 100_000
# A commit hash as documents write one: 7 to 40 hex digits with at least one letter and one digit,
# standing alone (not part of a longer token such as a hex constant, a UUID or a file name).
HASH = re.compile(r"(?<![0-9A-Za-z_./-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![0-9A-Za-z_-])")


def crates():
    for name in sorted(os.listdir(ROOT)):
        if os.path.isfile(os.path.join(ROOT, name, "Cargo.toml")) and os.path.isdir(os.path.join(ROOT, name, "src")):
            yield name


def module_graph(crate, breaches):
    """Top-level module -> the top-level modules it names through `crate::`; long files reported."""
    src = os.path.join(ROOT, crate, "src")
    graph = {}
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            text = open(path, encoding="utf-8", errors="replace").read()
            lines = text.count("\n")
            limit = MAX_MAIN_LINES if f == "main.rs" else MAX_LINES
            if lines > limit:
                breaches.append(f"long file: {os.path.relpath(path, ROOT)} has {lines} lines (limit {limit})")
            top = os.path.relpath(path, src).split(os.sep)[0]
            top = top[:-3] if top.endswith(".rs") else top
            if top in ("lib", "main"):
                continue
            used = set(re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", text)) - {top}
            graph.setdefault(top, set()).update(used)
    return graph


def cycles(graph):
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def documents():
    paths = ["README.md", "BENCHMARKS.md"]
    for folder in ("docs", os.path.join("conformance", "real")):
        full = os.path.join(ROOT, folder)
        if os.path.isdir(full):
            paths += [os.path.join(folder, f) for f in sorted(os.listdir(full)) if f.endswith(".md")]
    return [p for p in paths if os.path.isfile(os.path.join(ROOT, p))]


def main():
    breaches = []
    for crate in crates():
        for comp in cycles(module_graph(crate, breaches)):
            breaches.append(f"import cycle in {crate}: {' <-> '.join(comp)}")
    total = 0
    for doc in documents():
        text = open(os.path.join(ROOT, doc), encoding="utf-8", errors="replace").read()
        total += len(text.encode("utf-8"))
        for n, line in enumerate(text.splitlines(), 1):
            for m in HASH.finditer(line):
                breaches.append(f"commit hash in {doc}:{n}: {m.group(0)}")
    if total > MAX_DOC_BYTES:
        breaches.append(f"documents are {total} bytes together (limit {MAX_DOC_BYTES}): {', '.join(documents())}")
    if breaches:
        print("\n".join(breaches))
        print(f"house: {len(breaches)} breach(es)")
        return 1
    print(f"house: no import cycles, no long files, documents {total} bytes, no commit hashes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
