#!/usr/bin/env python3
"""Circles between modules, at every level of every crate under framework/: within each folder
of a crate's src/, an arrow goes from a module (a file, or a folder with its files) to a sibling
it names (`crate::a::b`, `super::b`, `self::b` in its `use`s and paths, code under
`#[cfg(test)]` and comments left out). A child naming its parent is no arrow (Rust nests
modules that way). Prints each circle and exits 1 when there is one; `.ci/test` runs it.
Usage: python3 .ci/circles.py [CRATE_SRC_DIR...] (default: framework/*/src)."""
import pathlib
import re
import sys


def modules_of(src):
    """module path (tuple) -> text, for every .rs file under src."""
    mods = {}
    for f in src.rglob('*.rs'):
        parts = list(f.relative_to(src).parts)
        if parts[-1] in ('mod.rs', 'lib.rs', 'main.rs'):
            parts = parts[:-1]
        else:
            parts[-1] = parts[-1][:-3]
        text = f.read_text(errors='replace')
        cut = text.find('#[cfg(test)]')
        text = text[:cut] if cut >= 0 else text
        text = '\n'.join(l for l in text.splitlines() if not l.lstrip().startswith('//'))
        mods[tuple(parts)] = text
    return mods


def references(path, text):
    """The module paths (absolute, as tuples) that `text`, in module `path`, names."""
    out = set()
    for m in re.finditer(r'\bcrate((?:::\w+)+)', text):
        out.add(tuple(m.group(1).split('::')[1:]))
    for m in re.finditer(r'\b((?:super::)+)((?:\w+::)*\w+)', text):
        up = m.group(1).count('super::')
        base = path[:len(path) - up] if up <= len(path) else ()
        out.add(base + tuple(m.group(2).split('::')))
    for m in re.finditer(r'\bself::((?:\w+::)*\w+)', text):
        out.add(path + tuple(m.group(1).split('::')))
    return out


def circles(src):
    mods = modules_of(src)
    known = set(mods)
    found = []
    parents = {p[:-1] for p in known if p}
    for parent in sorted(parents):
        children = sorted(p for p in known if len(p) == len(parent) + 1 and p[:-1] == parent)
        names = {c[-1] for c in children}
        graph = {n: set() for n in names}
        for path, text in mods.items():
            if len(path) <= len(parent) or path[:len(parent)] != parent:
                continue
            me = path[len(parent)]
            for ref in references(path, text):
                if len(ref) > len(parent) and ref[:len(parent)] == parent:
                    other = ref[len(parent)]
                    if other in names and other != me:
                        graph[me].add(other)
        found += [(parent, c) for c in sccs(graph)]
    return found


def sccs(g):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def main():
    roots = [pathlib.Path(a) for a in sys.argv[1:]] or sorted(pathlib.Path('framework').glob('*/src'))
    bad = 0
    for src in roots:
        for parent, comp in circles(src):
            where = '::'.join(('crate',) + parent)
            print(f'circle in {src} under {where}: ' + ' <-> '.join(comp))
            bad = 1
    if not bad:
        print('circles: none in ' + ', '.join(str(r) for r in roots))
    sys.exit(bad)


main()
