#!/usr/bin/python3
"""`tide serve` never crashes on a request: hostile HTTP and JSON, sent over
raw sockets to 127.0.0.1 (bounded: a fixed list plus 400 seeded random
mutations of valid bodies). Every well-framed request must get an answer
with a status below 500 and, for errors, an OpenAI-style JSON error; at the
end the server still answers, and it exits 0 on SIGTERM with no sanitizer
report (run under ASan by the sanitizer build of CI). Then clients that
stall in their headers or body, as many as [serve] max_connections, get 408
after [serve] read_timeout, and others are served again.

Usage: test_malformed.py [SEED]  (environment: TIDE_BIN, TIDE_SOURCE_DIR)
"""
import json
import os
import random
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, check, finish  # noqa: E402

VALID = [
    ("/v1/completions", {"prompt": "Hello", "max_tokens": 8, "steps": 2, "stop": ["x", "\n"]}),
    ("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4, "stream": True,
                         "stream_options": {"include_usage": True}}),
    ("/v1/completions", {"prompt": ["a", [4, 5]], "max_tokens": 4, "temperature": 0.7,
                         "top_p": 0.9, "top_k": 3, "seed": 5}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                              "stream": True}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Hi"}]}], "max_completion_tokens": 4, "threshold": 0.5}),
    ("/tokenize", {"prompt": "hello world"}),
    ("/detokenize", {"tokens": [1, 2, 3]}),
]


def exchange(port, data, timeout=120, half_close=False):
    """Send raw bytes; return the bytes answered until the server closes or
    the answer is complete (Connection: close is requested)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):  # closed on us mid-request
            pass
        if half_close:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:  # the server has closed already
                pass
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


def http(method, path, body=b"", headers=None, extra=b""):
    h = {"Host": "127.0.0.1", "Connection": "close", "Content-Type": "application/json",
         "Content-Length": str(len(body))}
    h.update(headers or {})
    head = "%s %s HTTP/1.1\r\n" % (method, path) + "".join(
        "%s: %s\r\n" % kv for kv in h.items() if kv[1] is not None) + "\r\n"
    return head.encode() + body + extra


def status_of(answer):
    try:
        return int(answer.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def check_answer(what, answer, failures, allow=(200, 400, 404, 405, 413, 431)):
    st = status_of(answer)
    check(st is not None, "%s: no HTTP answer (%r)" % (what, answer[:200]), failures)
    if st is None:
        return
    check(st in allow, "%s: status %d: %r" % (what, st, answer[:300]), failures)
    if 400 <= st < 500 and st != 431 and b"\r\n\r\n" in answer:
        body = answer.split(b"\r\n\r\n", 1)[1]
        try:
            err = json.loads(body)["error"]
            check(isinstance(err["message"], str), "%s: error without message" % what, failures)
        except Exception:
            check(False, "%s: %d without an OpenAI error body: %r" % (what, st, body[:200]),
                  failures)


def mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        i = rng.randrange(len(data) + 1)
        if op == 0 and data:  # flip a byte
            data[min(i, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:  # insert a troublesome character
            data[i:i] = rng.choice([b"\"", b"\\", b"{", b"[", b"]", b"}", b",", b":", b"0",
                                    b"-", b"\x00", b"\xff", b"\\u0000", b"\\ud800", b"1e999",
                                    b"null", b"true", b"9" * 30])
        elif op == 2:  # truncate
            data = data[:i]
        elif op == 3:  # duplicate a slice
            j = rng.randrange(len(data) + 1)
            data[i:i] = data[min(i, j):max(i, j)][:64]
        elif op == 4 and data:  # delete a slice
            del data[i:i + rng.randint(1, 8)]
        else:  # swap a value's type
            data = data.replace(b"4", rng.choice([b"\"4\"", b"[4]", b"{}", b"4.5", b"-4"]), 1)
    return bytes(data)


def stalled(failures):
    """max_connections = 8 sockets that stall, four in their headers and four
    in their body, hold every slot: each must get 408 once read_timeout (1 s)
    has passed and free its slot, so that a normal request is served."""
    srv = Server(sets=["serve.max_connections=8", "serve.read_timeout=1",
                       "generation.gen_length=16"])
    socks = []
    try:
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        for i in range(8):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            s.sendall(head + (b'Content-Length: 100\r\n\r\n{"prompt":' if i % 2 else
                              b"Content-Le"))
            socks.append(s)
        t0 = time.time()
        try:
            st, out = srv.post("/v1/completions", {"prompt": "Hello", "max_tokens": 4}, timeout=30)
        except OSError as e:  # no slot, no answer
            st, out = None, repr(e)
        check(st == 200, "a request behind 8 stalled connections: %s %r" % (st, out), failures)
        check(time.time() - t0 < 15, "served after %.1f s, with read_timeout = 1 s"
              % (time.time() - t0), failures)
        for i, s in enumerate(socks):
            answer = b""
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    answer += chunk
            except OSError:
                pass
            what = "stalled in the %s" % ("body" if i % 2 else "headers")
            check(status_of(answer) == 408 and b'"code":"request_timeout"' in answer,
                  "%s: %r" % (what, answer[:300]), failures)
        m = srv.metrics()
        for label in ("completions", "other"):
            n = m.get('tide_http_requests_total{endpoint="%s",status="408"}' % label)
            check(n == 4, "408s counted for %s: %s" % (label, n), failures)
    finally:
        for s in socks:
            s.close()
        failures += srv.stop()


def main():
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 1234
    failures = []
    # A small max_body keeps the oversized cases cheap.
    srv = Server(sets=["serve.max_body=64KiB", "generation.gen_length=16"])
    port = srv.port
    try:
        # HTTP-level abuse: libmicrohttpd answers (4xx or 505, its own HTML)
        # or closes the connection; either is fine, hanging or crashing is not.
        protocol = [
            ("garbage request line", b"\x00\x01\x02 nonsense \xff\xfe\r\n\r\n"),
            ("not HTTP", b"hello\r\n\r\n"),
            ("HTTP/0.9", b"GET /health\r\n\r\n"),
            ("bad version", b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n"),
            ("header without colon", b"GET /health HTTP/1.1\r\nHost: x\r\nbroken\r\n\r\n"),
            ("huge header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 200000 +
             b"\r\n\r\n"),
            ("many headers", b"GET /health HTTP/1.1\r\nHost: x\r\n" +
             b"".join(b"X-%d: y\r\n" % i for i in range(3000)) + b"\r\n"),
            ("long path", http("GET", "/" + "a" * 100000)),
            ("negative length", http("POST", "/v1/completions", b"{}",
                                     {"Content-Length": "-5"})),
            ("huge length", http("POST", "/v1/completions", b"{}",
                                 {"Content-Length": "99999999999999999999"})),
            ("bad chunked", http("POST", "/v1/completions", b"zz\r\nabc\r\n0\r\n\r\n",
                                 {"Content-Length": None, "Transfer-Encoding": "chunked"})),
        ]
        for what, data in protocol:
            t0 = time.time()
            answer = exchange(port, data, timeout=30, half_close=True)
            st = status_of(answer)
            check(st is None or (400 <= st < 500 and st != 499) or st == 505,
                  "%s: status %s" % (what, st), failures)
            check(time.time() - t0 < 25, "%s: no answer nor close in 25 s" % what, failures)
        # API-level abuse: an answer below 500, errors as OpenAI JSON.
        cases = [
            ("query string", http("GET", "/health?x=1&y=%00")),
            ("percent path", http("GET", "/v1/models/%2e%2e%2f%2e%2e%2fetc%2fpasswd")),
            ("unknown method", http("BREW", "/v1/completions")),
            ("length over max_body", http("POST", "/v1/completions", b"{}",
                                          {"Content-Length": "10000000"})),
            ("body over max_body", http("POST", "/v1/completions",
                                        b'{"prompt":"' + b"a" * 70000 + b'"}')),
            ("chunked over max_body", http(
                "POST", "/v1/completions",
                b"".join(b"4000\r\n" + b"a" * 0x4000 + b"\r\n" for _ in range(8)) +
                b"0\r\n\r\n", {"Content-Length": None, "Transfer-Encoding": "chunked"})),
            ("deep JSON", http("POST", "/v1/completions", b"[" * 60000)),
            ("deep object", http("POST", "/v1/completions",
                                 b'{"prompt":"a","x":' + b'{"a":' * 10000)),
            ("huge number", http("POST", "/v1/completions",
                                 b'{"prompt":"a","max_tokens":1e400}')),
            ("huge integer", http("POST", "/v1/completions",
                                  b'{"prompt":"a","max_tokens":123456789012345678901234567890}')),
            ("NaN", http("POST", "/v1/completions", b'{"prompt":"a","temperature":NaN}')),
            ("lone surrogate", http("POST", "/v1/completions", b'{"prompt":"\\ud800"}')),
            ("invalid UTF-8", http("POST", "/v1/completions", b'{"prompt":"\xc3\x28"}')),
            ("NUL in body", http("POST", "/v1/completions", b'{"prompt":"a\x00b"}')),
            ("duplicate keys", http("POST", "/v1/completions",
                                    b'{"prompt":1,"prompt":"a","max_tokens":2}')),
            ("ids out of range", http("POST", "/v1/completions",
                                      b'{"prompt":[2147483648],"max_tokens":2}')),
            ("many prompts", http("POST", "/v1/completions",
                                  json.dumps({"prompt": ["a"] * 1000}).encode())),
            ("many stops", http("POST", "/v1/completions",
                                json.dumps({"prompt": "a", "stop": ["x"] * 100}).encode())),
            ("file path prompt", http("POST", "/v1/completions",
                                      b'{"prompt":"/etc/passwd","max_tokens":2}')),
            ("wrong content type", http("POST", "/v1/completions",
                                        b'{"prompt":"a","max_tokens":2}',
                                        {"Content-Type": "text/plain"})),
            ("form body", http("POST", "/v1/completions", b"prompt=a&max_tokens=2",
                               {"Content-Type": "application/x-www-form-urlencoded"})),
            ("bad auth header", http("GET", "/v1/models", b"",
                                     {"Authorization": "Basic \xff"})),
        ]
        for what, data in cases:
            check_answer(what, exchange(port, data), failures)
        st = status_of(exchange(port, http("POST", "/v1/completions",
                                           b'{"prompt":"' + b"a" * 70000 + b'"}')))
        check(st == 413, "a body over max_body: %s, not 413" % st, failures)
        # Truncated bodies and early closes: the server must shrug them off.
        for what, data in [
            ("truncated body", http("POST", "/v1/completions", b'{"prompt":"a"}',
                                    {"Content-Length": "1000"})),
            ("half headers", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le"),
        ]:
            exchange(port, data, timeout=2, half_close=True)
        for _ in range(20):  # connect and leave
            socket.create_connection(("127.0.0.1", port)).close()
        # A stream whose client leaves as soon as the headers arrive.
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(http("POST", "/v1/completions",
                       b'{"prompt":"a","max_tokens":400,"stream":true}'))
        s.recv(100)
        s.close()
        # Pipelined requests on one connection (libmicrohttpd answers the
        # first and may close).
        two = http("GET", "/health", headers={"Connection": "keep-alive"}) + http("GET", "/health")
        check(exchange(port, two).startswith(b"HTTP/1.1 200"), "pipelined requests", failures)

        # Seeded random mutations of valid bodies.
        rng = random.Random(seed)
        statuses = {}
        for n in range(400):
            path, body = VALID[n % len(VALID)]
            data = mutate(rng, json.dumps(body).encode())
            answer = exchange(port, http("POST", path, data))
            check_answer("mutation %d of %s (seed %d): %r" % (n, path, seed, data[:200]), answer,
                         failures)
            st = status_of(answer)
            statuses[st] = statuses.get(st, 0) + 1
        print("mutated requests by status:", dict(sorted(statuses.items(), key=str)))

        # Still alive and still right.
        st, _ = srv.get("/health")
        check(st == 200, "/health after the abuse: %s" % st, failures)
        st, out = srv.post("/v1/completions", {"prompt": "Hello", "max_tokens": 4})
        check(st == 200 and json.loads(out)["usage"]["completion_tokens"] == 4,
              "a completion after the abuse: %s %r" % (st, out[:200]), failures)
        time.sleep(0.2)
    finally:
        failures += srv.stop()
    stalled(failures)
    finish(failures)


if __name__ == "__main__":
    main()
