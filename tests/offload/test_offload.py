#!/usr/bin/python3
"""Expert offload end to end on a generated tiny checkpoint (32 experts per
MoE layer, top-4), on the CPU backend playing both the device and the host.

  lossless   tokens and every logit the decoder saw (FNV-1a hash) are
             bit-identical under no offload, policy-lru, policy-static and
             policy-tide (interval 1, 4, 32; also with prefetch) at budgets 1,
             half and all, and budget 0 (every expert on the host); and under
             policy-lfu, policy-cost, policy-hybrid and policy-warm (with a
             GPU-like profile written for the tiny expert shape, so they
             promote and balance; policy-warm with a library recorded by a
             first run) at budget 1 or half.
  telemetry  the JSON Lines metrics are consistent: per layer and phase,
             hit_rows + miss_rows == tokens * top_k; weight_bytes ==
             promotions * bytes per expert; act_bytes == miss_rows * hidden *
             6; per step, promotions <= budget... and the run's totals add up.
  bad_policy a policy returning an invalid plan is refused, naming the policy;
             an unknown policy, a negative budget, budget + expert_memory
             together, a cost-aware policy without [policy] profile or with
             a profile of another expert shape are configuration errors
             (exit 2); a missing profile file is a runtime error (exit 1).
Usage: test_offload.py MODE PATH_TO_TIDE TEST_PLUGIN_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

PROMPT = ",".join(str(7 + (i * 37) % 400) for i in range(40))
H200 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "config", "profiles",
                    "h200-pcie5.ini")


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


# A GPU-like profile for the tiny model's experts (hidden 64, inter 32): the
# device is much faster than the host and copies overlap, so the cost-aware
# policies promote and balance. The numbers only steer placement.
GPU_LIKE = """[profile]
name = test-gpu-like
[transfer]
h2d_gbps = 2
d2h_gbps = 2
latency_us = 1
overlap = true
[expert]
hidden = 64
inter = 32
[device]
rows = 1, 64
us = 2, 3
[host]
rows = 1, 64
us = 20, 60
"""


def gpu_like_profile(tmp):
    path = os.path.join(tmp, "gpu-like.ini")
    with open(path, "w") as f:
        f.write(GPU_LIKE)
    return path


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
    prof = gpu_like_profile(tmp)
    library = os.path.join(tmp, "library.trc")
    run_ids(binary, cfg, ["policy.budget=-1", "output.trace=" + library])
    for b in (1, 16):
        cases.append(["policy.plugin=policy-lfu", "policy.budget=%d" % b])
        cases.append(["policy.plugin=policy-cost", "policy.budget=%d" % b, "policy.profile=" + prof])
    cases.append(["policy.plugin=policy-hybrid", "policy.budget=16", "policy.profile=" + prof])
    cases.append(["policy.plugin=policy-hybrid", "policy.budget=1", "policy-hybrid.core=0.5",
                  "policy-hybrid.interval=2"])
    cases.append(["policy.plugin=policy-warm", "policy.budget=16", "policy.profile=" + prof,
                  "policy-warm.library=" + library])
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
    prof = gpu_like_profile(tmp)
    configs = (["policy.plugin=policy-tide", "policy.budget=8", "policy-tide.interval=4"],
               ["policy.plugin=policy-lru", "policy.budget=8"],
               ["policy.plugin=policy-static", "policy.budget=8"],
               ["policy.plugin=policy-tide", "policy.budget=8", "policy-tide.prefetch=true"],
               ["policy.plugin=policy-lfu", "policy.budget=8"],
               ["policy.plugin=policy-cost", "policy.budget=8", "policy.profile=" + prof],
               ["policy.plugin=policy-hybrid", "policy.budget=8", "policy.profile=" + prof],
               ["policy.plugin=policy-warm", "policy.budget=8", "policy.profile=" + prof])
    for sets in configs:
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
    print("%d passed, %d failed" % (len(configs) - failures, failures))
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
        (["--set", "policy.plugin=policy-cost", "--set", "policy.budget=4"], 2,
         "policy-cost: needs the machine's modelled costs: set [policy] profile"),
        (["--set", "policy.plugin=policy-cost", "--set", "policy.budget=4", "--set",
          "policy.profile=" + H200], 2,
         "[policy] profile: its costs are for experts of 6291456 bytes, but the model's experts "
         "have 12288 bytes"),
        (["--set", "policy.plugin=policy-cost", "--set", "policy.budget=4", "--set",
          "policy.profile=" + os.path.join(tmp, "nope.ini")], 1, "nope.ini"),
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
