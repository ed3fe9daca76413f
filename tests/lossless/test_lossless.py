#!/usr/bin/python3
"""Speed paths change no token and no logit, end to end on a generated tiny
checkpoint (CPU backend in both roles), comparing `tide run --print-ids
--logits-hash` with the optimisation on and off:

  simd   backend-cpu-onednn.simd = true (AVX-512 attention, exp/SiLU, the
         expert batch with one expert per thread; or, without AVX-512, the
         AVX2 attention) against false (the plain C loops), with no offload,
         every expert on the host (budget 0) and policy-tide at budget 8; 1
         and 2 threads. Skipped (77) when the CPU has neither (both settings
         would run the plain loops).
  rows   the output layer only for the still-masked rows (the model's
         forward_rows) against every row of the block (generation.all_logits
         = true, and --dump-logits, which needs the whole block), with the
         KV cache and with recompute, with no offload and at budget 4; the
         logits hash covers the rows the decoder read, so it must match too.
  load   [model] mmap = false (the checkpoint read into RAM) and mlock = true,
         alone and together, against the default mapping; and the NaN/Inf
         scan's marker: never written unless remember_check = true, then the
         next load skips the scan, and a file whose mtime changed is scanned
         again.
Usage: test_lossless.py MODE PATH_TO_TIDE
"""
import os
import shutil
import sys
import tempfile

# The tiny checkpoint, its config and the prompt of the offload tests.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "offload"))
from test_offload import PROMPT, setup as setup_model, tide  # noqa: E402


def setup(binary, tmp):
    return setup_model(binary, tmp)[1]


def run_ids(binary, cfg, sets):
    args = ["run", "-c", cfg, "--ids", PROMPT, "--print-ids", "--logits-hash"]
    for s in sets:
        args += ["--set", s]
    r = tide(binary, args)
    return r.stdout.strip(), r.stderr


def simd(binary, tmp):
    cfg = setup(binary, tmp)
    failures, cases = 0, 0
    for threads in (1, 2):
        for place in (["policy.budget=-1"], ["policy.budget=0", "policy.plugin=policy-static"],
                      ["policy.budget=8", "policy.plugin=policy-tide"]):
            base = ["backend-cpu-onednn.threads=%d" % threads] + place
            on, log = run_ids(binary, cfg, base + ["backend-cpu-onednn.simd=true"])
            if "simd on" not in log and "simd avx2" not in log:
                print("skipped: the simd kernels do not run here:",
                      [l for l in log.splitlines() if "simd" in l])
                return 77
            off, _ = run_ids(binary, cfg, base + ["backend-cpu-onednn.simd=false"])
            cases += 1
            ok = on == off
            failures += not ok
            print("%-70s %s" % (" ".join(base), "identical" if ok else "DIFFERENT"))
            if not ok:
                print("  simd on: ", on)
                print("  simd off:", off)
    print("%d passed, %d failed" % (cases - failures, failures))
    return 1 if failures else 0


def rows(binary, tmp):
    cfg = setup(binary, tmp)
    failures, cases = 0, 0
    for base in ([], ["generation.recompute=true"],
                 ["policy.budget=4", "policy.plugin=policy-tide"]):
        want, _ = run_ids(binary, cfg, base)
        for extra, dump in ((["generation.all_logits=true"], False), ([], True)):
            args = ["run", "-c", cfg, "--ids", PROMPT, "--print-ids", "--logits-hash"]
            for x in base + extra:
                args += ["--set", x]
            path = os.path.join(tmp, "dump.bin")
            if dump:
                if os.path.exists(path):
                    os.remove(path)
                args += ["--dump-logits", path]
            got = tide(binary, args).stdout.strip()
            cases += 1
            ok = got == want
            failures += not ok
            name = " ".join(base + extra) + (" --dump-logits" if dump else "")
            print("%-70s %s" % (name, "identical" if ok else "DIFFERENT"))
            if not ok:
                print("  masked rows:", want)
                print("  all rows:   ", got)
    print("%d passed, %d failed" % (cases - failures, failures))
    return 1 if failures else 0


def load(binary, tmp):
    cfg = setup(binary, tmp)
    model = os.path.join(tmp, "tiny")
    marker = os.path.join(model, ".tide-weights-verified")
    want, log = run_ids(binary, cfg, [])
    failures, cases = 0, 0

    def check(name, ok, detail=""):
        nonlocal failures, cases
        cases += 1
        failures += not ok
        print("%-60s %s" % (name, "ok" if ok else "FAILED " + detail))

    for sets in (["model.mmap=false"], ["model.mlock=true"],
                 ["model.mmap=false", "model.mlock=true"]):
        got, _ = run_ids(binary, cfg, sets)
        check(" ".join(sets) + ": same ids and logits", got == want, got)
    check("no marker written by default", not os.path.exists(marker))
    check("the default scans the weights", "skipping the NaN/Inf scan" not in log)
    _, log = run_ids(binary, cfg, ["model.remember_check=true"])
    check("remember_check = true writes the marker", os.path.exists(marker), log)
    got, log = run_ids(binary, cfg, [])
    check("an unchanged checkpoint skips the scan", "skipping the NaN/Inf scan" in log, log)
    check("  with the same ids and logits", got == want, got)
    st = os.stat(os.path.join(model, "model.safetensors"))
    os.utime(os.path.join(model, "model.safetensors"), ns=(st.st_atime_ns,
                                                           st.st_mtime_ns + 10**9))
    _, log = run_ids(binary, cfg, [])
    check("a changed mtime scans again", "skipping the NaN/Inf scan" not in log, log)
    print("%d passed, %d failed" % (cases - failures, failures))
    return 1 if failures else 0


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    mode, binary = sys.argv[1:]
    tmp = tempfile.mkdtemp(prefix="tide-lossless-")
    try:
        if mode == "simd":
            return simd(binary, tmp)
        if mode == "load":
            return load(binary, tmp)
        if mode == "rows":
            return rows(binary, tmp)
        print("unknown mode", mode)
        return 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
