"""Start and stop `tide serve` for the tests of tests/serve (loopback only).

Environment: TIDE_BIN (the tide binary), TIDE_SOURCE_DIR (the source tree).
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


class Server:
    """A `tide serve` on a free port of 127.0.0.1 with a tiny synthetic
    model (config/CONFIG.ini, default llada2-tiny; its [model] create preset
    CREATE), generated in a temporary folder."""

    def __init__(self, sets=(), env=None, tmp=None, config="llada2-tiny", create="tiny"):
        self.tmp = tmp or tempfile.mkdtemp(prefix="tide-serve-")
        os.makedirs(self.tmp, exist_ok=True)
        self.log_path = os.path.join(self.tmp, "serve.log")
        args = [os.environ["TIDE_BIN"], "serve",
                "-c", os.path.join(os.environ["TIDE_SOURCE_DIR"], "config", config + ".ini"),
                "--set", "model.path=" + os.path.join(self.tmp, create),
                "--set", "model.create=" + create,  # generated at this path, not the config's
                "--set", "output.progress=false", "--port", "0"]
        for s in sets:
            args += ["--set", s]
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=full_env)
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.read_log())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.1)
        if not self.port:
            self.proc.kill()
            sys.exit("the server did not start:\n" + self.read_log())
        self.base = "http://127.0.0.1:%d" % self.port

    def read_log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def get(self, path, headers=None):
        req = urllib.request.Request(self.base + path, headers=headers or {})
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()

    def post(self, path, body, headers=None, timeout=300):
        """POST a JSON body (dict or bytes); returns (status, bytes)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        req = urllib.request.Request(self.base + path, data=data, headers=h, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def metrics(self):
        """/metrics as {sample name with labels: float}."""
        _, text = self.get("/metrics")
        out = {}
        for line in text.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self, sig=signal.SIGTERM):
        """Stop it; returns a list of problems (exit status, sanitizer reports)."""
        problems = []
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "killed after 120 s"
        self.log.close()
        if rc != 0:
            problems.append("tide serve exited %s" % rc)
        log = self.read_log()
        if re.search(r"AddressSanitizer|LeakSanitizer|runtime error:", log):
            problems.append("sanitizer report in the server's log")
        if problems:
            print(log)
        return problems


def sse_events(resp):
    """The JSON payloads of a server-sent-event stream, until [DONE]; the
    last element is "[DONE]" when the stream ended properly."""
    out = []
    for raw in resp:
        line = raw.decode().rstrip("\r\n")
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            out.append(data)
            break
        out.append(json.loads(data))
    return out


def check(cond, what, failures):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def finish(failures):
    """End a test: exit 1 listing the failures, or print ok."""
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("ok")
