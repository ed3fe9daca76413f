#!/usr/bin/python3
"""The llada decoder (generation.decoder = llada) against the numpy reference.

`tide run` decodes on a generated tiny llada2 checkpoint with decoder llada;
llada_generate_ref.generate() (written from LLaDA's generate.py, not from
the C) runs the same loop on the numpy forward of llada2_ref.Model over the
whole canvas (the checkpoint's own block-causal mask). For every setting the
ids, the step count and the forward count (one per step, two with cfg_scale)
must be identical. Settings cover: one and several blocks, schedules with a
remainder and with 0-entries (steps > block_length), cfg_scale, random
remasking, Gumbel sampling at temperature > 0, mask_in_argmax = false and
eos_early_stop. The rules themselves (L2, L3 refusals, the decoder option)
are checked on tide's messages.

Part "prefix": generation.prefix_cache (APPROXIMATE) against the exact
whole-canvas forwards: token agreement of tide's outputs over several
prompts, and, at identical canvases, the largest |logit| difference of the
reference's cached suffix forward from the full forward. Both are printed;
the test fails only if the option changes nothing at all or if its output
length differs (it must still decode every position).

Usage: test_llada_decoder.py PATH_TO_TIDE [exact|rules|prefix]. Exit 0 pass,
1 fail, 77 skipped.
"""
import json
import os
import re
import shutil
import struct
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
import llada2_ref as R  # noqa: E402
import llada_generate_ref as LR  # noqa: E402

FAILS = []


def check(cond, what):
    print("  %s %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        FAILS.append(what)
    return cond


def tide_run(tide, model, prompt, sets, expect_fail=False, trace=None):
    cmd = [tide, "run", "--ids", ",".join(map(str, prompt)), "--print-ids",
           "--set", "model.path=" + model, "--set", "output.progress=false",
           "--set", "generation.decoder=llada"]
    for k, v in sets.items():
        cmd += ["--set", "generation.%s=%s" % (k, v)]
    if trace:
        cmd += ["--set", "output.trace=" + trace, "--set", "output.overwrite=true"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if expect_fail:
        return r
    if r.returncode != 0:
        print("FAILED:", " ".join(cmd))
        print(r.stdout, r.stderr)
        sys.exit(1)
    ids = [int(t) for t in r.stdout.strip().split(",") if t]
    m = re.search(r"done: (\d+) tokens in (\d+) blocks, (\d+) steps .* (\d+) forwards", r.stderr)
    return ids, {"blocks": int(m.group(2)), "steps": int(m.group(3)),
                 "forwards": int(m.group(4))}


class Forward:
    """(ids) -> logits of one whole-canvas forward of the numpy llada2 model
    (its block-causal mask with the checkpoint's block length, as tide opens
    it with generation.block_length). A numpy LLaDA-MoE forward plugs in the
    same way. force: tide's routing (from its trace), one record per MoE
    layer call in forward order, so that a router near-tie (the two round
    activations to bf16 in different orders; test_engine_vs_ref.py explains)
    cannot send the two down different experts; llada2_ref checks that every
    forced choice is within its margin of the reference's own."""

    def __init__(self, model, block, force=None):
        self.model, self.block, self.force = model, block, force

    def __call__(self, ids):
        return self.model.forward(np.asarray(ids), 0, self.block, force=self.force)

    def full(self, ids):
        """The prefix cache's full forward: logits, and every position's K/V
        kept (as the model's cache after tide's whole-canvas forward)."""
        self.cache = R.KVCache(self.model.cfg)
        return self.model.forward(np.asarray(ids), 0, self.block, self.cache, store=True,
                                  force=self.force)

    def suffix(self, ids, start):
        """Positions start.. against the kept K/V of positions < start."""
        c = R.KVCache(self.model.cfg)
        c.k = [k[:, :start] for k in self.cache.k]
        c.v = [v[:, :start] for v in self.cache.v]
        c.n = start
        return self.model.forward(np.asarray(ids[start:]), start, self.block, c,
                                  force=self.force)


SETTINGS = [
    # name, prompt length, sets
    ("one block", 7, dict(gen_length=16, block_length=16, steps=8)),
    ("4 blocks", 5, dict(gen_length=32, block_length=8, steps=16)),
    ("schedule remainder 3,3,2", 6, dict(gen_length=24, block_length=8, steps=9)),
    ("0-entries (steps > block)", 7, dict(gen_length=8, block_length=4, steps=12)),
    ("cfg_scale 1.5", 6, dict(gen_length=16, block_length=8, steps=8, cfg_scale=1.5)),
    ("random remasking", 9, dict(gen_length=16, block_length=8, steps=8, remasking="random",
                                 seed=3)),
    ("temperature 0.8", 5, dict(gen_length=16, block_length=8, steps=4, temperature=0.8, seed=5)),
    ("mask_in_argmax false", 5, dict(gen_length=16, block_length=8, steps=8,
                                     mask_in_argmax="false")),
]


def ref_kw(sets):
    kw = {}
    for k, v in sets.items():
        if k in ("cfg_scale", "temperature"):
            kw[k] = float(v)
        elif k == "seed":
            kw[k] = int(v)
        elif k == "remasking":
            kw[k] = v
        elif k in ("mask_in_argmax", "eos_early_stop"):
            kw[k] = v == "true"
    return kw


def split_passes(path, force):
    """cfg: tide runs a step's conditional and unconditional passes as the
    two spans of one forward of the model, so each MoE layer's routing record
    holds both (the conditional pass's rows first); the reference runs them
    one after the other. Split each forward's records into the two passes'."""
    raw = open(path, "rb").read()
    jlen = struct.unpack_from("<I", raw, 12)[0]
    n_moe = json.loads(raw[16:16 + jlen])["n_layers"]
    out = []
    for f in range(0, len(force), n_moe):
        fw = force[f:f + n_moe]
        out += [r[:r.shape[0] // 2] for r in fw] + [r[r.shape[0] // 2:] for r in fw]
    return out


def part_exact(tide, model_dir, prompts):
    m = R.Model(model_dir)
    trace = os.path.join(os.path.dirname(model_dir), "run.trace")
    for name, plen, sets in SETTINGS:
        ids, st = tide_run(tide, model_dir, prompts[:plen], sets, trace=trace)
        force = R.read_trace_routes(trace)
        if float(sets.get("cfg_scale", 0)) > 0:
            force = split_passes(trace, force)
        fw = Forward(m, sets["block_length"], force)
        m.route_stats = {"tokens": 0, "different": 0, "unexplained": 0}
        rst = {}
        want = LR.generate(fw, prompts[:plen], sets["gen_length"], sets["block_length"],
                           sets["steps"], m.mask_id, m.eos_id, stats=rst, **ref_kw(sets))
        ok = ids == want and st["steps"] == rst["steps"] and st["blocks"] == rst["blocks"]
        rs = m.route_stats
        ok = ok and not force and not rs["unexplained"]
        check(ok, "%s: %d ids, %d steps in %d blocks, identical to the reference (routing: %d "
              "token-layers, %d near-ties forced, %d unexplained)" % (
                  name, len(ids), st["steps"], st["blocks"], rs["tokens"], rs["different"],
                  rs["unexplained"]))
        if ids != want:
            print("    tide:", ids)
            print("    ref: ", want)
        per = 2 if float(sets.get("cfg_scale", 0)) > 0 else 1
        check(st["forwards"] == rst["forwards"] == per * rst["steps"],
              "%s: %d forwards = %d per step x %d steps (the official count)" % (
                  name, st["forwards"], per, rst["steps"]))


def part_rules(tide, model_dir, prompts):
    base = dict(gen_length=32, block_length=8, steps=16)
    cases = [
        (dict(base, gen_length=30), "gen_length (30) must be a multiple of block_length (8)"),
        (dict(base, steps=6), "steps (6) must be a multiple of the number of blocks"),
        (dict(base, top_p=0.5), "top_k and top_p are not part of decoder = llada"),
        (dict(base, prefix_cache="true", cfg_scale=1), "prefix_cache cannot be combined"),
        (dict(base, decoder="bogus"), "decoder = 'bogus': expected one of auto|llada2|llada"),
        (dict(base, remasking="lowest"), "remasking = 'lowest': expected one of"),
    ]
    for sets, msg in cases:
        r = tide_run(tide, model_dir, prompts[:5], sets, expect_fail=True)
        check(r.returncode != 0 and msg in r.stderr, "refused: %s" % msg)
    # auto = the model's decoder (llada2 for this checkpoint): the summary
    # carries the llada2 threshold, and llada2's prefix_cache is refused.
    r = tide_run(tide, model_dir, prompts[:5], dict(base, decoder="auto", prefix_cache="true"),
                 expect_fail=True)
    check(r.returncode != 0 and "prefix_cache is an option of decoder = llada" in r.stderr,
          "decoder auto on a llada2 checkpoint resolves to llada2 (prefix_cache refused)")
    part_eos(tide, model_dir, prompts)


def part_eos(tide, model_dir, prompts):
    """On a checkpoint whose lm_head favours EOS (test_decoding_rules.favour):
    the output is cut after the first EOS, as the reference's; with
    eos_early_stop the same ids in fewer forwards, blocks after the EOS's
    skipped, and the reference stops at the same block."""
    import test_decoding_rules as TD
    m = R.Model(model_dir)
    prompt = prompts[:6]
    sets = dict(gen_length=48, block_length=8, steps=24)
    plain, _ = tide_run(tide, model_dir, prompt, sets)
    eos_dir = os.path.join(os.path.dirname(model_dir), "eos")
    found = None
    for like in TD.candidates(plain, 4)[:8]:
        TD.favour(model_dir, eos_dir, m.eos_id, like, 1.05)
        ids, st = tide_run(tide, eos_dir, prompt, sets)
        if ids and ids[-1] == m.eos_id and 8 < len(ids) < 40 and m.mask_id not in ids:
            found = like
            break
    if not check(found is not None, "a checkpoint with an EOS after the first block, before "
                                    "the last"):
        return
    me = R.Model(eos_dir)
    trace = os.path.join(os.path.dirname(model_dir), "eos.trace")
    for early in (False, True):
        s = dict(sets, eos_early_stop="true") if early else sets
        ids, st = tide_run(tide, eos_dir, prompt, s, trace=trace)
        fw = Forward(me, 8, R.read_trace_routes(trace))
        rst = {}
        want = LR.generate(fw, prompt, 48, 8, 24, me.mask_id, me.eos_id, eos_early_stop=early,
                           stats=rst)
        check(ids == want and st["forwards"] == rst["forwards"] and
              st["blocks"] == rst["blocks"],
              "EOS%s: %d ids cut after EOS, %d blocks, %d forwards, as the reference" % (
                  " eos_early_stop" if early else "", len(ids), st["blocks"], st["forwards"]))
        if early:
            check(ids == full_ids and st["forwards"] < full_st["forwards"],
                  "eos_early_stop: the same ids in %d forwards instead of %d" % (
                      st["forwards"], full_st["forwards"]))
        full_ids, full_st = ids, st


def part_prefix(tide, model_dir, prompts):
    """prefix_cache: tide against the reference's own prefix-cache loop
    (the same approximation, so the same ids), then its error against the
    exact whole-canvas forwards."""
    sets = dict(gen_length=32, block_length=8, steps=32)
    m = R.Model(model_dir)
    trace = os.path.join(os.path.dirname(model_dir), "prefix.trace")
    same = total = 0
    worst, scale, flips, n = 0.0, 0.0, 0, 0
    aligned_worst = 0.0
    for k in range(4):
        prompt = prompts[k * 7: k * 7 + 8 + 4 * k]  # 8, 12, 16, 20 tokens
        P = len(prompt)
        a, sa = tide_run(tide, model_dir, prompt, sets)
        b, sb = tide_run(tide, model_dir, prompt, dict(sets, prefix_cache="true"), trace=trace)
        fw = Forward(m, 8, R.read_trace_routes(trace))
        m.route_stats = {"tokens": 0, "different": 0, "unexplained": 0}
        want = LR.generate(fw, prompt, 32, 8, 32, m.mask_id, m.eos_id, prefix=fw)
        check(b == want and sb["forwards"] == sa["forwards"] and not fw.force and
              not m.route_stats["unexplained"],
              "prompt of %d: prefix_cache gives the reference's prefix-cache ids (%d tokens, "
              "%d forwards, as many as exact)" % (P, len(b), sb["forwards"]))
        same += sum(int(x == y) for x, y in zip(a, b))
        total += max(len(a), len(b))
        # Logits at identical canvases: along the exact run, each later step
        # of a block recomputed as the cache would (K/V of the prefix from the
        # block's first step).
        ex = Forward(m, 8)
        tr = []
        w0 = worst
        worst = 0.0
        LR.generate(ex, prompt, 32, 8, 32, m.mask_id, m.eos_id, trace=tr)
        for t in tr:
            b0 = P + 8 * t["block"]
            if t["step"] == 0:
                ex.full(t["canvas"])
                continue
            if not t["rows"] or min(t["rows"]) < b0:
                continue
            approx = ex.suffix(t["canvas"], b0)
            for j, row in t["rows"].items():
                d = approx[j - b0]
                worst = max(worst, float(np.abs(d - row).max()))
                scale = max(scale, float(np.abs(row).max()))
                flips += int(np.argmax(d) != np.argmax(row))
                n += 1
        print("    prompt of %d: agreement %d / %d, logits max|diff| %.4g" % (
            P, sum(int(x == y) for x, y in zip(a, b)), max(len(a), len(b)), worst))
        if P % 8 == 0:
            aligned_worst = max(aligned_worst, worst)
        worst = max(worst, w0)
    print("  prefix_cache (APPROXIMATE) vs exact: token agreement %d / %d = %.1f%%"
          % (same, total, 100.0 * same / max(total, 1)))
    print("  prefix_cache logits vs full forward at identical canvases: max|diff| %.4g "
          "(logit scale %.3g), argmax differs at %d of %d rows" % (worst, scale, flips, n))
    check(n > 0, "the prefix cache's error is measured")
    # On this block-causal checkpoint a prompt of whole blocks makes the
    # decoder's blocks the mask's blocks: nothing cached can see a later
    # position, so the cache is exact there (up to float rounding).
    check(aligned_worst < 1e-3, "prompts of whole blocks: the cache is exact on a block-causal "
          "model (max|diff| %.3g)" % aligned_worst)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    tide = sys.argv[1]
    parts = sys.argv[2:] or ["exact", "rules", "prefix"]
    tmp = tempfile.mkdtemp(prefix="tide-llada-")
    try:
        model = os.path.join(tmp, "tiny")
        subprocess.run([tide, "mkmodel", model, "--preset", "tiny", "--seed", "7"], check=True,
                       capture_output=True)
        import json
        vocab = int(json.load(open(os.path.join(model, "config.json")))["vocab_size"])
        prompts = np.random.default_rng(11).integers(0, vocab - 8, size=64).tolist()
        for p in parts:
            print("[%s]" % p)
            {"exact": part_exact, "rules": part_rules, "prefix": part_prefix}[p](
                tide, model, prompts)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
