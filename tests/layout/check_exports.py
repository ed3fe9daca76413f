#!/usr/bin/env python3
"""libtide exports its public API and nothing else (tide/api.h).

The functions libtide.so defines in its dynamic symbol table must be exactly
those the public headers (core/include/tide/*.h) declare with TIDE_API:
an internal function exported, or a public one missing, fails with its name.

usage: check_exports.py LIBTIDE INCLUDE_DIR     exit 0: the same set, 1: not
"""
import glob
import os
import re
import subprocess
import sys


def declared(include):
    names = set()
    decl = re.compile(r"^TIDE_API\b[^(]*?\b(tide_[a-z0-9_]+)\s*\(", re.M)
    for path in glob.glob(os.path.join(include, "tide", "*.h")):
        names |= set(decl.findall(open(path, encoding="utf-8").read()))
    return names


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True,
                         check=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in ("T", "W"):
            names.add(parts[2])
    return names


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    want, got = declared(sys.argv[2]), exported(sys.argv[1])
    # What toolchains add on their own (initialisers, sanitizer hooks).
    got = {n for n in got if not n.startswith("_") and not n.startswith("__")}
    extra, missing = sorted(got - want), sorted(want - got)
    for n in extra:
        print("exported but not TIDE_API in a public header: %s" % n)
    for n in missing:
        print("declared TIDE_API but not exported: %s" % n)
    print("%d functions exported, %d declared TIDE_API" % (len(got), len(want)))
    sys.exit(1 if extra or missing else 0)


if __name__ == "__main__":
    main()
