#!/usr/bin/env python3
"""check-layers.py — the include arrows of the house (docs/architecture.md, "The map").

Allowed: lib -> lib; worker -> worker, lib; controller -> controller, lib; cmd -> anything;
api -> api, lib, and api/consumer (the stream consumer library) -> worker/data (the fetch client
it shares with the workers); api/ headers and generated protobuf headers from anywhere. Also, among the folders one level
down (lib/io, worker/ops, controller/sched, ...), no two may include each other, directly or
through others: the folders form a graph without cycles, so each can be read after the ones
it points to. Files inside one folder may include each other freely.

Usage: check-layers.py [ROOT]   exits 1 and names every wrong include (file:line), 0 when clean.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
TOPS = ("lib", "worker", "controller", "cmd", "api")
ALLOWED = {"lib": {"lib"}, "worker": {"worker", "lib"}, "controller": {"controller", "lib"},
           "api": {"api", "lib"}}
# single folder arrows beyond ALLOWED (docs/architecture.md, "The map")
FOLDER_ARROWS = {("api/consumer", "worker/data")}


def resolve(src, name):
    """Where the compiler finds a quoted include: the file's folder, then -Ilib, then -I."""
    for base in (os.path.dirname(src), "lib", "."):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(p):
            return p
    if name.endswith(".pb-c.h"):
        return "gen/" + name
    return None


def folder(path):
    """The unit of the cycle check: lib/io, worker/ops, controller/ctl; worker/runtime.c -> worker."""
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def main():
    os.chdir(sys.argv[1] if len(sys.argv) > 1 else ".")
    bad, edges, where = [], {}, {}
    for top in TOPS:
        for dirpath, _, names in os.walk(top):
            for n in sorted(names):
                if not n.endswith((".c", ".h", ".cu")):
                    continue
                src = os.path.join(dirpath, n)
                with open(src, errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        dst = resolve(src, m.group(1))
                        at = f"{src}:{lineno}"
                        if dst is None:
                            bad.append(f"{at}: \"{m.group(1)}\" is not a file of the tree")
                            continue
                        st, dt = src.split("/")[0], dst.split("/")[0]
                        if (dt in ("api", "gen") and st != "api") or dt == "gen" or st == "cmd":
                            continue
                        if dt not in ALLOWED[st] and (folder(src), folder(dst)) not in FOLDER_ARROWS:
                            also = "".join(f"; {a} also to {b}" for a, b in sorted(FOLDER_ARROWS)
                                           if a.split("/")[0] == st)
                            bad.append(f"{at}: {st}/ may not include {dst} ({st}/ points only "
                                       f"to {', '.join(sorted(ALLOWED[st]))}{also})")
                            continue
                        a, b = folder(src), folder(dst)
                        if a != b:
                            edges.setdefault(a, set()).add(b)
                            where.setdefault((a, b), at)
    # cycles among folders: depth-first search, reporting each cycle once
    state, stack = {}, []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(edges.get(u, ())):
            if state.get(v) == 1:
                cyc = stack[stack.index(v):] + [v]
                hops = ", ".join(f"{x} -> {y} ({where[(x, y)]})" for x, y in zip(cyc, cyc[1:]))
                bad.append(f"include cycle: {hops}")
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = 2

    for u in sorted(edges):
        if u not in state:
            visit(u)
    for b in bad:
        print(f"layers: {b}")
    if bad:
        return 1
    print(f"layers: {sum(len(v) for v in edges.values())} folder arrows, all pointing down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
