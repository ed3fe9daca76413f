#!/usr/bin/python3
"""llada21_generate_ref.generate() on scripted logits, against outcomes
worked out by hand from the official LLaDA2.1 generate() (the rule names
are those of llada21_generate_ref.py and docs/decoding.md).

Vocabulary of 8 ids: 0 = EOS, 7 = mask. A scripted runner returns, for each
step, logits where a chosen id at a position has a chosen probability; the
rest of the mass is spread evenly.

Exit 0 pass, 1 fail, 77 skipped (no numpy)."""
import math
import os
import sys

try:
    import numpy as np
except ImportError:
    print("skipped: numpy is not importable by", sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llada21_generate_ref as R21  # noqa: E402

V, EOS, MASK = 8, 0, 7
FAILS = []


def check(cond, what):
    print("  %s %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        FAILS.append(what)


class Ids:
    mask_id, eos_id = MASK, EOS


def row(tok, p):
    """Logits of one position: id tok with probability p, the others equal."""
    q = (1.0 - p) / (V - 1)
    out = np.full(V, math.log(q), dtype=np.float64)
    out[tok] = math.log(p)
    return out.astype(np.float32)


class Script:
    """block_logits returns script(canvas, block, k) for the k-th call."""

    def __init__(self, L, fn):
        self.L, self.fn, self.calls, self.kv = L, fn, 0, 0

    def prefill(self, canvas, n):
        pass

    def block_logits(self, canvas, b):
        self.calls += 1
        lo = b * self.L
        return np.stack([self.fn(canvas, b, self.calls - 1, i, canvas[lo + i])
                         for i in range(self.L)])

    def finish_block(self, canvas, b):
        self.kv += 1


def gen(fn, prompt, G, L=4, **kw):
    st = {}
    sc = Script(L, fn)
    out = R21.generate(Ids(), prompt, G, L, runner=sc, stats=st, **kw)
    return out, st, sc


def main():
    print("E7 mask commits")
    # Every mask predicts token 3 at 0.6: below 0.95, so one per step (the
    # most confident; all equal: the lowest position first).
    out, st, _ = gen(lambda c, b, k, i, t: row(3, 0.6), [1, 2], 2, L=4, threshold=0.95,
                     editing_threshold=0.9, max_post_steps=0)
    check(out == [3, 3] and st["steps_per_block"] == [2],
          "below threshold: num_to_transfer = 1 per step (%s)" % st["steps_per_block"])
    # Above threshold: every mask at once.
    out, st, _ = gen(lambda c, b, k, i, t: row(3, 0.99), [1, 2], 2, L=4, max_post_steps=0)
    check(st["steps_per_block"] == [1], "above threshold: all masks in one step")
    # num_to_transfer 3, only 2 above threshold: the 3 most confident.
    conf = [0.99, 0.5, 0.97, 0.6]
    out, st, sc = gen(lambda c, b, k, i, t: row(3, conf[i]), [], 4, L=4, threshold=0.95,
                      num_to_transfer=3, max_post_steps=0)
    check(st["steps_per_block"] == [2], "num_to_transfer 3 with 2 above threshold: 3, then 1")

    print("E8, E9 edits")
    # Step 0 commits 3 at every position (0.99); step 1 predicts 5 at
    # position 2 with 0.95 (> 0.9): edited; the prompt's position 0 predicts
    # 6 with 0.99 but is never edited.
    def fn(c, b, k, i, t):
        if k == 0:
            return row(3, 0.99)
        if i == 2:
            return row(5, 0.95)
        if i == 0:
            return row(6, 0.99)
        return row(int(t), 0.99)
    out, st, _ = gen(fn, [1], 3, L=4, max_post_steps=4)
    check(out == [3, 5, 3], "a changed prediction above editing_threshold is written (%s)" % out)
    check(st["edits"] == 1, "the prompt's position is never edited (%d edit)" % st["edits"])
    # E4/E10: step 0 fills, step 1 (post 1) edits, step 2 (post 2) edits
    # nothing: the block ends; 3 steps.
    check(st["steps_per_block"] == [3], "E10: a post step that edits nothing ends the block "
          "(%s)" % st["steps_per_block"])
    # The same at 0.9 exactly: not above editing_threshold.
    def fn2(c, b, k, i, t):
        if k == 0:
            return row(3, 0.99)
        return row(5 if i == 2 else int(t), 0.9)
    out, st, _ = gen(fn2, [1], 3, L=4, max_post_steps=4)
    check(out == [3, 3, 3] and st["edits"] == 0, "probability 0.9 is not > 0.9: no edit")
    # The same prediction: no edit whatever its probability.
    out, st, _ = gen(lambda c, b, k, i, t: row(3, 0.99), [1], 3, L=4, max_post_steps=4)
    check(st["edits"] == 0 and st["steps_per_block"] == [2], "an unchanged prediction is not "
          "an edit (steps %s)" % st["steps_per_block"])

    print("E4 max_post_steps")
    # Position 1 flips between 4 and 5 forever once filled.
    def flip(c, b, k, i, t):
        if k == 0:
            return row(3, 0.99)
        return row((4 if k % 2 else 5) if i == 1 else int(t), 0.99)
    for mps in (0, 1, 3):
        out, st, _ = gen(flip, [], 4, L=4, max_post_steps=mps)
        check(st["steps_per_block"] == [1 + mps], "max_post_steps %d: %d steps" % (
            mps, 1 + mps))
    # Edits while masks remain do not count as post steps.
    def slow(c, b, k, i, t):
        if t == MASK:
            return row(3, 0.5)
        return row(4 if i == 0 and k == 1 else int(t), 0.99)
    out, st, _ = gen(slow, [], 4, L=4, max_post_steps=0)
    check(st["steps_per_block"] == [4] and st["edits"] == 1,
          "an edit while masks remain: 4 fill steps, 0 post steps (%s, %d edits)"
          % (st["steps_per_block"], st["edits"]))

    print("E8 an edit to the mask token remasks the position")
    def remask(c, b, k, i, t):
        if k == 0:
            return row(3, 0.99)
        if k == 1 and i == 3:
            return row(MASK, 0.99)
        return row(int(t) if t != MASK else 6, 0.99)
    out, st, _ = gen(remask, [], 4, L=4, max_post_steps=2)
    check(out == [3, 3, 3, 6] and st["masks_chosen"] == 0,
          "remasked at step 1, filled again at step 2 (%s)" % out)

    print("E13 eos_early_stop, E14 output")
    # Block 0 = [1, 2, EOS, 3]: EOS generated; blocks after it still decoded
    # without eos_early_stop (there is no block stop in the 2.1 loop).
    def eos(c, b, k, i, t):
        if b == 0:
            return row([1, 2, EOS, 3][i], 0.99)
        return row(4, 0.99)
    out, st, sc = gen(eos, [], 8, L=4, max_post_steps=0)
    check(out == [1, 2, EOS] and st["blocks"] == 2,
          "without eos_early_stop: every block decoded (%d), output cut after EOS" %
          st["blocks"])
    out, st, sc = gen(eos, [], 8, L=4, max_post_steps=0, eos_early_stop=True)
    check(out == [1, 2, EOS] and st["blocks"] == 1 and sc.kv == 0,
          "eos_early_stop: stop after the block, no K/V pass")
    # A mask left before the EOS: no early stop. The official loop never
    # ends that block (the mask keeps winning): step 2 starts from step 1's
    # state.
    def held(c, b, k, i, t):
        if b == 0:
            return row(MASK, 0.99) if i == 0 else row([1, 2, EOS, 3][i], 0.99)
        return row(4, 0.99)
    out, st, _ = gen(held, [], 8, L=4, max_post_steps=0, eos_early_stop=True)
    check(st["blocks"] == 2 and st["steps_per_block"][0] == 2 and st["repeats"] == [(0, 2, 1)],
          "a mask before EOS: no early stop; the repeated state ends the block at step 2 (%s)"
          % st["repeats"])
    _, st, _ = gen(held, [], 8, L=4, max_post_steps=0, eos_early_stop=True, official=True,
                   official_limit=200)
    check(st["unended"] == 0 and st["steps_per_block"] == [200],
          "the official loop on it: block 0 has not ended after 200 steps")

    print("departure 3: repeated states and the safety bound")
    # A cycle of two states: position 1 toggles 1 <-> 2 by edits while
    # position 0 stays masked. States: step 0 all masks, 1 [M 1 3 3],
    # 2 [M 2 3 3], 3 [M 1 3 3] = step 1's.
    def toggle(c, b, k, i, t):
        if i == 0:
            return row(MASK, 0.99)
        if i == 1:
            return row({MASK: 1, 1: 2, 2: 1}[int(t)], 0.99)
        return row(3, 0.99)
    _, st, _ = gen(toggle, [], 4, L=4, max_post_steps=0)
    check(st["steps_per_block"] == [3] and st["repeats"] == [(0, 3, 1)],
          "a two-state cycle ends at step 3, the state of step 1 (%s, %s)"
          % (st["steps_per_block"], st["repeats"]))

    # A block that ends, after more steps than 2 L + max_post_steps (the old
    # bound, 8 here) and never repeats a state: positions 1..3 count in
    # base 6 (ids 1..6) by edits while position 0 stays masked until step 100.
    def digits(n):
        return [1 + (n // 36) % 6, 1 + (n // 6) % 6, 1 + n % 6]
    def count(c, b, k, i, t):
        if i == 0:
            return row(5 if k >= 100 else MASK, 0.99)
        return row(digits(k + 1)[i - 1], 0.99)
    out, st, _ = gen(count, [], 4, L=4, max_post_steps=0)
    check(st["steps_per_block"] == [101] and not st["repeats"] and not st["capped"] and
          out[0] == 5, "no repeat: the block follows the official loop to its end at 101 "
          "steps (%s)" % st["steps_per_block"])
    out2, st2, _ = gen(count, [], 4, L=4, max_post_steps=0, official=True)
    check(out2 == out and st2["steps_per_block"] == [101] and st2["unended"] is None,
          "the official loop: the same ids and steps")
    _, st, _ = gen(count, [], 4, L=4, max_post_steps=0, max_block_steps=30)
    check(st["steps_per_block"] == [30] and st["capped"] == [0],
          "max_block_steps = 30 ends it at 30 steps")
    # At temperature > 0 a repeated state proves nothing: only the bound.
    _, st, _ = gen(held, [], 8, L=4, max_post_steps=0, temperature=1.0, top_k=1,
                   max_block_steps=5)
    check(st["steps_per_block"][0] == 5 and st["capped"] == [0] and not st["repeats"],
          "temperature 1: no repeat check, the bound ends the block at 5 steps")

    print("E6 sampling")
    # At temperature 0 top_k / top_p are not applied: the probability is
    # that of the unfiltered softmax (0.6 < 0.95 with top_k 1 would be 1.0).
    out, st, _ = gen(lambda c, b, k, i, t: row(3, 0.6), [], 4, L=4, top_k=1, top_p=0.1,
                     max_post_steps=0)
    check(st["steps_per_block"] == [4], "temperature 0 ignores top_k and top_p (4 steps, one "
          "per step)")
    # At temperature 1 with top_k 1 only token 3 remains: probability 1.
    out, st, _ = gen(lambda c, b, k, i, t: row(3, 0.6), [], 4, L=4, top_k=1, temperature=1.0,
                     max_post_steps=0, seed=1)
    check(out == [3, 3, 3, 3] and st["steps_per_block"] == [1], "temperature 1, top_k 1: every "
          "position at probability 1, one step")

    print("E3 forwards")
    out, st, sc = gen(lambda c, b, k, i, t: row(3, 0.99), [1, 2, 3, 4, 5], 6, L=4,
                      max_post_steps=0)
    check(st["blocks"] == 2 and st["forwards"] == st["steps"] + 1 + 1,
          "prompt of 5 with L 4: 1 prefill block, decoding from block 1, one K/V pass "
          "(%d forwards for %d steps)" % (st["forwards"], st["steps"]))

    print("%d failed" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
