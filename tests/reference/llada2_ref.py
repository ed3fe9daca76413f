#!/usr/bin/python3
"""llada2_ref.py -- an independent numpy reference of LLaDA2.0 (llada2_moe).

README
======

What it is
----------
A second, plain implementation of the LLaDA2.0 forward pass and of
block-diffusion generation, written from the numeric semantics in
/work/shared/DESIGN.md section 4 (and the TIDE/LLaDA2 research notes, sections
3 and 4) and, for generation and config.json defaults, from the official
modeling_llada2_moe.py / configuration_llada2_moe.py -- not from the C engine. The C tests call it to get expected logits,
routes and token streams for small checkpoints. Only numpy and the Python
standard library are used; run it with Debian's interpreter, /usr/bin/python3.

Commands
--------
    llada2_ref.py logits   --model DIR --ids 1,2,3 [--pos0 0] [--block 32] --out FILE
        One full forward over the ids at positions pos0..pos0+n-1 (block-causal
        mask on the absolute positions, no earlier cache). Writes float32
        logits [n, vocab], raw little-endian, to FILE.
    llada2_ref.py generate --model DIR --prompt-ids 1,2,3 --gen-length G
                           [--block-length 32] [--steps 32] [--threshold 0.95]
                           [--minimal-topk 1] [--temperature 0] [--top-k 0]
                           [--top-p 1] [--seed 0] [--eos-early-stop]
                           [--mask-out] [--stop-ids 5,6] [--recompute]
        Generation as the official generate(); prints the generated ids,
        comma-separated, on one line. --recompute runs every step over the
        whole window without a KV cache (it must print the same ids).
    llada2_ref.py route    --model DIR --ids 1,2,3 [--pos0 0] [--block 32] --out FILE
        The full forward's routing as JSON:
        {"top_k": k, "layers": [{"layer": i, "ids": [[...] per token],
                                 "weights": [[...] per token]}, ...]}
        with the ids in slot order (selection score descending).

The checkpoint is a Hugging Face folder: config.json (model_type llada2_moe),
model.safetensors or shards listed in model.safetensors.index.json (bf16, the
router's expert_bias f32), tokenizer.json (the special ids are looked up by
name in added_tokens: "<|mask|>", "<|endoftext|>" and, if present,
"<|role_end|>").

Numeric semantics (the C engine follows the same rounding points)
-----------------------------------------------------------------
bf16(v) rounds a float32 to the nearest bf16 (ties to even) and returns it as
float32; everything else is float32. Every "matmul" here multiplies in float64
and casts the sums to float32: products of bf16 values are exact in float64, so
this is the correctly-rounded float32 result; the C engine sums in float32 in
its own order, so compare with a tolerance.

    rmsnorm(h, w) = h * (1 / sqrt(mean(h^2) + eps)) * w            (float32)
    h = embed[ids]
    per layer:
        x   = bf16(rmsnorm(h, input_layernorm))
        qkv = x Wqkv^T; q | k | v = head-major columns (nh, nkv, nkv heads)
        q, k = per-head rmsnorm (query_layernorm / key_layernorm), not rounded
        RoPE rotate-half on dims [0, rot) of each head at the absolute position:
            inv_freq[j] = f32(theta ** (-2j / rot)) (float64 power)
            angle = f32(pos) * inv_freq (float32), c/s = f32(cos/sin(f64(angle)))
        K/V go to the cache (float32)
        attention: query head h uses kv head h // (nh / nkv),
            score = q.k / sqrt(hd), key j visible from position p iff
            j // B <= p // B, float32 max-subtracted softmax, o = bf16(sum p v)
        h += o Wdense^T
        x = bf16(rmsnorm(h, post_attention_layernorm))
        dense layer (i < first_k_dense_replace): y = FFN(x)
        MoE layer:
            s = sigmoid(x Wgate^T), sel = s + expert_bias
            group score = sum of the 2 largest sel of each group of E/n_group
            experts; keep the topk_group best groups (ties: lower group);
            top-k experts by sel among the kept ones (ties: lower id);
            w = s[ids] (/ (sum + 1e-20) if top_k > 1) * routed_scaling_factor
            y = sum over the slots, in order, of w * FFN_e(x) (float32, from 0)
                + FFN_shared(x)
        FFN(x) = bf16(silu(x G^T) * (x U^T)) D^T
        h += y
    logits = bf16(rmsnorm(h, norm)) lm_head^T; position i predicts token i.

Generation
----------
generate() follows the official LLaDA2MoeModelLM.generate()
(modeling_llada2_moe.py, ims-kdks/TIDE commit b79491a9 model/, lines
1263-1433) rule by rule; its docstring cites the line of each rule, and
docs/decoding.md lists them. In short: steps = min(steps, gen_length //
minimal_topk); decoding starts at the block holding the prompt's tail; per
step the block's masks are the candidates (none left ends the block before
its forward), every masked position gets a token and a confidence from the
official temperature / top-k / top-p rules (mask token included), and the
positions above threshold (strict) are committed when there are at least the
schedule's count of them, else the schedule's count of most confident ones;
generation stops after a block holding EOS, and the output is
canvas[P:P+gen_length] cut after the first EOS. Temperature 0 is argmax and
sampling uses TIDE's RNG (class Rng), TIDE's documented departures. Finished
blocks are cached (prefill of the prompt blocks, one K/V pass per finished
block that another follows); --recompute runs the official forwards.

Exit status: 0 ok, 2 bad checkpoint or arguments (one line on stderr), 77 numpy
missing (the tests read 77 as "skipped").

Precision notes: matmuls, attention dot products and the RMSNorm mean of
squares are computed in float64 and rounded once to float32; everything the
semantics name (bf16 points, float32 softmax, float32 routing weights, slot
order of the routed sum) is followed literally. The cached and recompute
paths agree bit-for-bit on the self-test model.

Speed: fine for small test checkpoints (the self-test runs in a few seconds).
A real LLaDA2.0-mini checkpoint loads lazily (memory-mapped, at most
LLADA2_REF_CACHE_MB, default 4096, of weights kept as float32) but a forward
takes tens of seconds, so use it there for single `logits` checks only.

Self-test: /usr/bin/python3 tests/reference/selftest_ref.py
"""

import argparse
import json
import math
import os
import struct
import sys

try:
    import numpy as np
except ImportError:  # the tests treat 77 as "skipped"
    print(f"{os.path.basename(__file__)}: numpy is missing (use /usr/bin/python3)", file=sys.stderr)
    sys.exit(77)

MASK_TOKEN = "<|mask|>"
EOS_TOKEN = "<|endoftext|>"
STOP_TOKEN = "<|role_end|>"

# Weight rows converted to float64 at once inside matmul (bounds memory for
# the big lm_head / experts of real checkpoints).
MATMUL_ROW_CHUNK = 8192


class RefError(Exception):
    """A checkpoint or argument problem; the CLI prints it and exits 2."""


# --------------------------------------------------------------------------
# bf16 helpers
# --------------------------------------------------------------------------


def bf16_bits_to_f32(bits):
    """uint16 bf16 bit patterns -> float32 (the bits become the top half)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> uint16 bf16 bits, round to nearest, ties to even; NaN stays NaN."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan_bits = ((u >> 16) | 0x0040) & 0xFFFF  # keep sign/payload, force quiet
    out = np.where(np.isnan(x), nan_bits, rounded)
    return out.astype(np.uint16)


def bf16(x):
    """Round float32 values to bf16 (ties to even), returned as float32."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


def as_f32(a):
    """A tensor as stored (uint16 = bf16 bits, or a float array) -> float32."""
    if a.dtype == np.uint16:
        return bf16_bits_to_f32(a)
    return np.asarray(a, dtype=np.float32)


def matmul(x, w):
    """x [T, K] float32 times w^T, w [N, K] (bf16 bits or float) -> [T, N] float32.

    Products and sums are done in float64, then rounded once to float32.
    """
    x64 = np.asarray(x, dtype=np.float32).astype(np.float64)
    n = w.shape[0]
    out = np.empty((x64.shape[0], n), dtype=np.float32)
    for r in range(0, n, MATMUL_ROW_CHUNK):
        wc = as_f32(w[r : r + MATMUL_ROW_CHUNK]).astype(np.float64)
        out[:, r : r + MATMUL_ROW_CHUNK] = x64 @ wc.T
    return out


def rmsnorm(h, w, eps):
    """h * (1 / sqrt(mean(h^2) + eps)) * w over the last axis, float32 result."""
    ms = np.mean(np.square(h.astype(np.float64)), axis=-1, keepdims=True)
    inv = (1.0 / np.sqrt(ms + eps)).astype(np.float32)
    return (h.astype(np.float32) * inv) * w.astype(np.float32)


def sigmoid32(v):
    with np.errstate(over="ignore"):
        return (np.float32(1) / (np.float32(1) + np.exp(-v.astype(np.float32)))).astype(
            np.float32
        )


def silu32(v):
    return (v.astype(np.float32) * sigmoid32(v)).astype(np.float32)


# --------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------

_ST_DTYPES = {
    "BF16": np.uint16,  # kept as raw bits, converted with bf16_bits_to_f32
    "F32": np.float32,
    "F16": np.float16,
    "F64": np.float64,
    "I32": np.int32,
    "I64": np.int64,
    "I8": np.int8,  # q8_0 values
    "U8": np.uint8,  # q4_0 values, two per byte
    "F8_E4M3": np.uint8,  # fp8 codes, decoded with FP8_E4M3
}

QUANT_DTYPES = ("I8", "U8", "F8_E4M3")


def _fp8_e4m3fn_table():
    """The 256 values of float8 e4m3fn (the OCP FP8 spec as torch.float8_e4m3fn
    implements it): 1 sign bit, 4 exponent bits with bias 7, 3 mantissa bits,
    subnormals at exponent 0, no infinities, S.1111.111 is NaN."""
    t = np.empty(256, dtype=np.float32)
    for b in range(256):
        e, m = (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            v = float("nan")
        elif e == 0:
            v = m / 8.0 * 2.0 ** -6
        else:
            v = (1.0 + m / 8.0) * 2.0 ** (e - 7)
        t[b] = -v if b & 0x80 else v
    return t


FP8_E4M3 = _fp8_e4m3fn_table()


def quant_config(model_dir):
    """(method, block) from config.json's quantization_config, or None."""
    with open(os.path.join(model_dir, "config.json"), "r", encoding="utf-8") as f:
        q = json.load(f).get("quantization_config")
    if not q:
        return None
    if q["quant_method"] == "fp8":
        return ("fp8", tuple(q.get("weight_block_size", (128, 128))))
    return (q["format"], (1, 32))


def dequantize(st, name, quant):
    """Weight `name` of a quantized checkpoint as float32, written from the
    formats' definitions: Hugging Face's fine-grained FP8 (weight times
    weight_scale_inv broadcast over blocks of weight_block_size) and GGML's
    q8_0 (int8 times an f16 scale per 32 values of a row) and q4_0 (nibble
    minus 8 times the scale; in each block of 32, byte j holds value j low
    and value j + 16 high). Each product is rounded once to float32."""
    if quant is None:
        raise RefError(f"tensor {name} is quantized but config.json has no quantization_config")
    base = name[: -len("weight")]
    dt = st.dtype(name)
    if dt == "F8_E4M3":
        q = FP8_E4M3[np.asarray(st.get(name))]
        s = np.asarray(st.get(base + "weight_scale_inv"), dtype=np.float32)
        br, bc = quant[1]
        full = np.repeat(np.repeat(s, br, axis=0), bc, axis=1)[: q.shape[0], : q.shape[1]]
        return (q * full).astype(np.float32)
    d = np.asarray(st.get(base + "weight_scale")).astype(np.float32)
    raw = np.asarray(st.get(name))
    if dt == "I8":
        q = raw.astype(np.float32)
    else:
        rows, nb = raw.shape[0], raw.shape[1] // 16
        b = raw.reshape(rows, nb, 16)
        lo = (b & 15).astype(np.int32) - 8
        hi = (b >> 4).astype(np.int32) - 8
        q = np.concatenate([lo, hi], axis=2).reshape(rows, nb * 32).astype(np.float32)
    return (q * np.repeat(d, 32, axis=1)).astype(np.float32)


class SafeTensors:
    """Read-only view of one safetensors file or of a sharded checkpoint folder.

    Tensors are memory-mapped; get() returns the stored array (bf16 as uint16
    bits) without copying.
    """

    def __init__(self, model_dir):
        self.where = {}  # tensor name -> (file path, header entry)
        self.maps = {}  # file path -> np.memmap of the whole file
        index = os.path.join(model_dir, "model.safetensors.index.json")
        single = os.path.join(model_dir, "model.safetensors")
        if os.path.exists(index):
            with open(index, "r", encoding="utf-8") as f:
                wmap = json.load(f).get("weight_map", {})
            files = sorted(set(wmap.values()))
            if not files:
                raise RefError(f"{index}: empty weight_map")
            for fn in files:
                self._add_file(os.path.join(model_dir, fn))
        elif os.path.exists(single):
            self._add_file(single)
        else:
            raise RefError(f"{model_dir}: no model.safetensors or model.safetensors.index.json")

    def _add_file(self, path):
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise RefError(f"{path}: too short for a safetensors header")
            (hlen,) = struct.unpack("<Q", raw)
            if hlen > size - 8:
                raise RefError(f"{path}: header length {hlen} exceeds the file")
            header = json.loads(f.read(hlen).decode("utf-8"))
        data_start = 8 + hlen
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        self.maps[path] = mm
        for name, ent in header.items():
            if name == "__metadata__":
                continue
            if ent["dtype"] not in _ST_DTYPES:
                raise RefError(f"{path}: tensor {name}: unsupported dtype {ent['dtype']}")
            b, e = ent["data_offsets"]
            if data_start + e > size:
                raise RefError(f"{path}: tensor {name}: data past the end of the file")
            self.where[name] = (path, ent, data_start + b, data_start + e)

    def __contains__(self, name):
        return name in self.where

    def dtype(self, name):
        if name not in self.where:
            raise RefError(f"missing tensor {name}")
        return self.where[name][1]["dtype"]

    def get(self, name):
        if name not in self.where:
            raise RefError(f"missing tensor {name}")
        path, ent, b, e = self.where[name]
        dt = np.dtype(_ST_DTYPES[ent["dtype"]]).newbyteorder("<")
        shape = tuple(ent["shape"])
        arr = self.maps[path][b:e].view(dt)
        return arr.reshape(shape)


# --------------------------------------------------------------------------
# config, tokenizer ids
# --------------------------------------------------------------------------


class Config:
    """config.json; a missing key takes the default of the official
    LLaDA2MoeConfig (configuration_llada2_moe.py, __init__ lines 11-46),
    except the keys that set tensor shapes, which are required (the class
    defaults for those fit no released checkpoint, or crash its own code:
    intermediate_size None, num_key_value_heads 0)."""

    REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "intermediate_size", "moe_intermediate_size",
                "num_experts", "vocab_size")

    def __init__(self, model_dir):
        path = os.path.join(model_dir, "config.json")
        with open(path, "r", encoding="utf-8") as f:
            c = json.load(f)
        if c.get("model_type") != "llada2_moe":
            raise RefError(f"{path}: model_type {c.get('model_type')!r} is not llada2_moe")
        for key in self.REQUIRED:
            if c.get(key) is None:
                raise RefError(f"{path}: missing key {key!r}")

        def opt(key, default):
            v = c.get(key)
            return default if v is None else v

        self.hidden = int(c["hidden_size"])
        self.n_layers = int(c["num_hidden_layers"])
        self.n_heads = int(c["num_attention_heads"])
        self.n_kv = int(c["num_key_value_heads"])
        # configuration 71: head_dim or hidden_size // num_attention_heads
        self.head_dim = int(opt("head_dim", 0) or self.hidden // self.n_heads)
        # rotary_dim is never read upstream; transformers' default rope init
        # uses dim = int(head_dim * partial_rotary_factor)
        self.rot = int(self.head_dim * float(opt("partial_rotary_factor", 0.5)))
        self.theta = float(opt("rope_theta", 10000.0))
        self.eps = float(opt("rms_norm_eps", 1e-5))
        self.inter = int(c["intermediate_size"])
        self.moe_inter = int(c["moe_intermediate_size"])
        self.n_experts = int(c["num_experts"])
        self.top_k = int(opt("num_experts_per_tok", 2))
        self.n_shared = int(opt("num_shared_experts", 0))
        self.n_group = int(opt("n_group", 8))
        self.topk_group = int(opt("topk_group", 4))
        self.rsf = float(opt("routed_scaling_factor", 2.5))
        self.first_dense = int(opt("first_k_dense_replace", 0))
        self.vocab = int(c["vocab_size"])
        self.max_pos = int(opt("max_position_embeddings", 16384))
        # modeling 279-283: the gate normalises whenever top_k > 1;
        # norm_topk_prob is never read
        self.norm_topk = self.top_k > 1
        self.qk_norm = bool(opt("use_qk_norm", True))
        self.tied = bool(opt("tie_word_embeddings", False))
        self.use_bias = bool(opt("moe_router_enable_expert_bias", True))
        if bool(opt("use_bias", True)):
            raise RefError(f"{path}: use_bias (default true: a bias on attention.dense) is not "
                           "supported")
        if self.n_heads % self.n_kv or self.rot % 2 or self.rot > self.head_dim:
            raise RefError(f"{path}: inconsistent heads / rotary dims")
        if self.n_experts % self.n_group or self.topk_group > self.n_group:
            raise RefError(f"{path}: inconsistent n_group / topk_group")
        if self.top_k > self.topk_group * (self.n_experts // self.n_group):
            raise RefError(f"{path}: num_experts_per_tok exceeds the kept groups")


def special_ids(model_dir):
    """(mask, eos, stop or None) from tokenizer.json added_tokens, by name."""
    path = os.path.join(model_dir, "tokenizer.json")
    with open(path, "r", encoding="utf-8") as f:
        tok = json.load(f)
    by_name = {t["content"]: int(t["id"]) for t in tok.get("added_tokens", [])}
    for need in (MASK_TOKEN, EOS_TOKEN):
        if need not in by_name:
            raise RefError(f"{path}: added_tokens has no {need}")
    return by_name[MASK_TOKEN], by_name[EOS_TOKEN], by_name.get(STOP_TOKEN)


# --------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------


def route_topk(s, bias, n_group, topk_group, top_k, norm_topk, rsf):
    """Group-limited top-k routing.

    s: [T, E] float32 sigmoid scores; bias: [E] float32 or None.
    Returns ids [T, top_k] (slot order: selection score descending, ties to the
    lower id) and weights [T, top_k] float32.
    """
    s = s.astype(np.float32)
    t, e = s.shape
    sel = s + bias.astype(np.float32) if bias is not None else s.copy()
    gsize = e // n_group
    grouped = sel.reshape(t, n_group, gsize)
    top2 = np.sort(grouped, axis=-1)[..., -min(2, gsize) :]
    gscore = top2.sum(axis=-1, dtype=np.float32)  # [T, n_group]
    # stable sort of the negated score: descending, ties keep the lower index
    keep = np.argsort(-gscore, axis=1, kind="stable")[:, :topk_group]
    kept = np.zeros((t, n_group), dtype=bool)
    np.put_along_axis(kept, keep, True, axis=1)
    masked = np.where(np.repeat(kept, gsize, axis=1), sel, np.float32(-np.inf))
    ids = np.argsort(-masked, axis=1, kind="stable")[:, :top_k]
    w = np.take_along_axis(s, ids, axis=1)
    if norm_topk:
        total = np.zeros((t, 1), dtype=np.float32)
        for j in range(top_k):  # slot order, float32
            total = total + w[:, j : j + 1]
        w = w / (total + np.float32(1e-20))
    w = (w * np.float32(rsf)).astype(np.float32)
    return ids, w


class KVCache:
    """Per-layer float32 K and V for canvas positions 0 .. n-1."""

    def __init__(self, cfg):
        self.n = 0
        self.k = [np.zeros((cfg.n_kv, 0, cfg.head_dim), np.float32) for _ in range(cfg.n_layers)]
        self.v = [np.zeros((cfg.n_kv, 0, cfg.head_dim), np.float32) for _ in range(cfg.n_layers)]


class Model:
    """A llada2_moe checkpoint and its forward pass."""

    def __init__(self, model_dir, cache_mb=None):
        self.dir = model_dir
        self.cfg = Config(model_dir)
        self.st = SafeTensors(model_dir)
        self.quant = quant_config(model_dir)
        self.mask_id, self.eos_id, self.stop_id = special_ids(model_dir)
        if cache_mb is None:
            cache_mb = int(os.environ.get("LLADA2_REF_CACHE_MB", "4096"))
        self._cache = {}
        self._cache_left = cache_mb * (1 << 20)
        self.route_stats = {"tokens": 0, "different": 0, "unexplained": 0}
        c = self.cfg
        r = c.rot // 2
        # float64 power, then float32, as the semantics require
        self.inv_freq = np.array(
            [c.theta ** (-2.0 * j / c.rot) for j in range(r)], dtype=np.float64
        ).astype(np.float32)
        self._check_shapes()

    # -- weights -----------------------------------------------------------

    def w(self, name):
        """A weight as float32 when it fits the conversion cache, else as stored."""
        if name in self._cache:
            return self._cache[name]
        raw = self.st.get(name)
        if self.st.dtype(name) in QUANT_DTYPES:
            raw = dequantize(self.st, name, self.quant)
            if ".mlp.experts." not in name:
                # dense FP8 weights are dequantized once to bf16 at load
                # (docs/quantization.md); routed experts run quantized
                raw = bf16(raw)
        nbytes = raw.size * 4
        if nbytes <= self._cache_left:
            arr = as_f32(raw)
            self._cache[name] = arr
            self._cache_left -= nbytes
            return arr
        return raw

    def _check_shapes(self):
        c = self.cfg
        H, hd = c.hidden, c.head_dim

        def want(name, shape):
            got = tuple(self.st.get(name).shape)
            if got != tuple(shape):
                raise RefError(f"tensor {name}: shape {got}, expected {tuple(shape)}")

        want("model.word_embeddings.weight", (c.vocab, H))
        want("model.norm.weight", (H,))
        if not c.tied or "lm_head.weight" in self.st:
            want("lm_head.weight", (c.vocab, H))
        for i in range(c.n_layers):
            p = f"model.layers.{i}."
            want(p + "attention.query_key_value.weight", ((c.n_heads + 2 * c.n_kv) * hd, H))
            want(p + "attention.dense.weight", (H, c.n_heads * hd))
            if i >= c.first_dense:
                want(p + "mlp.gate.weight", (c.n_experts, H))

    def head_weight(self):
        if "lm_head.weight" in self.st:
            return self.w("lm_head.weight")
        return self.w("model.word_embeddings.weight")

    # -- pieces of the forward --------------------------------------------

    def ffn(self, x, prefix):
        g = matmul(x, self.w(prefix + "gate_proj.weight"))
        u = matmul(x, self.w(prefix + "up_proj.weight"))
        a = bf16(silu32(g) * u)
        return matmul(a, self.w(prefix + "down_proj.weight"))

    def rope(self, x, pos):
        """Rotate-half RoPE on dims [0, rot) of x [T, heads, hd] at positions pos [T]."""
        c = self.cfg
        r = c.rot // 2
        if r == 0:
            return x
        angle = pos.astype(np.float32)[:, None] * self.inv_freq[None, :]  # float32
        cos = np.cos(angle.astype(np.float64)).astype(np.float32)[:, None, :]
        sin = np.sin(angle.astype(np.float64)).astype(np.float32)[:, None, :]
        x1 = x[..., :r]
        x2 = x[..., r : c.rot]
        out = x.copy()
        out[..., :r] = x1 * cos - x2 * sin
        out[..., r : c.rot] = x2 * cos + x1 * sin
        return out

    def attention(self, q, k_all, v_all, qpos, kpos, block):
        """q [T, nh, hd]; k_all/v_all [nkv, S, hd]; returns bf16-valued o [T, nh*hd]."""
        c = self.cfg
        t = q.shape[0]
        group = c.n_heads // c.n_kv
        qg = q.reshape(t, c.n_kv, group, c.head_dim).transpose(1, 2, 0, 3)  # [nkv,g,T,hd]
        dots = np.einsum(
            "cgtd,csd->cgts", qg.astype(np.float64), k_all.astype(np.float64)
        ).astype(np.float32)
        scores = dots / np.float32(math.sqrt(c.head_dim))
        visible = (kpos[None, :] // block) <= (qpos[:, None] // block)  # [T, S]
        scores = np.where(visible[None, None], scores, np.float32(-np.inf))
        m = scores.max(axis=-1, keepdims=True)
        e = np.exp(scores - m)
        p = (e / e.sum(axis=-1, keepdims=True, dtype=np.float32)).astype(np.float32)
        o = np.einsum("cgts,csd->cgtd", p.astype(np.float64), v_all.astype(np.float64))
        o = o.astype(np.float32).transpose(2, 0, 1, 3).reshape(t, c.n_heads * c.head_dim)
        return bf16(o)

    def moe(self, x, prefix, routes=None, force=None):
        c = self.cfg
        logits = matmul(x, self.w(prefix + "gate.weight"))
        s = sigmoid32(logits)
        bias = None
        if c.use_bias and (prefix + "gate.expert_bias") in self.st:
            bias = as_f32(self.st.get(prefix + "gate.expert_bias"))
        ids, wts = route_topk(s, bias, c.n_group, c.topk_group, c.top_k, c.norm_topk, c.rsf)
        if force is not None:
            ids, wts = self.forced_route(force, s, bias, ids)
        if routes is not None:
            routes.append((ids, wts))
        t = x.shape[0]
        slot_out = np.zeros((t, c.top_k, c.hidden), dtype=np.float32)
        for e in np.unique(ids):
            rows, slots = np.nonzero(ids == e)
            y = self.ffn(x[rows], f"{prefix}experts.{int(e)}.")
            slot_out[rows, slots] = wts[rows, slots][:, None] * y
        routed = np.zeros((t, c.hidden), dtype=np.float32)
        for j in range(c.top_k):  # slot order, float32, from 0
            routed = routed + slot_out[:, j]
        if c.n_shared > 0:
            routed = routed + self.ffn(x, prefix + "shared_experts.")
        return routed

    # Routing given from outside (another implementation's choices), checked
    # against this reference's own: a different choice is accepted only where
    # this reference's own scores put it within ROUTE_MARGIN of the boundary.
    # The margin bounds how far two correct implementations' sigmoid scores
    # can drift apart: their hidden states differ by up to ~1% once a bf16
    # rounding went the other way upstream, router logits are O(1), and the
    # sigmoid's slope is at most 1/4.
    ROUTE_MARGIN = 1e-2

    def forced_route(self, force, s, bias, own):
        c = self.cfg
        if not force:
            raise RefError("forced routing ran out of records")
        ids = np.asarray(force.pop(0), dtype=np.int64).reshape(s.shape[0], c.top_k)
        sel = s + (bias if bias is not None else np.float32(0))
        t = s.shape[0]
        g = sel.reshape(t, c.n_group, -1)
        gscore = np.sort(g, axis=-1)[..., -min(2, g.shape[-1]):].sum(-1)
        gcut = -np.sort(-gscore, axis=1)[:, c.topk_group - 1]
        stats = self.route_stats
        gsize = g.shape[-1]
        for r in range(t):
            stats["tokens"] += 1
            if (ids[r] == own[r]).all():
                continue
            stats["different"] += 1
            # The kept groups may differ only where group scores nearly tie;
            # then redo the top-k inside the groups the forced choice used.
            fgroups = sorted({int(e) // gsize for e in ids[r]})
            near = len(fgroups) <= c.topk_group and all(
                gscore[r, q] >= gcut[r] - self.ROUTE_MARGIN for q in fgroups)
            kept = list(fgroups)
            for q in np.argsort(-gscore[r], kind="stable"):
                if len(kept) < c.topk_group and int(q) not in kept:
                    kept.append(int(q))
            allowed = np.zeros(sel.shape[1], dtype=bool)
            for q in kept:
                allowed[q * gsize:(q + 1) * gsize] = True
            masked = np.where(allowed, sel[r], -np.inf)
            mine = np.argsort(-masked, kind="stable")[: c.top_k]
            kth = masked[mine[-1]]
            # every forced expert must be within the margin of the k-th, and
            # the slot order may differ only among near-equal scores
            near = near and all(masked[e] >= kth - self.ROUTE_MARGIN for e in ids[r])
            near = near and bool(np.all(np.diff(sel[r, ids[r]]) <= self.ROUTE_MARGIN))
            if not near:
                stats["unexplained"] += 1
                if os.environ.get("LLADA2_REF_DEBUG"):
                    print("route r=%d forced %s own %s sel_forced %s sel_own %s gscore %s" % (
                        r, ids[r].tolist(), own[r].tolist(), sel[r, ids[r]].tolist(),
                        sel[r, own[r]].tolist(), gscore[r].tolist()), file=sys.stderr)
        w = np.take_along_axis(s, ids, axis=1)
        if c.norm_topk:
            total = np.zeros((t, 1), dtype=np.float32)
            for j in range(c.top_k):
                total = total + w[:, j : j + 1]
            w = w / (total + np.float32(1e-20))
        return ids, (w * np.float32(c.rsf)).astype(np.float32)

    # -- the forward ---------------------------------------------------------

    def forward(self, ids, pos0, block, cache=None, store=False, logits=True, routes=None,
                force=None):
        """Run ids at positions pos0 .. pos0+T-1.

        cache: a KVCache holding positions 0 .. pos0-1 (its keys are visible
        under the block-causal mask), or None for no earlier keys.
        store: append this call's K/V to cache (requires cache.n == pos0).
        routes: a list that receives (ids, weights) per MoE layer.
        force: a list of [T, top_k] id arrays, one per MoE layer call, taken
        in order: route with these instead (see forced_route).
        Returns float32 logits [T, vocab], or None when logits is False.
        """
        c = self.cfg
        ids = np.asarray(ids, dtype=np.int64)
        t = ids.shape[0]
        if cache is not None and cache.n != pos0:
            raise RefError(f"cache holds {cache.n} positions, forward starts at {pos0}")
        if ids.min() < 0 or ids.max() >= c.vocab:
            raise RefError(f"token id out of range [0, {c.vocab})")
        qpos = np.arange(pos0, pos0 + t, dtype=np.int64)
        kpos = np.arange(0 if cache is not None else pos0, pos0 + t, dtype=np.int64)
        hd, nh, nkv = c.head_dim, c.n_heads, c.n_kv

        h = as_f32(self.st.get("model.word_embeddings.weight")[ids])
        for i in range(c.n_layers):
            p = f"model.layers.{i}."
            x = bf16(rmsnorm(h, self.w(p + "input_layernorm.weight"), c.eps))
            qkv = matmul(x, self.w(p + "attention.query_key_value.weight"))
            q = qkv[:, : nh * hd].reshape(t, nh, hd)
            k = qkv[:, nh * hd : (nh + nkv) * hd].reshape(t, nkv, hd)
            v = qkv[:, (nh + nkv) * hd :].reshape(t, nkv, hd)
            if c.qk_norm:
                q = rmsnorm(q, self.w(p + "attention.query_layernorm.weight"), c.eps)
                k = rmsnorm(k, self.w(p + "attention.key_layernorm.weight"), c.eps)
            q = self.rope(q, qpos)
            k = self.rope(k, qpos)
            k_new = np.ascontiguousarray(k.transpose(1, 0, 2))  # [nkv, T, hd]
            v_new = np.ascontiguousarray(v.transpose(1, 0, 2))
            if cache is not None:
                k_all = np.concatenate([cache.k[i], k_new], axis=1)
                v_all = np.concatenate([cache.v[i], v_new], axis=1)
                if store:
                    cache.k[i], cache.v[i] = k_all, v_all
            else:
                k_all, v_all = k_new, v_new
            o = self.attention(q, k_all, v_all, qpos, kpos, block)
            h = h + matmul(o, self.w(p + "attention.dense.weight"))
            x = bf16(rmsnorm(h, self.w(p + "post_attention_layernorm.weight"), c.eps))
            if i < c.first_dense:
                y = self.ffn(x, p + "mlp.")
            else:
                y = self.moe(x, p + "mlp.", routes, force)
            h = h + y
        if cache is not None and store:
            cache.n = pos0 + t
        if not logits:
            return None
        x = bf16(rmsnorm(h, self.w("model.norm.weight"), c.eps))
        return matmul(x, self.head_weight())


# --------------------------------------------------------------------------
# generation
# --------------------------------------------------------------------------


class CachedRunner:
    """Runs each step over the L block tokens against cached K/V."""

    def __init__(self, model, block):
        self.model = model
        self.block = block
        self.cache = KVCache(model.cfg)

    def prefill(self, canvas, n):
        if n > 0:
            self.model.forward(canvas[:n], 0, self.block, self.cache, store=True, logits=False)

    def block_logits(self, canvas, b):
        lo = b * self.block
        return self.model.forward(canvas[lo : lo + self.block], lo, self.block, self.cache)

    def finish_block(self, canvas, b):
        lo = b * self.block
        self.model.forward(
            canvas[lo : lo + self.block], lo, self.block, self.cache, store=True, logits=False
        )


class RecomputeRunner:
    """No cache: every step runs positions 0 .. (b+1)L-1 and keeps the last L rows."""

    def __init__(self, model, block):
        self.model = model
        self.block = block

    def prefill(self, canvas, n):
        pass

    def block_logits(self, canvas, b):
        hi = (b + 1) * self.block
        return self.model.forward(canvas[:hi], 0, self.block)[-self.block :]

    def finish_block(self, canvas, b):
        pass


def transfer_schedule(block, steps):
    """_get_num_transfer_tokens (modeling 1253-1260): steps entries of
    block // steps, the first block % steps of them one more; [] for 0 steps.
    With steps > block the tail entries are 0."""
    if steps == 0:
        return []
    base, rem = divmod(block, steps)
    return [base + (1 if s < rem else 0) for s in range(steps)]


def capped_steps(steps, gen_length, minimal_topk=1):
    """modeling 1333: steps = min(steps, gen_length // minimal_topk)."""
    return min(steps, gen_length // minimal_topk)


def read_logits_dump(path):
    """`tide run --dump-logits` file: per step int32 {block, step, rows, vocab},
    then float32 logits [rows, vocab]. Returns [(block, step, logits)]."""
    raw = open(path, "rb").read()
    off, out = 0, []
    while off < len(raw):
        b, s, r, v = np.frombuffer(raw, "<i4", 4, off)
        off += 16
        out.append((int(b), int(s), np.frombuffer(raw, "<f4", int(r) * int(v), off).reshape(r, v)))
        off += 4 * int(r) * int(v)
    return out


def read_trace_routes(path):
    """The routing records of a TIDE trace (docs/trace-format.md), in file
    order, as [n, top_k] int arrays (other records are skipped)."""
    raw = open(path, "rb").read()
    if raw[:8] != b"TIDETRC\0":
        raise RefError(f"{path}: not a TIDE trace")
    version, jlen = struct.unpack_from("<II", raw, 8)
    if version not in (1, 2, 3, 4):
        raise RefError(f"{path}: trace version {version}, expected 1 to 4")
    head = json.loads(raw[16 : 16 + jlen])
    k, nexp = head["top_k"], head["n_experts"]
    width = 1 if nexp <= 256 else 2
    pos = 16 + jlen + (8 - (16 + jlen) % 8) % 8
    out = []
    sizes = {1: 8, 2: 5, 3: 4}
    while pos < len(raw):
        typ = raw[pos]
        if typ in sizes:
            pos += 1 + sizes[typ]
            continue
        if typ == 5 and version >= 2:  # the prompt's vector: u32 dim, dim f32
            pos += 5 + 4 * struct.unpack_from("<I", raw, pos + 1)[0]
            continue
        if typ == 6 and version >= 3:  # a prompt joins a running batch: u32 id, u32 len
            pos += 9
            continue
        if typ == 7 and version >= 3:  # the next forward's prompts: u32 n, n u32 ids
            pos += 5 + 4 * struct.unpack_from("<I", raw, pos + 1)[0]
            continue
        if typ == 8 and version >= 4:  # the prompt grew (DIP): id, at, inserted, length
            pos += 17
            continue
        if typ != 4:
            raise RefError(f"{path}: unknown record type {typ} at byte {pos}")
        n = struct.unpack_from("<I", raw, pos + 6)[0]
        cnt = n * k
        ids = np.frombuffer(raw, "<u1" if width == 1 else "<u2", cnt, pos + 10)
        out.append(ids.astype(np.int64).reshape(n, k))
        pos += 10 + cnt * width
    return out


class Rng:
    """TIDE's sampling generator, xoshiro256** seeded through splitmix64, as
    in plugins/decoder-common/rng.h (the official code draws with
    torch.multinomial, whose stream cannot be reproduced outside torch)."""

    M = (1 << 64) - 1

    def __init__(self, seed):
        self.s = []
        x = seed & self.M
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & self.M
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self.M
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self.M
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def _rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & Rng.M

    def uniform(self):
        """A float in [0, 1) from the top 53 bits."""
        s, M = self.s, self.M
        out = (self._rotl((s[1] * 5) & M, 7) * 9) & M
        t = (s[1] << 17) & M
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self._rotl(s[3], 45)
        return (out >> 11) * (1.0 / 9007199254740992.0)


class Sampler:
    """_sample_with_temperature_topk_topp (modeling 1237-1250) for one position.

    1243-1244: logits / temperature only when temperature > 0 and != 1.
    1245, _top_k_logits 1210-1218: k None or <= 0 is off; else the k-th
        largest value (counting repeats) is the cut, logits < it become -inf
        (ties with it are kept).
    1246, _top_p_logits 1221-1235, on the top-k output: p None or >= 1 is
        off; sort descending, cumulative softmax, drop every entry whose
        preceding cumulative mass exceeds p (the first is always kept).
    1247: probs = softmax of what is left; 1249: the confidence is the
        chosen token's probability under it.
    1248 draws with torch.multinomial even at temperature 0; here (and in
    TIDE) temperature 0 takes the argmax (lowest id on ties) and
    temperature > 0 draws with Rng: u * Z against the running sum of
    exp(s - max) in id order. mask_in_argmax False (a TIDE option) removes
    the mask token before everything else. Sums run in the same order as in
    decoder-common/sample.h with math.exp, so the draws agree bit for bit.
    """

    def __init__(self, temperature=0.0, top_k=0, top_p=1.0, skip=None, seed=0):
        self.temperature, self.top_k, self.top_p, self.skip = temperature, top_k, top_p, skip
        self.rng = Rng(seed) if temperature > 0 else None

    def __call__(self, row):
        s = [float(v) for v in np.asarray(row, dtype=np.float32)]
        V = len(s)
        t = self.temperature
        if t > 0 and t != 1.0:
            s = [v / t for v in s]
        if self.skip is not None:
            s[self.skip] = -math.inf
        k = self.top_k
        if k and 0 < k < V:
            kth = sorted(s, reverse=True)[k - 1]
            s = [v if v >= kth else -math.inf for v in s]
        p = self.top_p
        if p is not None and p < 1.0:
            order = sorted((v for v in range(V) if s[v] > -math.inf), key=lambda v: (-s[v], v))
            mx = s[order[0]]
            z = 0.0
            for v in order:
                z += math.exp(s[v] - mx)
            cum, keep = 0.0, 0
            while keep < len(order):
                cum += math.exp(s[order[keep]] - mx) / z
                keep += 1
                if cum > p:
                    break
            for v in order[keep:]:
                s[v] = -math.inf
        mx, best = -math.inf, None
        for v in range(V):
            if s[v] > mx:
                mx, best = s[v], v
        z = 0.0
        for v in range(V):
            if s[v] > -math.inf:
                z += math.exp(s[v] - mx)
        if self.rng is None:
            return best, 1.0 / z
        r = self.rng.uniform() * z
        acc, last = 0.0, best
        for v in range(V):
            if s[v] == -math.inf:
                continue
            e = math.exp(s[v] - mx)
            acc += e
            last = v
            if r < acc:
                return v, e / z
        return last, math.exp(s[last] - mx) / z


def commit_positions(conf, active, n_s, threshold):
    """modeling 1389-1403. conf [L] float64; active [L] bool (masked).
    Non-masked positions have confidence -inf (1392). When at least n_s
    masked positions are strictly above threshold (1393, 1396), all of them
    are committed; else the min(n_s, #masks) most confident (1399-1403;
    torch.topk leaves ties unordered, here the lower position wins).
    Returns the committed positions, sorted."""
    c = np.where(active, conf, -np.inf)
    high = np.nonzero(c > threshold)[0]
    if high.size >= n_s:
        return high
    k = min(n_s, int(active.sum()))
    order = sorted(range(len(c)), key=lambda i: (-c[i], i))
    return np.sort(np.array(order[:k], dtype=np.int64))


def generate(
    model,
    prompt,
    gen_length,
    block_length=32,
    steps=32,
    threshold=0.95,
    recompute=False,
    trace=None,
    runner=None,
    minimal_topk=1,
    temperature=0.0,
    top_k=0,
    top_p=1.0,
    seed=0,
    eos_early_stop=False,
    mask_in_argmax=True,
    stop_ids=(),
    stats=None,
):
    """LLaDA2MoeModelLM.generate (modeling 1263-1433) on this model; returns
    the generated ids (a list). Rules, with the lines they follow:

    1333 steps = min(steps, gen_length // minimal_topk), for every block.
    1336-1338 canvas of ceil((P + G) / L) blocks; 1352-1354 prompt, then masks.
    1359, 1365 blocks the prompt covers are not decoded; decoding starts at
        block P // L.
    1362-1364 one transfer schedule for all blocks.
    1373-1376 per step, the candidates are the block's mask positions; a step
        that starts with none ends the block before its forward.
    1378-1384 one forward per step; the block's rows are used.
    1385-1387 Sampler on every masked position (the mask token is not removed
        unless mask_in_argmax is False; a position given it stays masked).
    1389-1406 commit_positions, written in place.
    1407-1413 eos_early_stop: after a step that committed EOS, the first EOS
        of the window [0, end of block) -- prompt included -- ends generation
        when no mask lies between the prompt's end and it. Upstream returns
        the prompt too; here the generated tokens, at most G of them.
    1416-1420 after a block, EOS anywhere in [P, end of block) stops.
    1422-1433 output: canvas[P:P+G] cut after the first EOS (inclusive).

    stop_ids (TIDE's generation.stop_tokens) end generation as EOS does
    (counted from the prompt's end only). Forwards: the official count is one
    per step; the cached runner adds P // L prefill forwards (one per prompt
    block, as the engine) and one K/V pass after each block another follows.
    trace: a list that receives one dict per step: block, step, logits,
    commit (committed block offsets), x0 (the chosen ids).
    stats: a dict that receives steps (the official forward count), blocks,
    forwards (this runner's count), masks_chosen.
    runner: overrides the cached/recompute runner (tests).
    """
    L = block_length
    if L < 1 or steps < 1 or gen_length < 1 or minimal_topk < 1:
        raise RefError("block_length, steps, gen_length and minimal_topk must be >= 1")
    prompt = [int(t) for t in prompt]
    P, G = len(prompt), gen_length
    S = capped_steps(steps, G, minimal_topk)
    if S < 1:
        raise RefError("gen_length // minimal_topk is 0: nothing would be decoded")
    nb = -(-(P + G) // L)
    mask_id, eos_id = model.mask_id, model.eos_id
    stops = {eos_id} | {int(t) for t in stop_ids}
    canvas = np.full(nb * L, mask_id, dtype=np.int64)
    canvas[:P] = prompt
    if runner is None:
        runner = RecomputeRunner(model, L) if recompute else CachedRunner(model, L)
    sampler = Sampler(temperature, top_k, top_p, None if mask_in_argmax else mask_id, seed)
    first = P // L
    forwards = first if not recompute else 0
    runner.prefill(canvas, first * L)
    sched = transfer_schedule(L, S)
    n_steps, blocks, masks_chosen = 0, 0, 0
    out = None
    for b in range(first, nb):
        lo, end = b * L, (b + 1) * L
        stop = False
        for s in range(S):
            active = canvas[lo:end] == mask_id
            if not active.any():
                break
            logits = runner.block_logits(canvas, b)
            n_steps += 1
            forwards += 1
            x0 = np.full(L, mask_id, dtype=np.int64)
            conf = np.full(L, -np.inf)
            for i in np.nonzero(active)[0]:
                x0[i], conf[i] = sampler(logits[i])
            commit = commit_positions(conf, active, sched[s], threshold)
            canvas[lo + commit] = x0[commit]
            masks_chosen += int((x0[commit] == mask_id).sum())
            if trace is not None:
                trace.append({"block": b, "step": s, "logits": logits, "commit": commit,
                              "x0": x0.copy()})
            if eos_early_stop and any(int(t) in stops for t in x0[commit]):
                e = next((i for i in range(end)
                          if canvas[i] == eos_id or (i >= P and int(canvas[i]) in stops)), None)
                if e is not None and not (canvas[P:e] == mask_id).any():
                    out = [int(t) for t in canvas[P:min(e + 1, P + G)]]
                    stop = True
                    break
        blocks += 1
        stop = stop or any(int(t) in stops for t in canvas[P:end])
        if not stop and b + 1 < nb:
            runner.finish_block(canvas, b)
            forwards += 0 if recompute else 1
        if stop:
            break
    if out is None:
        out = [int(t) for t in canvas[P:P + G]]
        for i, t in enumerate(out):
            if t in stops:
                out = out[: i + 1]
                break
    if stats is not None:
        stats.update(steps=n_steps, blocks=blocks, forwards=forwards, masks_chosen=masks_chosen)
    return out


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def parse_ids(text):
    text = text.strip()
    if not text:
        return []
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise RefError(f"bad id list {text!r}") from None


def cmd_logits(a):
    model = Model(a.model)
    ids = parse_ids(a.ids)
    if not ids:
        raise RefError("--ids is empty")
    logits = model.forward(ids, a.pos0, a.block)
    logits.astype("<f4").tofile(a.out)


def cmd_route(a):
    model = Model(a.model)
    ids = parse_ids(a.ids)
    if not ids:
        raise RefError("--ids is empty")
    routes = []
    model.forward(ids, a.pos0, a.block, routes=routes, logits=False)
    c = model.cfg
    layers = [
        {"layer": li, "ids": r[0].tolist(), "weights": r[1].astype(float).tolist()}
        for li, r in zip(range(c.first_dense, c.n_layers), routes)
    ]
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"top_k": c.top_k, "layers": layers}, f)
        f.write("\n")


def cmd_generate(a):
    model = Model(a.model)
    out = generate(
        model,
        parse_ids(a.prompt_ids),
        a.gen_length,
        a.block_length,
        a.steps,
        a.threshold,
        a.recompute,
        minimal_topk=a.minimal_topk,
        temperature=a.temperature,
        top_k=a.top_k,
        top_p=a.top_p,
        seed=a.seed,
        eos_early_stop=a.eos_early_stop,
        mask_in_argmax=not a.mask_out,
        stop_ids=parse_ids(a.stop_ids),
    )
    print(",".join(str(t) for t in out))


def main(argv=None):
    ap = argparse.ArgumentParser(description="numpy reference of LLaDA2.0 (llada2_moe)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("logits", "route"):
        p = sub.add_parser(name)
        p.add_argument("--model", required=True)
        p.add_argument("--ids", required=True)
        p.add_argument("--pos0", type=int, default=0)
        p.add_argument("--block", type=int, default=32)
        p.add_argument("--out", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--model", required=True)
    g.add_argument("--prompt-ids", required=True)
    g.add_argument("--gen-length", type=int, required=True)
    g.add_argument("--block-length", type=int, default=32)
    g.add_argument("--steps", type=int, default=32)
    g.add_argument("--threshold", type=float, default=0.95)
    g.add_argument("--recompute", action="store_true")
    g.add_argument("--minimal-topk", type=int, default=1)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--eos-early-stop", action="store_true")
    g.add_argument("--mask-out", action="store_true",
                   help="leave the mask token out of argmax/softmax (generation.mask_in_argmax=false)")
    g.add_argument("--stop-ids", default="", help="extra stop ids, comma-separated")
    a = ap.parse_args(argv)
    try:
        {"logits": cmd_logits, "route": cmd_route, "generate": cmd_generate}[a.cmd](a)
    except (RefError, OSError, KeyError, ValueError) as e:
        print(f"llada2_ref.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
