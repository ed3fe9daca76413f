#!/usr/bin/python3
"""`tide run` per expert format: ms per forward, peak RSS, checkpoint size and
bytes promoted (docs/quantization.md).

For each checkpoint given as FORMAT=DIR, one generation of --gen tokens of a
fixed chat prompt with no offload, and one with --budget experts per MoE
layer under policy-tide (the CPU backend plays the device: promotions are
copies into its slots, counted like PCIe bytes). A first, untimed run per
checkpoint pages it in from disk. Each is timed as the engine
reports it ("done: ... N forwards, T s"); peak RSS is the process's
(wait4's rusage, so the mapped checkpoint pages it touched count).
Prints one Markdown table naming the CPU.

Usage: speed.py --tide BUILD/tide [--gen 32] [--budget 64] bf16=DIR q8_0=DIR ...
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import cpu_name  # noqa: E402

PROMPT = "Write a short poem about the morning sea."


def run(binary, model, gen, sets):
    args = [binary, "run", "--set", "model.path=" + model, "--set", "model.check_weights=false",
            "--set", "generation.gen_length=%d" % gen, "--set", "output.progress=false",
            "--chat", "-p", PROMPT, "--print-ids"]
    for s in sets:
        args += ["--set", s]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(args, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        r = subprocess.CompletedProcess(args, p.returncode, out.read(), err.read())
    if r.returncode:
        sys.exit("FAILED: %s\n%s" % (" ".join(args), r.stderr[-1500:]))
    rss = usage.ru_maxrss
    m = re.search(r"done: (\d+) tokens .* (\d+) forwards, ([0-9.]+) s", r.stderr)
    if not m:
        sys.exit("no 'done:' line in the output of " + " ".join(args))
    gb = 0.0
    for line in r.stdout.splitlines() + r.stderr.splitlines():
        f = line.split()
        if len(f) >= 9 and f[0].startswith("policy-"):
            gb = float(f[5])
    return {"forwards": int(m.group(2)), "seconds": float(m.group(3)),
            "rss_kb": rss, "gb": gb, "ids": r.stdout.strip()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tide", required=True)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--budget", type=int, default=64)
    ap.add_argument("models", nargs="+", help="FORMAT=DIR")
    a = ap.parse_args()
    print("tide run, %d tokens of one chat prompt, CPU backend in both roles; CPU: %s\n"
          % (a.gen, cpu_name()))
    print("| format | file GB | no offload: ms/forward | peak RSS GB | budget %d (policy-tide): "
          "ms/forward | GB promoted |" % a.budget)
    print("|---|---|---|---|---|---|")
    for spec in a.models:
        fmt, d = spec.split("=", 1)
        size = sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d)
                   if n.endswith(".safetensors"))
        # a first run pages the checkpoint in: time the second
        run(a.tide, d, a.gen, ["policy.budget=-1"])
        full = run(a.tide, d, a.gen, ["policy.budget=-1"])
        off = run(a.tide, d, a.gen, ["policy.budget=%d" % a.budget,
                                     "policy.plugin=policy-tide"])
        print("| %s | %.2f | %.0f | %.2f | %.0f | %.2f |"
              % (fmt, size / 1e9, 1e3 * full["seconds"] / full["forwards"],
                 full["rss_kb"] / 1e6, 1e3 * off["seconds"] / off["forwards"], off["gb"]))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
