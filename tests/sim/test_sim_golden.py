#!/usr/bin/python3
"""tide sim against the live engine, and the sim/trace command lines.

Golden modes (one ctest each): a generated tiny checkpoint (32 experts per
MoE layer, top-4; budget 8 makes it offload, the CPU backend plays device and
host) runs with a routing trace and metrics; `tide sim` replays the trace
through the same policy and must give exactly the same per-layer, per-phase
counters (tokens, active, hit_rows, miss_rows, promotions, evictions,
weight_bytes, act_bytes), line for line.

  tide, tide_prefetch, tide_first, lru, static,  `tide run`, one prompt with a
  lfu, cost, hybrid,                              prefilled block (cost and hybrid
  tide_llada21, tide_auto_llada21                 with [policy] profile = a
                                                  device-fast profile, which
                                                  tide sim gets as --profile;
                                                  the llada21 modes decode with
                                                  LLaDA2.1's open-ended loop
                                                  and also check trace info's
                                                  steps per block)
  bench, bench_warm                               `tide bench`, three prompts in
                                                  one trace, state carried over
                                                  (policy-warm: its library grows
                                                  from the prompts' vectors)
  cli      trace info/synth/counts and sim on a synthetic trace: the sweep,
           CSV, plots (well-formed SVG), --layer-budgets, --interval auto,
           and clear errors for a truncated or foreign trace, a profile of
           another shape, a model of another shape, --metrics with several
           configurations, and existing output files.
Usage: test_sim_golden.py MODE PATH_TO_TIDE PROFILE_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

PROMPT = ",".join(str(7 + (i * 37) % 400) for i in range(45))
KEYS = ["phase", "block", "step", "layer", "tokens", "active", "hit_rows", "miss_rows",
        "promotions", "evictions", "weight_bytes", "act_bytes"]


def tide(binary, args, check=True):
    r = subprocess.run([binary] + args, capture_output=True, text=True, errors="replace")
    if check and r.returncode != 0:
        print("FAILED (exit %d): tide %s" % (r.returncode, " ".join(args)))
        print(r.stdout)
        print(r.stderr)
        sys.exit(1)
    return r


def setup(binary, tmp):
    model = os.path.join(tmp, "tiny")
    tide(binary, ["--quiet", "mkmodel", model, "--preset", "tiny", "--seed", "5"])
    cfg = os.path.join(tmp, "t.ini")
    with open(cfg, "w") as f:
        # One thread: counters do not depend on it, and the test stays quick on
        # a busy machine (OpenMP teams spin when cores are oversubscribed).
        f.write("[model]\npath = %s\n[generation]\ngen_length = 96\n"
                "[output]\nprogress = false\nstream = false\n"
                "[backend-cpu-onednn]\nthreads = 1\n" % model)
    return model, cfg


def layer_lines(path):
    out = []
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            if o.get("type") == "layer":
                out.append([o[k] for k in KEYS])
    return out


def compare(live, sim, offloads=True):
    a, b = layer_lines(live), layer_lines(sim)
    bad = 0
    if len(a) != len(b):
        print("line counts differ: engine %d, sim %d" % (len(a), len(b)))
        bad += 1
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            bad += 1
            if bad <= 5:
                print("line %d differs:\n  engine %s\n  sim    %s" % (i, x, y))
    tot = [sum(r[k] for r in a) for k in range(4, len(KEYS))]
    print("%d lines compared; engine totals %s: %s" % (len(a), KEYS[4:], tot))
    if offloads and sum(r[KEYS.index("promotions")] for r in a) == 0:
        print("no promotions at all: the run did not offload")
        bad += 1
    return bad


def fast_device_profile(tmp):
    """A profile for the tiny experts (hidden 64, inter 32) with a device ten
    times faster than the host and overlapped copies, so that the cost-aware
    policies promote and balance."""
    path = os.path.join(tmp, "fast-device.ini")
    with open(path, "w") as f:
        f.write("[profile]\nname = fast-device\n[transfer]\nh2d_gbps = 4\nd2h_gbps = 4\n"
                "latency_us = 2\noverlap = true\n[expert]\nhidden = 64\ninter = 32\n"
                "[device]\nrows = 1, 32\nus = 1, 2\n[host]\nrows = 1, 32\nus = 10, 40\n")
    return path


def golden(binary, tmp, mode):
    _, cfg = setup(binary, tmp)
    prof = fast_device_profile(tmp)
    sets = {
        "tide": ["policy.plugin=policy-tide", "policy-tide.interval=3"],
        "tide_prefetch": ["policy.plugin=policy-tide", "policy-tide.interval=2",
                          "policy-tide.prefetch=true"],
        "tide_first": ["policy.plugin=policy-tide", "policy-tide.interval=4",
                       "policy-tide.first_block_every_step=false"],
        "lru": ["policy.plugin=policy-lru"],
        "static": ["policy.plugin=policy-static"],
        "lfu": ["policy.plugin=policy-lfu", "policy-lfu.decay=0.8"],
        "cost": ["policy.plugin=policy-cost", "policy.profile=" + prof],
        "hybrid": ["policy.plugin=policy-hybrid", "policy.profile=" + prof],
        # LLaDA2.1's loop: open-ended steps, blocks of different lengths.
        "tide_llada21": ["policy.plugin=policy-tide", "policy-tide.interval=5",
                         "generation.decoder=llada21", "generation.mode=quality",
                         "generation.threshold=0.9"],
        "tide_auto_llada21": ["policy.plugin=policy-tide", "policy-tide.interval=auto",
                              "policy-tide.profile=" + prof, "generation.decoder=llada21",
                              "generation.mode=speed", "generation.threshold=0.9"],
    }[mode]
    trace, live, sim = (os.path.join(tmp, n) for n in ("t.trc", "live.jsonl", "sim.jsonl"))
    args = ["--quiet", "run", "-c", cfg, "--ids", PROMPT, "--set", "policy.budget=8",
            "--set", "output.trace=" + trace, "--set", "output.metrics=" + live]
    for s in sets:
        args += ["--set", s]
    tide(binary, args)
    policy = sets[0].split("=")[1]
    sargs = ["--quiet", "sim", "--trace", trace, "-c", cfg, "--policy", policy, "--budget", "8",
             "--metrics", sim, "--no-hindsight"]
    for s in sets[1:]:
        if s.startswith("policy.profile="):
            sargs += ["--profile", s.split("=", 1)[1]]
        elif not s.startswith("generation."):  # the trace holds the decoding
            sargs += ["--set", s]
    iv = [s.split("=")[1] for s in sets if s.startswith("policy-tide.interval")]
    if iv:
        sargs += ["--interval", iv[0]]
    tide(binary, sargs)
    bad = compare(live, sim, mode != "static")
    if "llada21" in mode:
        bad += check_llada21(binary, trace, cfg, prof if "auto" in mode else None)
    return 1 if bad else 0


def check_llada21(binary, trace, cfg, auto_profile):
    """The trace of an open-ended decoder: the decoder is recorded and its
    blocks differ in length, some beyond 32 steps. With interval = auto, the
    policy weighs intervals up to the longest block of the trace (the
    decoder gives no bound: the official loop has none)."""
    info = tide(binary, ["trace", "info", trace]).stdout
    print("\n".join(l for l in info.splitlines()
                    if l.startswith(("decoder", "steps per block", "  "))))
    dist = [l for l in info.splitlines() if l.startswith("steps per block")]
    if "decoder: llada21 (mode=" not in info or not dist:
        print("trace info shows no llada21 decoder or no steps per block")
        return 1
    bad = 0
    longest = int(dist[0].rsplit("max ", 1)[1])
    if longest <= 32 or "min %d," % longest in dist[0]:
        print("expected blocks of different lengths, some longer than 32 steps")
        bad += 1
    if auto_profile:
        err = tide(binary, ["sim", "--trace", trace, "-c", cfg, "--policy", "tide", "--budget",
                            "8", "--interval", "auto", "--no-hindsight", "--set",
                            "policy-tide.profile=" + auto_profile]).stderr
        if "intervals 1..%d): interval " % longest not in err:
            print("interval = auto did not weigh intervals up to the longest block (%d):\n"
                  % longest + err)
            bad += 1
    return bad


def bench(binary, tmp, policy="lru"):
    _, cfg = setup(binary, tmp)
    extra = []
    if policy == "warm":
        extra = ["--set", "policy.profile=" + fast_device_profile(tmp)]
    prompts = os.path.join(tmp, "prompts.txt")
    with open(prompts, "w") as f:
        f.write("# three prompts\nthe tide comes in\n" + "long " * 40 + "prompt\nshort\n")
    out = os.path.join(tmp, "bench")
    trace = os.path.join(tmp, "b.trc")
    tide(binary, ["--quiet", "bench", "-c", cfg, "--policies", policy, "--budgets", "8",
                  "--prompts", prompts, "--out", out, "--set", "bench.baseline=false",
                  "--set", "output.trace=" + trace] + extra)
    runs = os.listdir(out)
    metrics = [os.path.join(out, runs[0], m) for m in os.listdir(os.path.join(out, runs[0]))
               if m.startswith("metrics-")]
    if len(metrics) != 1:
        print("expected one metrics file, got", metrics)
        return 1
    manifest = json.load(open(os.path.join(out, runs[0], "manifest.json")))
    if manifest.get("interrupted") is not False or len(manifest.get("rows", [])) != 1:
        print("manifest.json: expected interrupted false and one finished configuration, got",
              manifest.get("interrupted"), manifest.get("rows"))
        return 1
    info = tide(binary, ["trace", "info", trace]).stdout
    if "prompts 3," not in info or "prompt vectors: 3 of 3 prompts" not in info:
        print("the trace should hold three prompts with their vectors:\n" + info)
        return 1
    sim = os.path.join(tmp, "sim.jsonl")
    sargs = ["--profile", extra[1].split("=", 1)[1]] if extra else []
    tide(binary, ["--quiet", "sim", "--trace", trace, "-c", cfg, "--policy", policy, "--budget",
                  "8", "--metrics", sim, "--no-hindsight"] + sargs)
    return 1 if compare(metrics[0], sim) else 0


def expect_fail(binary, args, code, text):
    r = tide(binary, args, check=False)
    ok = r.returncode == code and text in r.stderr
    print("%-4s exit %d (want %d), %r" % ("ok" if ok else "FAIL", r.returncode, code, text))
    if not ok:
        print(r.stderr)
    return 0 if ok else 1


def cli(binary, tmp, profiles):
    fails = 0
    h100 = os.path.join(profiles, "h100-pcie5.ini")
    syn = os.path.join(tmp, "syn.trc")
    tide(binary, ["--quiet", "trace", "synth", syn, "--layers", "4", "--experts", "64",
                  "--top-k", "4", "--hidden", "64", "--inter", "32", "--blocks", "3",
                  "--similarity", "0.97", "--seed", "3"])
    fails += expect_fail(binary, ["trace", "synth", syn], 2, "exists; refusing to replace it")
    info = tide(binary, ["trace", "info", syn]).stdout
    line = [l for l in info.splitlines() if l.startswith("all")][0]
    d1 = float(line.split()[1])
    print("trace info: adjacent-step cosine %.4f (asked 0.97)" % d1)
    if abs(d1 - 0.97) > 0.01:
        fails += 1
    counts = os.path.join(tmp, "counts.txt")
    tide(binary, ["trace", "counts", syn, counts])
    with open(counts) as f:
        rows = [l.split() for l in f if not l.startswith("#")]
    if not rows or any(len(r) != 3 for r in rows):
        print("bad counts file")
        fails += 1
    # The sweep with a profile of another shape: refused, then accepted with scaling.
    fails += expect_fail(binary, ["sim", "--trace", syn, "--profile", h100], 2,
                         "was measured for experts of hidden 2048 x inter 512 (6.00 MiB, bf16), but the trace")
    # ... and the refusal names the flag that accepts it.
    fails += expect_fail(binary, ["sim", "--trace", syn, "--profile", h100], 2, "--scale-profile")
    # A profile of this machine for the trace's expert shape.
    prof = os.path.join(tmp, "p.ini")
    tide(binary, ["--quiet", "profile", prof, "--hidden", "64", "--inter", "32", "--experts",
                  "8", "--rows", "1,2,4,8,16", "--device", "none", "--set",
                  "backend-cpu-onednn.threads=1"])
    with open(prof) as f:
        text = f.read()
    for want in ("[M]", "hidden = 64", "overlap = false", "rows = 1, 2, 4, 8, 16"):
        if want not in text:
            print("tide profile output lacks %r:\n%s" % (want, text))
            fails += 1
    r = tide(binary, ["sim", "--trace", syn, "--profile", h100, "--scale-profile", "--budget",
                      "8", "--policy", "static", "--no-oracle"])
    if "are scaled by" not in r.stderr:
        print("no warning about the scaled profile:\n" + r.stderr)
        fails += 1
    csv, plots = os.path.join(tmp, "s.csv"), os.path.join(tmp, "plots")
    r = tide(binary, ["sim", "--trace", syn, "--profile", prof, "--budget",
                      "8,16", "--interval", "1-4,16,auto", "--csv", csv, "--plot", plots,
                      "--layer-budgets"])
    print(r.stdout)
    for want in ("minimises modelled time for policy-tide", "oracle", "belady", "best-static",
                 "shared unequally", "million assignments per second"):
        if want not in r.stdout:
            print("missing from the sim output:", want)
            fails += 1
    if "interval auto" not in r.stderr:
        print("policy-tide interval = auto logged no choice:\n" + r.stderr)
        fails += 1
    with open(csv) as f:
        lines = f.read().splitlines()
    # 2 budgets x (6 tide + lru + static + belady + best-static + oracle) + 2 layer-budget rows
    if len(lines) != 1 + 2 * 11 + 2:
        print("csv has %d lines" % len(lines))
        fails += 1
    svgs = sorted(os.listdir(plots))
    print("plots:", svgs)
    for want in ("interval-b8.svg", "interval-b16.svg", "hitrate-budget.svg",
                 "heatmap-layer00.svg"):
        if want not in svgs:
            fails += 1
    for s in svgs:
        try:
            ET.parse(os.path.join(plots, s))
        except ET.ParseError as e:
            print("%s is not well-formed: %s" % (s, e))
            fails += 1
    # Bad input.
    with open(syn, "rb") as f:
        data = f.read()
    cut = os.path.join(tmp, "cut.trc")
    with open(cut, "wb") as f:
        f.write(data[:-5])
    fails += expect_fail(binary, ["sim", "--trace", cut], 1, "truncated")
    foreign = os.path.join(tmp, "foreign.trc")
    with open(foreign, "wb") as f:
        f.write(b"GGUF" + data[4:])
    fails += expect_fail(binary, ["trace", "info", foreign], 1, "not a TIDE routing trace")
    ver = os.path.join(tmp, "ver.trc")
    with open(ver, "wb") as f:
        f.write(data[:8] + b"\x07" + data[9:])
    fails += expect_fail(binary, ["sim", "--trace", ver], 1,
                         "format version 7, this tide reads versions 1 to 4")
    fails += expect_fail(binary, ["sim", "--trace", syn, "--budget", "4,8", "--policy", "lru",
                                  "--metrics", os.path.join(tmp, "m.jsonl")], 2,
                         "--metrics needs exactly one configuration")
    fails += expect_fail(binary, ["sim", "--trace", syn, "--csv", csv], 2,
                         "exists; refusing to replace it")
    fails += expect_fail(binary, ["sim", "--trace", syn, "--budget", "x"], 2,
                         "is not a number or range")
    fails += expect_fail(binary, ["sim", "--trace", syn, "--interval", "auto"], 2,
                         "--interval auto needs --profile")
    model, _ = setup(binary, tmp)
    fails += expect_fail(binary, ["sim", "--trace", syn, "--model", model, "--policy", "static"],
                         2, "was recorded for 4 MoE layers x 64 experts")
    fails += expect_fail(binary, ["profile", csv], 2, "exists; refusing to replace it")
    return 1 if fails else 0


def sim_compare(binary, tmp):
    """Issue 38: a shipped profile is found with --out as without it; several
    --trace, --batch and --profile values in one run give one CSV row per
    combination and configuration, with a column naming each."""
    fails = 0
    traces = []
    for seed in (3, 4):
        t = os.path.join(tmp, "syn%d.trc" % seed)
        tide(binary, ["--quiet", "trace", "synth", t, "--layers", "2", "--experts", "16",
                      "--top-k", "2", "--hidden", "64", "--inter", "32", "--blocks", "2",
                      "--prompts", "2", "--similarity", "0.97", "--seed", str(seed)])
        traces.append(t)
    shipped = ["config/profiles/h100-pcie5.ini", "config/profiles/a100-pcie4.ini"]
    base = ["sim", "--budget", "4,8", "--policy", "lru", "--no-hindsight", "--scale-profile"]
    # From a folder without config/: the profile is found where tide ships it.
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        for extra in ([], ["--out", os.path.join(tmp, "o")]):
            r = tide(binary, base + ["--trace", traces[0], "--profile", shipped[0]] + extra,
                     check=False)
            if r.returncode != 0:
                print("shipped profile not found%s:\n%s" % (" with --out" if extra else "",
                                                            r.stderr))
                fails += 1
        csv_path = os.path.join(tmp, "cmp.csv")
        r = tide(binary, base + ["--trace", ",".join(traces), "--batch", "1", "--batch", "2",
                                 "--profile", ",".join(shipped), "--csv", csv_path], check=False)
    finally:
        os.chdir(cwd)
    if r.returncode != 0:
        print("tide sim over several traces, batches and profiles failed:\n" + r.stderr)
        return 1
    import csv
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    combos = {(x["trace"], x["batch"], x["profile"]) for x in rows}
    want = {(t, b, p) for t in traces for b in ("1", "2") for p in shipped}
    if combos != want:
        print("combinations in the CSV: %s, want %s" % (sorted(combos), sorted(want)))
        fails += 1
    # One row per combination x budget (policy-lru only).
    if len(rows) != len(want) * 2 or len({(x["trace"], x["batch"], x["profile"], x["budget"])
                                          for x in rows}) != len(rows):
        print("%d rows, want one per combination and budget (%d)" % (len(rows), len(want) * 2))
        fails += 1
    # Batches of 2 prompts differ from one at a time.
    one = [x["hit_rows"] for x in rows if x["batch"] == "1"]
    two = [x["hit_rows"] for x in rows if x["batch"] == "2"]
    if one == two:
        print("batch 1 and batch 2 rows are the same: --batch was not applied per run")
        fails += 1
    fails += expect_fail(binary, base + ["--trace", ",".join(traces)], 2, "--csv FILE")
    fails += expect_fail(binary, base + ["--trace", traces[0], "--trace", traces[1], "--csv",
                                         os.path.join(tmp, "x.csv"), "--out",
                                         os.path.join(tmp, "o2")], 2, "--out replays one")
    print("compare: %d rows over %d combinations" % (len(rows), len(combos)))
    return 1 if fails else 0


def main():
    mode, binary = sys.argv[1], sys.argv[2]
    profiles = sys.argv[3] if len(sys.argv) > 3 else ""
    tmp = tempfile.mkdtemp(prefix="tide-sim-golden-")
    try:
        if mode == "bench":
            rc = bench(binary, tmp)
        elif mode == "bench_warm":
            rc = bench(binary, tmp, "warm")
        elif mode == "cli":
            rc = cli(binary, tmp, profiles)
        elif mode == "compare":
            rc = sim_compare(binary, tmp)
        else:
            rc = golden(binary, tmp, mode)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS" if rc == 0 else "FAIL")
    return rc


if __name__ == "__main__":
    sys.exit(main())
