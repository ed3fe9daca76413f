#!/usr/bin/python3
"""model-llada-moe against the numpy reference (llada_moe_ref.py, written from
the official modeling_lladamoe.py) on a generated tiny-moe checkpoint.

For a few id sequences (random ids; a prompt followed by mask tokens, as the
decoder's canvas looks), `tide forward --chunk 0` (one full forward) must
agree with the reference:
  1. routing: the engine's expert choices (recorded with --trace) equal the
     reference's own for every token and MoE layer, except where the
     reference's scores put them within Model.ROUTE_MARGIN of the boundary
     (unexplained differences: 0);
  2. logits, computed by the reference with the engine's routing, within
     REL_TOL of the logit scale (bf16 roundings at the same points; the
     engine sums in float32 in its kernels' order, the reference in float64).
A wrong mask (causal or block instead of full), rotation, norm placement or
routing rule moves logits by O(1) of the scale.

Then generation with the model's own decoder (generation.decoder = auto
resolves to "llada", LLaDA's generate.py: every step one forward over the
whole canvas): llada_generate_ref.generate(), written from generate.py,
driven by this reference's forward with the engine's routing (from its
trace, as a router near-tie must not send the two down different experts),
must give the engine's ids, step, block and forward counts exactly.
Usage: test_llada_moe_vs_ref.py PATH_TO_TIDE. Exit 0 pass, 1 fail, 77 skipped.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("skipped: numpy is not importable by", sys.executable)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llada2_ref  # noqa: E402
import llada_generate_ref as LR  # noqa: E402
import llada_moe_ref as R  # noqa: E402

REL_TOL = 2e-2


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print("FAILED:", " ".join(cmd))
        print(r.stdout)
        print(r.stderr)
        sys.exit(1)
    return r.stdout


class Replay:
    """(ids) -> logits of one whole-canvas forward, for generate(): the
    reference computes its own on the canvas (with the engine's routing),
    and the rows of the current block, the ones the decoder decides on, are
    replaced by the engine's (--dump-logits), whose largest difference from
    the reference's is recorded. Deciding on the engine's logits keeps the
    two canvases identical, so that a confidence near-tie (bf16 rounding in
    a different order) cannot send the loops apart; the logits are then
    compared at every step instead."""

    def __init__(self, model, force, steps, prompt_len, block):
        self.model, self.force, self.steps = model, force, steps
        self.P, self.L = prompt_len, block
        self.i, self.diffs, self.scale = 0, [], 0.0

    def __call__(self, ids):
        ref = np.array(self.model.forward(list(map(int, ids)), force=self.force))
        if self.i >= len(self.steps):
            raise llada2_ref.RefError("the reference decoded more steps than the engine")
        blk, _, eng = self.steps[self.i]
        self.i += 1
        b0 = self.P + blk * self.L
        if eng.shape[0] != self.L or b0 + self.L > len(ids):
            raise llada2_ref.RefError("step %d: block %d's dump holds %d rows"
                                      % (self.i, blk, eng.shape[0]))
        self.diffs.append(float(np.abs(eng - ref[b0:b0 + self.L]).max()))
        self.scale = max(self.scale, float(np.abs(ref).max()))
        ref[b0:b0 + self.L] = eng
        return ref


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tide = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="tide-lmoe-ref-")
    failures = cases = 0
    try:
        model = os.path.join(tmp, "tiny")
        run([tide, "mkmodel", model, "--preset", "tiny-moe", "--seed", "7", "--plugin",
             "model-llada-moe"])
        cfg = os.path.join(tmp, "t.ini")
        with open(cfg, "w") as f:
            f.write("[model]\nplugin = model-llada-moe\npath = %s\n[output]\nprogress = false\n"
                    % model)
        vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
        tok = json.load(open(os.path.join(model, "tokenizer.json")))
        mask = {t["content"]: t["id"] for t in tok["added_tokens"]}["<|mask|>"]
        rng = np.random.default_rng(3)
        seqs = {
            "random 70": rng.integers(0, vocab - 8, size=70).tolist(),
            "prompt 12 + 52 masks": rng.integers(0, vocab - 8, size=12).tolist() + [mask] * 52,
            "one token": [int(rng.integers(0, vocab - 8))],
        }
        ref = R.Model(model)
        for name, ids in seqs.items():
            cases += 1
            out = os.path.join(tmp, "l.f32")
            trace = os.path.join(tmp, "l.trace")
            run([tide, "--quiet", "forward", "-c", cfg, "--ids", ",".join(map(str, ids)),
                 "--out", out, "--chunk", "0", "--trace", trace, "--force"])
            got = np.fromfile(out, dtype="<f4").reshape(len(ids), vocab)
            force = llada2_ref.read_trace_routes(trace)
            ref.route_stats = {"tokens": 0, "different": 0, "unexplained": 0}
            want = ref.forward(ids, force=force)
            scale = float(np.abs(want).max())
            diff = float(np.abs(got - want).max())
            st = ref.route_stats
            ok = (diff <= REL_TOL * scale and not st["unexplained"] and not force
                  and st["tokens"] == len(ids) * sum(ref.cfg.moe))
            print("%-22s max|diff| %.3g (scale %.3g, tol %.3g); routing: %d token-layers, %d "
                  "differ, %d unexplained: %s"
                  % (name, diff, scale, REL_TOL * scale, st["tokens"], st["different"],
                     st["unexplained"], "ok" if ok else "FAIL"))
            failures += not ok
        for plen in (12, 45):
            cases += 1
            prompt = seqs["random 70"][:plen]
            trace = os.path.join(tmp, "run%d.trace" % plen)
            dump = os.path.join(tmp, "steps%d.bin" % plen)
            r = subprocess.run([tide, "run", "-c", cfg, "--ids", ",".join(map(str, prompt)),
                                "--print-ids", "--set", "generation.gen_length=64",
                                "--set", "generation.block_length=32",
                                "--set", "generation.steps=32",
                                "--dump-logits", dump, "--set", "output.trace=" + trace],
                               capture_output=True,
                               text=True)
            if r.returncode != 0:
                print("FAILED: tide run\n" + r.stdout + r.stderr)
                return 1
            got = [int(t) for t in r.stdout.strip().split(",") if t]
            m = re.search(r"done: (\d+) tokens in (\d+) blocks, (\d+) steps .* (\d+) forwards",
                          r.stderr)
            force = llada2_ref.read_trace_routes(trace)
            ref.route_stats = {"tokens": 0, "different": 0, "unexplained": 0}
            rst = {}
            steps = llada2_ref.read_logits_dump(dump)
            replay = Replay(ref, force, steps, plen, 32)
            want = LR.generate(replay, prompt, 64, 32, 32, mask, ref.eos_id, stats=rst)
            st = ref.route_stats
            counts = m and (int(m.group(2)), int(m.group(3)), int(m.group(4)))
            worst = max(replay.diffs) if replay.diffs else float("inf")
            ok = (got == want and not force and not st["unexplained"]
                  and replay.i == len(steps) and worst <= REL_TOL * replay.scale
                  and counts == (rst["blocks"], rst["steps"], rst["forwards"]))
            print("generate prompt=%d (decoder llada): %d ids, replayed decisions %s; "
                  "blocks/steps/forwards tide %s, reference %s; max|diff| over all steps %.3g "
                  "(tol %.3g); routing: %d token-layers, %d near-ties forced, %d unexplained: %s"
                  % (plen, len(got), "identical" if got == want else "DIFFERENT", counts,
                     (rst["blocks"], rst["steps"], rst["forwards"]), worst,
                     REL_TOL * replay.scale, st["tokens"], st["different"], st["unexplained"],
                     "ok" if ok else "FAIL"))
            if got != want:
                print("    tide:", got)
                print("    ref: ", want)
            failures += not ok
        # Quantized experts (docs/quantization.md): the same forward on the
        # checkpoint with q4_0 and with fp8 experts, against the reference's
        # own dequantization.
        for fmt in ("q4_0", "fp8"):
            cases += 1
            qdir = os.path.join(tmp, "q-" + fmt)
            run([tide, "--quiet", "quantize", model, qdir, "--experts", fmt])
            ids = seqs["random 70"]
            out = os.path.join(tmp, "q.f32")
            trace = os.path.join(tmp, "q.trace")
            run([tide, "--quiet", "forward", "-c", cfg, "--set", "model.path=" + qdir, "--ids",
                 ",".join(map(str, ids)), "--out", out, "--chunk", "0", "--trace", trace,
                 "--force"])
            got = np.fromfile(out, dtype="<f4").reshape(len(ids), vocab)
            qref = R.Model(qdir)
            force = llada2_ref.read_trace_routes(trace)
            want = qref.forward(ids, force=force)
            scale = float(np.abs(want).max())
            diff = float(np.abs(got - want).max())
            st = qref.route_stats
            ok = diff <= REL_TOL * scale and not st["unexplained"] and not force
            print("%-22s max|diff| %.3g (scale %.3g, tol %.3g); routing: %d token-layers, %d "
                  "differ, %d unexplained: %s"
                  % (fmt + " experts", diff, scale, REL_TOL * scale, st["tokens"],
                     st["different"], st["unexplained"], "ok" if ok else "FAIL"))
            failures += not ok
        # The reference must tell a causal mask from the full one (the test
        # can fail): the logits of position 0 change once later tokens do.
        cases += 1
        ids = seqs["random 70"]
        a = ref.forward(ids)[0]
        b = ref.forward(ids[:1] + [mask] * 69)[0]
        ok = float(np.abs(a - b).max()) > 1e-3 * float(np.abs(a).max())
        print("full attention: position 0 sees later tokens: %s" % ("ok" if ok else "FAIL"))
        failures += not ok
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (cases - failures, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
