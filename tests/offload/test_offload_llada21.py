#!/usr/bin/python3
"""Expert offload stays lossless under decoder-llada21 (the LLaDA2.1 loop:
open-ended steps, token editing): on the generated tiny checkpoint, the CPU
backend playing both device and host, tokens and every logit the decoder
saw (FNV-1a hash) are bit-identical with no offload and under every policy
(policy-static at budget 0, policy-lru, policy-static, policy-tide at
interval 1, 4 and 32 and with prefetch, at budgets 1, 16 and 32;
policy-lfu, policy-cost, policy-hybrid, policy-warm), in the modes speed
(threshold 0.5, editing 0.0) and quality (0.7, 0.5). Each mode's run edits
(the count is checked nonzero), so placement is exercised across edit steps
and the editing-only steps after a block is full.
Usage: test_offload_llada21.py PATH_TO_TIDE
"""
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_offload import PROMPT, gpu_like_profile, run_ids, tide  # noqa: E402


def setup(binary, tmp):
    model = os.path.join(tmp, "tiny")
    tide(binary, ["--quiet", "mkmodel", model, "--preset", "tiny", "--seed", "11"])
    cfg = os.path.join(tmp, "t.ini")
    with open(cfg, "w") as f:
        f.write("[model]\npath = %s\n[generation]\ngen_length = 64\ndecoder = llada21\n"
                "[output]\nprogress = false\nstream = false\n" % model)
    return cfg


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    binary = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="tide-l21-offload-")
    failures = 0
    try:
        cfg = setup(binary, tmp)
        prof = gpu_like_profile(tmp)
        for mode in ("speed", "quality"):
            m = ["generation.mode=" + mode]
            want = run_ids(binary, cfg, m + ["policy.budget=-1"])
            r = tide(binary, ["run", "-c", cfg, "--ids", PROMPT, "--set", m[0]])
            edits = re.search(r"(\d+) edits", r.stderr)
            n_edits = int(edits.group(1)) if edits else 0
            print("mode %s: %d edits without offload" % (mode, n_edits))
            failures += n_edits == 0
            library = os.path.join(tmp, "library-%s.trc" % mode)
            run_ids(binary, cfg, m + ["policy.budget=-1", "output.trace=" + library])
            cases = [["policy.plugin=policy-static", "policy.budget=0"]]
            for b in (1, 16, 32):
                cases.append(["policy.plugin=policy-lru", "policy.budget=%d" % b])
                cases.append(["policy.plugin=policy-static", "policy.budget=%d" % b])
                for i in (1, 4, 32):
                    cases.append(["policy.plugin=policy-tide", "policy.budget=%d" % b,
                                  "policy-tide.interval=%d" % i])
                cases.append(["policy.plugin=policy-tide", "policy.budget=%d" % b,
                              "policy-tide.prefetch=true"])
            for b in (1, 16):
                cases.append(["policy.plugin=policy-lfu", "policy.budget=%d" % b])
                cases.append(["policy.plugin=policy-cost", "policy.budget=%d" % b,
                              "policy.profile=" + prof])
            cases.append(["policy.plugin=policy-hybrid", "policy.budget=16",
                          "policy.profile=" + prof])
            cases.append(["policy.plugin=policy-warm", "policy.budget=16",
                          "policy.profile=" + prof, "policy-warm.library=" + library])
            for sets in cases:
                got = run_ids(binary, cfg, m + sets)
                ok = got == want
                failures += not ok
                print("%-8s %-70s %s" % (mode, " ".join(sets), "identical" if ok else "DIFFERENT"))
                if not ok:
                    print("  want:", want)
                    print("  got: ", got)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
