"""Per-position hits -> per-step accuracies, expected acceptance length, confidence interval
(docs/eval.md §3).

For one sample of S positions, ``ref[p]`` is the target's top-1 after position p and
``preds[k, t]`` the drafter's step-k draft (a target id) at column t, which drafts the token after
position t+k+1. Step k is valid at column t where SpecForge counts it: ``loss_mask[t+k]`` with
the last position's mask cleared (specforge/data/preprocessing.py ``process_data``:
``loss_mask[0, -1] = 0``; the mask shifted left once per step, model.py ``padding``).

- ``trained[k]``: SpecForge's ``acc_k`` — hits over valid columns, whatever the earlier steps did
  (its training-time test feeds the data's own tokens at every step).
- ``acc[k]``: the conditional accuracy given an accepted prefix — hits over the valid columns
  whose steps 0..k-1 all hit *and* whose data tokens there are the target's top-1 (only then are
  the tokens the drafter was fed the ones a chain would have fed it).
- ``tau = 1 + sum_k prod_{j<=k} acc[j]``: the expected number of tokens one verify cycle of a
  K-step chain yields under greedy verification (the accepted drafts plus the target's own),
  for a chain started at a position drawn at random among the counted ones.
- ``walked``: the engines' own count on these sequences. An engine starts a chain only where the
  previous cycle ended, so its chain starts are not drawn at random: after a rejection the next
  chain starts on the very token the drafter just missed. The walk starts at the first counted
  column, accepts the longest correct prefix of the K drafts there (``a`` tokens), moves on by
  ``a + 1`` and so on while the start is a counted column (to the next counted column after a
  gap); its acceptance length is ``1 + accepted / cycles``, the mean acceptance length vLLM and
  SGLang report (vLLM: ``1 + num_accepted_tokens / num_drafts``).
"""

from __future__ import annotations

from dataclasses import field

from weightcheck.record import record

BOOTSTRAP = 1000
SEED = 0


@record
class Counts:
    """Per-sample counts, one row per sample: lists of K-long lists."""

    steps: int
    trained_num: list = field(default_factory=list)
    trained_den: list = field(default_factory=list)
    cond_num: list = field(default_factory=list)
    cond_den: list = field(default_factory=list)
    walk_cycles: list = field(default_factory=list)  # per sample
    walk_accepted: list = field(default_factory=list)
    walk_per_step: list = field(default_factory=list)  # per sample: cycles accepting step k
    positions: int = 0
    agree: int = 0  # positions whose next data token is the target's top-1
    agree_den: int = 0

    def add_sample(self, preds, ref, input_ids, loss_mask) -> None:
        import torch

        K, S = preds.shape
        lm = loss_mask.clone().long()
        if S:
            lm[-1] = 0
        t = torch.arange(S)
        # the data token after position p is the target's top-1 there (ref[p] == input_ids[p+1])
        nxt = torch.cat((input_ids[1:], input_ids.new_full((1,), -1)))
        agree = (ref == nxt) & (ref >= 0)
        ok = torch.ones(S, dtype=torch.bool)
        run = torch.zeros(S, dtype=torch.long)  # drafts a chain started at column t gets accepted
        tn, td, cn, cd = [], [], [], []
        for k in range(K):
            p = t + k + 1  # the position whose top-1 step k drafts (after p-1)
            inside = p < S
            target_here = torch.full((S,), -2, dtype=torch.long)
            target_here[inside] = ref[p[inside]]
            hit = preds[k] == target_here
            valid = torch.zeros(S, dtype=torch.bool)
            q = t + k
            valid[q < S] = lm[q[q < S]].bool()
            tn.append(int((hit & valid).sum()))
            td.append(int(valid.sum()))
            cd.append(int((valid & ok).sum()))
            cn.append(int((valid & ok & hit).sum()))
            fed = torch.zeros(S, dtype=torch.bool)  # the next step's input is the target's top-1
            fed[inside] = agree[p[inside]]
            run += ok & hit
            ok = ok & hit & fed
        self.trained_num.append(tn)
        self.trained_den.append(td)
        self.cond_num.append(cn)
        self.cond_den.append(cd)
        cycles, accepted, per_step = walk(run.tolist(), lm.bool().tolist(), K)
        self.walk_cycles.append(cycles)
        self.walk_accepted.append(accepted)
        self.walk_per_step.append(per_step)
        self.positions += S
        self.agree += int((agree & lm.bool()).sum())
        self.agree_den += int(lm.sum())


def walk(run, counted, steps: int) -> tuple[int, int, list[int]]:
    """(cycles, accepted drafts, cycles accepting step k) of one sample walked as an engine
    drafts it: ``run[t]`` is how many drafts a chain started at column t gets accepted (its
    longest correct prefix), ``counted[t]`` whether column t counts. The first chain starts at the
    first counted column, each next one ``run + 1`` columns on (the accepted drafts and the
    target's own token), while the start is a counted column; past an uncounted one, at the next
    counted column."""
    import bisect

    starts = [t for t, c in enumerate(counted) if c]
    cycles = accepted = 0
    per_step = [0] * steps
    p = starts[0] if starts else len(counted)
    while p < len(counted):
        if not counted[p]:
            i = bisect.bisect_right(starts, p)
            if i == len(starts):
                break
            p = starts[i]
        a = run[p]
        cycles += 1
        accepted += a
        for k in range(a):
            per_step[k] += 1
        p += a + 1
    return cycles, accepted, per_step


def _ratios(num, den):
    return [n / d if d else None for n, d in zip(num, den)]


def tau_of(acc) -> float | None:
    total, run = 1.0, 1.0
    for a in acc:
        if run == 0:  # no prefix got this far: the later steps add nothing
            break
        if a is None:  # nothing to count at all
            return None
        run *= a
        total += run
    return total


def _walked(c: Counts) -> dict:
    K = c.steps
    cycles, accepted = sum(c.walk_cycles), sum(c.walk_accepted)
    return {
        "tau": 1 + accepted / cycles if cycles else None,
        "cycles": cycles,
        "accepted": accepted,
        "accepted_per_step": [sum(r[k] for r in c.walk_per_step) for k in range(K)],
        "tau_interval": None,
    }


def summarize(c: Counts, bootstrap: int = BOOTSTRAP, seed: int = SEED, level: float = 0.95) -> dict:
    K = c.steps
    n = len(c.cond_num)
    tn = [sum(r[k] for r in c.trained_num) for k in range(K)]
    td = [sum(r[k] for r in c.trained_den) for k in range(K)]
    cn = [sum(r[k] for r in c.cond_num) for k in range(K)]
    cd = [sum(r[k] for r in c.cond_den) for k in range(K)]
    acc = _ratios(cn, cd)
    out = {
        "samples": n,
        "positions": c.positions,
        "steps": [
            {
                "step": k,
                "acc": acc[k],
                "hits": cn[k],
                "given": cd[k],
                "trained_acc": _ratios(tn, td)[k],
                "trained_hits": tn[k],
                "trained_valid": td[k],
            }
            for k in range(K)
        ],
        "tau": tau_of(acc),
        "walked": _walked(c),
        "data_agreement": c.agree / c.agree_den if c.agree_den else None,
        "interval": None,
    }
    if n >= 2 and bootstrap > 0:
        _bootstrap(c, out, bootstrap, seed, level)
    return out


def _bootstrap(c: Counts, out: dict, bootstrap: int, seed: int, level: float) -> None:
    """Percentile intervals over samples resampled with replacement: each step's acc, tau and the
    walked acceptance length (the same resamples for all)."""
    import torch

    K, n = c.steps, len(c.cond_num)
    num = torch.tensor(c.cond_num, dtype=torch.float64)
    den = torch.tensor(c.cond_den, dtype=torch.float64)
    w_cyc = torch.tensor(c.walk_cycles, dtype=torch.float64)
    w_acc = torch.tensor(c.walk_accepted, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    accs, taus, walked = [], [], []
    per = max(1, 4_000_000 // max(1, n * K))
    for a in range(0, bootstrap, per):
        b = min(bootstrap, a + per)
        idx = torch.randint(n, (b - a, n), generator=g)
        s_num, s_den = num[idx].sum(1), den[idx].sum(1)  # [B, K]
        r = torch.where(s_den > 0, s_num / s_den.clamp_min(1), torch.zeros_like(s_num))
        accs.append(r)
        run = torch.cumprod(r, dim=1)
        taus.append(1 + run.sum(1))
        s_cyc = w_cyc[idx].sum(1)
        walked.append(1 + w_acc[idx].sum(1) / s_cyc.clamp_min(1))
    accs_t, taus_t = torch.cat(accs), torch.cat(taus)
    lo, hi = (1 - level) / 2, 1 - (1 - level) / 2
    qs = torch.tensor([lo, hi], dtype=torch.float64)
    for k in range(K):
        ql = torch.quantile(accs_t[:, k], qs).tolist()
        out["steps"][k]["acc_interval"] = ql
    out["interval"] = {
        "level": level,
        "method": f"percentile bootstrap over samples, {bootstrap} resamples, seed {seed}",
        "tau": torch.quantile(taus_t, qs).tolist(),
    }
    if out["walked"]["cycles"]:
        out["walked"]["tau_interval"] = torch.quantile(torch.cat(walked), qs).tolist()


def break_even(baseline_tps: float, cycle_ms: float, draft_ms: float = 0.0) -> float:
    """The acceptance length at which speculation matches ``baseline_tps``: one cycle (verify
    plus drafting) of ``cycle_ms + draft_ms`` yields tau tokens, so tau / cycle = baseline."""
    return baseline_tps * (cycle_ms + draft_ms) / 1000.0


def predicted_tps(tau: float, cycle_ms: float, draft_ms: float = 0.0) -> float:
    return tau * 1000.0 / (cycle_ms + draft_ms)
