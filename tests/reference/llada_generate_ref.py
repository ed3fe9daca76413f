#!/usr/bin/python3
"""llada_generate_ref.py -- a numpy reference of LLaDA's generate(), TIDE's
decoder "llada" (the loop LLaDA-MoE uses).

Written from the official code, not from TIDE's C: generate.py of
ML-GSAI/LLaDA at commit b7e6c356 (the file the LLaDA-MoE release points its
users to; the same function with mask_id 156895). Line numbers below are that
file's. docs/decoding.md ("The llada decoder") lists the same rules L1-L12.

The model is a function: forward(ids) -> float32 logits [len(ids), vocab] for
one whole-canvas forward (the official code calls model(x) on the whole
canvas). Any model plugs in: llada2_ref.Model (test_llada_decoder.py drives
this with the tiny llada2 checkpoint under its block-causal mask), or a numpy
LLaDA-MoE forward with full attention. The APPROXIMATE prefix cache
(TIDE's generation.prefix_cache) needs an object instead, with
full(ids) -> logits of a whole-canvas forward that also keeps every
position's K/V, and suffix(ids, start) -> logits of positions start..
computed against the K/V that the last full() left for positions < start.

Departures, each also in docs/decoding.md:
  * randomness uses TIDE's generator (llada2_ref.Rng: xoshiro256** seeded by
    splitmix64), not torch.rand: Gumbel noise is drawn for the positions that
    can be committed only (the masked positions before the block's end, in
    position order, one draw per token in id order), then, for random
    remasking, one uniform per such position in position order;
  * torch.topk's order among equal confidences is unspecified: the lower
    position wins; when fewer candidates than the scheduled count remain,
    only the candidates are committed (topk would also pick -inf positions);
  * the output is canvas[P:P+G] cut after the first EOS (or stop id), as the
    rest of TIDE; eos_early_stop (off by default) ends after a block whose
    output is final (its first EOS has no mask before it).
"""
import math

import numpy as np

from llada2_ref import RefError, Rng


def get_num_transfer_tokens(mask_num, steps):
    """generate.py 22-40: mask_num // steps per step, the first
    mask_num % steps steps one more."""
    base, rem = divmod(int(mask_num), steps)
    return [base + (1 if i < rem else 0) for i in range(steps)]


def gumbel_argmax(row, temperature, rng, skip=None):
    """add_gumbel_noise (8-19) then argmax (95): exp(logits) / (-log u)^T in
    float64, u uniform in [0, 1); the first maximum."""
    best, bv = None, -math.inf
    for v in range(len(row)):
        u = rng.uniform()
        if v == skip:
            continue
        with np.errstate(divide="ignore", over="ignore"):
            g = math.exp(float(row[v])) if float(row[v]) < 709 else math.inf
            nl = -math.log(u) if u > 0 else math.inf
            d = nl ** temperature
            g = g / d if d != 0 else math.inf
        if best is None or g > bv:
            best, bv = v, g
    return best


def softmax_prob(row, tok, skip=None):
    """F.softmax(logits)[x0] (101-103), in float64."""
    r = np.asarray(row, dtype=np.float64)
    if skip is not None:
        r = r.copy()
        r[skip] = -np.inf
    mx = r.max()
    return math.exp(r[tok] - mx) / np.exp(r - mx).sum()


def generate(forward, prompt, gen_length, block_length, steps, mask_id, eos_id,
             temperature=0.0, cfg_scale=0.0, remasking="low_confidence", seed=0,
             mask_in_argmax=True, stop_ids=(), eos_early_stop=False, prefix=None,
             stats=None, trace=None):
    """generate.py 43-120. Returns the generated ids (a list).

    L1  60-61  canvas = prompt + gen_length masks
    L2  68-69  gen_length % block_length == 0; blocks start after the prompt
    L3  71-72  steps % num_blocks == 0; steps // num_blocks per block
    L4  75-76  each block's schedule from its own masks at its start
    L5  78     candidates: every masked position of the canvas ...
    L6  89     one forward over the whole canvas per step
    L7  79-87  cfg_scale > 0: a second forward with the prompt (66: the
               positions not masked at the start) masked;
               logits = un + (cfg + 1) (cond - un)
    L8  94-95  x0 = argmax (temperature 0) or Gumbel-max
    L9  100-107 confidence: softmax(logits)[x0] or uniform (random)
    L10 109    ... before the current block's end (the rest get -inf)
    L11 111-118 commit the scheduled count of most confident candidates
    L12 118    committed tokens are written and never changed

    prefix: the approximate prefix cache (see the module docstring): a
    block's first step calls prefix.full(canvas), later steps
    prefix.suffix(canvas, block start) when no candidate lies before the
    block (else prefix.full again). stats receives steps, forwards,
    blocks. trace receives per step {block, step, canvas (before), logits of
    the candidates' rows, commit}.
    """
    P, G, L = len(prompt), int(gen_length), int(block_length)
    if G % L:
        raise RefError("gen_length %d is not a multiple of block_length %d" % (G, L))
    nb = G // L
    if steps % nb:
        raise RefError("steps %d is not a multiple of the %d blocks" % (steps, nb))
    S = steps // nb
    if remasking not in ("low_confidence", "random"):
        raise RefError("remasking %r" % remasking)
    if prefix is not None and cfg_scale > 0:
        raise RefError("the prefix cache does not combine with cfg")
    skip = None if mask_in_argmax else mask_id
    stops = {int(eos_id)} | {int(t) for t in stop_ids}
    x = np.full(P + G, mask_id, dtype=np.int64)
    x[:P] = prompt
    prompt_index = x != mask_id
    rng = Rng(seed)
    n_steps = forwards = blocks = 0
    end = P + G
    for b in range(nb):
        b0, be = P + b * L, P + (b + 1) * L
        sched = get_num_transfer_tokens((x[b0:be] == mask_id).sum(), S)
        for i in range(S):
            cand = [int(j) for j in np.nonzero(x[:be] == mask_id)[0]]
            before = cand and cand[0] < b0
            if prefix is not None and i > 0 and not before:
                part = np.asarray(prefix.suffix(x.copy(), b0), dtype=np.float32)
                lg = np.concatenate([np.zeros((b0, part.shape[1]), np.float32), part])
            elif prefix is not None:
                lg = np.asarray(prefix.full(x.copy()), dtype=np.float32)
            else:
                lg = np.asarray(forward(x.copy()), dtype=np.float32)
            forwards += 1
            if cfg_scale > 0:
                un_x = x.copy()
                un_x[prompt_index] = mask_id
                un = np.asarray(forward(un_x), dtype=np.float32)
                forwards += 1
                lg = un + np.float32(cfg_scale + 1.0) * (lg - un)
            n_steps += 1
            x0 = {}
            for j in cand:
                if temperature > 0:
                    x0[j] = gumbel_argmax(lg[j], temperature, rng, skip)
                else:
                    row = lg[j].copy()
                    if skip is not None:
                        row[skip] = -np.inf
                    x0[j] = int(np.argmax(row))
            conf = {}
            for j in cand:
                conf[j] = (softmax_prob(lg[j], x0[j], skip) if remasking == "low_confidence"
                           else rng.uniform())
            k = min(sched[i], len(cand))
            order = sorted(cand, key=lambda j: (-conf[j], j))[:k]
            if trace is not None:
                trace.append({"block": b, "step": i, "canvas": x.copy(),
                              "rows": {j: lg[j].copy() for j in cand}, "commit": sorted(order)})
            for j in order:
                x[j] = x0[j]
        blocks += 1
        out = [int(t) for t in x[P:be]]
        e = next((n for n, t in enumerate(out) if t in stops), None)
        if eos_early_stop and e is not None and b + 1 < nb and mask_id not in out[:e]:
            end = be
            break
    out = [int(t) for t in x[P:end]]
    for n, t in enumerate(out):
        if t in stops:
            out = out[: n + 1]
            break
    if stats is not None:
        stats.update(steps=n_steps, forwards=forwards, blocks=blocks)
    return out
