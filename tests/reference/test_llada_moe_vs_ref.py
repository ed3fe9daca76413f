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

Then generation on main's block-diffusion loop with recompute = true (every
step forwards positions 0 .. end of the current block): the reference's
generate() (llada2_ref.py's decoding rules) replayed on the logits the
engine decided on (--dump-logits), each step's logits also computed by the
reference on the same canvas with the engine's routing, must give the
engine's ids exactly, and every step's logits must agree within REL_TOL.
Usage: test_llada_moe_vs_ref.py PATH_TO_TIDE. Exit 0 pass, 1 fail, 77 skipped.
"""
import json
import os
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
    """generate()'s runner: hands the decoder the engine's logits step by
    step, while the reference computes its own on the same canvas (positions
    0 .. end of block b, as the engine's recompute forward) with the
    engine's routing, for comparison."""

    def __init__(self, model, block, steps, force):
        self.model, self.block, self.steps, self.force = model, block, steps, force
        self.i, self.diffs, self.scale = 0, [], 0.0

    def prefill(self, canvas, n):
        pass

    def block_logits(self, canvas, b):
        hi = (b + 1) * self.block
        ref = self.model.forward(canvas[:hi], force=self.force)[-self.block:]
        if self.i >= len(self.steps):
            raise llada2_ref.RefError("the reference decoded more steps than the engine")
        blk, _, eng = self.steps[self.i]
        if blk != b:
            raise llada2_ref.RefError("step %d: engine block %d, reference block %d"
                                      % (self.i, blk, b))
        self.i += 1
        self.diffs.append(float(np.abs(eng - ref).max()))
        self.scale = max(self.scale, float(np.abs(ref).max()))
        return eng

    def finish_block(self, canvas, b):
        pass


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
            dump = os.path.join(tmp, "steps%d.bin" % plen)
            trace = os.path.join(tmp, "run%d.trace" % plen)
            got = run([tide, "--quiet", "run", "-c", cfg, "--ids", ",".join(map(str, prompt)),
                       "--print-ids", "--set", "generation.gen_length=64",
                       "--set", "generation.recompute=true", "--dump-logits", dump,
                       "--set", "output.trace=" + trace]).strip()
            steps = llada2_ref.read_logits_dump(dump)
            replay = Replay(ref, 32, steps, llada2_ref.read_trace_routes(trace))
            ref.route_stats = {"tokens": 0, "different": 0, "unexplained": 0}
            want = ",".join(map(str, llada2_ref.generate(ref, prompt, 64, runner=replay)))
            st = ref.route_stats
            worst = max(replay.diffs) if replay.diffs else float("inf")
            ok = (got == want and replay.i == len(steps) and not replay.force
                  and worst <= REL_TOL * replay.scale and not st["unexplained"])
            print("generate prompt=%d: %d steps; replayed decisions %s; max|diff| over all steps "
                  "%.3g (tol %.3g); routing: %d token-layers, %d differ, %d unexplained: %s"
                  % (plen, len(steps), "identical" if got == want else "DIFFERENT", worst,
                     REL_TOL * replay.scale, st["tokens"], st["different"], st["unexplained"],
                     "ok" if ok else "FAIL"))
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
