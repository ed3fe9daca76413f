#!/usr/bin/python3
"""The KV-cached path equals recompute, end to end: `tide run --print-ids
--logits-hash` with generation.recompute = false (the default: prompt blocks
prefilled once, earlier blocks' K/V cached) and = true (the official loop:
the whole window forwarded at every step) give the same ids and the same
logits hash, and each run makes the documented number of forwards:

    recompute:  forwards == steps
    KV cache:   forwards == steps + P // L + (blocks decoded - 1)

This holds only when every CPU kernel is batch invariant (a row's bits do not
depend on how many rows share the call): a recompute forward gives every
matmul, expert and attention call more rows than the cached one.

Cases, on generated tiny checkpoints (model-llada2, CPU backend in both
roles; one also with q4_0 and with fp8 experts from tide quantize): decoders llada2 (thresholds 0.95 and 0.5) and llada21 (speed and
quality pairs); prompts of 5, 33 and 64 tokens; gen_length 96; blocks of 32
and 8; every `gemm` kernel and `expert_layout` this CPU runs; and the
reproducer of issue 22 (33-token prompt, threshold 0.5, gen_length 96, which
differed when inplace experts switched from the row kernel to oneDNN above 64
rows).

LLaDA-MoE (model-llada-moe) attends over the whole canvas and has no exact KV
path (its prefix_cache is approximate by design); its batch invariance is
checked by lossless_llada_moe_rows and the backend conformance test.

Usage: test_kv_recompute.py PATH_TO_TIDE [--quick]
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPRO = ("288,398,197,419,252,442,42,301,51,267,379,425,84,291,304,140,433,192,207,104,"
         "139,261,292,277,303,89,399,181,221,22,398,265,215")


def prompt(n, seed):
    return ",".join(str(5 + (i * 37 + seed * 11) % 440) for i in range(n))


def tide(binary, args):
    r = subprocess.run([binary] + args, capture_output=True, text=True)
    if r.returncode != 0:
        print("FAILED (exit %d): tide %s" % (r.returncode, " ".join(args)))
        print(r.stdout)
        print(r.stderr)
        sys.exit(1)
    return r


def run(binary, cfg, ids, sets):
    args = ["run", "-c", cfg, "--ids", ids, "--print-ids", "--logits-hash"]
    for s in sets:
        args += ["--set", s]
    r = tide(binary, args)
    m = re.search(r"done: (\d+) tokens in (\d+) blocks, (\d+) steps .* (\d+) forwards", r.stderr)
    if not m:
        print("no summary line in the log of tide %s:\n%s" % (" ".join(args), r.stderr))
        sys.exit(1)
    return {"out": r.stdout.strip(), "blocks": int(m.group(2)), "steps": int(m.group(3)),
            "forwards": int(m.group(4)), "log": r.stderr}


def kernels(binary, cfg):
    """The (gemm, expert_layout) settings this CPU runs, each with the
    backend's description."""
    out = []
    for gemm in ("auto", "amx", "own", "onednn"):
        for layout in ("auto", "packed"):
            sets = ["backend-cpu-onednn.gemm=" + gemm, "backend-cpu-onednn.expert_layout=" + layout]
            r = subprocess.run([binary, "run", "-c", cfg, "--ids", "5,6,7", "--print-ids"] +
                               sum((["--set", s] for s in sets + ["generation.gen_length=32"]), []),
                               capture_output=True, text=True)
            if r.returncode != 0:
                print("(skipped, refused on this CPU: %s)" % " ".join(sets))
                continue
            m = re.search(r"gemm (own \(\w+ ?\w*\)|onednn|amx), experts (\w+)", r.stderr)
            desc = m.group(0) if m else "?"
            if any(d == desc for _, d in out):
                continue  # the same kernels as a setting already listed
            out.append((sets, desc))
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    binary, quick = sys.argv[1], "--quick" in sys.argv[2:]
    tmp = tempfile.mkdtemp(prefix="tide-kv-")
    failures, cases = 0, 0
    try:
        models = {}
        for name, seed in (("tiny-s1", 1), ("tiny-s3", 3)):
            models[name] = os.path.join(tmp, name)
            tide(binary, ["--quiet", "mkmodel", models[name], "--preset", "tiny", "--seed",
                          str(seed)])
        # Quantized experts (docs/quantization.md) run their own kernel.
        for fmt in ("q4_0", "fp8"):
            models["tiny-s1-" + fmt] = os.path.join(tmp, "tiny-s1-" + fmt)
            tide(binary, ["--quiet", "quantize", models["tiny-s1"], models["tiny-s1-" + fmt],
                          "--experts", fmt])
        cfg = os.path.join(tmp, "t.ini")
        with open(cfg, "w") as f:
            f.write("[model]\nplugin = model-llada2\npath = %s\n"
                    "[backend]\ndevice = backend-cpu-onednn\nhost = backend-cpu-onednn\n"
                    "[policy]\nbudget = -1\n"
                    "[generation]\ngen_length = 96\nblock_length = 32\n"
                    "[output]\nprogress = false\nstream = false\n" % models["tiny-s1"])
        decoders = [
            ("llada2 0.95", ["generation.decoder=llada2", "generation.threshold=0.95"]),
            ("llada2 0.5", ["generation.decoder=llada2", "generation.threshold=0.5"]),
            ("llada21 speed", ["generation.decoder=llada21", "generation.mode=speed"]),
            ("llada21 quality", ["generation.decoder=llada21", "generation.mode=quality"]),
        ]
        cases_list = [("reproducer (issue 22)", "tiny-s1", REPRO, 32,
                       ["generation.decoder=llada2", "generation.threshold=0.5"])]
        for mname in ("tiny-s1", "tiny-s3"):
            for plen in (5, 33, 64):
                for dname, dsets in decoders:
                    for block in (32, 8):
                        if quick and (block == 8 or mname == "tiny-s3"):
                            continue
                        cases_list.append(("%s P=%d L=%d %s" % (dname, plen, block, mname),
                                           mname, prompt(plen, len(mname) + plen), block,
                                           dsets + ["generation.block_length=%d" % block]))
        for mname in ("tiny-s1-q4_0", "tiny-s1-fp8"):
            for plen in (33, 64):
                for dname, dsets in decoders[1::2]:
                    for block in (32, 8):
                        if quick and (block == 8 or plen == 64):
                            continue
                        cases_list.append(("%s P=%d L=%d %s" % (dname, plen, block, mname),
                                           mname, prompt(plen, 3 + plen), block,
                                           dsets + ["generation.block_length=%d" % block]))
        ks = kernels(binary, cfg)
        print("kernels: " + "; ".join(d for _, d in ks))
        edits = 0
        for ksets, kdesc in ks:
            for name, mname, ids, L, sets in cases_list:
                base = ["model.path=" + models[mname]] + ksets + sets
                kv = run(binary, cfg, ids, base + ["generation.recompute=false"])
                rc = run(binary, cfg, ids, base + ["generation.recompute=true"])
                P = len(ids.split(","))
                want_kv = kv["steps"] + P // L + (kv["blocks"] - 1)
                problems = []
                if kv["out"] != rc["out"]:
                    problems.append("ids or logits differ:\n    kv:        %s\n    recompute: %s"
                                    % (kv["out"].replace("\n", " "), rc["out"].replace("\n", " ")))
                if rc["forwards"] != rc["steps"]:
                    problems.append("recompute made %d forwards for %d steps"
                                    % (rc["forwards"], rc["steps"]))
                if kv["forwards"] != want_kv:
                    problems.append("KV made %d forwards, the formula says %d (steps %d, P %d, "
                                    "L %d, blocks %d)" % (kv["forwards"], want_kv, kv["steps"], P,
                                                         L, kv["blocks"]))
                m = re.search(r"(\d+) edits", kv["log"])
                edits += int(m.group(1)) if m else 0
                cases += 1
                failures += bool(problems)
                h = kv["out"].splitlines()[-1].split()[-1] if kv["out"] else "?"
                print("%-44s %-32s %s (%d steps, forwards %d / %d, %s)" % (
                    name, kdesc, "same" if not problems else "DIFFERENT", kv["steps"],
                    kv["forwards"], rc["forwards"], h))
                for p in problems:
                    print("  " + p)
        if not quick and edits == 0:
            print("the llada21 cases edited nothing: the test would not see an edit's rows")
            failures += 1
        print("%d passed, %d failed" % (cases - failures, failures))
        return 1 if failures else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
