#!/usr/bin/python3
"""Quantized experts against the numpy reference (docs/quantization.md).

On a generated tiny checkpoint:
  1. a published-style FP8 checkpoint written here with numpy alone (e4m3
     codes as F8_E4M3, one float32 weight_scale_inv per block, config.json's
     quantization_config as Hugging Face's FineGrainedFP8Config writes it),
     with blocks of [16, 32] (several per matrix, not square) and [128, 128]
     (one, partial), and one with the attention, dense MLP and shared
     expert in FP8 as well (the engine dequantizes those to bf16 at load):
     the engine loads each as is and its logits match the reference, which
     dequantizes from the format's definition (llada2_ref.dequantize), given
     the same routing;
  2. the checkpoints `tide quantize` writes in q8_0, q4_0 and fp8: the same.
Logits are compared as test_engine_vs_ref.py does (full forward and the
KV-cached path, routing from the engine's trace, checked against the
reference's own with a margin). The distance of each format's logits from
the bf16 checkpoint's is printed for information.
Usage: test_quant_vs_ref.py PATH_TO_TIDE. Exit 0 pass, 1 fail, 77 skipped.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("skipped: numpy is not importable by", sys.executable)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llada2_ref as R  # noqa: E402
from test_engine_vs_ref import REL_TOL, run  # noqa: E402

EXPERT = (".gate_proj.weight", ".up_proj.weight", ".down_proj.weight")


def fp8_encode(x):
    """Nearest e4m3fn code of each value of x (|x| <= 448)."""
    table = R.FP8_E4M3[:0x7f]  # the non-negative finite codes, ascending
    a = np.abs(x).astype(np.float64)
    i = np.clip(np.searchsorted(table, a), 1, len(table) - 1)
    lo, hi = table[i - 1], table[i]
    code = np.where(a - lo <= hi - a, i - 1, i).astype(np.uint8)
    return np.where(x < 0, code | 0x80, code).astype(np.uint8)


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype string, shape, bytes)."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dt, shape, data in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, data in tensors:
            f.write(data)


# Linear layers a fully FP8 checkpoint also quantizes (DeepSeek-V3's
# releases keep only embeddings, the router and the head in bf16).
DENSE = ("attention.query_key_value.weight", "attention.dense.weight", "mlp.gate_proj.weight",
         "mlp.up_proj.weight", "mlp.down_proj.weight", "shared_experts.gate_proj.weight",
         "shared_experts.up_proj.weight", "shared_experts.down_proj.weight")


def write_published_fp8(src, dst, block, dense=False):
    """Copy checkpoint src to dst with every routed expert (and with dense,
    the attention, dense MLP and shared-expert matrices) in block-scaled FP8,
    the way DeepSeek-V3 and Hugging Face's fine-grained FP8 store it."""
    os.makedirs(dst)
    st = R.SafeTensors(src)
    out = []
    br, bc = block
    for name in sorted(st.where):
        arr = np.asarray(st.get(name))
        dt = st.dtype(name)
        quantize = ".mlp.experts." in name and name.endswith(EXPERT)
        quantize |= dense and name.endswith(DENSE)
        if not quantize:
            out.append((name, dt, arr.shape, arr.tobytes()))
            continue
        w = R.bf16_bits_to_f32(arr)
        rows, cols = w.shape
        sr, sc = -(-rows // br), -(-cols // bc)
        scale = np.zeros((sr, sc), dtype=np.float32)
        codes = np.zeros(w.shape, dtype=np.uint8)
        for i in range(sr):
            for j in range(sc):
                blk = w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
                amax = float(np.abs(blk).max())
                s = np.float32(amax / 448.0) if amax > 0 else np.float32(1.0)
                scale[i, j] = s
                codes[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = fp8_encode(blk / s)
        out.append((name, "F8_E4M3", codes.shape, codes.tobytes()))
        out.append((name[: -len("weight")] + "weight_scale_inv", "F32", scale.shape,
                    scale.tobytes()))
    write_safetensors(os.path.join(dst, "model.safetensors"), out)
    conf = json.load(open(os.path.join(src, "config.json")))
    conf["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                   "quant_method": "fp8", "weight_block_size": list(block),
                                   "modules_to_not_convert":
                                       ["mlp.gate", "lm_head"] if dense else
                                       ["attention", "mlp.gate", "shared_experts", "lm_head"]}
    json.dump(conf, open(os.path.join(dst, "config.json"), "w"), indent=2)
    shutil.copy(os.path.join(src, "tokenizer.json"), dst)


def compare(tide, tmp, model, ids, label, bf16_logits):
    """Engine vs reference logits on checkpoint `model`; returns failures."""
    cfg = os.path.join(tmp, "c-%s.ini" % label)
    with open(cfg, "w") as f:
        f.write("[model]\npath = %s\n[generation]\nblock_length = 32\n"
                "[output]\nprogress = false\n" % model)
    vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
    ref_model = R.Model(model)
    failures = 0
    for chunk in (0, 32):
        out = os.path.join(tmp, "%s-%d.f32" % (label, chunk))
        trace = os.path.join(tmp, "%s-%d.trace" % (label, chunk))
        run([tide, "--quiet", "forward", "-c", cfg, "--ids", ",".join(map(str, ids)), "--out",
             out, "--chunk", str(chunk), "--trace", trace])
        got = np.fromfile(out, dtype="<f4").reshape(len(ids), vocab)
        force = R.read_trace_routes(trace)
        ref_model.route_stats = {"tokens": 0, "different": 0, "unexplained": 0}
        if chunk == 0:
            ref = ref_model.forward(np.array(ids), 0, 32, force=force)
        else:
            cache = R.KVCache(ref_model.cfg)
            ref = np.concatenate([
                ref_model.forward(np.array(ids[p:p + chunk]), p, 32, cache, store=True,
                                  force=force)
                for p in range(0, len(ids), chunk)])
        scale = float(np.abs(ref).max())
        diff = float(np.abs(got - ref).max())
        st = ref_model.route_stats
        ok = diff <= REL_TOL * scale and not st["unexplained"] and not force
        vs_bf16 = "" if bf16_logits is None else "; vs bf16 max|diff| %.3g, top-1 agree %.1f%%" % (
            float(np.abs(got - bf16_logits).max()),
            100.0 * float(np.mean(got.argmax(-1) == bf16_logits.argmax(-1))))
        print("%-16s chunk=%-2d max|diff| vs reference %.3g (scale %.3g, tol %.3g); routing %d "
              "token-layers, %d differ, %d unexplained%s: %s"
              % (label, chunk, diff, scale, REL_TOL * scale, st["tokens"], st["different"],
                 st["unexplained"], vs_bf16, "ok" if ok else "FAIL"))
        failures += not ok
    return failures, got


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tide = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="tide-qref-")
    failures = checks = 0
    try:
        model = os.path.join(tmp, "tiny")
        run([tide, "mkmodel", model, "--preset", "tiny", "--seed", "7"])
        vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
        ids = np.random.default_rng(3).integers(0, vocab - 8, size=70).tolist()
        f, bf16_logits = compare(tide, tmp, model, ids, "bf16", None)
        failures += f
        checks += 2
        for block, dense in (((16, 32), False), ((128, 128), False), ((16, 32), True)):
            label = "published-fp8-%dx%d%s" % (block + ("-all" if dense else "",))
            q = os.path.join(tmp, label)
            write_published_fp8(model, q, block, dense)
            f, _ = compare(tide, tmp, q, ids, label, bf16_logits)
            failures += f
            checks += 2
        for fmt in ("q8_0", "q4_0", "fp8"):
            q = os.path.join(tmp, "tq-" + fmt)
            run([tide, "--quiet", "quantize", model, q, "--experts", fmt])
            f, _ = compare(tide, tmp, q, ids, "quantize-" + fmt, bf16_logits)
            failures += f
            checks += 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (checks - failures, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
