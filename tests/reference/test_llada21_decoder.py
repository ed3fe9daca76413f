#!/usr/bin/python3
"""decoder-llada21 against the official LLaDA2.1 loop, decision for decision.

`tide run` decodes with generation.decoder = llada21 on a generated tiny
checkpoint and dumps the logits of every step (--dump-logits); the numpy
reference (llada21_generate_ref.py, written from the official generate(),
not from the C) replays its loop on those logits. For every case the ids,
the blocks, the steps of every block, the forwards and the edits must be
identical. The checkpoint edits for real: its random weights change their
predictions as a block fills, so every threshold pair below edits (each
case prints its count, and the part fails if a pair edits nothing).

Parts (one ctest test each):
  official  thresholds 0.95/0.9, 0.7/0.5 and 0.5/0.0 x max_post_steps 0 and
            16 x eos_early_stop off and on x prompt lengths 5, 33, 64, on a
            checkpoint whose lm_head favours EOS (so eos_early_stop matters);
            the table of steps, forwards and edits is printed
  more      sampling (temperature, top_k, top_p), num_to_transfer 3,
            mask_in_argmax = false, stop_tokens, the modes speed and
            quality, a checkpoint favouring the mask token (the mask token
            wins edits and commits; max_block_steps bounds the loop), and the
            refusals (cfg_scale, an unknown mode, editing_threshold range)
  bound     departure 3 on checkpoints favouring the mask token, block
            lengths 8 and 32: a block that ends after more steps than
            2 L + max_post_steps (the old bound) follows the official loop to
            its end; a greedy block whose state repeats ends at the repeat,
            with a warning naming the steps, as the reference decides; with
            end_on_repeat = false the same block runs on, and its states
            from the repeat on are those of the earlier step's on, the
            official loop's cycle
  kv        the KV-cached path equals recompute = true: the same ids and the
            same logits hash, for each threshold pair (the backend's own
            kernels, which give a row the same bits whatever the row count)

Usage: test_llada21_decoder.py PATH_TO_TIDE [official|more|kv]. Exit 0 pass,
1 fail, 77 skipped.
"""
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
import llada2_ref as R  # noqa: E402
import llada21_generate_ref as R21  # noqa: E402
import test_decoding_rules as TD  # noqa: E402

FAILS = []
TIDE = None
TMP = None
L = 32
PAIRS = [(0.95, 0.9), (0.7, 0.5), (0.5, 0.0)]


def check(cond, what):
    print("  %s %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        FAILS.append(what)
    return cond


_runs = [0]


def tide_run(model, prompt, gen, dec, extra=(), dump=True, expect_fail=False):
    """Run tide with decoder llada21. gen: [generation] keys, dec:
    [decoder-llada21] keys. Returns (ids, stats, dumped steps)."""
    _runs[0] += 1
    path = os.path.join(TMP, "dump%d.bin" % _runs[0])
    cmd = [TIDE, "run", "--ids", ",".join(map(str, prompt)), "--print-ids",
           "--set", "model.path=" + model, "--set", "output.progress=false",
           "--set", "generation.block_length=%d" % L, "--set", "generation.decoder=llada21"]
    if dump:
        cmd += ["--dump-logits", path]
    for k, v in gen.items():
        cmd += ["--set", "generation.%s=%s" % (k, v)]
    for k, v in dec.items():
        cmd += ["--set", "decoder-llada21.%s=%s" % (k, v)]
    cmd += list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if expect_fail:
        return r
    if r.returncode != 0:
        print("FAILED:", " ".join(cmd))
        print(r.stdout, r.stderr)
        sys.exit(1)
    lines = [t for t in r.stdout.strip().split("\n") if t]
    id_lines = [t for t in lines if not t.startswith("logits-fnv1a64")]
    ids = [int(t) for t in id_lines[0].split(",") if t] if id_lines else []
    m = re.search(r"done: (\d+) tokens in (\d+) blocks, (\d+) steps .* (\d+) forwards"
                  r"(?:, (\d+) edits)?", r.stderr)
    stats = {"n": int(m.group(1)), "blocks": int(m.group(2)), "steps": int(m.group(3)),
             "forwards": int(m.group(4)), "edits": int(m.group(5) or 0), "stderr": r.stderr,
             "hash": next((t.split()[1] for t in lines if t.startswith("logits-fnv1a64")), None)}
    return ids, stats, R.read_logits_dump(path) if dump else None


def ref_kw(gen, dec, special):
    kw = {}
    for k, v in gen.items():
        if k == "threshold" or k == "temperature" or k == "top_p":
            kw[k] = float(v)
        elif k in ("top_k", "seed"):
            kw[k] = int(v)
        elif k in ("eos_early_stop", "mask_in_argmax", "recompute"):
            kw[k] = v == "true"
        elif k == "stop_tokens":
            kw["stop_ids"] = [special.stop_id]
    for k, v in dec.items():
        if k == "end_on_repeat":
            kw[k] = v == "true"
        else:
            kw[k] = float(v) if k == "editing_threshold" else int(v)
    return kw


def compare(name, model, prompt, G, gen, dec, kw_over=None, trace=None):
    """Run tide and replay the reference; check ids, blocks, steps per
    block, forwards and edits. Returns (ids, tide stats, reference stats)."""
    gen = dict(gen, gen_length=G)
    ids, st, steps = tide_run(model, prompt, gen, dec)
    special = TD.Special(model)
    rep = TD.Replay(steps)
    rst = {}
    kw = ref_kw(gen, dec, special)
    kw.pop("recompute", None)
    kw.update(kw_over or {})
    try:
        want = R21.generate(special, prompt, G, L, runner=rep, stats=rst, trace=trace, **kw)
    except R.RefError as e:
        check(False, "%s: reference replay: %s" % (name, e))
        return ids, st, rst
    per_block = {}
    for b, _, _ in steps:
        per_block[b] = per_block.get(b, 0) + 1
    tide_per_block = [per_block[b] for b in sorted(per_block)]
    ok = (ids == want and rep.i == len(steps) and st["steps"] == rst["steps"] and
          st["blocks"] == rst["blocks"] and tide_per_block == rst["steps_per_block"] and
          st["edits"] == rst["edits"])
    recompute = gen.get("recompute") == "true"
    want_fw = rst["steps"] if recompute else rst["forwards"]
    ok = ok and st["forwards"] == want_fw
    check(ok, "%s: %d ids, %d blocks, steps per block %s, %d forwards, %d edits: identical to "
          "the reference" % (name, len(ids), st["blocks"], tide_per_block, st["forwards"],
                             st["edits"]))
    if not ok:
        print("    tide: ids %s\n          steps %s forwards %d edits %d" % (
            ids, tide_per_block, st["forwards"], st["edits"]))
        print("    ref:  ids %s\n          steps %s forwards %d edits %d" % (
            want, rst.get("steps_per_block"), want_fw, rst.get("edits", -1)))
    return ids, st, rst


def make_models():
    base = os.path.join(TMP, "base")
    subprocess.run([TIDE, "--quiet", "mkmodel", base, "--preset", "tiny", "--seed", "7"],
                   check=True)
    special = TD.Special(base)
    rng = np.random.default_rng(21)
    prompts = {n: rng.integers(0, 470, size=n).tolist() for n in (5, 33, 64)}
    # A checkpoint that emits EOS within two blocks: EOS's lm_head row set to
    # 1.05 x a frequent token's (test_decoding_rules.favour).
    plain, _, _ = tide_run(base, prompts[5], {"gen_length": 96}, {}, dump=False)
    eos = os.path.join(TMP, "eos")
    found = None
    for like in TD.candidates(plain, 4)[:10]:
        TD.favour(base, eos, special.eos_id, like, 1.05)
        ids, _, _ = tide_run(eos, prompts[5], {"gen_length": 96}, {}, dump=False)
        if special.eos_id in ids and len(ids) < 64:
            found = like
            break
    check(found is not None, "a checkpoint that emits EOS early (lm_head row of EOS = 1.05 x "
          "that of token %s)" % found)
    return base, eos, special, prompts, plain


def part_official(base, eos, prompts):
    print("E1-E14 on the EOS-prone checkpoint: thresholds x max_post_steps x eos_early_stop x "
          "prompt length")
    rows = []
    edits_by_pair = {p: 0 for p in PAIRS}
    for th, et in PAIRS:
        for mps in (0, 16):
            for ees in ("false", "true"):
                for plen in (5, 33, 64):
                    name = "th %.2f/%.1f post %d eos_early_stop %s P %d" % (th, et, mps, ees,
                                                                             plen)
                    _, st, rst = compare(name, eos, prompts[plen], 64,
                                         {"threshold": th, "eos_early_stop": ees},
                                         {"editing_threshold": et, "max_post_steps": mps})
                    edits_by_pair[(th, et)] += st["edits"]
                    rows.append((th, et, mps, ees, plen, st["blocks"], st["steps"],
                                 st["forwards"], st["edits"], st["n"]))
    for p, n in edits_by_pair.items():
        check(n > 0, "thresholds %.2f/%.1f edit (%d edits over the 12 cases)" % (p[0], p[1], n))
    print("\n| threshold / editing | max_post_steps | eos_early_stop | prompt | blocks | steps | "
          "forwards | edits | tokens |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %.2f / %.1f | %d | %s | %d | %d | %d | %d | %d | %d |" % r)


def part_more(base, eos, special, prompts, plain):
    p = prompts[33]
    print("E6 sampling, E7 num_to_transfer, options")
    compare("temperature 0.8", base, p, 64, {"temperature": 0.8, "seed": 3, "threshold": 0.7},
            {"editing_threshold": 0.5})
    compare("temperature 1 (drawn, no scaling)", base, p, 64,
            {"temperature": 1, "seed": 4, "threshold": 0.5}, {"editing_threshold": 0.0})
    compare("temperature 1.5 top_k 5 top_p 0.9", base, p, 64,
            {"temperature": 1.5, "top_k": 5, "top_p": 0.9, "seed": 5, "threshold": 0.7},
            {"editing_threshold": 0.5})
    compare("temperature 0 with top_k/top_p (unfiltered, as the official)", base, p, 64,
            {"top_k": 3, "top_p": 0.5, "threshold": 0.7}, {"editing_threshold": 0.5})
    compare("num_to_transfer 3", base, p, 64, {"threshold": 0.9}, {"num_to_transfer": 3,
                                                                  "editing_threshold": 0.5})
    compare("mask_in_argmax false", base, p, 64,
            {"mask_in_argmax": "false", "threshold": 0.5}, {"editing_threshold": 0.0})
    compare("recompute", base, p, 64, {"recompute": "true", "threshold": 0.7},
            {"editing_threshold": 0.5})
    compare("prompt of whole blocks, recompute", base, prompts[64], 40,
            {"recompute": "true", "threshold": 0.5}, {"editing_threshold": 0.0})

    print("modes: speed = 0.5/0.0, quality = 0.7/0.5 (thresholds left at their defaults)")
    for mode, th, et in (("speed", 0.5, 0.0), ("quality", 0.7, 0.5)):
        # generation.threshold is the option's default here (not set).
        compare("mode %s" % mode, base, p, 64, {"mode": mode}, {},
                kw_over={"threshold": th, "editing_threshold": et})
    ids_m, st_m, _ = tide_run(base, p, {"mode": "quality", "gen_length": 64}, {}, dump=False)
    ids_x, st_x, _ = tide_run(base, p, {"threshold": 0.7, "gen_length": 64},
                              {"editing_threshold": 0.5}, dump=False)
    check(ids_m == ids_x and st_m["edits"] == st_x["edits"],
          "mode quality = threshold 0.7, editing_threshold 0.5")
    ids_o, _, _ = tide_run(base, p, {"mode": "quality", "threshold": 0.95, "gen_length": 64}, {},
                           dump=False)
    ids_q, _, _ = tide_run(base, p, {"threshold": 0.95, "gen_length": 64},
                           {"editing_threshold": 0.5}, dump=False)
    check(ids_o == ids_q, "an explicit threshold wins over the mode's")

    print("stop tokens (lm_head row of <|role_end|> = 1.05 x a frequent token's)")
    stop_ckpt = os.path.join(TMP, "stop")
    found = None
    for like in TD.candidates(plain, 3)[:8]:
        TD.favour(base, stop_ckpt, special.stop_id, like, 1.05)
        ids, _, _ = tide_run(stop_ckpt, prompts[5], {"gen_length": 64}, {}, dump=False)
        if special.stop_id in ids[:-1]:
            found = like
            break
    if check(found is not None, "a checkpoint that emits <|role_end|>"):
        ids, _, _ = compare("role_end, default", stop_ckpt, prompts[5], 64, {}, {})
        s_ids, _, _ = compare("role_end, stop_tokens + eos_early_stop", stop_ckpt, prompts[5], 64,
                              {"stop_tokens": "<|role_end|>", "eos_early_stop": "true"}, {})
        check(s_ids == ids[:ids.index(special.stop_id) + 1],
              "stop_tokens=<|role_end|>: cut after it")

    print("the mask token (lm_head row of <|mask|> = 1.05 x a frequent token's): E8 remasks, "
          "max_block_steps ends a loop that would not")
    mask_ckpt = os.path.join(TMP, "mask")
    done = False
    for like in TD.candidates(plain, 0)[:8]:
        TD.favour(base, mask_ckpt, special.mask_id, like, 1.05)
        ids, st, rst = compare("mask competes", mask_ckpt, prompts[5], 64, {"threshold": 0.5},
                               {"editing_threshold": 0.0, "max_block_steps": 20})
        if rst.get("masks_chosen", 0) > 0:
            done = True
            break
    if check(done, "the mask token was chosen (%d times), tide agreeing on every decision"
             % rst.get("masks_chosen", 0)):
        check(20 in rst["steps_per_block"] and "reached max_block_steps" in st["stderr"],
              "max_block_steps = 20 ends a block, with a warning (steps per block %s)"
              % rst["steps_per_block"])
        compare("mask_in_argmax false on it", mask_ckpt, prompts[5], 64,
                {"threshold": 0.5, "mask_in_argmax": "false"}, {"editing_threshold": 0.0})

    print("refusals")
    cases = [
        ({"cfg_scale": 1}, {}, "cfg_scale is not part of decoder llada21"),
        ({"mode": "turbo"}, {}, "decoder llada21 has the modes speed and quality"),
        ({}, {"editing_threshold": 1.5}, "editing_threshold = '1.5': expected a number in [0,1]"),
        ({}, {"num_to_transfer": 0}, "num_to_transfer = '0'"),
    ]
    for gen, dec, msg in cases:
        r = tide_run(base, prompts[5], dict(gen, gen_length=32), dec, dump=False,
                     expect_fail=True)
        check(r.returncode == 2 and msg in r.stderr, "refused: %s" % msg)
    r = tide_run(base, prompts[5], {"mode": "speed", "gen_length": 32}, {}, dump=False,
                 expect_fail=True)
    r2 = subprocess.run([TIDE, "run", "--ids", "1,2,3", "--set", "model.path=" + base,
                         "--set", "generation.mode=speed"], capture_output=True, text=True)
    check(r2.returncode == 2 and "decoder llada2 has no named modes" in r2.stderr,
          "mode on a decoder without modes is refused")


def part_bound(base, special, prompts, plain):
    global L
    print("departure 3: a block ends at a repeated state or the safety bound, otherwise "
          "follows the official loop")
    cand = TD.candidates(plain, 0)
    made = {}

    def ckpt(ci, fac):
        if (ci, fac) not in made:
            made[(ci, fac)] = os.path.join(TMP, "mask%d_%s" % (ci, fac))
            TD.favour(base, made[(ci, fac)], special.mask_id, cand[ci], fac)
        return made[(ci, fac)]

    # (candidate, factor, block length, prompt length): the first cases that
    # show each behaviour on the tiny checkpoint of seed 7 come first; the
    # rest keep the search going should kernels change the bits.
    combos = [(3, 1.05, 32, 33), (3, 1.02, 8, 5), (2, 1.1, 8, 5), (3, 1.1, 8, 33),
              (2, 1.05, 8, 5), (3, 1.05, 8, 33), (1, 1.1, 32, 5), (2, 1.02, 8, 5)]
    long_end = repeat = None
    try:
        for ci, fac, lb, plen in combos:
            if long_end and repeat:
                break
            if ci >= len(cand):
                continue
            L = lb
            name = "mask x%s (token %d), L %d, P %d, 0.5/0.0" % (fac, cand[ci], lb, plen)
            ids, st, rst = compare(name, ckpt(ci, fac), prompts[plen], 64, {"threshold": 0.5},
                                   {"editing_threshold": 0.0})
            old = 2 * lb + 16
            cut = {r[0] for r in rst["repeats"]} | set(rst["capped"])
            ended = [n for j, n in enumerate(rst["steps_per_block"])
                     if n > old and plen // lb + j not in cut]
            said = re.findall(r"block (\d+) ends at step (\d+), whose state .*? step (\d+) had",
                              st["stderr"])
            check(sorted((int(b), int(s), int(k)) for b, s, k in said) ==
                  sorted(rst["repeats"]) and not rst["capped"],
                  "%s: tide's repeat warnings %s are the reference's %s" % (
                      name, said, rst["repeats"]))
            if ended and not long_end:
                long_end = (name, max(ended), old)
            if rst["repeats"] and not repeat:
                repeat = (ci, fac, lb, plen, rst["repeats"][0], name)
        if check(long_end is not None, "a block that ends after more steps than 2 L + 16: %s"
                 % (long_end,)):
            print("    %s: a block of %d steps, past the old bound %d, as the official loop"
                  % long_end)
        if check(repeat is not None, "a block whose state repeats"):
            ci, fac, lb, plen, (b, s, k), name = repeat
            L = lb
            cap = s + 2 * (s - k) + 2
            trace = []
            ids, st, rst = compare(name + ", end_on_repeat = false, max_block_steps %d" % cap,
                                   ckpt(ci, fac), prompts[plen], 64, {"threshold": 0.5},
                                   {"editing_threshold": 0.0, "end_on_repeat": "false",
                                    "max_block_steps": cap}, trace=trace)
            states = [t["state"] for t in trace if t["block"] == b]
            period = s - k
            cyc = len(states) == cap and all(states[k + t] == states[k + t + period]
                                            for t in range(cap - k - period))
            check(cyc and b in rst["capped"] and "reached max_block_steps" in st["stderr"],
                  "block %d without the repeat check: %d steps to the bound, its states from "
                  "step %d on repeat with period %d (the official loop's cycle)"
                  % (b, len(states), k, period))
    finally:
        L = 32


def part_kv(base, prompts):
    print("E12: the KV-cached path equals recompute = true (ids and logits hash)")
    own = ["--set", "backend-cpu-onednn.gemm=own", "--logits-hash"]
    for th, et in PAIRS:
        for plen in (5, 33):
            got = []
            for rc in ("false", "true"):
                ids, st, _ = tide_run(base, prompts[plen],
                                      {"threshold": th, "recompute": rc, "gen_length": 64},
                                      {"editing_threshold": et}, extra=own, dump=False)
                got.append((ids, st["hash"], st["steps"], st["edits"], st["forwards"]))
            (a, ha, sa, ea, fa), (b, hb, sb, eb, fb) = got
            check(a == b and ha == hb and sa == sb and ea == eb and fb == sb,
                  "th %.2f/%.1f P %d: KV %s == recompute %s (%d steps, %d edits; %d and %d "
                  "forwards)" % (th, et, plen, ha, hb, sa, ea, fa, fb))


def main():
    global TIDE, TMP
    parts = ("official", "more", "bound", "kv")
    if len(sys.argv) < 2 or any(a not in parts for a in sys.argv[2:]):
        print(__doc__)
        return 2
    TIDE = sys.argv[1]
    want = set(sys.argv[2:] or parts)
    TMP = tempfile.mkdtemp(prefix="tide-llada21-")
    try:
        base, eos, special, prompts, plain = make_models()
        if "official" in want:
            part_official(base, eos, prompts)
        if "more" in want:
            part_more(base, eos, special, prompts, plain)
        if "bound" in want:
            part_bound(base, special, prompts, plain)
        if "kv" in want:
            part_kv(base, prompts)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    print("%d failed" % len(FAILS))
    for f in FAILS:
        print("  -", f)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
