#!/usr/bin/python3
"""Expert offload is lossless for model-llada-moe: on a generated tiny-moe
checkpoint (16 experts per MoE layer, top-4, a dense first layer, a shared
expert), the CPU backend playing both device and host, tokens and every
logit the decoder saw (FNV-1a hash) are bit-identical with no offload and
under policy-tide (interval 1 and 4, and with prefetch), policy-lru,
policy-lfu, policy-static, policy-cost, policy-hybrid and policy-warm at
budgets 0 (every expert on the host), 1, 8 (half) and 16 (all) where the
policy takes them. Generation runs the model's own decoder (llada): every
step one forward over the whole canvas (the attention is full).
Usage: test_offload_llada_moe.py PATH_TO_TIDE
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_offload import PROMPT, gpu_like_profile, run_ids, tide  # noqa: E402


def setup(binary, tmp):
    model = os.path.join(tmp, "tiny-moe")
    tide(binary, ["--quiet", "mkmodel", model, "--preset", "tiny-moe", "--seed", "11",
                  "--plugin", "model-llada-moe"])
    cfg = os.path.join(tmp, "t.ini")
    with open(cfg, "w") as f:
        f.write("[model]\nplugin = model-llada-moe\npath = %s\n"
                "[generation]\ngen_length = 64\n"
                "[output]\nprogress = false\nstream = false\n" % model)
    return cfg


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    binary = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="tide-lmoe-offload-")
    try:
        cfg = setup(binary, tmp)
        want = run_ids(binary, cfg, ["policy.budget=-1"])
        if not want or "," not in want.splitlines()[0]:
            print("no ids generated:", want)
            return 1
        prof = gpu_like_profile(tmp)
        library = os.path.join(tmp, "library.trc")
        run_ids(binary, cfg, ["policy.budget=-1", "output.trace=" + library])
        cases = [["policy.plugin=policy-static", "policy.budget=0"]]
        for b in (1, 8, 16):
            cases.append(["policy.plugin=policy-lru", "policy.budget=%d" % b])
            cases.append(["policy.plugin=policy-static", "policy.budget=%d" % b])
            for i in (1, 4):
                cases.append(["policy.plugin=policy-tide", "policy.budget=%d" % b,
                              "policy-tide.interval=%d" % i])
            cases.append(["policy.plugin=policy-tide", "policy.budget=%d" % b,
                          "policy-tide.prefetch=true"])
        for b in (1, 8):
            cases.append(["policy.plugin=policy-lfu", "policy.budget=%d" % b])
            cases.append(["policy.plugin=policy-cost", "policy.budget=%d" % b,
                          "policy.profile=" + prof])
            cases.append(["policy.plugin=policy-hybrid", "policy.budget=%d" % b,
                          "policy.profile=" + prof])
            cases.append(["policy.plugin=policy-warm", "policy.budget=%d" % b,
                          "policy.profile=" + prof, "policy-warm.library=" + library])
        failures = 0
        # The cases exercise offload: at budget 1 most expert rows run on the host.
        r = tide(binary, ["run", "-c", cfg, "--ids", PROMPT, "--set", "policy.plugin=policy-lru",
                          "--set", "policy.budget=1"])
        row = [l.split() for l in r.stderr.splitlines() if l.startswith("policy-lru")]
        host_rows = int(row[0][3]) if row and len(row[0]) > 3 else 0
        print("policy-lru budget 1: %d expert rows on the host" % host_rows)
        failures += host_rows <= 0
        for sets in cases:
            got = run_ids(binary, cfg, sets)
            ok = got == want
            failures += not ok
            print("%-75s %s" % (" ".join(sets), "identical" if ok else "DIFFERENT"))
            if not ok:
                print("  want:", want)
                print("  got: ", got)
        print("%d passed, %d failed" % (len(cases) + 1 - failures, failures))
        return 1 if failures else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
