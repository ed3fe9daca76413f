#!/usr/bin/python3
"""`tide quantize` and the loading of what it and published FP8 checkpoints
hold, end to end on a generated tiny checkpoint (docs/quantization.md):

  modules   fp8's modules_to_not_convert names every bf16 module in full, so
            that transformers 4 (substring match) and 5 (whole name, prefix
            or suffix) both keep exactly the routed experts in FP8;
  block     --block whose columns backend-cpu-onednn cannot run is refused
            (exit 2, naming the backend), and nothing is written;
  nonfinite a NaN in a bf16 expert is refused, naming the tensor;
  nan-code  an e4m3 NaN code (0x7f, 0xff) in fp8 values is found by the
            load-time scan, naming the tensor;
  per-tensor an fp8 config without weight_block_size gets one message that
            says per-tensor scales are not supported;
  block-size quant_method "tide" with a block_size other than [1, 32] is
            refused, naming the key;
  dense     `tide inspect` checks the weight_scale_inv of a published-style
            FP8 dense weight (dtype and shape) as `tide run` does.
Uses only the standard library. Usage: test_quantize.py PATH_TO_TIDE
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

EXPERT = re.compile(r"\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$")
failures = 0


def st_read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def st_write(path, header, data):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def poke(path, tensor, index, raw):
    """Write bytes `raw` at element `index` of tensor (element size len(raw))."""
    header, data = st_read(path)
    at = header[tensor]["data_offsets"][0] + index * len(raw)
    st_write(path, header, data[:at] + raw + data[at + len(raw):])


def edit_config(d, fn):
    path = os.path.join(d, "config.json")
    c = json.load(open(path))
    fn(c)
    json.dump(c, open(path, "w"), indent=2)


def tide_run(tide, args):
    r = subprocess.run([tide] + args, capture_output=True, text=True)
    return r.returncode, r.stderr + r.stdout


def check(name, ok, detail=""):
    global failures
    failures += not ok
    print("%-44s %s" % (name, "ok" if ok else "FAIL"))
    if not ok and detail:
        print("  " + detail.strip().replace("\n", "\n  ")[:1500])


def expect(name, rc_out, code, needles, count=None):
    rc, out = rc_out
    missing = [n for n in needles if n not in out]
    ok = rc == code and not missing
    if ok and count:
        ok = out.count(count[0]) == count[1]
    check(name, ok, "exit %d (want %d), missing %s; output:\n%s" % (rc, code, missing, out))


def run_args(tide, d):
    return ["run", "-p", "hi", "--set", "model.path=" + d, "--set", "output.progress=false",
            "--set", "generation.gen_length=4"]


def test_modules(tide, base, tmp):
    out = os.path.join(tmp, "fp8")
    rc, text = tide_run(tide, ["quantize", base, out, "--experts", "fp8", "-q"])
    check("quantize fp8", rc == 0, text)
    if rc:
        return out
    qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
    keep = qc["modules_to_not_convert"]
    header, _ = st_read(os.path.join(base, "model.safetensors"))
    linear = sorted(n[:-len(".weight")] for n, e in header.items()
                    if n != "__metadata__" and n.endswith(".weight") and len(e["shape"]) == 2)
    experts = [m for m in linear if EXPERT.search(m + ".weight")]
    dense = [m for m in linear if m not in experts]

    def v4(m):  # transformers 4.x: any entry a substring of the module name
        return any(k in m for k in keep)

    def v5(m):  # transformers 5: the whole name, a prefix or a suffix
        return any(m == k or m.startswith(k + ".") or m.endswith("." + k) for k in keep)

    for label, match in (("transformers 4", v4), ("transformers 5", v5)):
        converted = [m for m in dense if not match(m)]
        skipped = [m for m in experts if match(m)]
        check("modules_to_not_convert under %s" % label, not converted and not skipped,
              "%d bf16 modules would become FP8 (%s), %d experts would stay bf16"
              % (len(converted), converted[:4], len(skipped)))
    check("modules_to_not_convert holds full module names", sorted(keep) == dense,
          "entries not module names: %s" % [k for k in keep if k not in dense][:6])
    return out


def test_block(tide, base, tmp):
    out = os.path.join(tmp, "b16")
    expect("--block 16,16 refused naming the backend",
           tide_run(tide, ["quantize", base, out, "--experts", "fp8", "--block", "16,16"]), 2,
           ["--block 16,16", "backend-cpu-onednn", "multiple of 32"])
    check("--block 16,16 writes nothing",
          not [f for f in os.listdir(tmp) if f.startswith(".b16") or f == "b16"])
    rc, text = tide_run(tide, ["quantize", base, os.path.join(tmp, "b1632"), "--experts", "fp8",
                               "--block", "16,32", "-q"])
    check("--block 16,32 accepted", rc == 0, text)


def test_nonfinite(tide, base, tmp):
    d = os.path.join(tmp, "nan-bf16")
    shutil.copytree(base, d)
    name = "model.layers.2.mlp.experts.3.down_proj.weight"
    poke(os.path.join(d, "model.safetensors"), name, 70, b"\xc0\x7f")
    for fmt in ("q8_0", "fp8"):
        out = os.path.join(tmp, "nan-" + fmt)
        expect("NaN in a bf16 expert refused by quantize %s" % fmt,
               tide_run(tide, ["quantize", d, out, "--experts", fmt]), 1,
               ["tensor '%s' holds NaN or Inf" % name])
        check("  and nothing written (%s)" % fmt, not os.path.exists(out))


def test_nan_code(tide, fp8, tmp):
    for code in (b"\x7f", b"\xff"):
        d = os.path.join(tmp, "nan-code-%02x" % code[0])
        shutil.copytree(fp8, d)
        name = "model.layers.1.mlp.experts.4.up_proj.weight"
        poke(os.path.join(d, "model.safetensors"), name, 65, code)
        expect("e4m3 NaN code 0x%02x named at load" % code[0], tide_run(tide, run_args(tide, d)),
               1, ["tensor '%s' (F8_E4M3) holds 1 NaN and 0 Inf values" % name,
                   "first at [1, 1]"])


def test_per_tensor(tide, fp8, tmp):
    d = os.path.join(tmp, "per-tensor")
    shutil.copytree(fp8, d)
    edit_config(d, lambda c: c["quantization_config"].pop("weight_block_size"))
    msg = "per-tensor fp8 scales are not supported"
    for cmd in (run_args(tide, d), ["inspect", d]):
        rc, out = tide_run(tide, cmd)
        expect("no weight_block_size: one message (%s)" % cmd[0], (rc, out), 1, [msg],
               count=(msg, 1))
        check("  and no scale-shape errors (%s)" % cmd[0],
              "weight_scale_inv" not in out and "missing" not in out, out)


def test_block_size(tide, base, tmp):
    q8 = os.path.join(tmp, "q8")
    rc, text = tide_run(tide, ["quantize", base, q8, "--experts", "q8_0", "-q"])
    check("quantize q8_0", rc == 0, text)
    d = os.path.join(tmp, "q8-block")
    shutil.copytree(q8, d)
    edit_config(d, lambda c: c["quantization_config"].update(block_size=[1, 64]))
    expect("quant_method tide with block_size [1, 64] refused", tide_run(tide, run_args(tide, d)),
           1, ["config.json: quantization_config.block_size must be [1, 32] for q8_0"])
    rc, out = tide_run(tide, ["inspect", q8])
    check("block_size [1, 32] as written is read", rc == 0, out)


def make_dense_fp8(fp8, d, scale_fn):
    """Copy fp8 (experts in fp8) to d with the attention's query_key_value of
    every layer in F8_E4M3 (zero codes) and a weight_scale_inv from scale_fn(
    rows, cols) -> (dtype, shape, bytes)."""
    shutil.copytree(fp8, d)
    path = os.path.join(d, "model.safetensors")
    header, data = st_read(path)
    meta = header.pop("__metadata__", None)
    out, blob = ({} if meta is None else {"__metadata__": meta}), bytearray()
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, en = e["data_offsets"]
        blob += bytes(-len(blob) % 8)  # keep every tensor aligned
        if name.endswith("attention.query_key_value.weight"):
            rows, cols = e["shape"]
            out[name] = {"dtype": "F8_E4M3", "shape": [rows, cols],
                         "data_offsets": [len(blob), len(blob) + rows * cols]}
            blob += bytes(rows * cols) + bytes(-(rows * cols) % 8)
            dt, shape, raw = scale_fn(rows, cols)
            sn = name[:-len("weight")] + "weight_scale_inv"
            out[sn] = {"dtype": dt, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
            blob += raw
            continue
        out[name] = dict(e, data_offsets=[len(blob), len(blob) + en - b])
        blob += data[b:en]
    st_write(path, out, bytes(blob))


def test_dense(tide, fp8, tmp):
    qkv_scale = "model.layers.0.attention.query_key_value.weight_scale_inv"

    def good(rows, cols):
        shape = [-(-rows // 128), -(-cols // 128)]
        return "F32", shape, struct.pack("<f", 1.0) * (shape[0] * shape[1])

    def wrong_shape(rows, cols):
        return "F32", [rows, 2], struct.pack("<f", 1.0) * (rows * 2)

    def wrong_dtype(rows, cols):
        shape = [-(-rows // 128), -(-cols // 128)]
        return "F16", shape, b"\x00\x3c" * (shape[0] * shape[1])

    d = os.path.join(tmp, "dense-good")
    make_dense_fp8(fp8, d, good)
    rc, out = tide_run(tide, ["inspect", d])
    check("published-style fp8 dense: inspect complete",
          rc == 0 and "dense weights are fp8 with their weight_scale_inv" in out, out)
    for label, fn, found in (("shape", wrong_shape, "found F32 [128, 2]"),
                             ("dtype", wrong_dtype, "found F16 [1, 1]")):
        d = os.path.join(tmp, "dense-" + label)
        make_dense_fp8(fp8, d, fn)
        expect("dense scale of wrong %s: inspect" % label, tide_run(tide, ["inspect", d]), 1,
               ["mismatch    " + qkv_scale + ": expected F32 [1, 1]", found])
        expect("dense scale of wrong %s: run" % label, tide_run(tide, run_args(tide, d)), 1,
               [qkv_scale])


def main():
    tide = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="tide-quantize-")
    try:
        base = os.path.join(tmp, "base")
        subprocess.run([tide, "--quiet", "mkmodel", base, "--preset", "tiny"], check=True)
        fp8 = test_modules(tide, base, tmp)
        test_block(tide, base, tmp)
        test_nonfinite(tide, base, tmp)
        if os.path.isdir(fp8):
            test_nan_code(tide, fp8, tmp)
            test_per_tensor(tide, fp8, tmp)
            test_dense(tide, fp8, tmp)
        test_block_size(tide, base, tmp)
        print("%d failed" % failures)
        return 1 if failures else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
