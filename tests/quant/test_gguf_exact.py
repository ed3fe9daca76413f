#!/usr/bin/python3
"""`tide quantize` q8_0 and q4_0 against GGML's reference quantizers.

A generated tiny checkpoint gets routed experts filled with chosen bf16
blocks of 32 values: random at magnitudes from 1e-30 to 1e38, zeros, -0,
all-equal blocks, values exactly halfway between two levels (where
rounding to even, rounding halves away from zero and truncating x + 8.5
disagree), scales beyond f16's range and bf16 subnormals beside normal
values. `tide quantize --experts q8_0|q4_0` quantizes it; each matrix's
values and scales, put back into GGML's blocks (f16 scale, then the 32
values or 16 bytes of nibbles), must equal gguf.quants.quantize's bytes.

Blocks whose every value is so small that GGML's 1/d overflows f32 (largest
magnitude below 2^-121 for q8_0, 2^-125 for q4_0) have no defined GGML
result; there tide divides by d (docs/quantization.md), which is checked
instead.
Usage: test_gguf_exact.py PATH_TO_TIDE (run by run_gguf.sh, in a venv with
gguf). Exit 0 pass, 1 fail.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from gguf.constants import GGMLQuantizationType as QT
from gguf.quants import quantize as gguf_quantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_quantize import EXPERT, st_read, st_write  # noqa: E402

QK = 32


def to_bf16_bits(x):
    """f32 -> bf16 bits, to nearest even (the values tide reads)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def from_bf16_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def edge_blocks(rng):
    """Blocks of 32 values (f32) that probe the quantizers' arithmetic."""
    out = []
    for scale in (1e-30, 1e-6, 1e-3, 0.02, 1.0, 3.0, 1e3, 1e6, 1e10, 1e30, 1e38):
        for _ in range(24):
            out.append(rng.standard_normal(QK) * scale)
    out.append(np.zeros(QK))
    z = np.zeros(QK)
    z[0] = -0.0
    out.append(z)
    out.append(np.full(QK, -0.0))
    for v in (0.7, -0.7, 1.0, -3.5, 2.0**-120, 65504.0 * 127):
        out.append(np.full(QK, v))
    for k in range(QK):  # one nonzero value at every position
        b = np.zeros(QK)
        b[k] = (-1) ** k * (k + 1) * 0.37
        out.append(b)
    # q8_0 ties: amax 127 makes d = 1 exactly; k + 0.5 sits halfway.
    for sign in (1, -1):
        for _ in range(16):
            b = rng.integers(-127, 127, QK) + 0.5
            b[rng.integers(0, QK)] = 127 * sign
            out.append(b)
    # q4_0 ties: the extreme -8 (or 8) makes d = 1 (or -1); x + 8.5 lands on
    # integers, so truncating and rounding differ.
    for extreme in (-8.0, 8.0, -16.0, 4.0):
        for _ in range(16):
            b = (rng.integers(-8, 8, QK) + 0.5) * abs(extreme) / 8
            b[rng.integers(0, QK)] = extreme
            out.append(b)
    # Halfway cases after an inexact 1/d: amax 100 (d = 100/127).
    for _ in range(16):
        b = rng.integers(-100, 100, QK) * (100.0 / 127) + 100.0 / 254
        b[0] = 100.0
        out.append(b)
    # bf16 subnormals and tiny normals beside ordinary values.
    for _ in range(16):
        b = rng.standard_normal(QK)
        b[rng.integers(0, QK, 8)] = rng.choice([2.0**-133, -(2.0**-130), 2.0**-127, 1e-38], 8)
        out.append(b)
    # Blocks of nothing but subnormals (GGML's 1/d overflows there).
    for _ in range(8):
        out.append(rng.integers(-127, 128, QK) * 2.0**-133)
    # Largest magnitudes bf16 holds (3.39e38), and f16 scale overflow.
    for _ in range(8):
        out.append(rng.uniform(-3.3e38, 3.3e38, QK))
        out.append(rng.uniform(-1e7, 1e7, QK))
    return [np.clip(np.asarray(b, dtype=np.float64), -3.3e38, 3.3e38).astype(np.float32)
            for b in out]


def fill_experts(path, rng):
    """Overwrite every routed expert matrix of the checkpoint with edge blocks
    first, then random rows; returns {name: f32 [rows, cols]} as stored."""
    header, data = st_read(path)
    data = bytearray(data)
    pool = edge_blocks(rng)
    at, want = 0, {}
    for name in sorted(header):
        if name == "__metadata__" or not EXPERT.search(name):
            continue
        e = header[name]
        assert e["dtype"] == "BF16", (name, e["dtype"])
        rows, cols = e["shape"]
        n_blocks = rows * cols // QK
        blocks = []
        for _ in range(n_blocks):
            if at < len(pool):
                blocks.append(pool[at])
                at += 1
            else:
                blocks.append((rng.standard_normal(QK) * rng.choice([0.01, 0.1, 1, 30]))
                              .astype(np.float32))
        bits = to_bf16_bits(np.concatenate(blocks).reshape(rows, cols))
        b, en = e["data_offsets"]
        data[b:en] = bits.tobytes()
        want[name] = from_bf16_bits(bits)
    assert at == len(pool), "the checkpoint is too small for the edge blocks (%d of %d)" % (
        at, len(pool))
    st_write(path, header, bytes(data))
    return want


def roundf(x):
    """C's roundf: halves away from zero."""
    return np.sign(x) * np.floor(np.abs(x) + np.float32(0.5))


def tiny_rule(fmt, blocks):
    """What tide does where GGML's 1/d overflows: x / d (docs/quantization.md)."""
    with np.errstate(all="ignore"):
        if fmt == "q8_0":
            d = (np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float32)
            q = np.clip(roundf((blocks / d).astype(np.float32)), -127, 127).astype(np.int8)
            return np.concatenate([d.astype(np.float16).view(np.uint8), q.view(np.uint8)], axis=1)
        i = np.abs(blocks).argmax(axis=1)[:, None]
        d = (np.take_along_axis(blocks, i, axis=1) / np.float32(-8)).astype(np.float32)
        n = np.clip(np.trunc((blocks / d).astype(np.float32) + np.float32(8.5)), 0, 15)
        n = n.astype(np.uint8)
        qs = n[:, :QK // 2] | (n[:, QK // 2:] << 4)
        return np.concatenate([d.astype(np.float16).view(np.uint8), qs], axis=1)


def ggml_blocks(fmt, header, data, name, rows, cols):
    """tide's values and scales of one matrix as GGML's blocks [rows*cols/32, bytes]."""
    def tensor(n, dt):
        b, e = header[n]["data_offsets"]
        return np.frombuffer(data[b:e], dtype=dt)
    scale_name = name[:-len("weight")] + "weight_scale"
    d = tensor(scale_name, np.uint16).reshape(-1, 1).view(np.uint8)
    assert header[scale_name]["shape"] == [rows, cols // QK], header[scale_name]
    per = QK if fmt == "q8_0" else QK // 2
    q = tensor(name, np.uint8).reshape(-1, per)
    return np.concatenate([d, q], axis=1)


def main():
    tide = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="tide-gguf-")
    failures = 0
    try:
        base = os.path.join(tmp, "base")
        subprocess.run([tide, "--quiet", "mkmodel", base, "--preset", "tiny"], check=True)
        want = fill_experts(os.path.join(base, "model.safetensors"), np.random.default_rng(39))
        for fmt, qt in (("q8_0", QT.Q8_0), ("q4_0", QT.Q4_0)):
            out = os.path.join(tmp, fmt)
            subprocess.run([tide, "quantize", base, out, "--experts", fmt, "-q"], check=True,
                           stdout=subprocess.DEVNULL)
            header, data = st_read(os.path.join(out, "model.safetensors"))
            n_blocks = n_bad = n_tiny = n_values = n_values_bad = 0
            shown = 0
            for name, w in sorted(want.items()):
                rows, cols = w.shape
                got = ggml_blocks(fmt, header, data, name, rows, cols)
                blocks = w.reshape(-1, QK)
                with np.errstate(all="ignore"):
                    ref = gguf_quantize(w, qt).reshape(-1, got.shape[1])
                amax = np.abs(blocks).max(axis=1)
                with np.errstate(all="ignore"):
                    d = amax / np.float32(127 if fmt == "q8_0" else 8)
                    tiny = np.isinf(np.float32(1) / d) & (amax > 0)
                ref[tiny] = tiny_rule(fmt, blocks[tiny])
                diff = (got != ref).any(axis=1)
                n_blocks += len(blocks)
                n_tiny += int(tiny.sum())
                n_bad += int(diff.sum())
                n_values += got[:, 2:].size
                n_values_bad += int((got[:, 2:] != ref[:, 2:]).sum())
                for i in np.nonzero(diff)[0]:
                    if shown < 5:
                        shown += 1
                        print("  %s %s block %d differs:\n    values %s\n    tide %s\n    gguf %s"
                              % (fmt, name, i, blocks[i].tolist(), got[i].tolist(),
                                 ref[i].tolist()))
            ok = n_bad == 0
            failures += not ok
            print("%s: %d blocks (%d of them subnormal-only, checked against x / d), %d differ "
                  "from gguf.quants.quantize (%d of %d value bytes): %s"
                  % (fmt, n_blocks, n_tiny, n_bad, n_values_bad, n_values,
                     "ok" if ok else "FAIL"))
        print("%d failed" % failures)
        return 1 if failures else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
