#!/usr/bin/python3
"""Runs the shell and Python examples of the documentation marked runnable
(docs/runnable-docs.md).

A block is runnable when the line right before its opening fence (```sh,
```bash or ```python) is a marker, an HTML comment that GitHub does not render:

    <!-- runnable -->
    <!-- runnable: setup=t.trc timeout=120 -->

Options are separated by spaces; quote one that holds spaces (shell quoting):
  timeout=S       seconds before the block is killed (default 60)
  setup=A,B       fixtures made in its folder before it runs:
                    tiny         models/llada2-tiny, the checkpoint that
                                 config/llada2-tiny.ini creates
                    t.trc        a routing trace of `tide run -c config/llada2-tiny.ini`
                    run.tidetrace  the same trace under the README's name
                    my.ini       a copy of config/llada2-tiny.ini ("your config"),
                                 with its checkpoint
                    few-prompts  bench/prompts/prompts.txt holds only the first
                                 2 prompts of the shipped file (tide bench's default)
                    install      this build installed into $HOME/tide
                    venv         a Python venv (system site packages) first on PATH
  env=NAME=VALUE  an environment variable for the block (repeatable)
  sub=FROM=>TO    replace the text FROM by TO in the block before running it,
                  for what cannot be used here as written (repeatable)
  continue        run in the folder of the previous runnable block of the same
                  file, with what it left there, instead of a fresh one

Each shell block runs with `bash -euo pipefail`, each Python block as a
script of `python3` (the venv's with setup=venv), in a fresh temporary folder that
holds symbolic links to the source tree's config/, bench/, docs/, examples/,
scripts/ and tools/ (python/ is copied: pip builds in it). The folder of the
tide binary given comes first on PATH, so `tide` is the build's, which finds
its plugins next to itself; HOME and TMPDIR point into the folder, stdin is
empty, TIDE_PLUGIN_PATH and TIDE_LOG_LEVEL are unset, TIDE_BUILD_DIR names the
build (the Python package finds libtide there).

A failure names FILE:LINE of the command that failed (of the traceback's
line in a Python block), shows the block and the end of its output, and the
exit status is 1. A marker that is not directly followed by such a fence, or
an unknown option, is an error too, found before anything runs. Each file
ends with a count of runnable and unmarked blocks; --list names the unmarked.

In a sanitizer build (--sanitize 1), what the blocks compile gets ASan and
UBSan too (CFLAGS, LDFLAGS), as what links the instrumented libtide must, and
Python runs with the ASan runtime preloaded (found with --cc), leaks off.

usage: run_doc_blocks.py --tide TIDE [--source DIR] [--sanitize 0|1 --cc CC]
                         [--list] [--keep] FILE.md...
"""
import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

MARKER = re.compile(r"^<!--\s*runnable(?::\s*(.*?))?\s*-->\s*$")
FENCE = re.compile(r"^(```+|~~~+)\s*([A-Za-z0-9_+-]*)")
SHELL_LANGS = ("sh", "bash", "shell")
RUN_LANGS = SHELL_LANGS + ("python",)
LINKED = ("config", "bench", "docs", "examples", "scripts", "tools")
SETUPS = ("tiny", "t.trc", "run.tidetrace", "my.ini", "few-prompts", "install", "venv")
TINY = "models/llada2-tiny"
FEW_PROMPTS = 2
TAIL_LINES = 40
NOT_FOLLOWED = "%s:%d: runnable marker not followed by a ```sh, ```bash or ```python block"


class Skip(Exception):
    """A fixture this machine cannot make (what tests/python skips on too)."""


class Block:
    def __init__(self, path, line, lang, text, marker, marker_line):
        self.path = path  # the markdown file
        self.line = line  # line of the opening fence, 1-based
        self.lang = lang
        self.text = text
        self.marker = marker  # None when unmarked, else the options string
        self.marker_line = marker_line
        self.timeout = 60.0
        self.setup = []
        self.env = {}
        self.subs = []
        self.cont = False

    def where(self, line=None):
        return "%s:%d" % (self.path, self.line if line is None else line)


def parse(path, errors):
    """Every fenced block of a markdown file, with its marker if it has one."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks = []
    pending = None  # (options, line) of a marker waiting for its fence
    i = 0
    while i < len(lines):
        line = lines[i]
        m = MARKER.match(line)
        if m:
            if pending:
                errors.append(NOT_FOLLOWED % (path, pending[1]))
            pending = (m.group(1) or "", i + 1)
            i += 1
            continue
        f = FENCE.match(line)
        if not f:
            if pending and line.strip():
                errors.append(NOT_FOLLOWED % (path, pending[1]))
                pending = None
            i += 1
            continue
        fence, lang = f.group(1), f.group(2).lower()
        start = i + 1
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        b = Block(path, start, lang, "\n".join(body) + "\n", None, None)
        if pending:
            b.marker, b.marker_line = pending
            if lang not in RUN_LANGS:
                errors.append("%s:%d: runnable marker before a ```%s block; only sh, bash and "
                              "python blocks run" % (path, pending[1], lang))
                b.marker = None
            elif pending[1] != start - 1:
                errors.append("%s:%d: runnable marker must be the line right before the fence" %
                              (path, pending[1]))
                b.marker = None
            else:
                options(b, errors)
            pending = None
        blocks.append(b)
    if pending:
        errors.append("%s:%d: runnable marker at the end of the file" % (path, pending[1]))
    return blocks


def options(b, errors):
    try:
        opts = shlex.split(b.marker)
    except ValueError as e:
        errors.append("%s:%d: runnable options: %s" % (b.path, b.marker_line, e))
        return
    for opt in opts:
        key, eq, val = opt.partition("=")
        bad = None
        if key == "timeout" and eq:
            try:
                b.timeout = float(val)
            except ValueError:
                bad = "not a number of seconds"
        elif key == "setup" and eq:
            for s in val.split(","):
                if s not in SETUPS:
                    bad = "unknown fixture '%s' (valid: %s)" % (s, ", ".join(SETUPS))
                b.setup.append(s)
        elif key == "env" and "=" in val:
            name, _, value = val.partition("=")
            b.env[name] = value
        elif key == "sub" and "=>" in val:
            frm, _, to = val.partition("=>")
            if frm not in b.text:
                bad = "'%s' is not in the block" % frm
            b.subs.append((frm, to))
        elif key == "continue" and not eq:
            b.cont = True
        else:
            bad = "unknown option (valid: timeout=S setup=A,B env=N=V sub=FROM=>TO continue)"
        if bad:
            errors.append("%s:%d: runnable option '%s': %s" % (b.path, b.marker_line, opt, bad))


class Runner:
    def __init__(self, tide, source, keep, sanitize, cc):
        self.tide = os.path.abspath(tide)
        self.sanitize = sanitize
        self.cc = cc
        self.source = os.path.abspath(source)
        self.keep = keep
        self.base_env = dict(os.environ)
        for k in ("TIDE_PLUGIN_PATH", "TIDE_LOG_LEVEL", "TIDE_LIBRARY", "TIDE_EXECUTABLE"):
            self.base_env.pop(k, None)
        self.base_env["TIDE_BUILD_DIR"] = os.path.dirname(self.tide)
        self.base_env["PATH"] = os.path.dirname(self.tide) + os.pathsep + os.environ.get(
            "PATH", "/usr/bin:/bin")
        self.dirs = []
        if sanitize:
            flags = "-fsanitize=address,undefined -fno-omit-frame-pointer"
            self.base_env["CFLAGS"] = self.base_env["LDFLAGS"] = flags

    def folder(self):
        d = tempfile.mkdtemp(prefix="tide-doc.")
        self.dirs.append(d)
        for name in LINKED:
            if os.path.isdir(os.path.join(self.source, name)):
                os.symlink(os.path.join(self.source, name), os.path.join(d, name))
        os.mkdir(os.path.join(d, "home"))
        os.mkdir(os.path.join(d, "tmp"))
        return d

    def env(self, d):
        e = dict(self.base_env)
        e["HOME"] = os.path.join(d, "home")
        e["TMPDIR"] = os.path.join(d, "tmp")
        return e

    def fixture(self, name, d, env):
        """Makes fixture NAME in folder d; returns an error text or None."""
        cmds = []
        if name in ("tiny", "my.ini") and not os.path.exists(os.path.join(d, TINY)):
            # Made before the block: processes started in parallel on a config
            # with [model] create would each generate it.
            cmds.append([self.tide, "mkmodel", TINY, "--preset", "tiny", "--seed", "1"])
        if name == "my.ini":
            shutil.copy(os.path.join(self.source, "config", "llada2-tiny.ini"),
                        os.path.join(d, "my.ini"))
        elif name in ("t.trc", "run.tidetrace"):
            cmds.append([self.tide, "run", "-c", "config/llada2-tiny.ini", "-p", "Hello",
                         "--set", "output.trace=" + name])
        elif name == "few-prompts":
            self.shadow(d, "bench/prompts/prompts.txt")
            with open(os.path.join(self.source, "bench", "prompts", "prompts.txt"),
                      encoding="utf-8") as f:
                prompts = [l for l in f if l.strip() and not l.lstrip().startswith("#")]
            with open(os.path.join(d, "bench", "prompts", "prompts.txt"), "w",
                      encoding="utf-8") as f:
                f.writelines(prompts[:FEW_PROMPTS])
        elif name == "install":
            build = os.path.dirname(self.tide)
            prefix = os.path.join(env["HOME"], "tide")
            cmds.append(["cmake", "--install", build, "--prefix", prefix])
        elif name == "venv":
            if subprocess.run([sys.executable, "-c", "import venv, ensurepip"],
                              capture_output=True).returncode != 0:
                raise Skip("%s cannot create a venv (apt-get install python3-venv; "
                           "scripts/setup.sh does)" % sys.executable)
            if not os.path.isdir(os.path.join(d, "python")):
                shutil.copytree(os.path.join(self.source, "python"), os.path.join(d, "python"),
                                ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                              "__pycache__"))
            cmds.append([sys.executable, "-m", "venv", "--system-site-packages", "venv"])
        for cmd in cmds:
            r = subprocess.run(cmd, cwd=d, env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, errors="replace", timeout=300)
            if r.returncode != 0:
                return "fixture %s: %s exited %d\n%s" % (name, " ".join(cmd), r.returncode,
                                                          (r.stdout + r.stderr)[-2000:])
        if name == "venv":
            env["VIRTUAL_ENV"] = os.path.join(d, "venv")
            env["PATH"] = os.path.join(d, "venv", "bin") + os.pathsep + env["PATH"]
            return self.preload(env)
        return None

    def preload(self, env):
        """With a sanitizer build, libtide carries ASan: its runtime must be
        loaded before the Python interpreter's allocations (tests/python)."""
        if not self.sanitize or "LD_PRELOAD" in env:
            return None
        r = subprocess.run([self.cc, "-print-file-name=libasan.so"], capture_output=True,
                           text=True)
        if r.returncode != 0 or not os.path.isabs(r.stdout.strip()):
            return "%s -print-file-name=libasan.so: no ASan runtime" % self.cc
        env["LD_PRELOAD"] = r.stdout.strip()
        opts = env.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = (opts + ":" if opts else "") + "detect_leaks=0"
        return None

    def shadow(self, d, rel):
        """Turns the links on the way to d/rel into real folders whose other
        entries link to the source tree, so that rel can be replaced."""
        parts = rel.split("/")
        for i in range(1, len(parts)):
            here = os.path.join(d, *parts[:i])
            if not os.path.islink(here):
                continue
            src = os.path.join(self.source, *parts[:i])
            os.unlink(here)
            os.mkdir(here)
            for entry in os.listdir(src):
                os.symlink(os.path.join(src, entry), os.path.join(here, entry))
        os.unlink(os.path.join(d, rel))

    def run(self, b, d, env):
        """Runs block b in folder d; returns (ok, message)."""
        text = b.text
        for frm, to in b.subs:
            text = text.replace(frm, to)
        for k, v in b.env.items():
            env[k] = v
        if b.lang == "python":
            err = self.preload(env)
            if err:
                return False, "%s: FAILED, %s" % (b.where(), err)
            script = os.path.join(d, "tmp", "block-%d.py" % b.line)
            with open(script, "w", encoding="utf-8") as f:
                f.write(text)
            cmd = ["python3", script]
        else:
            # One line before the block, so that the block's first line is line 2.
            trap = ("trap 'rc=$?; echo \"run_doc_blocks: line $((LINENO - 1)) of the block "
                    "failed (exit $rc): $BASH_COMMAND\" >&2' ERR\n")
            script = os.path.join(d, "tmp", "block-%d.sh" % b.line)
            with open(script, "w", encoding="utf-8") as f:
                f.write(trap + text)
            cmd = ["bash", "-euo", "pipefail", script]
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, cwd=d, env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=b.timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            timed_out = True
        # A block may start a server in the background: nothing outlives it.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        secs = time.monotonic() - t0
        out = out.decode("utf-8", "replace")
        if not timed_out and p.returncode == 0:
            return True, "%.1f s" % secs
        where = b.where(b.line + 1)
        m = re.search(r"run_doc_blocks: line (\d+) of the block failed \(exit (\d+)\): (.*)", out)
        py = re.findall(r'File "%s", line (\d+)' % re.escape(script), out)
        if timed_out:
            why = "timed out after %.0f s (timeout=%g)" % (secs, b.timeout)
        elif b.lang == "python" and py:
            where = b.where(b.line + int(py[-1]))
            last = [l for l in out.rstrip("\n").split("\n") if l and not l.startswith(" ")]
            why = "exit %d: %s" % (p.returncode, last[-1] if last else "")
        elif m:
            where = b.where(b.line + int(m.group(1)))
            why = "exit %s: %s" % (m.group(2), m.group(3))
        else:
            why = "exit %d" % p.returncode
        tail = out.rstrip("\n").split("\n")[-TAIL_LINES:]
        msg = ["%s: FAILED, %s" % (where, why),
               "--- the block (%s%s):" % (b.where(), ", after substitutions" if b.subs else "")]
        msg += ["    " + l for l in text.rstrip("\n").split("\n")]
        msg += ["--- its output (last %d lines):" % TAIL_LINES] + ["    " + l for l in tail]
        msg += ["--- folder: %s" % (d if self.keep else "(removed; --keep keeps it)")]
        return False, "\n".join(msg)

    def cleanup(self):
        if not self.keep:
            for d in self.dirs:
                shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tide", required=True, help="the tide binary of the build")
    ap.add_argument("--source", default=os.path.join(os.path.dirname(__file__), "..", ".."),
                    help="the source tree (config/, bench/ ...; default: this script's)")
    ap.add_argument("--sanitize", default="0", choices=("0", "1"),
                    help="1: the build has ASan and UBSan")
    ap.add_argument("--cc", default="cc", help="the build's C compiler (for --sanitize 1)")
    ap.add_argument("--list", action="store_true", help="list every block and its state")
    ap.add_argument("--keep", action="store_true", help="keep the blocks' folders")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()

    errors = []
    parsed = [(path, parse(path, errors)) for path in args.files]
    for e in errors:
        print(e)
    if errors:
        return 1
    runner = Runner(args.tide, args.source, args.keep, args.sanitize == "1", args.cc)
    failed = 0
    try:
        for path, blocks in parsed:
            marked = [b for b in blocks if b.marker is not None]
            unmarked = [b for b in blocks if b.marker is None and b.lang in RUN_LANGS]
            d = env = None
            prev = "ok"
            failed_before = failed
            t0 = time.monotonic()
            for b in marked:
                if b.cont and d is None:
                    print("%s: FAILED, 'continue' on the first runnable block" % b.where())
                    failed += 1
                    continue
                if b.cont and prev != "ok":
                    print("%s: not run: the block it continues %s" % (b.where(), prev))
                    if prev == "failed":
                        failed += 1
                    continue
                if not b.cont:
                    d = runner.folder()
                    env = runner.env(d)
                err = None
                try:
                    for s in b.setup:
                        err = err or runner.fixture(s, d, env)
                except Skip as e:
                    print("%s: skipped: %s" % (b.where(), e))
                    prev = "was skipped"
                    continue
                if err:
                    ok, msg = False, "%s: FAILED, %s" % (b.where(), err)
                else:
                    ok, msg = runner.run(b, d, env)
                prev = "ok" if ok else "failed"
                if ok:
                    print("%s: ok (%s)" % (b.where(), msg))
                else:
                    print(msg)
                    failed += 1
            if args.list:
                for b in unmarked:
                    print("%s: not run (unmarked ```%s block)" % (b.where(), b.lang))
            print("%s: %d runnable blocks, %d failed; %d sh/python blocks unmarked (%.1f s)" %
                  (path, len(marked), failed - failed_before, len(unmarked),
                   time.monotonic() - t0))
    finally:
        runner.cleanup()
    if failed:
        print("%d runnable block(s) failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
