#!/usr/bin/python3
"""Load test of `tide serve` on the tiny synthetic model (loopback only).

24 distinct greedy requests (6 prompts x 4 shapes: completions and chat,
whole and streamed, various max_tokens and steps) are first run alone, one
after the other. Then 200 requests drawn from them are sent by 8 concurrent
clients. None may be lost (every one answered 200, in time), and every
answer must equal the same request run alone: text, finish reason and token
counts, though the server decodes them together (continuous batching: the
/metrics gauge tide_batch_sequences_max must exceed 1). Bounded: 200 requests, each with a 120 s timeout, the whole phase
with a 600 s deadline. Prints requests/s and p50/p99 latency (wall clock on
a shared machine: noisy, for information; nothing is asserted on time).

Usage: test_load.py  (environment: TIDE_BIN, TIDE_SOURCE_DIR)
"""
import json
import os
import random
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, check, finish, sse_events  # noqa: E402

N_REQUESTS = 200
N_CLIENTS = 8
DEADLINE = 600

PROMPTS = ["Hello", "The tide comes in", "Write a haiku about the sea", "1 2 3 4",
           "Once upon a time", "def f(x):"]
# (endpoint, max_tokens, steps, stream)
SHAPES = [("completions", 8, 4, False), ("completions", 40, 4, True),
          ("chat/completions", 24, 8, False), ("chat/completions", 16, 2, True)]


def body(prompt, shape):
    ep, max_tokens, steps, stream = shape
    b = {"model": "tiny", "max_tokens": max_tokens, "steps": steps, "temperature": 0,
         "stream": stream}
    if stream:
        b["stream_options"] = {"include_usage": True}
    if ep == "completions":
        b["prompt"] = prompt
    else:
        b["messages"] = [{"role": "user", "content": prompt}]
    return "/v1/" + ep, b


def run(base, path, b):
    """One request; returns (text, finish_reason, usage) or raises."""
    req = urllib.request.Request(base + path, data=json.dumps(b).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        if r.status != 200:
            raise RuntimeError("status %d" % r.status)
        if not b["stream"]:
            o = json.loads(r.read())
            c = o["choices"][0]
            text = c["text"] if "text" in c else c["message"]["content"]
            return text, c["finish_reason"], o["usage"]
        events = sse_events(r)
    if not events or events[-1] != "[DONE]":
        raise RuntimeError("the stream did not end with [DONE]")
    text, finish, usage = "", None, None
    for e in events[:-1]:
        if e.get("usage"):
            usage = e["usage"]
        for c in e["choices"]:
            text += c["text"] if "text" in c else c["delta"].get("content", "")
            finish = c["finish_reason"] or finish
    return text, finish, usage


def main():
    failures = []
    srv = Server()
    try:
        variants = [body(p, s) for p in PROMPTS for s in SHAPES]
        solo = [run(srv.base, path, b) for path, b in variants]
        for i, (_, reason, usage) in enumerate(solo):
            check(reason in ("stop", "length") and usage and usage["completion_tokens"] > 0,
                  "variant %d: %r %r" % (i, reason, usage), failures)
        before = srv.metrics().get("tide_generations_total", 0)

        rng = random.Random(15)
        order = [rng.randrange(len(variants)) for _ in range(N_REQUESTS)]
        results = [None] * N_REQUESTS
        latency = [None] * N_REQUESTS
        lock = threading.Lock()
        next_i = [0]
        t_end = time.time() + DEADLINE

        def client():
            while time.time() < t_end:
                with lock:
                    i = next_i[0]
                    next_i[0] += 1
                if i >= N_REQUESTS:
                    return
                path, b = variants[order[i]]
                t0 = time.time()
                try:
                    results[i] = run(srv.base, path, b)
                except Exception as e:  # a lost request: recorded, reported
                    results[i] = e
                latency[i] = time.time() - t0

        t0 = time.time()
        threads = [threading.Thread(target=client) for _ in range(N_CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.time() - t0

        lost = [i for i, r in enumerate(results) if r is None or isinstance(r, Exception)]
        wrong = [i for i, r in enumerate(results)
                 if i not in lost and r != solo[order[i]]]
        for i in lost[:5]:
            print("lost request %d (variant %d): %r" % (i, order[i], results[i]))
        for i in wrong[:5]:
            print("request %d (variant %d) differs from the same request alone:\n  %r\n  %r"
                  % (i, order[i], results[i], solo[order[i]]))
        check(not lost, "%d of %d requests lost" % (len(lost), N_REQUESTS), failures)
        check(not wrong, "%d answers differ from the same request run alone" % len(wrong),
              failures)
        # Continuous batching ([serve] max_batch, default 8): 8 clients that
        # keep sending make requests decode together, and each answer above
        # is still its solo answer (batch invariance).
        most = srv.metrics().get("tide_batch_sequences_max", 0)
        check(most > 1, "requests never decoded together (tide_batch_sequences_max %r)" % most,
              failures)
        served = srv.metrics().get("tide_generations_total", 0) - before
        check(served == N_REQUESTS, "the server counted %d generations, not %d"
              % (served, N_REQUESTS), failures)
        lat = sorted(x for x in latency if x is not None)
        if lat:
            p50 = lat[len(lat) // 2]
            p99 = lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))]
            print("serve load: %d requests from %d clients in %.2f s: %.1f requests/s, "
                  "latency p50 %.3f s, p99 %.3f s, max %.3f s; lost %d, differing %d; "
                  "up to %d prompts decoded together (wall clock on a shared machine)"
                  % (N_REQUESTS, N_CLIENTS, elapsed, N_REQUESTS / elapsed, p50, p99, lat[-1],
                     len(lost), len(wrong), most))
    finally:
        failures += srv.stop()
    finish(failures)


if __name__ == "__main__":
    main()
