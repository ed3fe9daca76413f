#!/usr/bin/python3
"""Speed paths change no token and no logit for model-llada-moe, end to end
on a generated tiny-moe checkpoint (CPU backend in both roles; generation
with the model's own decoder, llada: whole-canvas forwards), comparing
`tide run --print-ids --logits-hash` with each path on and off:

  rows   the output layer only for the still-masked rows (forward_rows)
         against every row (generation.all_logits = true) and against
         --dump-logits (which needs the whole block), with no offload and at
         budget 4;
  simd   backend-cpu-onednn.simd = true against false, with no offload and
         at budget 0 (every expert on the host); skipped (77) without AVX-512 or
         AVX2;
  load   [model] mmap = false and mlock = true against the default mapping.
Usage: test_lossless_llada_moe.py MODE PATH_TO_TIDE
"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "offload"))
from test_offload import PROMPT, tide  # noqa: E402
from test_offload_llada_moe import setup  # noqa: E402


def run_ids(binary, cfg, sets, extra=()):
    args = ["run", "-c", cfg, "--ids", PROMPT, "--print-ids", "--logits-hash"] + list(extra)
    for s in sets:
        args += ["--set", s]
    r = tide(binary, args)
    return r.stdout.strip(), r.stderr


def compare(name, want, got, counts):
    ok = want == got
    counts[0] += 1
    counts[1] += not ok
    print("%-70s %s" % (name, "identical" if ok else "DIFFERENT"))
    if not ok:
        print("  want:", want)
        print("  got: ", got)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    mode, binary = sys.argv[1:]
    tmp = tempfile.mkdtemp(prefix="tide-lmoe-lossless-")
    counts = [0, 0]
    try:
        cfg = setup(binary, tmp)
        if mode == "rows":
            for base in ([], ["policy.budget=4", "policy.plugin=policy-tide"]):
                want, _ = run_ids(binary, cfg, base)
                got, _ = run_ids(binary, cfg, base + ["generation.all_logits=true"])
                compare(" ".join(base + ["generation.all_logits=true"]), want, got, counts)
                dump = os.path.join(tmp, "d.bin")
                if os.path.exists(dump):
                    os.remove(dump)
                got, _ = run_ids(binary, cfg, base, ["--dump-logits", dump])
                compare(" ".join(base) + " --dump-logits", want, got, counts)
        elif mode == "simd":
            for place in (["policy.budget=-1"], ["policy.budget=0", "policy.plugin=policy-static"]):
                on, log = run_ids(binary, cfg, place + ["backend-cpu-onednn.simd=true"])
                if "simd on" not in log and "simd avx2" not in log:
                    print("skipped: the simd kernels do not run here")
                    return 77
                off, _ = run_ids(binary, cfg, place + ["backend-cpu-onednn.simd=false"])
                compare(" ".join(place) + " simd on/off", off, on, counts)
        elif mode == "load":
            want, _ = run_ids(binary, cfg, [])
            for sets in (["model.mmap=false"], ["model.mlock=true"]):
                got, _ = run_ids(binary, cfg, sets)
                compare(" ".join(sets), want, got, counts)
        else:
            print("unknown mode", mode)
            return 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (counts[0] - counts[1], counts[1]))
    return 1 if counts[1] else 0


if __name__ == "__main__":
    sys.exit(main())
