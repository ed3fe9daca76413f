#!/usr/bin/python3
"""The bad-input catalogue: run `tide` on one damaged input per case file.

Usage: run.py --tide TIDE [--plugins DIR] [--sanitized] CASE...

A case file (cases/*.case) is a list of "key: value" lines (# starts a
comment; keys may repeat where noted):

  about:   one line saying what is wrong
  model:   tiny (default: a fresh copy of a generated tiny checkpoint in
           {model}), tiny-moe (the same from model-llada-moe's preset) or none
  setup:   an action on the files (repeatable, in order; see action())
  env:     NAME=VALUE for the child (repeatable)
  run:     the command line after `tide` (shell-like quoting)
  stdin:   text given on standard input
  limit:   as=BYTES (the child's address-space limit, RLIMIT_AS)
  signal:  NAME after TEXT (send signal NAME once TEXT appears on stderr)
  exit:    the expected exit status; "signal" means killed by a signal or
           stopped by a sanitizer (a crash that is reported, not hidden)
  expect:  a substring of stderr+stdout (repeatable, all required)
  reject:  a substring that must not appear (repeatable)
  keep:    a path that must still exist afterwards, unchanged (repeatable)
  allow:   a glob, relative to {out}, of files that may be left (repeatable)
  jsonl:   a glob, relative to {out}: at least one file matches, and every
           line of each is a whole JSON value (repeatable)
  json:    GLOB KEY VALUE: at least one file matches the glob (relative to
           {out}), each is one JSON object, and its KEY equals the JSON
           VALUE (repeatable)
  skip:    sanitized (skip when tide is built with ASan: it cannot run
           under an address-space limit)
  timeout: seconds (default 120)

Substitutions in every value: {tide} {model} {out} {tmp} {plugins}.
Every case also checks: no sanitizer report, no control character on
stderr, and nothing left in {out} (no output file, no FILE.tmp) other than
the paths named by keep:. Each run gets --set output.metrics={out}/metrics.jsonl
and --set output.trace={out}/trace.tidetrace when its command is run or bench
and the case does not set them itself, so "no half-written output" is checked
on every failure path.

Exit status: 0 when the case holds, 1 when it does not, 77 when skipped.
"""
import fnmatch
import glob
import hashlib
import json
import os
import re
import resource
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

# ---- safetensors helpers ------------------------------------------------


def st_read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def st_write_raw(path, header_bytes, data):
    header_bytes += b" " * ((8 - len(header_bytes) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)) + header_bytes + data)


def st_write(path, header, data):
    st_write_raw(path, json.dumps(header).encode(), data)


def bf16_nan_at(path, tensor, index):
    header, data = st_read(path)
    e = header[tensor]
    assert e["dtype"] == "BF16", e
    at = e["data_offsets"][0] + 2 * int(index)
    data = data[:at] + b"\xc0\x7f" + data[at + 2:]
    st_write(path, header, data)


def duplicate_tensor(path, tensor):
    """Write the header with TENSOR's entry twice (json.dumps cannot)."""
    header, data = st_read(path)
    text = json.dumps(header)
    entry = '"%s": %s' % (tensor, json.dumps(header[tensor]))
    assert entry in text
    text = text.replace(entry, entry + ", " + entry, 1)
    st_write_raw(path, text.encode(), data)


def inflate_experts(ckpt, moe_inter):
    """Make every routed and shared expert MOE_INTER wide, in a sparse file
    (the data is all zeros and takes no disk space)."""
    cfg_path = os.path.join(ckpt, "config.json")
    cfg = json.load(open(cfg_path))
    old = cfg["moe_intermediate_size"]
    shared = cfg.get("num_shared_experts", 0)
    cfg["moe_intermediate_size"] = moe_inter
    json.dump(cfg, open(cfg_path, "w"))
    st = os.path.join(ckpt, "model.safetensors")
    header, data = st_read(st)
    meta = header.pop("__metadata__", None)
    items = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    out, pos, chunks = {}, 0, []
    if meta is not None:
        out["__metadata__"] = meta
    for name, e in items:
        b, en = e["data_offsets"]
        shape = list(e["shape"])
        if ".mlp.experts." in name:
            shape = [moe_inter if d == old else d for d in shape]
        elif ".mlp.shared_experts." in name:
            shape = [moe_inter * shared if d == old * shared else d for d in shape]
        size = 2 if e["dtype"] in ("BF16", "F16") else 4
        for d in shape:
            size *= d
        out[name] = {"dtype": e["dtype"], "shape": shape, "data_offsets": [pos, pos + size]}
        chunks.append((pos, data[b:en] if shape == e["shape"] else None, size))
        pos += size
    h = json.dumps(out).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(st, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        base = 8 + len(h)
        for at, blob, size in chunks:
            if blob is not None:
                f.seek(base + at)
                f.write(blob)
        f.truncate(base + pos)


def many_experts(ckpt, n):
    """Give every MoE layer N routed experts, n_group 8 and topk_group 4: the
    router rows and bias grow, and experts 1..N-1 take expert 0's shapes. New
    data is zeros in a sparse file (no disk space)."""
    cfg_path = os.path.join(ckpt, "config.json")
    cfg = json.load(open(cfg_path))
    cfg.update(num_experts=n, n_group=8, topk_group=4)
    json.dump(cfg, open(cfg_path, "w"))
    st = os.path.join(ckpt, "model.safetensors")
    header, data = st_read(st)
    meta = header.pop("__metadata__", None)
    out = {} if meta is None else {"__metadata__": meta}
    chunks, pos = [], 0
    expert = re.compile(r"(model\.layers\.\d+\.mlp\.experts\.)(\d+)(\..*)$")
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, en = e["data_offsets"]
        m = expert.match(name)
        if m and m.group(2) != "0":
            continue
        if m:
            todo = [(m.group(1) + str(k) + m.group(3), e["shape"], None) for k in range(n)]
        elif name.endswith(".mlp.gate.weight"):
            todo = [(name, [n, e["shape"][1]], None)]
        elif name.endswith(".mlp.gate.expert_bias"):
            todo = [(name, [n], None)]
        else:
            todo = [(name, e["shape"], data[b:en])]
        for tname, shape, blob in todo:
            size = 2 if e["dtype"] in ("BF16", "F16") else 4
            for d in shape:
                size *= d
            out[tname] = {"dtype": e["dtype"], "shape": shape, "data_offsets": [pos, pos + size]}
            chunks.append((pos, blob))
            pos += size
    h = json.dumps(out).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(st, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for at, blob in chunks:
            if blob is not None:
                f.seek(8 + len(h) + at)
                f.write(blob)
        f.truncate(8 + len(h) + pos)


def shard(ckpt):
    """Split model.safetensors into two shards with an index."""
    st = os.path.join(ckpt, "model.safetensors")
    header, data = st_read(st)
    header.pop("__metadata__", None)
    names = sorted(header)
    halves = [names[:len(names) // 2], names[len(names) // 2:]]
    wmap = {}
    for i, part in enumerate(halves):
        fname = "model-%05d-of-00002.safetensors" % (i + 1)
        h, blob = {"__metadata__": {"format": "pt"}}, b""
        for n in part:
            b, e = header[n]["data_offsets"]
            h[n] = dict(header[n], data_offsets=[len(blob), len(blob) + e - b])
            blob += data[b:e]
            wmap[n] = fname
        st_write(os.path.join(ckpt, fname), h, blob)
    os.remove(st)
    json.dump({"metadata": {}, "weight_map": wmap},
              open(os.path.join(ckpt, "model.safetensors.index.json"), "w"))


def json_set(path, key, value):
    d = json.load(open(path))
    obj = d
    parts = key.split("/") if "/" in key else key.split(".")  # "/" when a key holds dots
    for p in parts[:-1]:
        obj = obj[int(p)] if isinstance(obj, list) else obj[p]
    last = parts[-1]
    if value == "<delete>":
        del obj[last]
    elif isinstance(obj, list):
        obj[int(last)] = json.loads(value)
    else:
        obj[last] = json.loads(value)
    json.dump(d, open(path, "w"))


def unescape(text):
    return text.encode().decode("unicode_escape").encode("latin-1")


TIDE = None


def action(line):
    """Run one setup: line (already substituted)."""
    a = shlex.split(line)
    op, args = a[0], a[1:]
    if op == "truncate":  # FILE BYTES_TO_REMOVE
        size = os.path.getsize(args[0])
        with open(args[0], "r+b") as f:
            f.truncate(max(0, size - int(args[1])))
    elif op == "st-header-len":  # FILE VALUE
        with open(args[0], "r+b") as f:
            f.write(struct.pack("<Q", int(args[1], 0)))
    elif op == "st-nan":  # FILE TENSOR INDEX
        bf16_nan_at(args[0], args[1], args[2])
    elif op == "st-dup":  # FILE TENSOR
        duplicate_tensor(args[0], args[1])
    elif op == "st-drop":  # FILE TENSOR
        header, data = st_read(args[0])
        del header[args[1]]
        st_write(args[0], header, data)
    elif op == "st-set":  # FILE TENSOR FIELD JSON
        header, data = st_read(args[0])
        header[args[1]][args[2]] = json.loads(args[3])
        st_write(args[0], header, data)
    elif op == "inflate-experts":  # DIR MOE_INTER
        inflate_experts(args[0], int(args[1]))
    elif op == "shard":  # DIR
        shard(args[0])
    elif op == "many-experts":  # DIR N
        many_experts(args[0], int(args[1]))
    elif op == "json-set":  # FILE KEY JSON|<delete>
        json_set(args[0], args[1], args[2])
    elif op == "json-append":  # FILE KEY JSON: append to the list at KEY
        d = json.load(open(args[0]))
        obj = d
        for part in args[1].split("."):
            obj = obj[part]
        obj.append(json.loads(args[2]))
        json.dump(d, open(args[0], "w"))
    elif op == "write":  # FILE TEXT (\n, \xNN escapes)
        os.makedirs(os.path.dirname(args[0]) or ".", exist_ok=True)
        open(args[0], "wb").write(unescape(args[1]))
    elif op == "write-repeat":  # FILE TEXT COUNT
        open(args[0], "wb").write(unescape(args[1]) * int(args[2]))
    elif op == "mkfifo":  # PATH (replacing a file)
        if os.path.exists(args[0]):
            os.remove(args[0])
        os.mkfifo(args[0])
    elif op == "mkdir":
        os.makedirs(args[0], exist_ok=True)
    elif op == "chmod":  # MODE PATH
        os.chmod(args[1], int(args[0], 8))
    elif op == "rm":
        if os.path.isdir(args[0]):
            shutil.rmtree(args[0])
        else:
            os.remove(args[0])
    elif op == "copy":
        shutil.copy(args[0], args[1])
    elif op == "tide":  # ARGS: run tide itself (e.g. to record a trace to damage)
        subprocess.run([TIDE] + args, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    else:
        raise ValueError("unknown setup action: " + op)


# ---- the case file ------------------------------------------------------

REPEATABLE = {"setup", "env", "expect", "reject", "keep", "allow", "jsonl", "json"}


def parse_case(path):
    case = {k: [] for k in REPEATABLE}
    for n, raw in enumerate(open(path, encoding="utf-8"), 1):
        line = raw.rstrip("\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if ":" not in line:
            raise ValueError("%s:%d: expected 'key: value'" % (path, n))
        key, value = line.split(":", 1)
        key, value = key.strip(), value.strip()
        if key in REPEATABLE:
            case[key].append(value)
        elif key in case:
            raise ValueError("%s:%d: '%s' given twice" % (path, n, key))
        else:
            case[key] = value
    for need in ("about", "run", "exit"):
        if need not in case:
            raise ValueError("%s: no '%s:' line" % (path, need))
    return case


def snapshot(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest() if os.path.isfile(path) else None


def run_case(path, tide, plugins, sanitized, work):
    case = parse_case(path)
    name = os.path.splitext(os.path.basename(path))[0]
    if case.get("skip") == "sanitized" and sanitized:
        print("%s: skipped (cannot run under sanitizers)" % name)
        return 77
    tmp = os.path.join(work, "tmp")
    model = os.path.join(tmp, "model")
    out = os.path.join(tmp, "out")
    os.makedirs(out)
    subst = {"tide": tide, "model": model, "out": out, "tmp": tmp, "plugins": plugins or ""}

    def sub(text):
        return re.sub(r"\{(\w+)\}", lambda m: subst[m.group(1)], text)

    if case.get("model", "tiny") in ("tiny", "tiny-moe"):
        shutil.copytree(os.path.join(work, "base"), model)
    for s in case["setup"]:
        action(sub(s))
    keep = {sub(k): snapshot(sub(k)) for k in case["keep"]}

    argv = [tide] + [sub(a) for a in shlex.split(case["run"])]
    # Point tide at the model and at outputs in {out}, unless the case does.
    cmd = argv[1] if len(argv) > 1 else ""
    joined = " ".join(argv)
    if cmd in ("run", "bench"):
        if "model.path=" not in joined and "-c" not in argv:
            argv += ["--set", "model.path=" + model]
        if "output.metrics=" not in joined and cmd == "run":
            argv += ["--set", "output.metrics=" + os.path.join(out, "metrics.jsonl")]
        if "output.trace=" not in joined and cmd == "run":
            argv += ["--set", "output.trace=" + os.path.join(out, "trace.tidetrace")]
        if "output.progress=" not in joined:
            argv += ["--set", "output.progress=true"]
    env = dict(os.environ)
    env.pop("TIDE_PLUGIN_PATH", None)
    env["TIDE_LOG_LEVEL"] = "info"
    for e in case["env"]:
        k, v = sub(e).split("=", 1)
        env[k] = v

    def limits():
        if "limit" in case:
            k, v = case["limit"].split("=")
            assert k == "as"
            resource.setrlimit(resource.RLIMIT_AS, (int(v, 0), int(v, 0)))

    timeout = float(case.get("timeout", 120))
    t0 = time.time()
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, preexec_fn=limits, cwd=tmp)
    err_chunks, out_chunks = [], []
    sig_spec = case.get("signal")
    sent = threading.Event()

    def pump(stream, chunks, watch):
        for line in iter(stream.readline, b""):
            chunks.append(line)
            if watch and not sent.is_set():
                signame, trigger = sig_spec.split(" after ", 1)
                if trigger.encode() in b"".join(chunks):
                    time.sleep(0.3)
                    p.send_signal(getattr(signal, signame))
                    sent.set()

    threads = [threading.Thread(target=pump, args=(p.stderr, err_chunks, bool(sig_spec))),
               threading.Thread(target=pump, args=(p.stdout, out_chunks, False))]
    for t in threads:
        t.start()
    try:
        p.stdin.write(unescape(sub(case.get("stdin", ""))))
        p.stdin.close()
    except BrokenPipeError:
        pass
    try:
        rc = p.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
        timed_out = True
    for t in threads:
        t.join()
    dt = time.time() - t0
    stderr = b"".join(err_chunks)
    text = (stderr + b"".join(out_chunks)).decode("utf-8", "replace")

    problems = []
    want = case["exit"]
    if timed_out:
        problems.append("timed out after %.0f s (a hang)" % timeout)
    elif want == "signal":
        asan_exit = "Sanitizer" in text and rc == 1
        if not (rc < 0 or asan_exit):
            problems.append("exit %d, expected death by a signal" % rc)
    elif rc != int(want):
        problems.append("exit %d, expected %s" % (rc, want))
    if sig_spec and not sent.is_set():
        problems.append("the signal was never sent: '%s' did not appear" % sig_spec)
    for e in case["expect"]:
        if sub(e) not in text:
            problems.append("missing in output: %r" % sub(e))
    rejects = [sub(r) for r in case["reject"]]
    if want != "signal":
        rejects += ["Sanitizer", "runtime error:", "(null)"]
    for r in rejects:
        if r in text:
            problems.append("unexpected in output: %r" % r)
    bad_bytes = sorted({c for c in stderr if c < 0x20 and c not in (9, 10, 13)})
    if bad_bytes and want != "signal":
        problems.append("control characters on stderr: %s" % bad_bytes)
    left = []
    for root, _, files in os.walk(out):
        for f in files:
            full = os.path.join(root, f)
            rel = os.path.relpath(full, out)
            if full not in keep and not any(fnmatch.fnmatch(rel, g) for g in case["allow"]):
                left.append(rel)
    for g in case["jsonl"]:
        files = glob.glob(os.path.join(out, g))
        if not files:
            problems.append("no file matches %s" % g)
        for f in files:
            for n, line in enumerate(open(f, encoding="utf-8", errors="replace"), 1):
                try:
                    json.loads(line)
                except ValueError:
                    problems.append("%s:%d is not a whole JSON line" % (os.path.relpath(f, out), n))
                    break
    for spec in case["json"]:
        g, key, value = spec.split(None, 2)
        files = glob.glob(os.path.join(out, g))
        if not files:
            problems.append("no file matches %s" % g)
        for f in files:
            try:
                got = json.load(open(f, encoding="utf-8")).get(key, "(absent)")
            except ValueError:
                got = "(not JSON)"
            if got != json.loads(value):
                problems.append("%s: %s is %r, expected %s" % (os.path.relpath(f, out), key, got,
                                                               value))
    if left:
        problems.append("files left in the output folder: %s" % sorted(left))
    for k, digest in keep.items():
        if snapshot(k) != digest:
            problems.append("%s was changed or removed" % k)

    status = "ok" if not problems else "FAIL"
    print("%s: %s (exit %d, %.1f s) - %s" % (name, status, rc, dt, case["about"]))
    print("  $ " + " ".join(shlex.quote(a) for a in argv))
    if problems:
        for pr in problems:
            print("  " + pr)
        print("  output:\n    " + "\n    ".join(text.strip().splitlines()[-25:]))
    else:
        first = [l for l in text.splitlines() if "error" in l or "warning" in l or "fatal" in l]
        if first:
            print("  says: " + first[0][:300])
    return 1 if problems else 0


def main():
    args = sys.argv[1:]
    tide = plugins = None
    sanitized = False
    cases = []
    while args:
        a = args.pop(0)
        if a == "--tide":
            tide = os.path.abspath(args.pop(0))
        elif a == "--plugins":
            plugins = os.path.abspath(args.pop(0))
        elif a == "--sanitized":
            sanitized = True
        else:
            cases.append(a)
    if not tide or not cases:
        print(__doc__)
        return 2
    global TIDE
    TIDE = tide
    worst = 0
    for c in cases:
        work = tempfile.mkdtemp(prefix="tide-bad-")
        try:
            base = os.path.join(work, "base")
            preset = ["tiny"]
            if parse_case(c).get("model") == "tiny-moe":
                preset = ["tiny-moe", "--plugin", "model-llada-moe"]
            subprocess.run([tide, "--quiet", "mkmodel", base, "--preset"] + preset, check=True,
                           stdout=subprocess.DEVNULL)
            rc = run_case(c, tide, plugins, sanitized, work)
        finally:
            for root, dirs, _ in os.walk(work):
                for d in dirs:
                    try:
                        os.chmod(os.path.join(root, d), 0o755)
                    except OSError:
                        pass
            shutil.rmtree(work, ignore_errors=True)
        if rc == 1 or (rc == 77 and worst == 0):
            worst = rc
    return worst


if __name__ == "__main__":
    sys.exit(main())
