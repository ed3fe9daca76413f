#!/usr/bin/env python3
"""The layering rules of docs/architecture.md, checked on every #include.

Each folder is one layer; a file may include the public headers in
core/include/tide/ (minus those of higher layers, listed below), the private
headers of its own folder, and those of the layers below it. The include
paths of the layer targets already stop most mistakes at compile time; this
check also covers the public headers that only higher layers may use, and
files the build does not compile (headers no .c includes yet).

usage: check_layers.py [--root DIR]     exit 0: clean, 1: violations listed
"""
import argparse
import os
import re
import sys

# Public headers that belong to a layer above the runtime: the runtime must
# never include them (writers, the tokenizer trainer, the simulator's API).
UPPER_PUBLIC = {
    "tide/trace_write.h": "the trace writer (formats' writers)",
    "tide/safetensors_write.h": "the safetensors writer (formats' writers)",
    "tide/tokenizer_train.h": "the tokenizer trainer",
    "tide/solver.h": "the simulator's solver",
    "tide/profile.h": "the simulator's hardware profiles",
}

# layer -> private folders it may include from (its own first).
LAYERS = {
    "core/formats": ["core/formats"],
    "core/runtime": ["core/runtime"],
    "core/sim": ["core/sim", "core/runtime"],
    "core/api": ["core/api", "core/runtime"],
    "cli": ["cli", "serve", "core/runtime", "core/formats", "core/sim"],
    # The HTTP server of `tide serve` (serve/README.md): a client of the
    # public embedding API (tide/engine.h) and nothing of the runtime.
    "serve": ["serve", "core/formats"],
}
# Private headers of another layer that a layer may include by name: they
# include no private header themselves.
EXTRA = {
    "serve": {"output_file.h": "cli"},
}
# Public headers a layer may not include.
FORBIDDEN_PUBLIC = {
    "core/formats": {"tide/solver.h", "tide/profile.h"},
    "core/runtime": set(UPPER_PUBLIC),
    "core/api": set(UPPER_PUBLIC),
}
PRIVATE = ["core/runtime", "core/formats", "core/sim", "core/api", "cli", "serve"]

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def headers(root, folder):
    d = os.path.join(root, folder)
    if not os.path.isdir(d):
        return set()
    return {f for f in os.listdir(d) if f.endswith(".h")}


def sources(root, folder):
    d = os.path.join(root, folder)
    for dirpath, _, files in os.walk(d):
        for f in sorted(files):
            if f.endswith((".c", ".h", ".cu", ".cpp")):
                yield os.path.join(dirpath, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    root = os.path.abspath(ap.parse_args().root)
    private = {folder: headers(root, folder) for folder in PRIVATE}
    owner = {}
    for folder in PRIVATE:
        for h in private[folder]:
            owner.setdefault(h, folder)
    bad = []
    checked = 0

    def check(path, layer, allowed, forbidden_public):
        nonlocal checked
        rel = os.path.relpath(path, root)
        text = open(path, encoding="utf-8", errors="replace").read()
        for m in INCLUDE.finditer(text):
            inc = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            checked += 1
            if inc in forbidden_public:
                why = UPPER_PUBLIC.get(inc, "a higher layer's public header")
                bad.append(f"{rel}:{line}: includes {inc}, {why}; {layer} must not")
                continue
            here = os.path.dirname(path)
            if ".." in inc:  # a relative path: judge by where it lands
                target = os.path.relpath(os.path.normpath(os.path.join(here, inc)), root)
                home = os.path.dirname(target)
            elif inc.startswith("tide/") or "/" in inc:
                continue  # public header, or plugin-relative (backend-common/x.h)
            elif os.path.exists(os.path.join(here, inc)):
                continue  # the file's own folder
            else:
                home = owner.get(inc)
            if home in PRIVATE and home not in allowed and EXTRA.get(layer, {}).get(inc) != home:
                bad.append(f"{rel}:{line}: includes \"{inc}\", a private header of {home}; "
                           f"{layer} may include private headers of {', '.join(allowed) or 'none'}")

    for layer, allowed in LAYERS.items():
        for path in sources(root, layer):
            check(path, layer, allowed, FORBIDDEN_PUBLIC.get(layer, set()))
    # Plugins see only the public headers (and their own and *-common code).
    for path in sources(root, "plugins"):
        check(path, "a plugin", [], set())
    # The core names no decoder: decoding loops are plugins (tide/decoder.h),
    # found by the name [generation] decoder or the model gives.
    decoder_name = re.compile(r'"(decoder-)?llada(2|21)?"|decoder-llada')
    for layer in LAYERS:
        for path in list(sources(root, layer)) + list(sources(root, "core/include")):
            text = open(path, encoding="utf-8", errors="replace").read()
            for m in decoder_name.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{os.path.relpath(path, root)}:{line}: names the decoder "
                           f"{m.group(0)}; the core finds decoders by name, it names none")
    for b in bad:
        print(b)
    lines = sum(sum(1 for _ in open(p, encoding="utf-8", errors="replace"))
                for p in sources(root, "core/runtime"))
    print(f"layers: {checked} includes checked, {len(bad)} violation(s); "
          f"core/runtime holds {lines} lines")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
