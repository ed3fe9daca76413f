#!/usr/bin/python3
"""llada_moe_ref.py -- an independent numpy reference of LLaDA-MoE's forward.

Written from the official modeling_lladamoe.py / configuration_lladamoe.py
(inclusionAI LLaDA-MoE-7B-A1B, class LLaDAMoEModelLM; read in dInfer's
tools/ and dllm's pipelines/llada/models/), not from the C engine. It shares
only the model-independent numerics of llada2_ref.py (bf16 rounding, the
float64 matmul, RMSNorm, SiLU, the safetensors reader and the trace reader),
so both references round at the same points TIDE's backend ops define.

Rules, in the order of the official code (per decoder layer):
    x = bf16(RMSNorm(h, input_layernorm))
    q = x Wq^T, k = x Wk^T, v = x Wv^T                (separate q/k/v_proj)
    q, k = RMSNorm over each head's head_dim values (q_norm, k_norm; the code
           reshapes to (-1, head_dim)), when qk_layernorm
    head_dim = hidden_size / num_attention_heads (no head_dim key is read)
    RoPE rotate-half on the first int(head_dim * partial_rotary_factor) dims,
           inv_freq[j] = theta^(-2j/rot), angle = pos * inv_freq (float32)
    attention: full, bidirectional (is_causal False, attention_mask None):
           every query sees every key; GQA by repeat_kv; scale 1/sqrt(hd)
    h += bf16(o) Wo^T
    x = bf16(RMSNorm(h, post_attention_layernorm))
    dense layer (moe_layer_freq[i] == 0): y = SwiGLU(x)
    MoE layer: logits = x Wgate^T; p = softmax(logits) (float32);
           p += expert_bias when moe_router_enable_expert_bias;
           top-k of p (ties: lower id); weights = those p values:
           norm_topk_prob is fixed to False in LLaDAMoESparseMoeBlock, and
           routed_scaling_factor, router groups and the score function key
           are never read;
           y = sum over the slots of w * SwiGLU_e(x)
           + SwiGLU_shared(x) when shared_expert_intermediate_size is not None
           (model.layers.i.shared_expert.*, fed the same normalised x)
    h += y
    logits = bf16(RMSNorm(h, norm)) lm_head^T (embed_tokens when tied)

Commands
--------
    llada_moe_ref.py logits --model DIR --ids 1,2,3 --out FILE
        One forward over the ids at positions 0..n-1; float32 logits [n, vocab].
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llada2_ref import (  # noqa: E402
    QUANT_DTYPES,
    RefError,
    SafeTensors,
    dequantize,
    quant_config,
    as_f32,
    bf16,
    matmul,
    rmsnorm,
    silu32,
)


class Config:
    """config.json of LLaDAMoEModelLM. Shape keys have class default -1 (no
    working model), so they are required; the rest take the class's defaults."""

    def __init__(self, model_dir):
        path = os.path.join(model_dir, "config.json")
        with open(path, "r", encoding="utf-8") as f:
            c = json.load(f)
        if c.get("model_type") not in ("llada", "lladamoe"):
            raise RefError(f"{path}: model_type {c.get('model_type')!r}")
        need = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_experts",
                "num_experts_per_tok", "expert_intermediate_size", "vocab_size", "rope_theta",
                "partial_rotary_factor", "moe_layer_freq")
        for k in need:
            if c.get(k) is None:
                raise RefError(f"{path}: missing {k}")
        self.hidden = c["hidden_size"]
        self.n_layers = c["num_hidden_layers"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv = c.get("num_key_value_heads") or self.n_heads
        self.head_dim = self.hidden // self.n_heads
        self.rot = int(self.head_dim * c["partial_rotary_factor"])
        self.theta = float(c["rope_theta"])
        self.eps = float(c.get("rms_norm_eps", 1e-5))
        self.n_experts = c["num_experts"]
        self.top_k = c["num_experts_per_tok"]
        self.vocab = c["vocab_size"]
        self.qk_norm = bool(c.get("qk_layernorm"))
        self.bias = bool(c.get("moe_router_enable_expert_bias"))
        self.shared = c.get("shared_expert_intermediate_size") is not None
        self.moe = [int(v) != 0 for v in c["moe_layer_freq"]]
        self.tied = bool(c.get("tie_word_embeddings", False))


def softmax32(v):
    v = v.astype(np.float32)
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True, dtype=np.float32)).astype(np.float32)


class Model:
    # Routing taken from the engine is accepted where this reference's own
    # scores put the forced expert within ROUTE_MARGIN of the k-th: the two
    # hidden states differ by bf16 roundings, and softmax scores move by at
    # most a quarter of a logit difference.
    ROUTE_MARGIN = 2e-3

    def __init__(self, model_dir):
        self.cfg = Config(model_dir)
        self.st = SafeTensors(model_dir)
        self.quant = quant_config(model_dir)
        # The Ling tokenizer's names (LLaDA-MoE's mask id 156895 is "<|mask|>")
        with open(os.path.join(model_dir, "tokenizer.json"), "r", encoding="utf-8") as f:
            names = {t["content"]: t["id"] for t in json.load(f).get("added_tokens", [])}
        self.mask_id, self.eos_id = names.get("<|mask|>"), names.get("<|endoftext|>")
        c = self.cfg
        r = c.rot // 2
        self.inv_freq = np.array([c.theta ** (-2.0 * j / c.rot) for j in range(r)],
                                 dtype=np.float64).astype(np.float32)
        self._w = {}
        self.route_stats = {"tokens": 0, "different": 0, "unexplained": 0}

    def w(self, name):
        if name not in self._w:
            if self.st.dtype(name) in QUANT_DTYPES:
                self._w[name] = dequantize(self.st, name, self.quant)
                if ".mlp.experts." not in name:  # dense FP8: bf16 at load, as the engine
                    self._w[name] = bf16(self._w[name])
            else:
                self._w[name] = as_f32(self.st.get(name))
        return self._w[name]

    def ffn(self, x, p):
        g = matmul(x, self.w(p + "gate_proj.weight"))
        u = matmul(x, self.w(p + "up_proj.weight"))
        return matmul(bf16(silu32(g) * u), self.w(p + "down_proj.weight"))

    def rope(self, x, pos):
        c = self.cfg
        r = c.rot // 2
        angle = pos.astype(np.float32)[:, None] * self.inv_freq[None, :]
        cos = np.cos(angle.astype(np.float64)).astype(np.float32)[:, None, :]
        sin = np.sin(angle.astype(np.float64)).astype(np.float32)[:, None, :]
        out = x.copy()
        x1, x2 = x[..., :r], x[..., r:c.rot]
        out[..., :r] = x1 * cos - x2 * sin
        out[..., r:c.rot] = x2 * cos + x1 * sin
        return out

    def attention(self, q, k, v):
        """Full attention: q [T, nh, hd], k/v [T, nkv, hd]."""
        c = self.cfg
        t = q.shape[0]
        rep = c.n_heads // c.n_kv
        kk = np.repeat(k, rep, axis=1)  # repeat_kv: head h uses kv head h // rep
        vv = np.repeat(v, rep, axis=1)
        s = np.einsum("thd,shd->hts", q.astype(np.float64), kk.astype(np.float64))
        s = s.astype(np.float32) / np.float32(math.sqrt(c.head_dim))
        p = softmax32(s)
        o = np.einsum("hts,shd->thd", p.astype(np.float64), vv.astype(np.float64))
        return bf16(o.astype(np.float32).reshape(t, c.n_heads * c.head_dim))

    def route(self, x, p, force):
        c = self.cfg
        probs = softmax32(matmul(x, self.w(p + "mlp.gate.weight")))
        if c.bias:
            probs = probs + as_f32(self.st.get(p + "mlp.expert_bias"))
        own = np.argsort(-probs, axis=1, kind="stable")[:, :c.top_k]
        ids = own
        if force is not None:
            if not force:
                raise RefError("forced routing ran out of records")
            ids = np.asarray(force.pop(0), dtype=np.int64).reshape(x.shape[0], c.top_k)
            for r in range(x.shape[0]):
                self.route_stats["tokens"] += 1
                if (ids[r] == own[r]).all():
                    continue
                self.route_stats["different"] += 1
                kth = probs[r, own[r, -1]]
                ok = all(probs[r, e] >= kth - self.ROUTE_MARGIN for e in ids[r])
                ok = ok and bool(np.all(np.diff(probs[r, ids[r]]) <= self.ROUTE_MARGIN))
                self.route_stats["unexplained"] += not ok
        return ids, np.take_along_axis(probs, ids, axis=1)

    def moe(self, x, p, force):
        c = self.cfg
        ids, wts = self.route(x, p, force)
        t = x.shape[0]
        slot = np.zeros((t, c.top_k, c.hidden), dtype=np.float32)
        for e in np.unique(ids):
            rows, slots = np.nonzero(ids == e)
            slot[rows, slots] = wts[rows, slots][:, None] * self.ffn(
                x[rows], f"{p}mlp.experts.{int(e)}.")
        y = np.zeros((t, c.hidden), dtype=np.float32)
        for j in range(c.top_k):
            y = y + slot[:, j]
        if c.shared:
            y = y + self.ffn(x, p + "shared_expert.")
        return y

    def forward(self, ids, force=None):
        c = self.cfg
        ids = np.asarray(ids, dtype=np.int64)
        if ids.min() < 0 or ids.max() >= c.vocab:
            raise RefError("token id out of range")
        t = ids.shape[0]
        pos = np.arange(t)
        hd = c.head_dim
        h = as_f32(self.st.get("model.embed_tokens.weight")[ids])
        for i in range(c.n_layers):
            p = f"model.layers.{i}."
            x = bf16(rmsnorm(h, self.w(p + "input_layernorm.weight"), c.eps))
            q = matmul(x, self.w(p + "self_attn.q_proj.weight")).reshape(t, c.n_heads, hd)
            k = matmul(x, self.w(p + "self_attn.k_proj.weight")).reshape(t, c.n_kv, hd)
            v = matmul(x, self.w(p + "self_attn.v_proj.weight")).reshape(t, c.n_kv, hd)
            if c.qk_norm:
                q = rmsnorm(q, self.w(p + "self_attn.q_norm.weight"), c.eps)
                k = rmsnorm(k, self.w(p + "self_attn.k_norm.weight"), c.eps)
            q, k = self.rope(q, pos), self.rope(k, pos)
            o = self.attention(q, k, v)
            h = h + matmul(o, self.w(p + "self_attn.o_proj.weight"))
            x = bf16(rmsnorm(h, self.w(p + "post_attention_layernorm.weight"), c.eps))
            y = self.moe(x, p, force) if c.moe[i] else self.ffn(x, p + "mlp.")
            h = h + y
        x = bf16(rmsnorm(h, self.w("model.norm.weight"), c.eps))
        head = "model.embed_tokens.weight" if c.tied else "lm_head.weight"
        return matmul(x, self.w(head))


def main(argv=None):
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    lg = sub.add_parser("logits")
    lg.add_argument("--model", required=True)
    lg.add_argument("--ids", required=True)
    lg.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        m = Model(a.model)
        m.forward([int(v) for v in a.ids.split(",")]).astype("<f4").tofile(a.out)
    except RefError as e:
        print("error:", e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
