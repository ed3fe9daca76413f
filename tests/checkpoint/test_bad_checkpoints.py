#!/usr/bin/python3
"""Damaged checkpoints through `tide run` and `tide inspect`.

Each case copies a freshly generated tiny checkpoint, damages one thing, and
asserts the exit code (1 for a bad checkpoint, 2 for bad usage) and that the
message names the file or the tensor at fault. Uses only the standard library.
Usage: test_bad_checkpoints.py PATH_TO_TIDE
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile


def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(path, header, data):
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def drop_tensor(st, name):
    header, data = read_st(st)
    del header[name]
    write_st(st, header, data)


def reshape_tensor(st, name):
    header, data = read_st(st)
    shape = header[name]["shape"]
    header[name]["shape"] = [shape[1], shape[0]] if shape[0] != shape[1] else [shape[0] * 2, shape[1] // 2]
    write_st(st, header, data)


def retype_tensor(st, name):
    header, data = read_st(st)
    e = header[name]
    e["dtype"] = "F16"  # same byte size as BF16: only the dtype is wrong
    write_st(st, header, data)


def truncate(st):
    size = os.path.getsize(st)
    with open(st, "r+b") as f:
        f.truncate(size - 1000)


def huge_header(st):
    with open(st, "r+b") as f:
        f.write(struct.pack("<Q", 1 << 60))


def edit_config(cfg, fn):
    c = json.load(open(cfg))
    fn(c)
    json.dump(c, open(cfg, "w"))


def main():
    tide = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="tide-badckpt-")
    failures = 0
    try:
        base = os.path.join(tmp, "base")
        subprocess.run([tide, "--quiet", "mkmodel", base, "--preset", "tiny"], check=True)
        qkv = "model.layers.1.attention.query_key_value.weight"
        cases = [
            ("truncated shard", lambda d: truncate(d + "/model.safetensors"), 1,
             ["model.safetensors", "truncated"]),
            ("header claims 2^60 bytes", lambda d: huge_header(d + "/model.safetensors"), 1,
             ["model.safetensors"]),
            ("missing tensor", lambda d: drop_tensor(d + "/model.safetensors", "lm_head.weight"), 1,
             ["lm_head.weight", "missing"]),
            ("missing expert", lambda d: drop_tensor(
                d + "/model.safetensors", "model.layers.2.mlp.experts.5.up_proj.weight"), 1,
             ["model.layers.2.mlp.experts.5.up_proj.weight"]),
            ("wrong shape", lambda d: reshape_tensor(d + "/model.safetensors", qkv), 1,
             [qkv, "expected BF16"]),
            ("wrong dtype", lambda d: retype_tensor(d + "/model.safetensors", qkv), 1,
             [qkv, "found F16"]),
            ("config.json not JSON", lambda d: open(d + "/config.json", "w").write("{oops"), 1,
             ["config.json", "not valid JSON"]),
            ("config.json other model", lambda d: edit_config(
                d + "/config.json", lambda c: c.update(model_type="llama")), 1,
             ["config.json", "model_type \"llama\" is not supported"]),
            ("n_group does not divide experts", lambda d: edit_config(
                d + "/config.json", lambda c: c.update(n_group=5)), 1,
             ["config.json", "n_group (5) must divide num_experts (32)"]),
            ("missing config key", lambda d: edit_config(
                d + "/config.json", lambda c: c.pop("hidden_size")), 1,
             ["config.json", "missing key \"hidden_size\""]),
            ("tokenizer.json malformed", lambda d: open(d + "/tokenizer.json", "w").write("[]"), 1,
             ["tokenizer.json"]),
            ("no weights", lambda d: os.remove(d + "/model.safetensors"), 1,
             ["model.safetensors"]),
        ]
        for name, damage, code, needles in cases:
            d = os.path.join(tmp, name.replace(" ", "_").replace("^", ""))
            shutil.copytree(base, d)
            damage(d)
            cfg = d + ".ini"
            open(cfg, "w").write("[model]\npath = %s\n[output]\nprogress = false\n" % d)
            for cmd in (["run", "-c", cfg, "-p", "hi"], ["inspect", d]):
                if cmd[0] == "inspect" and "tokenizer" in name:
                    continue  # inspect reads no tokenizer
                r = subprocess.run([tide] + cmd, capture_output=True, text=True)
                out = r.stderr + r.stdout  # inspect lists tensor problems on stdout
                missing = [n for n in needles if n not in out]
                ok = r.returncode == code and not missing
                failures += not ok
                print("%-34s tide %-8s exit %d: %s" % (name, cmd[0], r.returncode,
                                                      "ok" if ok else "FAIL"))
                if not ok:
                    print("  expected exit %d and %s" % (code, missing or needles))
                    print("  output:", out.strip()[:800])
        print("%d failed" % failures)
        return 1 if failures else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
