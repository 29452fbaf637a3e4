#!/usr/bin/env python3
"""Fail on any import cycle between two files of src/leveret, direct or around a circle,
TYPE_CHECKING imports included (grimp, the graph import-linter is built on)."""

from __future__ import annotations

import sys

import grimp


def cycles(package: str = "leveret") -> list[list[str]]:
    graph = grimp.build_graph(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(root: str) -> None:
        # Tarjan's strongly connected components, iteratively (no recursion limit).
        nonlocal counter
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def main() -> int:
    found = cycles()
    for component in found:
        print("import cycle: " + " <-> ".join(component), file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
