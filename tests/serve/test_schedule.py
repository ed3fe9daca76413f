#!/usr/bin/python3
"""Admission and scheduling of `tide serve` (docs/serving.md, "Batching").

1. A burst to an idle server: 10 requests sent at once to a server with
   max_batch 8 and max_queue 3. At most 2 of them can be waiting for a
   batch slot (8 slots take the rest at the next forward), so none may be
   refused: every answer is 200. (Before requests that a free slot takes at
   the next forward stopped counting against max_queue, such a burst got
   spurious 503s.)
2. [serve] schedule: one slot (max_batch 1), a long request running, then
   a long request A and a short one B waiting. fifo answers A before B;
   shortest answers B before A (B's plan forwards fewer positions).

Usage: test_schedule.py  (environment: TIDE_BIN, TIDE_SOURCE_DIR)
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, check, finish  # noqa: E402


def body(prompt, max_tokens, steps=8):
    return {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "steps": steps,
            "temperature": 0}


def burst(failures):
    srv = Server(sets=["serve.max_batch=8", "serve.max_queue=3"])
    try:
        go = threading.Barrier(10)
        status = [None] * 10

        def one(i):
            go.wait()
            status[i], _ = srv.post("/v1/completions", body("Burst %d" % i, 32))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        refused = [s for s in status if s != 200]
        check(not refused, "a burst of 10 on max_batch 8 / max_queue 3: all answered 200 "
              "(got %s)" % status, failures)
        print("burst: statuses %s" % status)
    finally:
        failures += srv.stop()


def order(schedule, failures):
    """The order in which a long (A) and a short (B) waiting request end."""
    srv = Server(sets=["serve.max_batch=1", "serve.schedule=" + schedule])
    ended = []
    try:
        lock = threading.Lock()

        def one(name, max_tokens):
            st, _ = srv.post("/v1/completions", body("Request " + name, max_tokens))
            with lock:
                ended.append((name, st))

        first = threading.Thread(target=one, args=("first", 512))
        first.start()
        # Until the first runs, so that A and B both wait for its slot.
        deadline = time.time() + 60
        while time.time() < deadline and srv.metrics().get("tide_running_requests", 0) < 1:
            time.sleep(0.01)
        a = threading.Thread(target=one, args=("A", 256))
        a.start()
        while time.time() < deadline and srv.metrics().get("tide_queue_requests", 0) < 1:
            time.sleep(0.01)
        b = threading.Thread(target=one, args=("B", 16))
        b.start()
        while time.time() < deadline and srv.metrics().get("tide_queue_requests", 0) < 2:
            time.sleep(0.01)
        check(srv.metrics().get("tide_queue_requests", 0) == 2,
              "%s: A and B wait together" % schedule, failures)
        for t in (first, a, b):
            t.join(600)
    finally:
        failures += srv.stop()
    names = [n for n, st in ended if st == 200]
    print("%s: ended %s" % (schedule, ended))
    return names


def main():
    failures = []
    burst(failures)
    fifo = order("fifo", failures)
    check(fifo == ["first", "A", "B"], "fifo: the first, then A (arrived first), then B "
          "(got %s)" % fifo, failures)
    short = order("shortest", failures)
    check(short == ["first", "B", "A"], "shortest: the first, then B (less planned work), "
          "then A (got %s)" % short, failures)
    finish(failures)


if __name__ == "__main__":
    main()
