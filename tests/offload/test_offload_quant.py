#!/usr/bin/python3
"""Offload of block-quantized experts end to end on the tiny checkpoint
quantized by `tide quantize` (q8_0, q4_0, fp8), the CPU backend playing both
the device and the host (docs/quantization.md).

For each format:
  lossless   tokens and every logit the decoder saw (FNV-1a hash) are
             bit-identical under no offload, budget 0 (every expert on the
             host), policy-lru, policy-static and policy-tide at budgets 1
             and 16, policy-tide with prefetch, and policy-cost with a
             profile measured for that format ([expert] format);
  bytes      the telemetry's weight_bytes are promotions times the format's
             real bytes per expert (values and scales), smaller than bf16's;
  profile    a profile of another format is refused for a cost-aware policy
             (exit 2), naming both formats.
Usage: test_offload_quant.py PATH_TO_TIDE
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_offload import GPU_LIKE, PROMPT, run_ids, setup, tide  # noqa: E402

FORMATS = ("q8_0", "q4_0", "fp8")


def expert_bytes(fmt, hidden, inter):
    """Bytes of one expert, from the layouts in docs/quantization.md."""
    def mat(rows, cols):
        if fmt == "q8_0":
            return rows * cols + rows * (cols // 32) * 2
        if fmt == "q4_0":
            return rows * cols // 2 + rows * (cols // 32) * 2
        return rows * cols + (-(-rows // 128)) * (-(-cols // 128)) * 4
    return 2 * mat(inter, hidden) + mat(hidden, inter)


def one_format(binary, tmp, model, fmt):
    qdir = os.path.join(tmp, "tiny-" + fmt)
    tide(binary, ["--quiet", "quantize", model, qdir, "--experts", fmt])
    cfg = os.path.join(tmp, fmt + ".ini")
    with open(cfg, "w") as f:
        f.write("[model]\npath = %s\n[generation]\ngen_length = 64\n"
                "[output]\nprogress = false\nstream = false\n" % qdir)
    prof = os.path.join(tmp, fmt + "-profile.ini")
    with open(prof, "w") as f:
        f.write(GPU_LIKE.replace("inter = 32\n", "inter = 32\nformat = %s\n" % fmt))
    failures = 0
    want = run_ids(binary, cfg, ["policy.budget=-1"])
    cases = [["policy.budget=0", "policy.plugin=policy-static"]]
    for b in (1, 16):
        cases.append(["policy.plugin=policy-lru", "policy.budget=%d" % b])
        cases.append(["policy.plugin=policy-static", "policy.budget=%d" % b])
        cases.append(["policy.plugin=policy-tide", "policy.budget=%d" % b,
                      "policy-tide.interval=4"])
    cases.append(["policy.plugin=policy-tide", "policy.budget=8", "policy-tide.prefetch=true"])
    cases.append(["policy.plugin=policy-cost", "policy.budget=8", "policy.profile=" + prof])
    for sets in cases:
        got = run_ids(binary, cfg, sets)
        ok = got == want
        failures += not ok
        print("%-5s %-66s %s" % (fmt, " ".join(sets), "identical" if ok else "DIFFERENT"))
        if not ok:
            print("  want:", want)
            print("  got: ", got)

    conf = json.load(open(os.path.join(qdir, "config.json")))
    hidden, inter = conf["hidden_size"], conf["moe_intermediate_size"]
    per = expert_bytes(fmt, hidden, inter)
    path = os.path.join(tmp, fmt + "-m.jsonl")
    tide(binary, ["--quiet", "run", "-c", cfg, "--ids", PROMPT, "--print-ids",
                  "--set", "output.metrics=" + path, "--set", "policy.plugin=policy-lru",
                  "--set", "policy.budget=4"])
    layers = [l for l in map(json.loads, open(path)) if l["type"] == "layer"]
    promotions = sum(l["promotions"] for l in layers)
    bad = [l for l in layers if l["weight_bytes"] != l["promotions"] * per]
    ok = promotions > 0 and not bad and per < 3 * hidden * inter * 2
    failures += not ok
    print("%-5s telemetry: %d promotions of %d bytes (bf16: %d): %s"
          % (fmt, promotions, per, 3 * hidden * inter * 2, "consistent" if ok else "WRONG"))
    for l in bad[:3]:
        print("  ", l)

    other = os.path.join(tmp, fmt + "-other.ini")
    with open(other, "w") as f:
        f.write(GPU_LIKE)  # a bf16 profile
    r = tide(binary, ["--quiet", "run", "-c", cfg, "--ids", PROMPT, "--set",
                      "policy.plugin=policy-cost", "--set", "policy.budget=8",
                      "--set", "policy.profile=" + other], check=False)
    ok = r.returncode == 2 and ("--format " + fmt) in r.stderr
    failures += not ok
    print("%-5s a bf16 profile is refused: %s" % (fmt, "yes" if ok else "NO"))
    if not ok:
        print(r.returncode, r.stderr[-800:])
    return failures, len(cases) + 2


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    binary = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="tide-offq-")
    try:
        model, _ = setup(binary, tmp)
        failures = total = 0
        for fmt in FORMATS:
            f, n = one_format(binary, tmp, model, fmt)
            failures += f
            total += n
        print("%d passed, %d failed" % (total - failures, failures))
        return 1 if failures else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
