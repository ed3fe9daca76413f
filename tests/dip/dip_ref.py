"""DIP's planner in numpy, written from the paper (arXiv 2601.03199, section
3.1, the example ranking stage) and docs/dip.md (the insertion schedule,
whose rules the paper leaves open: each is a named departure there).

- Sim(a, b): cosine similarity of two vectors.
- A question's vector: the mean of its tokens' input embeddings (the
  model's embedding table rows, bf16 widened to f32, averaged in float64
  and rounded to f32).
- Ranking: greedy Maximal Marginal Relevance. S starts empty; each round
  picks the candidate of highest
      MMR(q_i) = lambda * Sim(q_p, q_i) - (1 - lambda) * max_{j in S} Sim(q_i, q_j)
  (the max over an empty S is 0; the lowest index wins a tie), among the
  candidates whose tokens still fit the budget (0: no budget), until `shots`
  are chosen or none fits.
- Schedule (mode dynamic): the first `first` ranked examples are in the
  prompt from the start (block 0); the rest enter `per_block` at a time
  before blocks 1, 2, ... (per_block 0: ceil(rest / (blocks - 1)) per
  block); one scheduled at or past `blocks` never enters (-1). Mode upfront:
  every example at block 0.
"""
import numpy as np


def vector(table_f32, ids):
    rows = table_f32[np.asarray(ids, dtype=np.int64)].astype(np.float64)
    return rows.mean(axis=0).astype(np.float32)


def cos(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    na, nb = np.sqrt(np.dot(a, a)), np.sqrt(np.dot(b, b))
    return float(np.dot(a, b) / (na * nb)) if na > 0 and nb > 0 else 0.0


def mmr(q, vecs, lam, shots, cost, budget):
    n = len(vecs)
    chosen, scores, used = [], [], 0
    while len(chosen) < shots:
        best, best_s = -1, 0.0
        for i in range(n):
            if i in chosen or (budget > 0 and used + cost[i] > budget):
                continue
            red = max((cos(vecs[i], vecs[j]) for j in chosen), default=0.0)
            s = lam * cos(q, vecs[i]) - (1.0 - lam) * red
            if best < 0 or s > best_s:
                best, best_s = i, s
        if best < 0:
            break
        chosen.append(best)
        scores.append(best_s)
        used += cost[best]
    return chosen, scores


def schedule(n, first, per_block, blocks, dynamic=True):
    if not dynamic:
        return [0] * n
    first = min(first, n)
    per = per_block
    if per <= 0:
        rest, later = n - first, max(blocks - 1, 1)
        per = -(-rest // later) if rest > 0 else 1
    out = []
    for i in range(n):
        b = 0 if i < first else 1 + (i - first) // per
        out.append(b if b < max(blocks, 1) else -1)
    return out
