#!/usr/bin/env python3
"""Load table of `tide serve`: requests/s and latency by number of clients.

Starts `tide serve` (loopback, a free port) once per [serve] max_batch value,
runs every request alone first (one client) to know its answer, then sends
REQUESTS requests from each number of concurrent clients and prints one row
per (max_batch, clients): requests/s, generated tokens/s, latency p50 and
p99, requests lost (not answered 200), and answers that differ from the same
request run alone, with two ratios measured in the same run: to one client
at the same max_batch, and to max_batch 1 with as many clients. Greedy
requests over a few prompts, all of max_tokens tokens. Wall clock: run it on a quiet machine; the CPU is named in the
header. max_batch 1 decodes one request at a time (the server before
continuous batching).

With --baseline BIN (another build's tide, e.g. of the commit before), both
servers run side by side and every row is measured for each build in turn,
alternating (build column), so "before" and "after" share the host and the
hour; the ratios are then within each build.

usage: bench/serve-load/run.py [--tide BIN] [--baseline BIN] [-c CONFIG]
           [--set S.K=V ...] [--clients 1,8,16] [--requests 200]
           [--max-tokens 64] [--steps N] [--max-batch 1,8] [--prompts N]
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS = ["Hello", "The tide comes in", "Write a haiku about the sea", "1 2 3 4",
           "Once upon a time", "def f(x):", "Name three rivers.", "Why is the sky blue?"]


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


class Server:
    def __init__(self, tide, config, sets, max_batch):
        self.tmp = tempfile.mkdtemp(prefix="tide-serve-load-")
        self.log_path = os.path.join(self.tmp, "serve.log")
        args = [tide, "serve", "-c", config, "--port", "0", "--set", "output.progress=false",
                "--set", "serve.max_batch=%d" % max_batch, "--set", "serve.max_queue=1024"]
        for s in sets:
            args += ["--set", s]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        self.base = None
        deadline = time.time() + 600
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(self.log_path).read())
            if m:
                self.base = "http://127.0.0.1:%s" % m.group(1)
                break
            time.sleep(0.2)
        if not self.base:
            self.proc.kill()
            sys.exit("the server did not start:\n" + open(self.log_path).read())

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=120)
        self.log.close()


def run(base, prompt, max_tokens, steps):
    b = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    if steps:
        b["steps"] = steps
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(b).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=3600) as r:
        o = json.loads(r.read())
    return o["choices"][0]["text"], o["usage"]["completion_tokens"]


def load(base, n_clients, n_requests, max_tokens, steps, solo):
    results, latency = [None] * n_requests, [None] * n_requests
    lock, nxt = threading.Lock(), [0]

    def client():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= n_requests:
                return
            t0 = time.time()
            try:
                results[i] = run(base, PROMPTS[i % len(PROMPTS)], max_tokens, steps)
            except Exception as e:  # lost: counted
                results[i] = e
            latency[i] = time.time() - t0

    t0 = time.time()
    threads = [threading.Thread(target=client) for _ in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    lost = sum(1 for r in results if not isinstance(r, tuple))
    differ = sum(1 for i, r in enumerate(results)
                 if isinstance(r, tuple) and r != solo[i % len(PROMPTS)])
    tokens = sum(r[1] for r in results if isinstance(r, tuple))
    lat = sorted(x for x in latency if x is not None)
    p50 = lat[len(lat) // 2]
    p99 = lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))]
    return n_requests / elapsed, tokens / elapsed, p50, p99, lost, differ, elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tide", default=os.path.join(ROOT, "build", "tide"))
    ap.add_argument("--baseline", help="another build's tide, measured alternately")
    ap.add_argument("-c", "--config", default=os.path.join(ROOT, "config", "llada2-tiny.ini"))
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--clients", default="1,8,16")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=0, help="steps per block (0: as configured)")
    ap.add_argument("--max-batch", default="1,8")
    ap.add_argument("--prompts", type=int, default=len(PROMPTS),
                    help="distinct prompts (each also run alone first), at most %d" % len(PROMPTS))
    a = ap.parse_args()
    del PROMPTS[max(1, min(a.prompts, len(PROMPTS))):]
    clients = [int(x) for x in a.clients.split(",")]
    print("tide serve load: %s, %s; %d requests per row, max_tokens %d%s, greedy; CPU: %s "
          "(%d threads)" % (os.path.basename(a.config), " ".join(a.set) or "defaults",
                            a.requests, a.max_tokens,
                            ", %d steps per block" % a.steps if a.steps else "", cpu_name(),
                            os.cpu_count()))
    builds = [("this build", a.tide)] + ([("baseline", a.baseline)] if a.baseline else [])
    print("| build | max_batch | clients | req/s | x 1 client | x max_batch 1 | tok/s | p50 s | "
          "p99 s | lost | differ from alone |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rate = {}  # (build, max_batch, clients) -> req/s, for the ratio columns
    for mb in [int(x) for x in a.max_batch.split(",")]:
        servers = []
        try:
            for name, tide in builds:
                servers.append((name, Server(tide, a.config, a.set, mb)))
            solo = {name: [run(srv.base, p, a.max_tokens, a.steps) for p in PROMPTS]
                    for name, srv in servers}
            for c in clients:
                # Alternate the builds' order from one row to the next.
                order = servers if c % 2 == 0 else list(reversed(servers))
                for name, srv in order:
                    rps, tps, p50, p99, lost, differ, _ = load(srv.base, c, a.requests,
                                                                a.max_tokens, a.steps,
                                                                solo[name])
                    rate[(name, mb, c)] = rps
                    one = rate.get((name, mb, 1))
                    base = rate.get((name, 1, c))
                    print("| %s | %d | %d | %.2f | %s | %s | %.1f | %.3f | %.3f | %d | %d |"
                          % (name, mb, c, rps, "%.2f" % (rps / one) if one else "-",
                             "%.2f" % (rps / base) if base else "-", tps, p50, p99, lost,
                             differ))
                    sys.stdout.flush()
        finally:
            for _, srv in servers:
                srv.stop()


if __name__ == "__main__":
    main()
