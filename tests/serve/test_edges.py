"""`tide serve` at the edges of HTTP and of the API (issue 39), one case per
ctest test (serve_edges_CASE, tests/serve/CMakeLists.txt):

  half_close     a client that half-closes its socket after a whole request
                 (shutdown(SHUT_WR), as HTTP/1.0 tools do) gets its answer
  help           `tide serve --help` describes the continuous batch
  context_error  LLaDA-MoE's context error names the max_tokens asked for,
                 not the whole blocks it is rounded to
  param_refusal  top_k/top_p on the llada decoder: 400 naming the field, no
                 "generation failed:", logged at info level, not as an error
  json_safe      what the server emits (U+0000 included) is taken back as an
                 assistant turn
  cancel_close   a stream cancelled by a shutdown closes its connection at
                 once, not when the drain gives up
  keepalive      GET answers keep the connection open
  seed           without a seed each request draws one and reports it; the
                 reported seed repeats the answer; [serve] default_seed

usage: test_edges.py CASE. Environment: TIDE_BIN, TIDE_SOURCE_DIR.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, check, finish  # noqa: E402


def raw(port, data, half_close=True, timeout=60):
    """Send data on a new connection, half-close it (SHUT_WR), and read
    until the server closes: the bytes received."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    if half_close:
        s.shutdown(socket.SHUT_WR)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except socket.timeout:
        pass
    s.close()
    return out


def post_bytes(path, body, version="HTTP/1.0", extra=""):
    b = json.dumps(body).encode()
    return (("POST %s %s\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             "Content-Length: %d\r\n%s\r\n") % (path, version, len(b), extra)).encode() + b


def final_response(data):
    """(status, headers text, body) of the final answer in data, interim
    1xx answers skipped."""
    while True:
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
        if 100 <= status < 200:
            data = rest
            continue
        return status, head.decode(errors="replace"), rest


def dechunk(body):
    out = b""
    while body:
        size, _, body = body.partition(b"\r\n")
        n = int(size.split(b";")[0], 16)
        if n == 0:
            break
        out += body[:n]
        body = body[n + 2:]
    return out


def case_half_close(f):
    srv = Server()
    try:
        # Long enough (many steps) for the server to look at the socket meanwhile.
        req = {"prompt": "Hello", "max_tokens": 256, "steps": 32}
        for version, extra in (("HTTP/1.0", ""), ("HTTP/1.1", "Connection: close\r\n")):
            data = raw(srv.port, post_bytes("/v1/completions", req, version, extra))
            status, _, body = final_response(data)
            check(status == 200, "%s half-close: status %s, %d bytes: %r"
                  % (version, status, len(data), data[:200]), f)
            if status == 200:
                obj = json.loads(body)
                check(obj["choices"][0]["finish_reason"] in ("stop", "length"),
                      "%s half-close: no choice: %r" % (version, body[:200]), f)
        # A stream too (HTTP/1.1: chunked).
        data = raw(srv.port, post_bytes("/v1/completions", dict(req, stream=True), "HTTP/1.1",
                                        "Connection: close\r\n"))
        status, head, body = final_response(data)
        text = dechunk(body) if "chunked" in head.lower() else body
        check(status == 200 and b"data: [DONE]" in text,
              "half-closed stream: status %s, %r" % (status, data[:300]), f)
        m = srv.metrics()
        check(m.get('tide_cancelled_total{reason="disconnect"}', 0) == 0,
              "a half-closed client was taken for a disconnect", f)
    finally:
        f += srv.stop()


def case_help(f):
    out = subprocess.run([os.environ["TIDE_BIN"], "serve", "--help"], capture_output=True,
                         text=True, timeout=60)
    check(out.returncode == 0, "serve --help exited %d" % out.returncode, f)
    text = out.stdout
    check("one generation at a time" not in text, "--help: still 'one generation at a time'", f)
    check("max_batch" in text and "continuous batch" in text,
          "--help does not describe the continuous batch", f)
    check("default_seed" in text and "schedule" in text, "--help lacks [serve] keys", f)


def case_context_error(f):
    srv = Server(config="llada-moe-tiny", create="tiny-moe")
    try:
        _, info = srv.get("/tokenizer_info")
        ctx = json.loads(info)["model_max_length"]
        # 40 positions left: 33 tokens fit, the two blocks of 32 they are
        # generated in do not.
        status, body = srv.post("/v1/completions",
                                {"prompt": [5] * (ctx - 40), "max_tokens": 33})
        err = json.loads(body).get("error", {})
        msg = err.get("message", "")
        check(status == 400 and err.get("param") == "max_tokens", "status %d: %s" % (status, body), f)
        check("max_tokens (33" in msg, "the message does not name max_tokens 33: " + msg, f)
        check("max_tokens (64)" not in msg, "the message names the rounded 64 as asked: " + msg, f)
    finally:
        f += srv.stop()


def case_param_refusal(f):
    srv = Server(config="llada-moe-tiny", create="tiny-moe")
    try:
        for field, value in (("top_k", 5), ("top_p", 0.5)):
            status, body = srv.post("/v1/completions",
                                    {"prompt": "Hello", "max_tokens": 8, field: value})
            err = json.loads(body).get("error", {})
            check(status == 400, "%s: status %d: %s" % (field, status, body), f)
            check(err.get("param") == field, "%s: param %r: %s" % (field, err.get("param"), body), f)
            check(not err.get("message", "").startswith("generation failed"),
                  "%s: 'generation failed:' prefix: %s" % (field, body), f)
            check(err.get("type") == "invalid_request_error", "%s: type: %s" % (field, body), f)
        # The neutral values are taken.
        status, body = srv.post("/v1/completions", {"prompt": "Hello", "max_tokens": 8,
                                                    "top_k": 0, "top_p": 1})
        check(status == 200, "top_k 0, top_p 1: %d %s" % (status, body), f)
        log = srv.read_log()
        errors = [l for l in log.splitlines() if "error:" in l and ("top_k" in l or "top_p" in l)]
        check(not errors, "refusals logged as errors: %r" % errors, f)
        check(any("info:" in l and "top_k" in l for l in log.splitlines()),
              "the refusal is not logged at info level", f)
    finally:
        f += srv.stop()


def case_json_safe(f):
    srv = Server()
    try:
        msgs = lambda text: {"max_tokens": 4, "messages": [  # noqa: E731
            {"role": "user", "content": "Hi"}, {"role": "assistant", "content": text},
            {"role": "user", "content": "And?"}]}
        # Ids 0..31 of the tiny tokenizer are the bytes 0..31: every control
        # character, U+0000 included, as /detokenize and answers emit them.
        for i in range(32):
            status, body = srv.post("/detokenize", {"tokens": [i, 65]})
            check(status == 200, "detokenize %d: %d" % (i, status), f)
            text = json.loads(body)["prompt"]
            check("\x00" not in text, "id %d: the server emitted U+0000: %r" % (i, body), f)
            status, body = srv.post("/v1/chat/completions", msgs(text))
            check(status == 200, "id %d: its text sent back as an assistant turn: %d %s"
                  % (i, status, body[:200]), f)
        # Answers: whatever a random model generates is taken back.
        for seed in range(6):
            for stream in (False, True):
                req = {"prompt": "Hello", "max_tokens": 64, "temperature": 1.0, "seed": seed,
                       "stream": stream}
                status, body = srv.post("/v1/completions", req)
                if stream:
                    text = "".join(json.loads(l[6:])["choices"][0]["text"]
                                   for l in body.decode().splitlines()
                                   if l.startswith("data: {") and json.loads(l[6:])["choices"])
                else:
                    text = json.loads(body)["choices"][0]["text"]
                check("\x00" not in text, "an answer holds U+0000", f)
                if text:
                    status, body = srv.post("/v1/chat/completions", msgs(text))
                    check(status == 200, "an answer sent back: %d %s" % (status, body[:200]), f)
    finally:
        f += srv.stop()


def case_cancel_close(f):
    srv = Server(sets=("serve.shutdown_timeout=0",))
    try:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
        s.sendall(post_bytes("/v1/completions", {"prompt": "Tell me a long story",
                                                 "max_tokens": 4000, "steps": 32,
                                                 "stream": True}, "HTTP/1.1"))
        got = s.recv(65536)
        check(got.startswith(b"HTTP/1.1 200"), "the stream did not start: %r" % got[:200], f)
        srv.proc.send_signal(signal.SIGTERM)
        # Read to the end of the stream, then wait for the server to close.
        t_end = None
        s.settimeout(30)
        while True:
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            if not b:
                break
            got += b
            if t_end is None and got.endswith(b"0\r\n\r\n"):
                t_end = time.time()
        t_closed = time.time()
        s.close()
        check(b'"code":"cancelled"' in got, "no cancel event in the stream", f)
        check(t_end is not None, "the stream did not end", f)
        if t_end is not None:
            check(t_closed - t_end < 2, "the connection stayed open %.1f s after the stream's end"
                  % (t_closed - t_end), f)
    finally:
        f += srv.stop()


def case_keepalive(f):
    srv = Server()
    try:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        for path in ("/health", "/metrics", "/v1/models", "/v1/models/tiny", "/tokenizer_info",
                     "/health"):
            s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path).encode())
            data = b""
            while b"\r\n\r\n" not in data:
                b = s.recv(65536)
                if not b:
                    break
                data += b
            head, _, body = data.partition(b"\r\n\r\n")
            h = head.decode(errors="replace")
            check(h.startswith("HTTP/1.1 200"), "%s: %r" % (path, h[:100]), f)
            check("connection: close" not in h.lower(), "%s: Connection: close" % path, f)
            n = 0
            for line in h.split("\r\n"):
                if line.lower().startswith("content-length:"):
                    n = int(line.split(":")[1])
            while len(body) < n:
                b = s.recv(65536)
                if not b:
                    break
                body += b
            if not h.startswith("HTTP/1.1 200") or len(body) < n:
                check(False, "%s: the connection closed" % path, f)
                break
        s.close()
    finally:
        f += srv.stop()


def completion(srv, **kw):
    req = {"prompt": "Hello", "max_tokens": 32, "temperature": 1.0}
    req.update(kw)
    status, body = srv.post("/v1/completions", req)
    return status, json.loads(body)


def case_seed(f):
    srv = Server()
    try:
        _, a = completion(srv)
        _, b = completion(srv)
        check("seed" in a and "seed" in b, "no seed in the answer: %r" % a, f)
        if "seed" in a and "seed" in b:
            check(a["seed"] != b["seed"], "two requests without a seed drew %r" % a["seed"], f)
            check(a["choices"][0]["text"] != b["choices"][0]["text"],
                  "two requests without a seed gave the same text", f)
            _, again = completion(srv, seed=a["seed"])
            check(again["choices"][0]["text"] == a["choices"][0]["text"] and
                  again["seed"] == a["seed"], "the reported seed does not repeat the answer", f)
        _, given = completion(srv, seed=12345)
        check(given.get("seed") == 12345, "a given seed is not reported: %r" % given.get("seed"), f)
        status, body = srv.post("/v1/completions", {"prompt": "Hello", "max_tokens": 32,
                                                    "temperature": 1.0, "stream": True})
        chunks = [json.loads(l[6:]) for l in body.decode().splitlines() if l.startswith("data: {")]
        check(chunks and all("seed" in c for c in chunks) and
              len({c["seed"] for c in chunks}) == 1, "stream chunks lack the seed", f)
    finally:
        f += srv.stop()
    srv = Server(sets=("serve.default_seed=7",))
    try:
        _, a = completion(srv)
        _, b = completion(srv)
        check(a.get("seed") == 7 and b.get("seed") == 7, "default_seed 7: %r" % a.get("seed"), f)
        check(a["choices"][0]["text"] == b["choices"][0]["text"], "default_seed: not repeated", f)
    finally:
        f += srv.stop()
    out = subprocess.run([os.environ["TIDE_BIN"], "config", "doc"], capture_output=True,
                         text=True, timeout=60)
    check("default_seed" in out.stdout, "`tide config doc` does not list default_seed", f)


CASES = {n[5:]: fn for n, fn in globals().items() if n.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        sys.exit("usage: test_edges.py " + "|".join(CASES))
    failures = []
    CASES[sys.argv[1]](failures)
    finish(failures)
