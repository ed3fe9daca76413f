#!/usr/bin/python3
"""Accuracy of quantized experts against bf16, measured (docs/quantization.md).

For a bf16 checkpoint MODEL, `tide quantize` writes one copy per format into
WORK (kept, reused on a rerun), then for every prompt of PROMPTS (chat
template applied):
  - one forward over the prompt followed by one block of masks (what the
    decoder's first step sees): per position, top-1 agreement of the
    format's logits with bf16's, and KL(p_bf16 || p_format) of the softmax;
  - with --gen N (default 32, one block), a generation of N tokens with the
    default decoder: whether its ids are identical to bf16's.
Prints one table (Markdown) naming the CPU, and writes it with the raw
per-prompt numbers as JSON to --out.

Usage: run.py --tide BUILD/tide --model DIR --work DIR [--prompts FILE]
              [--formats q8_0,q4_0,fp8] [--gen N] [--limit N] [--out FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import time

try:
    import numpy as np
except ImportError:
    sys.exit("numpy is needed (/usr/bin/python3 on Debian has it)")

HERE = os.path.dirname(os.path.abspath(__file__))


def tide(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    if r.returncode:
        sys.exit("FAILED: %s\n%s" % (" ".join(args), r.stderr[-2000:]))
    return r.stdout


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + ", %d CPUs" % os.cpu_count()
    except OSError:
        pass
    return "unknown CPU"


def ids_of(binary, model, text, chat):
    out = tide([binary, "--quiet", "tokenize", "--model", model, "--json"] +
               (["--chat"] if chat else []) + ["--", text])
    j = json.loads(out)
    return j["ids"] if isinstance(j, dict) else [t["id"] for t in j]


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tide", required=True)
    ap.add_argument("--model", required=True, help="the bf16 checkpoint")
    ap.add_argument("--work", required=True, help="where the quantized copies go (kept)")
    ap.add_argument("--prompts", default=os.path.join(HERE, "prompts-64.txt"))
    ap.add_argument("--formats", default="q8_0,q4_0,fp8")
    ap.add_argument("--gen", type=int, default=32, help="tokens per generation (0: none)")
    ap.add_argument("--limit", type=int, default=0, help="first N prompts only")
    ap.add_argument("--out", default=None, help="JSON results")
    a = ap.parse_args()
    prompts = [l.strip() for l in open(a.prompts) if l.strip() and not l.startswith("#")]
    if a.limit:
        prompts = prompts[:a.limit]
    formats = a.formats.split(",")
    os.makedirs(a.work, exist_ok=True)
    dirs = {"bf16": a.model}
    for f in formats:
        d = os.path.join(a.work, os.path.basename(os.path.normpath(a.model)) + "-" + f)
        if not os.path.exists(d):
            t0 = time.time()
            tide([a.tide, "--quiet", "quantize", a.model, d, "--experts", f])
            print("quantized %s in %.0f s" % (d, time.time() - t0), file=sys.stderr)
        dirs[f] = d
    conf = json.load(open(os.path.join(a.model, "config.json")))
    vocab = conf["vocab_size"]
    mask = ids_of(a.tide, a.model, "<|mask|>", False)[0]
    block = 32
    res = {f: {"top1": [], "kl": [], "same_ids": []} for f in formats}
    tmp = os.path.join(a.work, "acc.f32")
    t_start = time.time()
    for i, p in enumerate(prompts):
        ids = ids_of(a.tide, a.model, p, True) + [mask] * block
        ids_s = ",".join(map(str, ids))
        logits, gen = {}, {}
        for f in ["bf16"] + formats:
            # check_weights off: the NaN scan reads the whole checkpoint per call
            tide([a.tide, "--quiet", "forward", "--set", "model.path=" + dirs[f],
                  "--set", "model.check_weights=false", "--ids", ids_s,
                  "--out", tmp, "--force"])
            logits[f] = np.fromfile(tmp, dtype="<f4").reshape(len(ids), vocab)
            if a.gen:
                gen[f] = tide([a.tide, "--quiet", "run", "--set", "model.path=" + dirs[f],
                               "--set", "model.check_weights=false",
                               "--set", "generation.gen_length=%d" % a.gen, "--set",
                               "output.progress=false", "--chat", "-p", p, "--print-ids"]).strip()
        ref = log_softmax(logits["bf16"])
        for f in formats:
            lq = log_softmax(logits[f])
            res[f]["top1"].append(float(np.mean(logits[f].argmax(-1) == logits["bf16"].argmax(-1))))
            res[f]["kl"].append(float(np.mean((np.exp(ref) * (ref - lq)).sum(-1))))
            if a.gen:
                res[f]["same_ids"].append(gen[f] == gen["bf16"])
        el = time.time() - t_start
        print("prompt %d/%d, %.0f s, about %.0f s left" % (i + 1, len(prompts), el,
              el / (i + 1) * (len(prompts) - i - 1)), file=sys.stderr)
    size = {f: sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d)
                   if n.endswith(".safetensors")) for f, d in dirs.items()}
    lines = ["quantized experts vs bf16 on %s (%d prompts, chat template, prompt + one block "
             "of %d masks; generations of %d tokens); CPU: %s"
             % (os.path.basename(os.path.normpath(a.model)), len(prompts), block, a.gen,
                cpu_name()),
             "",
             "| format | file GB | top-1 agreement | mean KL (nats) | identical generations |",
             "|---|---|---|---|---|",
             "| bf16 | %.2f | 100%% | 0 | %s |" % (size["bf16"] / 1e9,
                                                   "%d/%d" % (len(prompts), len(prompts))
                                                   if a.gen else "-")]
    for f in formats:
        r = res[f]
        same = ("%d/%d (%.0f%%)" % (sum(r["same_ids"]), len(r["same_ids"]),
                                    100.0 * sum(r["same_ids"]) / len(r["same_ids"]))
                if a.gen else "-")
        lines.append("| %s | %.2f | %.2f%% | %.3g | %s |"
                     % (f, size[f] / 1e9, 100.0 * float(np.mean(r["top1"])),
                        float(np.mean(r["kl"])), same))
    print("\n".join(lines))
    if a.out:
        with open(a.out, "w") as fo:
            json.dump({"table": lines, "per_prompt": res, "prompts": prompts}, fo, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
