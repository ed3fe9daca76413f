#!/usr/bin/python3
"""Expert offload end to end on a generated tiny checkpoint (32 experts per
MoE layer, top-4), on the CPU backend playing both the device and the host.

  lossless   tokens and every logit the decoder saw (FNV-1a hash) are
             bit-identical under no offload, policy-lru, policy-static and
             policy-tide (interval 1, 4, 32; also with prefetch) at budgets 1,
             half and all, and budget 0 (every expert on the host).
  telemetry  the JSON Lines metrics are consistent: per layer and phase,
             hit_rows + miss_rows == tokens * top_k; weight_bytes ==
             promotions * bytes per expert; act_bytes == miss_rows * hidden *
             6; per step, promotions <= budget... and the run's totals add up.
  bad_policy a policy returning an invalid plan is refused, naming the policy;
             an unknown policy, a negative budget and budget + expert_memory
             together are configuration errors (exit 2).
Usage: test_offload.py MODE PATH_TO_TIDE TEST_PLUGIN_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

PROMPT = ",".join(str(7 + (i * 37) % 400) for i in range(40))


def tide(binary, args, env=None, check=True):
    r = subprocess.run([binary] + args, capture_output=True, text=True, env=env)
    if check and r.returncode != 0:
        print("FAILED (exit %d): tide %s" % (r.returncode, " ".join(args)))
        print(r.stdout)
        print(r.stderr)
        sys.exit(1)
    return r


def setup(binary, tmp):
    model = os.path.join(tmp, "tiny")
    tide(binary, ["--quiet", "mkmodel", model, "--preset", "tiny", "--seed", "11"])
    cfg = os.path.join(tmp, "t.ini")
    with open(cfg, "w") as f:
        f.write("[model]\npath = %s\n[generation]\ngen_length = 64\n"
                "[output]\nprogress = false\nstream = false\n" % model)
    return model, cfg


def run_ids(binary, cfg, sets):
    args = ["--quiet", "run", "-c", cfg, "--ids", PROMPT, "--print-ids", "--logits-hash"]
    for s in sets:
        args += ["--set", s]
    return tide(binary, args).stdout.strip()


def lossless(binary, tmp):
    _, cfg = setup(binary, tmp)
    want = run_ids(binary, cfg, ["policy.budget=-1"])
    cases = [["policy.budget=0", "policy.plugin=policy-static"]]
    for b in (1, 16, 32):
        cases.append(["policy.plugin=policy-lru", "policy.budget=%d" % b])
        cases.append(["policy.plugin=policy-static", "policy.budget=%d" % b])
        for i in (1, 4, 32):
            cases.append(["policy.plugin=policy-tide", "policy.budget=%d" % b,
                          "policy-tide.interval=%d" % i])
        cases.append(["policy.plugin=policy-tide", "policy.budget=%d" % b,
                      "policy-tide.prefetch=true"])
    failures = 0
    for sets in cases:
        got = run_ids(binary, cfg, sets)
        ok = got == want
        failures += not ok
        print("%-75s %s" % (" ".join(sets), "identical" if ok else "DIFFERENT"))
        if not ok:
            print("  want:", want)
            print("  got: ", got)
    print("%d passed, %d failed" % (len(cases) - failures, failures))
    return 1 if failures else 0


def telemetry(binary, tmp):
    model, cfg = setup(binary, tmp)
    conf = json.load(open(os.path.join(model, "config.json")))
    k, hidden = conf["num_experts_per_tok"], conf["hidden_size"]
    expert_bytes = 3 * hidden * conf["moe_intermediate_size"] * 2
    failures, checked = 0, 0
    for sets in (["policy.plugin=policy-tide", "policy.budget=8", "policy-tide.interval=4"],
                 ["policy.plugin=policy-lru", "policy.budget=8"],
                 ["policy.plugin=policy-static", "policy.budget=8"],
                 ["policy.plugin=policy-tide", "policy.budget=8", "policy-tide.prefetch=true"]):
        path = os.path.join(tmp, "m.jsonl")
        if os.path.exists(path):
            os.remove(path)
        tide(binary, ["--quiet", "run", "-c", cfg, "--ids", PROMPT, "--print-ids",
                      "--set", "output.metrics=" + path] + ["--set=" + s for s in sets])
        lines = [json.loads(l) for l in open(path)]
        layers = [l for l in lines if l["type"] == "layer"]
        steps = [l for l in lines if l["type"] == "step"]
        bad = []
        per_step = {}
        for l in layers:
            if l["hit_rows"] + l["miss_rows"] != l["tokens"] * k:
                bad.append("rows %s" % l)
            if l["weight_bytes"] != l["promotions"] * expert_bytes:
                bad.append("weight bytes %s" % l)
            if l["act_bytes"] != l["miss_rows"] * hidden * 6:
                bad.append("activation bytes %s" % l)
            if l["evictions"] > l["promotions"]:
                bad.append("evictions %s" % l)
            if l["phase"] != "step" and l["promotions"] and "prefetch=true" not in " ".join(sets):
                bad.append("promotion outside a step %s" % l)
            if l["phase"] == "step":
                key = (l["block"], l["step"], l["layer"])
                per_step[key] = per_step.get(key, 0) + l["promotions"]
        for key, p in per_step.items():
            if p > 8:
                bad.append("%d promotions in one layer and step %s (budget 8)" % (p, key))
        if not steps or not layers:
            bad.append("no step or layer lines")
        step_keys = {(s["block"], s["step"]) for s in steps}
        for l in layers:
            if l["phase"] == "step" and (l["block"], l["step"]) not in step_keys:
                bad.append("layer line of an unknown step %s" % l)
        checked += len(layers)
        failures += bool(bad)
        print("%-60s %d layer lines, %d steps: %s" % (" ".join(sets), len(layers), len(steps),
                                                       "consistent" if not bad else "INCONSISTENT"))
        for b in bad[:5]:
            print("  ", b)
    print("%d passed, %d failed" % (4 - failures, failures))
    return 1 if failures else 0


def bad_policy(binary, tmp, plugin_dir):
    _, cfg = setup(binary, tmp)
    env = dict(os.environ, TIDE_PLUGIN_PATH=plugin_dir)
    failures = 0
    cases = [
        (["--set", "policy.plugin=test-bad-plan", "--set", "policy.budget=4"], 1,
         "policy test-bad-plan returned an invalid plan at MoE layer"),
        (["--set", "policy.plugin=policy-nope", "--set", "policy.budget=4"], 2,
         "[policy] plugin = policy-nope: no policy plugin of that name"),
        (["--set", "policy.budget=-5"], 2, "[policy] budget = '-5'"),
        (["--set", "policy.budget=4", "--set", "policy.expert_memory=1MiB"], 2,
         "budget (--set) and expert_memory (--set) are both set"),
        (["--set", "policy.plugin=policy-static", "--set", "policy.budget=4",
          "--set", "policy-static.initial=popular", "--set",
          "policy-static.counts_file=" + os.path.join(tmp, "missing.txt")], 1,
         "missing.txt"),
    ]
    for args, code, msg in cases:
        r = tide(binary, ["run", "-c", cfg, "--ids", PROMPT] + args, env=env, check=False)
        ok = r.returncode == code and msg in r.stderr
        failures += not ok
        print("%-70s exit %d: %s" % (" ".join(args)[:70], r.returncode, "ok" if ok else "FAIL"))
        if not ok:
            print("  expected exit %d and: %s" % (code, msg))
            print("  stderr:", r.stderr)
    print("%d passed, %d failed" % (len(cases) - failures, failures))
    return 1 if failures else 0


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    mode, binary, plugin_dir = sys.argv[1:]
    tmp = tempfile.mkdtemp(prefix="tide-offload-")
    try:
        if mode == "lossless":
            return lossless(binary, tmp)
        if mode == "telemetry":
            return telemetry(binary, tmp)
        if mode == "bad_policy":
            return bad_policy(binary, tmp, plugin_dir)
        print("unknown mode", mode)
        return 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
