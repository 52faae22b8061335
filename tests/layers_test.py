#!/usr/bin/env python3
"""Holds the code to the layering in docs/architecture.md: each layer includes only itself and
the layers below it. Prints every #include that crosses a layer the wrong way (file:line, what it
includes, what that layer may include) and exits 1 if there is one.

  python3 tests/layers_test.py [source root]
"""

import os
import re
import sys

# Layer folder -> the include prefixes its files may use (besides system headers). A prefix
# ending in ".h" allows that one header only.
ALLOWED = {
    "src/common": ["common/"],
    "src/reduce": ["common/", "reduce/"],
    "src/rendezvous": ["common/", "rendezvous/"],
    # The transport knows the Store interface (addresses are exchanged through it) and the
    # secret generator (mesh tokens), nothing of the launcher's environment or the collectives.
    "transport": ["common/", "transport/", "rendezvous/store.h", "rendezvous/secret.h"],
    # Device code and its host API: no collective, transport or engine logic.
    "kernels": ["common/", "reduce/", "kernels/"],
    "src/collectives": ["common/", "reduce/", "rendezvous/", "transport/", "kernels/", "collectives/"],
    # The engine reaches the transport only through a Communicator.
    "src/engine": ["common/", "reduce/", "rendezvous/", "kernels/", "collectives/", "engine/"],
    # --check-build asks the RDMA fabric probe which fabric this machine would use.
    "src/launcher": ["common/", "rendezvous/", "launcher/", "transport/rdma/fabric.h"],
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = (".h", ".cc", ".cu", ".cuh")


def layer_of(rel):
    for layer in ALLOWED:
        if rel == layer or rel.startswith(layer + "/"):
            return layer
    return None


def allowed(include, prefixes):
    return any(include == p if p.endswith(".h") else include.startswith(p) for p in prefixes)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    wrong = []
    checked = 0
    for layer in ALLOWED:
        for dirpath, _, files in os.walk(os.path.join(root, layer)):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                checked += 1
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m or "/" not in m.group(1):
                            continue  # same-folder or system-style include
                        if not allowed(m.group(1), ALLOWED[layer]):
                            wrong.append(f"{rel}:{n}: includes \"{m.group(1)}\"; {layer} may include only "
                                         + ", ".join(ALLOWED[layer]))
    if checked == 0:
        print(f"no sources found under {root}", file=sys.stderr)
        return 1
    for w in wrong:
        print(w)
    print(f"{checked} files checked, {len(wrong)} includes cross a layer the wrong way")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
