#!/usr/bin/python3
"""The demo's output reads as words.

scripts/demo.sh runs `tide run -c config/llada2-tiny.ini` on a synthetic tiny
checkpoint that tide generates on first use (random weights). Its byte-level
tokenizer has a token per byte, and a byte that is not a whole UTF-8
character prints as mojibake; mkmodel damps those lm_head rows (and the
specials', and other non-words') so that the random output is random words.
For the demo's own configuration and prompt, with the checkpoint seeds 1
(the demo's), 2 and 3, the printed text must be valid UTF-8 with no control
character, no special token, and at least 90% of its whitespace-separated
pieces words of three or more letters.

Usage: test_demo_readable.py PATH_TO_TIDE CONFIG_INI. Exit 0 pass, 1 fail.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile


def main():
    tide, ini = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="tide-demo-")
    # The config's own preset, asked for on the command line: create makes a
    # checkpoint at another path than the config's only when asked there.
    with open(ini) as f:
        preset = re.search(r"^create\s*=\s*(\S+)", f.read(), re.M).group(1)
    failures = 0
    try:
        for seed in (1, 2, 3):
            model = os.path.join(tmp, "tiny-%d" % seed)
            r = subprocess.run([tide, "run", "-c", ini, "--set", "model.path=" + model,
                                "--set", "model.create=" + preset,
                                "--set", "model.create_seed=%d" % seed,
                                "--set", "output.progress=false",
                                "-p", "Write a haiku about the tide."], capture_output=True)
            problems = []
            if r.returncode != 0:
                problems.append("exit %d: %s" % (r.returncode, r.stderr.decode(errors="replace")))
            try:
                text = r.stdout.decode("utf-8")
            except UnicodeDecodeError as e:
                text = r.stdout.decode("utf-8", "replace")
                problems.append("not valid UTF-8: %s" % e)
            if any(ord(c) < 0x20 and c != "\n" for c in text):
                problems.append("control characters")
            if "<|" in text or "<role>" in text:
                problems.append("a special token")
            pieces = text.split()
            words = [p for p in pieces if p.isascii() and p.isalpha() and len(p) >= 3]
            share = len(words) / len(pieces) if pieces else 0.0
            if len(pieces) < 20 or share < 0.9:
                problems.append("%d pieces, %.0f%% words" % (len(pieces), 100 * share))
            print("seed %d: %s: %s" % (seed, "ok" if not problems else "FAIL; " + "; ".join(
                problems), text.strip()[:160]))
            failures += bool(problems)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
