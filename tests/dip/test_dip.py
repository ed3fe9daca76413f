#!/usr/bin/python3
"""DIP (docs/dip.md) end to end on generated tiny checkpoints: LLaDA2
(decoder llada2, KV cache), LLaDA2.1 (decoder llada21, editing) and
LLaDA-MoE (decoder llada, whole-canvas forwards), with a pool of 32
question/answer examples written by the test, 8 shots.

  reference  tide's plan (the metrics file's "dip" line: which examples,
             in which order, before which block) equals dip_ref.py, the
             numpy planner written from the paper, for several lambdas,
             budgets and schedules, and the initial prompt and the
             insertions hold exactly the scheduled examples' tokens.
  lossless   with DIP inserting examples during generation, tokens and
             every logit the decoder saw are bit-identical with no offload
             and under policy-tide (also with prefetch), -lru, -static, -lfu
             at several budgets, and -cost, -hybrid and -warm at one;
             on llada2 and llada21 the KV-cached run equals recompute (the
             cache is refreshed from the block an insertion touched, and
             the results show nothing stale survived), up front and
             dynamic.
  trace      a routing trace records each insertion (format version 4,
             context records), `tide sim` replays it under a policy, and
             the insertions' prefill forwards are what the metrics count.
  errors     a missing pool, a malformed line, a line without "answer", a
             template without {question}, and a bad [dip] value are refused,
             each naming the file and line or the key.
Usage: test_dip.py MODE PATH_TO_TIDE
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
sys.path.insert(0, os.path.join(HERE, "..", "offload"))

TOPICS = ["tide", "moon", "river", "ocean", "mountain", "forest", "city", "desert"]
QUERY = "What is 7 plus 5 at the river?"


def tide(binary, args, check=True):
    r = subprocess.run([binary] + args, capture_output=True, text=True)
    if check and r.returncode != 0:
        print("FAILED (exit %d): tide %s" % (r.returncode, " ".join(args)))
        print(r.stdout[-2000:])
        print(r.stderr[-4000:])
        sys.exit(1)
    return r


def write_pool(path):
    with open(path, "w") as f:
        for i in range(32):
            t = TOPICS[i % 8]
            a, b = 3 + (i * 17) % 80, 5 + (i * 29) % 70
            f.write(json.dumps({"question": "What is %d plus %d at the %s?" % (a, b, t),
                                "answer": "%d plus %d is %d." % (a, b, a + b)}) + "\n")


MODELS = {
    "llada2": ("tiny", "model-llada2", ""),
    "llada21": ("tiny", "model-llada2", "decoder = llada21\n"),
    "llada-moe": ("tiny-moe", "model-llada-moe", ""),
}


def setup(binary, tmp, which):
    preset, plugin, extra = MODELS[which]
    model = os.path.join(tmp, preset)
    if not os.path.isdir(model):
        tide(binary, ["--quiet", "mkmodel", model, "--preset", preset, "--seed", "11",
                      "--plugin", plugin])
    pool = os.path.join(tmp, "pool.jsonl")
    if not os.path.exists(pool):
        write_pool(pool)
    cfg = os.path.join(tmp, which + ".ini")
    with open(cfg, "w") as f:
        f.write("[model]\nplugin = %s\npath = %s\n[generation]\ngen_length = 128\n%s"
                "[output]\nprogress = false\nstream = false\n[dip]\npool = %s\nshots = 8\n"
                % (plugin, model, extra, pool))
    return model, cfg


def run(binary, cfg, sets, extra=()):
    args = ["--quiet", "run", "-c", cfg, "-p", QUERY, "--print-ids", "--logits-hash"]
    for s in sets:
        args += ["--set", s]
    return tide(binary, args + list(extra)).stdout.strip()


def metrics(binary, cfg, sets, tmp):
    path = os.path.join(tmp, "m.jsonl")
    if os.path.exists(path):
        os.remove(path)
    out = run(binary, cfg, sets + ["output.metrics=" + path])
    with open(path) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    return out, lines


def mode_reference(binary, tmp):
    try:
        import numpy as np  # noqa: F401
        import dip_ref
        from llada2_ref import SafeTensors, as_f32
    except ImportError as e:
        print("skipped: numpy or the reference is missing (%s)" % e)
        return 77
    failures = 0
    for which in ("llada2", "llada-moe"):
        model, cfg = setup(binary, tmp, which)
        name = ("model.embed_tokens.weight" if which == "llada-moe"
                else "model.word_embeddings.weight")
        table = as_f32(SafeTensors(model).get(name))
        cases = [[], ["dip.lambda=0.3"], ["dip.lambda=1"], ["dip.lambda=0"],
                 ["dip.lambda=0.7", "dip.budget=200"], ["dip.first=3", "dip.per_block=2"],
                 ["dip.shots=12", "dip.per_block=1"], ["dip.mode=upfront"]]
        for sets in cases:
            _, lines = metrics(binary, cfg, sets, tmp)
            plans = [l for l in lines if l.get("type") == "dip"]
            if len(plans) != 1:
                print("%s %s: %d dip lines in the metrics" % (which, sets, len(plans)))
                failures += 1
                continue
            p = plans[0]
            vecs = [dip_ref.vector(table, e["question_ids"]) for e in p["examples"]]
            q = dip_ref.vector(table, p["query_ids"])
            cost = [e["tokens"] for e in p["examples"]]
            want, scores = dip_ref.mmr(q, vecs, p["lambda"], p["shots"], cost, p["budget"])
            blocks = dip_ref.schedule(len(want), p["first"], p["per_block"], p["blocks"],
                                      p["mode"] == "dynamic")
            got = [s["index"] for s in p["selected"]]
            got_blocks = [s["block"] for s in p["selected"]]
            ok = got == want and got_blocks == blocks and all(
                abs(s["score"] - w) < 1e-9 for s, w in zip(p["selected"], scores))
            # The prompt and the insertions hold exactly the scheduled examples.
            initial = len(p["query_ids"]) + p["query_offset"] + sum(
                cost[i] for i, b in zip(want, blocks) if b == 0)
            later = sum(cost[i] for i, b in zip(want, blocks) if b > 0)
            inserted = sum(l["inserted"] for l in lines if l.get("type") == "context")
            ok = ok and p["initial_prompt_tokens"] == initial and p["room"] == later
            ok = ok and inserted <= later
            print("%-9s %-40s order %s blocks %s inserted %d/%d: %s" % (
                which, " ".join(sets) or "(defaults)", got, got_blocks, inserted, later,
                "equal" if ok else "DIFFERENT (reference %s %s)" % (want, blocks)))
            failures += not ok
    return 1 if failures else 0


def mode_lossless(binary, tmp):
    failures = 0
    for which, budgets in (("llada2", (0, 1, 16)), ("llada21", (1, 16)), ("llada-moe", (1, 8))):
        _, cfg = setup(binary, tmp, which)
        want = run(binary, cfg, ["policy.budget=-1"])
        _, lines = metrics(binary, cfg, ["policy.budget=-1"], tmp)
        grown = sum(1 for l in lines if l.get("type") == "context")
        print("%s: %d insertions during generation" % (which, grown))
        failures += grown < 2
        cases = []
        for b in budgets:
            cases.append(["policy.plugin=policy-static", "policy.budget=%d" % b])
            if b:
                cases.append(["policy.plugin=policy-lru", "policy.budget=%d" % b])
                cases.append(["policy.plugin=policy-lfu", "policy.budget=%d" % b])
                for i in (1, 4):
                    cases.append(["policy.plugin=policy-tide", "policy.budget=%d" % b,
                                  "policy-tide.interval=%d" % i])
        # The cost-aware policies, with a GPU-like profile of the tiny expert
        # shape (so they promote and balance), and policy-warm with a library
        # recorded by a run with DIP.
        from test_offload import gpu_like_profile
        prof = gpu_like_profile(tmp)
        library = os.path.join(tmp, which + "-library.trc")
        run(binary, cfg, ["policy.budget=-1", "output.trace=" + library])
        b = budgets[-1] // 2 or 1
        cases.append(["policy.plugin=policy-tide", "policy.budget=%d" % b,
                      "policy-tide.prefetch=true"])
        for pol in ("policy-cost", "policy-hybrid"):
            cases.append(["policy.plugin=" + pol, "policy.budget=%d" % b, "policy.profile=" + prof])
        cases.append(["policy.plugin=policy-warm", "policy.budget=%d" % b,
                      "policy.profile=" + prof, "policy-warm.library=" + library])
        if which != "llada-moe":
            for mode in ("dynamic", "upfront"):
                base = run(binary, cfg, ["policy.budget=-1", "dip.mode=" + mode])
                rec = run(binary, cfg, ["policy.budget=-1", "dip.mode=" + mode,
                                        "generation.recompute=true"])
                ids = lambda s: s.splitlines()[0]  # noqa: E731
                ok = ids(base) == ids(rec)
                print("%-9s %-55s %s" % (which, "KV cache = recompute, dip.mode=" + mode,
                                          "identical" if ok else "DIFFERENT"))
                failures += not ok
        for sets in cases:
            got = run(binary, cfg, sets)
            ok = got == want
            print("%-9s %-55s %s" % (which, " ".join(sets), "identical" if ok else "DIFFERENT"))
            failures += not ok
    return 1 if failures else 0


def mode_trace(binary, tmp):
    _, cfg = setup(binary, tmp, "llada2")
    trc = os.path.join(tmp, "dip.trc")
    _, lines = metrics(binary, cfg, ["policy.budget=-1", "output.trace=" + trc], tmp)
    grown = [l for l in lines if l.get("type") == "context"]
    info = tide(binary, ["trace", "info", trc]).stdout
    print(info)
    failures = 0
    if "format version 4" not in info:
        print("FAIL: not a version-4 trace")
        failures += 1
    sim = tide(binary, ["sim", "--trace", trc, "--policies", "policy-tide", "--budgets", "8",
                        "--no-oracle", "--no-hindsight"]).stdout
    print(sim)
    want = "context growth (DIP): %d insertions, %d tokens" % (
        len(grown), sum(l["inserted"] for l in grown))
    for text, what in ((info, "trace info"), (sim, "sim")):
        if want not in text:
            print("FAIL: %s does not say '%s'" % (what, want))
            failures += 1
    if len(grown) < 2:
        print("FAIL: fewer than two insertions")
        failures += 1
    return 1 if failures else 0


def mode_errors(binary, tmp):
    _, cfg = setup(binary, tmp, "llada2")
    bad = os.path.join(tmp, "bad.jsonl")
    cases = []
    with open(bad, "w") as f:
        f.write('{"question": "a", "answer": "b"}\n{"question": "c"}\n')
    cases.append((["dip.pool=" + bad], ["bad.jsonl, line 2", "answer"]))
    with open(bad + "2", "w") as f:
        f.write('{"question": "a", "answer": "b"}\nnot json\n')
    cases.append((["dip.pool=" + bad + "2"], ["bad.jsonl2, line 2"]))
    cases.append((["dip.pool=" + os.path.join(tmp, "none.jsonl")], ["none.jsonl"]))
    cases.append((["dip.template=Q A"], ["[dip] template", "{question}"]))
    # Examples that make the prompt too long for the model: refused, naming [dip].
    long = os.path.join(tmp, "long.jsonl")
    with open(long, "w") as f:
        for i in range(4):
            words = " ".join("w%d_%d" % (i, j) for j in range(1500))
            f.write(json.dumps({"question": "q%d" % i, "answer": words}) + "\n")
    cases.append((["dip.pool=" + long], ["[dip]", "too long", "shots"]))
    cases.append((["dip.lambda=2"], ["lambda"]))
    cases.append((["dip.mode=sometimes"], ["mode"]))
    failures = 0
    for sets, want in cases:
        args = ["run", "-c", cfg, "-p", QUERY]
        for s in sets:
            args += ["--set", s]
        r = tide(binary, args, check=False)
        ok = r.returncode != 0 and all(w in r.stderr for w in want) and "Traceback" not in r.stderr
        print("%-50s exit %d: %s" % (" ".join(sets)[-50:], r.returncode,
                                     "refused, named" if ok else "NOT AS EXPECTED"))
        if not ok:
            print(r.stderr[-1500:])
        failures += not ok
    return 1 if failures else 0


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    mode, binary = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="tide-dip-")
    try:
        return {"reference": mode_reference, "lossless": mode_lossless, "trace": mode_trace,
                "errors": mode_errors}[mode](binary, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
