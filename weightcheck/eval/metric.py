"""Per-position hits -> per-step accuracies, expected acceptance length, confidence intervals
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

Intervals (95%): a step's ``acc`` the Wilson score interval over positions, from
:data:`MIN_POSITIONS` on; the two acceptance lengths a percentile bootstrap over sequences, from
:data:`MIN_SEQUENCES` on; fewer, and the report says too few instead of a number.

The counts are taken over a packed batch on its device (:func:`batch_counts`), the walk on the host.
"""

from __future__ import annotations

from dataclasses import field

from weightcheck.record import record

BOOTSTRAP = 1000
SEED = 0
LEVEL = 0.95
Z95 = 1.959963984540054  # the normal quantile of 0.975
MIN_POSITIONS = 10  # a step's rate gets an interval from this many positions on
MIN_SEQUENCES = 20  # the acceptance lengths get a bootstrap interval from this many sequences on


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
    lengths: list = field(default_factory=list)  # per sample: its positions
    agree: list = field(default_factory=list)  # per sample: counted positions whose next data
    agree_den: list = field(default_factory=list)  # token is the target's top-1; counted ones

    @property
    def positions(self) -> int:
        return sum(self.lengths)

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` samples (the ones every drafter has when a run is stopped)."""
        for f in (
            "trained_num", "trained_den", "cond_num", "cond_den", "walk_cycles",
            "walk_accepted", "walk_per_step", "lengths", "agree", "agree_den",
        ):  # fmt: skip
            del getattr(self, f)[n:]

    def add_sample(self, preds, ref, input_ids, loss_mask) -> None:
        """One sample: ``preds`` [K, S], ``ref``, ``input_ids``, ``loss_mask`` [S]."""
        from weightcheck.eval.packed import Layout

        layout = Layout.one(int(preds.shape[1]), preds.device)
        self.absorb(batch_counts(preds, ref, input_ids, loss_mask, layout), layout.lengths)

    def absorb(self, b: dict, lengths) -> None:
        """A batch's counts (:func:`batch_counts`, on the host) of sequences ``lengths``."""
        tn, td, cn, cd, ag, agd = (b[k].tolist() for k in ("tn", "td", "cn", "cd", "ag", "agd"))
        run, counted = b["run"].tolist(), b["counted"].tolist()
        at = 0
        for i, n in enumerate(lengths):
            self.lengths.append(n)
            self.agree.append(ag[i])
            self.agree_den.append(agd[i])
            self.trained_num.append(tn[i])
            self.trained_den.append(td[i])
            self.cond_num.append(cn[i])
            self.cond_den.append(cd[i])
            cycles, accepted, per_step = walk(run[at : at + n], counted[at : at + n], self.steps)
            self.walk_cycles.append(cycles)
            self.walk_accepted.append(accepted)
            self.walk_per_step.append(per_step)
            at += n


def batch_counts(preds, ref, input_ids, loss_mask, layout) -> dict:
    """Per-sequence counts of a packed batch (packed.py ``Layout``), on the batch's device:
    ``tn``/``td`` (trained hits, counted columns), ``cn``/``cd`` (hits and columns given an
    accepted prefix) [B, K]; ``run`` [L] the drafts a chain started at each column gets accepted,
    ``counted`` [L] whether the column counts; ``ag``/``agd`` [B] the counted positions whose
    next data token is the target's top-1, and the counted positions."""
    import torch

    K, L = preds.shape
    dev = preds.device
    B = len(layout.lengths)
    t, n = layout.pos, layout.seg_len
    lm = loss_mask.to(dev).long() * (t != n - 1)  # each sequence's last position cleared
    row = torch.arange(L, device=dev)
    last = max(0, L - 1)
    # the data token after position p is the target's top-1 there (ref[p] == input_ids[p+1])
    nxt = torch.where(t + 1 < n, input_ids[(row + 1).clamp(max=last)], -1)
    agree = (ref == nxt) & (ref >= 0)
    ok = torch.ones(L, dtype=torch.bool, device=dev)
    run = torch.zeros(L, dtype=torch.long, device=dev)
    cols = torch.zeros((4, K, B), dtype=torch.long, device=dev)  # tn, td, cn, cd
    for k in range(K):
        inside = t + k + 1 < n  # the position whose top-1 step k drafts (after t+k) is in it
        p = (row + k + 1).clamp(max=last)
        hit = (preds[k] == torch.where(inside, ref[p], -2)) & inside
        valid = (t + k < n) & lm[(row + k).clamp(max=last)].bool()
        for j, v in enumerate((hit & valid, valid, valid & ok & hit, valid & ok)):
            cols[j, k].index_add_(0, layout.seg, v.long())
        fed = inside & agree[p]  # the next step's input is the target's top-1
        run += ok & hit
        ok = ok & hit & fed
    tn, td, cn, cd = (c.T for c in cols)
    lmb = lm.bool()
    ag = torch.zeros((2, B), dtype=torch.long, device=dev)
    ag[0].index_add_(0, layout.seg, (agree & lmb).long())
    ag[1].index_add_(0, layout.seg, lm)
    return {
        "tn": tn,
        "td": td,
        "cn": cn,
        "cd": cd,
        "run": run,
        "counted": lmb,
        "ag": ag[0],
        "agd": ag[1],
    }


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


def wilson(hits: int, n: int, z: float = Z95) -> list[float] | None:
    """The Wilson score interval of a rate ``hits / n`` (95% for the default z); None when
    ``n`` is under :data:`MIN_POSITIONS`: too few positions for a number."""
    if n < MIN_POSITIONS:
        return None
    p = hits / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * (p * (1 - p) / n + z2 / (4 * n * n)) ** 0.5
    return [max(0.0, centre - half), min(1.0, centre + half)]


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


def summarize(c: Counts, bootstrap: int = BOOTSTRAP, seed: int = SEED) -> dict:
    """The result of one drafter: per step its rates (a Wilson interval for the conditional
    one from :data:`MIN_POSITIONS` positions on), the expected and the walked acceptance length
    (a percentile bootstrap over sequences from :data:`MIN_SEQUENCES` sequences on)."""
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
                "acc_interval": wilson(cn[k], cd[k]),
                "trained_acc": _ratios(tn, td)[k],
                "trained_hits": tn[k],
                "trained_valid": td[k],
            }
            for k in range(K)
        ],
        "tau": tau_of(acc),
        "walked": _walked(c),
        "data_agreement": sum(c.agree) / sum(c.agree_den) if sum(c.agree_den) else None,
        "interval": {
            "level": LEVEL,
            "rate_method": "Wilson score interval over positions",
            "min_positions": MIN_POSITIONS,
            "length_method": (
                f"percentile bootstrap over sequences, {bootstrap} resamples, seed {seed}"
            ),
            "min_sequences": MIN_SEQUENCES,
            "tau": None,
        },
    }
    if n >= MIN_SEQUENCES and bootstrap > 0:
        _bootstrap(c, out, bootstrap, seed, LEVEL)
    return out


def _bootstrap(c: Counts, out: dict, bootstrap: int, seed: int, level: float) -> None:
    """Percentile intervals over samples resampled with replacement: the expected and the walked
    acceptance length (the same resamples for both)."""
    import torch

    K, n = c.steps, len(c.cond_num)
    num = torch.tensor(c.cond_num, dtype=torch.float64)
    den = torch.tensor(c.cond_den, dtype=torch.float64)
    w_cyc = torch.tensor(c.walk_cycles, dtype=torch.float64)
    w_acc = torch.tensor(c.walk_accepted, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    taus, walked = [], []
    per = max(1, 4_000_000 // max(1, n * K))
    for a in range(0, bootstrap, per):
        b = min(bootstrap, a + per)
        idx = torch.randint(n, (b - a, n), generator=g)
        s_num, s_den = num[idx].sum(1), den[idx].sum(1)  # [B, K]
        r = torch.where(s_den > 0, s_num / s_den.clamp_min(1), torch.zeros_like(s_num))
        taus.append(1 + torch.cumprod(r, dim=1).sum(1))
        s_cyc = w_cyc[idx].sum(1)
        walked.append(1 + w_acc[idx].sum(1) / s_cyc.clamp_min(1))
    lo, hi = (1 - level) / 2, 1 - (1 - level) / 2
    qs = torch.tensor([lo, hi], dtype=torch.float64)
    if out["tau"] is not None:  # a step nothing reached: no expected length, no interval
        out["interval"]["tau"] = torch.quantile(torch.cat(taus), qs).tolist()
    if out["walked"]["cycles"]:
        out["walked"]["tau_interval"] = torch.quantile(torch.cat(walked), qs).tolist()


def break_even(baseline_tps: float, cycle_ms: float, draft_ms: float = 0.0) -> float:
    """The acceptance length at which speculation matches ``baseline_tps``: one cycle (verify
    plus drafting) of ``cycle_ms + draft_ms`` yields tau tokens, so tau / cycle = baseline."""
    return baseline_tps * (cycle_ms + draft_ms) / 1000.0


def predicted_tps(tau: float, cycle_ms: float, draft_ms: float = 0.0) -> float:
    return tau * 1000.0 / (cycle_ms + draft_ms)
