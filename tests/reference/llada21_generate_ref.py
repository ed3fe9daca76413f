#!/usr/bin/python3
"""numpy reference of LLaDA2.1's generate(), written from the official code.

Source: the generate() of the modeling file LLaDA2.1 checkpoints ship
(modeling_llada2_moe.py); the copy read line by line is
dllm/pipelines/llada21/models/modeling_llada21_moe.py of ZHZisZZ/dllm at
commit ca176752 (April 2026; dllm/pipelines/llada21/sampler.py is the same
loop for a batch of one). Line numbers below are that file's. The forward
pass is llada2_ref.Model's (LLaDA2.1 has LLaDA2.0's architecture and config
keys): any runner with prefill(canvas, n), block_logits(canvas, b) ->
logits of block b's L rows, and finish_block(canvas, b) plugs in, so the
tests replay tide's dumped logits through this loop.

The rules (docs/decoding.md names them E1..E14):
  E1  1313: steps = min(steps, gen_length // minimal_topk) is computed and
      never used: a block has no schedule and no step limit.
  E2  1317-1318, 1333-1334: ceil((P + G) / L) blocks of masks, the prompt
      written at the front.
  E3  1339, 1341: blocks the prompt covers are not decoded.
  E4  1352-1358: a step that starts with no mask in the block counts a post
      step; more than max_post_steps of them end the block (before the
      forward).
  E5  1368-1375: one forward of the window [0, (b+1)L) per step; the block's
      L rows are used.
  E6  1208-1227: at temperature 0 the argmax of the raw logits and its
      softmax probability (top_k, top_p are not applied); else logits / T
      (T != 1), top-k, top-p, softmax, multinomial, and the drawn token's
      probability.
  E7  1379-1396: masked positions above threshold are committed when there
      are at least num_to_transfer of them, else the min(num_to_transfer,
      #masks) most confident (torch.topk; ties: the lower position here).
  E8  1398-1408: a position that is neither masked (at the step's start) nor
      the prompt's is edited when its prediction has probability >
      editing_threshold and differs from its token (the prediction may be
      the mask token: the position is masked again).
  E9  1359-1366: the prompt's positions in the block are never edited.
  E10 1416-1417: a step that started with no mask and edited nothing ends
      the block.
  E11 1409-1414: both transfers are written at once; nothing outside the
      current block ever changes.
  E12 (from E11): finished blocks are final, so their K/V can be cached: the
      cached runner prefills P // L blocks and runs one K/V pass after each
      block that another follows (tide's departure; the official loop
      recomputes the window every step).
  E13 1419-1425: eos_early_stop: after a block, generation ends when the
      generated part [P, (b+1)L) holds no mask and an EOS. Without it every
      block is decoded (there is no stop after a block holding EOS).
  E14 1427-1438: the output is canvas[P:P+G] cut after its first EOS (kept).

TIDE's departures, implemented here identically so that tide's runs are
checked decision for decision: draws use llada2_ref.Rng, one per decided
position in position order (the masks and the editable positions), where
torch draws for all L; mask_in_argmax False leaves the mask token out of E6;
stop_ids end generation as EOS does (E13, E14). The official code never
bounds a block's steps; tide (departure 3) ends a block
  - at temperature 0, at a step whose state (the block's canvas and its
    post-step count, E4) an earlier step of the block had: a step is then a
    function of that state, so the official loop would repeat the steps in
    between forever;
  - at max_block_steps steps, a safety bound (default 100000) far above
    any block seen to end.
end_on_repeat=False leaves the repeat check out (the bound stays).
official=True runs the official loop alone (no repeat check, no bound), up
to official_limit steps per block, after which the block is recorded as
unended in stats and generation stops.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llada2_ref as R  # noqa: E402


def generate(ids, prompt, gen_length, block_length=32, threshold=0.95, editing_threshold=0.9,
             max_post_steps=16, num_to_transfer=1, temperature=0.0, top_k=0, top_p=1.0, seed=0,
             eos_early_stop=False, mask_in_argmax=True, stop_ids=(), recompute=False,
             runner=None, model=None, max_block_steps=0, stats=None, trace=None,
             official=False, official_limit=100000, end_on_repeat=True):
    """LLaDA2.1's generate(); returns the output ids (a list).

    ids: an object with mask_id and eos_id. runner: see the module
    docstring (default: llada2_ref's cached or recompute runner on model).
    stats receives steps (the official forward count), blocks, forwards
    (this runner's: steps + prefill + K/V passes, or steps with recompute),
    edits, steps_per_block (a list), masks_chosen, repeats (a list of
    (block, step, earlier step) where a repeated state ended a block),
    capped (blocks ended by max_block_steps), unended (official: the block
    that passed official_limit, or None). trace receives one dict per step:
    block, step, n_mask (at its start), committed, edited, state (the
    block's canvas as bytes and its post count, at the step's start)."""
    L = block_length
    if L < 1 or gen_length < 1 or num_to_transfer < 1:
        raise R.RefError("block_length, gen_length and num_to_transfer must be >= 1")
    prompt = [int(t) for t in prompt]
    P, G = len(prompt), gen_length
    mask_id, eos_id = ids.mask_id, ids.eos_id
    stops = {eos_id} | {int(t) for t in stop_ids}
    nb = -(-(P + G) // L)                                   # 1317
    canvas = np.full(nb * L, mask_id, dtype=np.int64)       # 1333
    canvas[:P] = prompt                                     # 1334
    if runner is None:
        runner = R.RecomputeRunner(model, L) if recompute else R.CachedRunner(model, L)
    cap = max_block_steps if max_block_steps > 0 else 100000
    if official:
        cap = official_limit
    skip = None if mask_in_argmax else mask_id
    # 1214-1218: temperature 0 samples nothing and filters nothing.
    greedy = not temperature > 0
    sampler = R.Sampler(temperature, 0 if greedy else top_k, 1.0 if greedy else top_p, skip,
                        seed)
    first = P // L                                          # 1339
    forwards = first if not recompute else 0
    runner.prefill(canvas, first * L)
    n_steps = blocks = edits = masks_chosen = 0
    per_block = []
    repeats, capped, unended = [], [], None
    for b in range(first, nb):                              # 1341
        lo, end = b * L, (b + 1) * L
        n_prompt = min(P - lo, L) if lo < P else 0          # 1362-1366
        post = 0                                            # 1351
        s = 0
        seen = {}                                           # TIDE: states at step starts
        while True:                                         # 1352
            old = canvas[lo:end].copy()                     # 1353
            active = old == mask_id                         # 1354
            if not active.any():                            # 1355
                post += 1
            if post > max_post_steps:                       # 1357
                break
            if not official and greedy and end_on_repeat:   # TIDE: a repeated state
                key = (old.tobytes(), post)
                if key in seen:
                    repeats.append((b, s, seen[key]))
                    break
                seen[key] = s
            if s >= cap:                                    # TIDE's bound
                if official:
                    unended = b
                else:
                    capped.append(b)
                break
            logits = runner.block_logits(canvas, b)         # 1368-1375
            n_steps += 1
            forwards += 1
            # 1376-1378, on the positions a step decides on, in order.
            x0 = old.copy()
            conf = np.full(L, -np.inf)
            for i in range(L):
                if active[i] or i >= n_prompt:
                    x0[i], conf[i] = sampler(logits[i])
            # 1379-1396
            transfer = np.zeros(L, dtype=bool)
            if active.sum() > 0:
                mconf = np.where(active, conf, -np.inf)
                high = (mconf > threshold) & active
                if high.sum() >= num_to_transfer:
                    transfer = high
                else:
                    k = min(num_to_transfer, int(active.sum()))
                    order = sorted(range(L), key=lambda i: (-mconf[i], i))
                    transfer[order[:k]] = True
            # 1398-1408
            editable = ~active & (np.arange(L) >= n_prompt)
            econf = np.where(editable, conf, -np.inf)
            edit = (econf > editing_threshold) & editable & (x0 != old)
            final = transfer | edit                         # 1409
            canvas[lo:end][final] = x0[final]               # 1411-1414
            masks_chosen += int((x0[transfer] == mask_id).sum())
            edits += int(edit.sum())
            if trace is not None:
                trace.append({"block": b, "step": s, "n_mask": int(active.sum()),
                              "committed": int(transfer.sum()), "edited": int(edit.sum()),
                              "state": (old.tobytes(), post)})
            s += 1
            if active.sum() == 0 and not edit.any():        # 1416
                break
        per_block.append(s)
        blocks += 1
        if unended is not None:
            break
        stop = False
        if eos_early_stop:                                  # 1420-1425
            gen = canvas[P:end]
            stop = not (gen == mask_id).any() and any(int(t) in stops for t in gen)
        if not stop and b + 1 < nb:
            runner.finish_block(canvas, b)
            forwards += 0 if recompute else 1
        if stop:
            break
    out = [int(t) for t in canvas[P:P + G]]                 # 1427-1438
    for i, t in enumerate(out):
        if t in stops:
            out = out[: i + 1]
            break
    if stats is not None:
        stats.update(steps=n_steps, blocks=blocks, forwards=forwards, edits=edits,
                     steps_per_block=per_block, masks_chosen=masks_chosen, repeats=repeats,
                     capped=capped, unended=unended)
    return out
