#!/usr/bin/python3
"""Dependency walls: fail on any #include that crosses a folder boundary walls.txt does not allow.

Usage: check_walls.py --root REPO [--graph tests/walls/walls.txt] [--inject FILE:INCLUDE ...]
Exit 0: walls hold. 1: forbidden or unresolvable includes. 2: the graph itself is wrong (a folder
it names is gone, an unknown target, an unused exception) or the command line is.
Reads include lines textually: no preprocessor, so an include under #if counts, and a computed
`#include MACRO` is not seen.
"""
import argparse
import collections
import os
import re
import sys
import time

SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh")
# Not ours or not sources: build trees, VCS/CI metadata, vendored code, fuzz corpora.
SKIP_DIRS = {"third_party", "third-party", "external", "_deps", "node_modules", "corpus", "results"}
# Where a quoted project include may live: the repo root, and the client's public headers
# ("leapcache/client.h" is client/include/leapcache/client.h).
INCLUDE_DIRS = ("", "client/include")
# External pseudo-nodes, recognised from the include text; first match wins (the generated
# grpc/health/v1 headers are proto, not grpc). A toolkit `.cuh` counts as CUDA only in <...>, so
# a typo in a quoted project .cuh is still reported.
PSEUDO = [
    ("proto", r"leapcache/v1/|grpc/health/v1/|.*\.pb\.h$"),
    ("protobuf", r"google/protobuf/"),
    ("grpc", r"grpcpp/|grpc\+\+/|grpc/"),
    ("absl", r"absl/"),
    ("cuda", r"cuda[a-z0-9_]*\.h$|cooperative_groups|cub/|cuda/|thrust/|mma\.h$|nvml\.h$|"
             r"nvtx|nvToolsExt|(cublas|curand|cufft|cusparse|nvrtc)[a-zA-Z0-9_]*\.h$"),
    ("ucx", r"uc[pst]/"),
    ("nccl", r"nccl(_net)?\.h$"),
    ("openssl", r"openssl/"),
    ("gtest", r"gtest/|gmock/"),
    ("civetweb", r"civetweb\.h$|CivetServer\.h$"),
    ("yaml", r"yaml-cpp/"),
    ("torch", r"torch/|ATen/|c10/"),
    ("pybind11", r"pybind11/"),
    ("fuzzer", r"fuzzer/"),
    ("sanitizer", r"sanitizer/"),
]
PSEUDO = [(name, re.compile(pattern)) for name, pattern in PSEUDO]
PSEUDO_NAMES = {name for name, _ in PSEUDO}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
RULE_RE = re.compile(r"^(?:(planned|except)\s+)?([\w./-]+)\s*:(.*)$")


class GraphError(Exception):
    pass


def parse_graph(path, root):
    """walls.txt -> (rules {node: set(targets)}, exceptions [[path, targets, line, used]])."""
    rules, exceptions, errors = {}, [], []
    with open(path, encoding="utf-8") as f:
        lines = [(n, line.split("#", 1)[0].strip()) for n, line in enumerate(f, 1)]
    for n, line in lines:
        if not line:
            continue
        m = RULE_RE.match(line)
        if not m:
            errors.append(f"{path}:{n}: cannot parse {line!r}")
            continue
        kind, name, targets = m.group(1), m.group(2).rstrip("/"), set(m.group(3).split())
        exists = os.path.exists(os.path.join(root, name))
        if kind == "except":
            if not exists:
                errors.append(f"{path}:{n}: exception for {name}, which does not exist")
            exceptions.append([name, targets, n, False])
            continue
        if name in rules:
            errors.append(f"{path}:{n}: second rule for {name}")
        if kind == "planned" and exists:
            errors.append(f"{path}:{n}: {name}/ exists now: drop `planned` from its rule")
        elif kind != "planned" and not os.path.isdir(os.path.join(root, name)):
            errors.append(f"{path}:{n}: {name}/ does not exist: move or delete its rule")
        rules[name] = (targets, n)
    # Every target must name something, so a typo or a renamed folder is caught here.
    for n, targets in [(n, t) for t, n in rules.values()] + [(e[2], e[1]) for e in exceptions]:
        for t in targets:
            base = t[:-3] if t.endswith("/**") else t
            if t != "*" and base not in rules and base not in PSEUDO_NAMES:
                errors.append(f"{path}:{n}: unknown target {t!r} (no rule and no pseudo-node)")
    if errors:
        raise GraphError("\n".join(errors))
    # Most specific path first, so the narrowest exception is the one marked used.
    exceptions.sort(key=lambda e: -len(e[0]))
    return {k: v[0] for k, v in rules.items()}, exceptions


def node_of(relpath, rules):
    """The rule node with the longest folder prefix of relpath, or None."""
    parts = relpath.split("/")[:-1]
    for i in range(len(parts), 0, -1):
        if "/".join(parts[:i]) in rules:
            return "/".join(parts[:i])
    return None


def allows(targets, target):
    for t in targets:
        if t == "*" or t == target:
            return True
        if t.endswith("/**") and (target == t[:-3] or target.startswith(t[:-2])):
            return True
    return False


def scan(root):
    """Relative paths of every source file we own."""
    for dirpath, dirnames, filenames in os.walk(root):
        top = dirpath == root  # build*/ trees sit at the root; a nested "builder/" is source
        dirnames[:] = sorted(d for d in dirnames if not (
            d.startswith(".") or (top and d.startswith("build")) or d in SKIP_DIRS))
        for name in sorted(filenames):
            if name.endswith(SOURCE_EXT):
                yield os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")


def resolve(root, relpath, delim, text, rules):
    """(target node or pseudo-node, or None for system headers) or raise KeyError if unknown."""
    # Like the compiler: "x.h" first next to the including file, then the include dirs; a
    # project file also counts through <...>, so brackets cannot sneak past a wall.
    dirs = ((os.path.dirname(relpath),) if delim == '"' else ()) + INCLUDE_DIRS
    for d in dirs:
        candidate = os.path.normpath(os.path.join(d, text)).replace(os.sep, "/")
        if os.path.isfile(os.path.join(root, candidate)):
            return node_of(candidate, rules) or candidate
    for name, pattern in PSEUDO:
        if pattern.match(text):
            return name
    if delim == "<" and text.endswith(".cuh"):
        return "cuda"
    if delim == '"':
        raise KeyError(text)
    return None  # Unclassified <...>: the standard library or the system.


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", required=True)
    p.add_argument("--graph", default="tests/walls/walls.txt")
    p.add_argument("--inject", action="append", default=[], metavar="FILE:INCLUDE",
                   help="pretend FILE also has `#include \"INCLUDE\"` (or <INCLUDE> if so written)")
    args = p.parse_args()
    start = time.monotonic()
    root = os.path.abspath(args.root)
    graph = os.path.join(root, args.graph)
    try:
        rules, exceptions = parse_graph(graph, root)
    except (GraphError, OSError) as e:
        print(f"walls: bad graph:\n{e}", file=sys.stderr)
        return 2
    files = list(scan(root))
    injected = collections.defaultdict(list)
    for item in args.inject:
        path, _, text = item.partition(":")
        if path not in files or not text:
            print(f"walls: --inject {item!r}: no such source file or empty include", file=sys.stderr)
            return 2
        injected[path].append(text if text[0] in '<"' else f'"{text}"')

    problems, unowned, edges = [], [], 0
    tally = collections.Counter()
    for relpath in files:
        node = node_of(relpath, rules)
        if node is None:
            unowned.append(relpath)
            continue
        with open(os.path.join(root, relpath), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines() + [f"#include {t}" for t in injected[relpath]]
        for n, line in enumerate(lines, 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            delim, text = m.groups()
            shown = f'"{text}"' if delim == '"' else f"<{text}>"
            edges += 1
            try:
                target = resolve(root, relpath, delim, text, rules)
            except KeyError:
                problems.append(f"{relpath}:{n}: {node} -> ? (#include {shown}) names no file in "
                                "the tree and no pseudo-node")
                tally[f"{node} -> unknown include"] += 1
                continue
            if target is None or target == node or allows(rules[node], target):
                continue
            # Named exceptions: the file itself or a folder above it.
            grant = next((e for e in exceptions if (relpath == e[0] or relpath.startswith(
                e[0] + "/")) and allows(e[1], target)), None)
            if grant:
                grant[3] = True
                continue
            problems.append(f"{relpath}:{n}: {node} -> {target} (#include {shown}) is not allowed "
                            "by walls.txt")
            tally[f"{node} -> {target}"] += 1

    # Graph rot: files no rule covers, and exceptions nothing needs any more.
    rot = [f"{p}: no rule in walls.txt covers this file" for p in unowned]
    rot += [f"{args.graph}:{e[2]}: exception for {e[0]} is unused: delete it"
            for e in exceptions if not e[3]]
    elapsed = time.monotonic() - start
    for line in problems:
        print(line)
    if problems:
        print(f"\nwalls: {len(problems)} forbidden or unknown include(s) in {len(files)} files "
              f"({elapsed:.2f}s):")
        for edge, count in sorted(tally.items()):
            print(f"  {edge}: {count}")
        print("Fix the include, or if the wall itself moved, change tests/walls/walls.txt in the "
              "same commit and say why (tests/walls/README.md).")
    if rot:
        print("walls: the graph is out of date:\n  " + "\n  ".join(rot))
        return 2
    if problems:
        return 1
    print(f"walls OK: {len(files)} files, {edges} include edges checked against {args.graph} "
          f"({elapsed:.2f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
