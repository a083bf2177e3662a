"""What the wiring probe found and how it judges it: each candidate wiring's training loss and teacher-forced
accuracy, whether the samples separate two candidates (a paired training-loss difference in standard errors,
block by block), the report with its best, its ties and how to separate them, and the verdict in words."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

from backend.diagnostics.probe_settings import (
    Candidate,
    DeclaredCandidate,
    ProbeConfig,
    ProbeResult,
    Separation,
)

CONFIRM_MARGIN = 0.01  # the least acc_0 gap that counts where no loss was measured (see confirm_margin)


T_SEPARATE = 3.0  # a paired training-loss difference this many standard errors above 0 separates


BLOCK = 16  # counted positions per block of the paired standard error (neighbours are correlated)


def confirm_margin(best: Candidate) -> float:
    """Where no training loss was measured (no sample long enough to count a position): how far below
    the best candidate's acc_0 the declared wiring may score and still be the trained one, two
    binomial standard errors of acc_0 over the positions counted (sqrt(p(1-p)/n)), at least
    CONFIRM_MARGIN. In a deep target neighbouring layers carry nearly the same residual stream (the
    demo's HF 5 and 6: cosine ~0.9), so a ±1 neighbour of the trained wiring can score a point higher
    on a few samples by chance; a gap inside this margin is no evidence of a mis-wiring."""
    n, p = best.n_positions, best.acc_step0
    if n <= 0:
        return CONFIRM_MARGIN
    return max(CONFIRM_MARGIN, 2 * math.sqrt(p * (1 - p) / n))


def loss_t(best: Candidate, other: Candidate) -> tuple[float, int, int] | None:
    """How many standard errors `other`'s training loss lies above `best`'s, paired position by
    position over the same samples, with the positions counted and the blocks of BLOCK the standard
    error came from (block-clustered: sum the deviations of each block, the variance of the mean is
    G/(G-1) * sum of their squares / n^2); None where either has no per-position losses or fewer
    than two blocks."""
    a, b = best.position_loss, other.position_loss
    if not a or len(a) != len(b):
        return None
    differences = [y - x for x, y in zip(a, b, strict=True)]
    n = sum(len(d) for d in differences)
    if n == 0:
        return None
    mean = sum(float(d.sum()) for d in differences) / n
    blocks = [float((d[i : i + BLOCK] - mean).sum()) for d in differences for i in range(0, len(d), BLOCK)]
    if len(blocks) < 2:
        return None
    variance = len(blocks) / (len(blocks) - 1) * sum(s * s for s in blocks) / n**2
    if variance == 0:
        return (math.inf if mean > 0 else 0.0), n, len(blocks)
    return mean / math.sqrt(variance), n, len(blocks)


def accept_t(best: Candidate, other: Candidate) -> tuple[float, int, int] | None:
    """How many standard errors `other`'s exact accept length over the traces lies below `best`'s,
    with the verify steps counted for each: unpaired (the two replays' rounds fall at different
    positions), each verify step's accepted count a unit; None where either has fewer than two."""
    a, b = best.live_counts, other.live_counts
    if len(a) < 2 or len(b) < 2:
        return None
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    variance = sum((x - mean_a) ** 2 for x in a) / (len(a) - 1) / len(a)
    variance += sum((x - mean_b) ** 2 for x in b) / (len(b) - 1) / len(b)
    if variance == 0:
        return (math.inf if mean_a > mean_b else 0.0), len(a), len(b)
    return (mean_a - mean_b) / math.sqrt(variance), len(a), len(b)


BY_LOSS, BY_ACCEPT_LENGTH = "loss", "accept length"
MEASURES = {  # what ranks and separates candidates, by the probe's mode (ProbeSettings.via)
    BY_LOSS: "the draft's training loss at TTT step 0, paired per position",
    BY_ACCEPT_LENGTH: "the exact accept length over traces, unpaired, each verify step a unit",
}


def measured_t(best: Candidate, other: Candidate, by: str = BY_LOSS) -> tuple[float, int, int] | None:
    return accept_t(best, other) if by == BY_ACCEPT_LENGTH else loss_t(best, other)


def separates(best: Candidate, other: Candidate, by: str = BY_LOSS) -> bool:
    """Whether these samples tell `best` from `other`: `other`'s training loss (`by` BY_LOSS) or
    exact accept length (BY_ACCEPT_LENGTH) T_SEPARATE standard errors behind the best's (see the
    module), else (nothing measured) acc_0 beyond two binomial standard errors."""
    measured = measured_t(best, other, by)
    if measured is None:
        return other.acc_step0 < best.acc_step0 - confirm_margin(best)
    return measured[0] >= T_SEPARATE


def _level(best: Candidate, other: Candidate) -> bool:
    """The two score the same at every position (the draft ignores the states they differ in)."""
    a, b = best.position_loss, other.position_loss
    return bool(a) and len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def samples_to_separate(best: Candidate, other: Candidate, n_samples: int, by: str = BY_LOSS) -> int | None:
    """About how many samples would separate the two if the mean difference holds: the standard error
    shrinks as one over the square root of the samples, so n * (T_SEPARATE / t)^2; None where the
    best is not ahead at all."""
    measured = measured_t(best, other, by)
    if measured is None or not 0 < measured[0] < T_SEPARATE:
        return None
    return max(n_samples + 1, math.ceil(n_samples * (T_SEPARATE / measured[0]) ** 2))


@dataclass
class Ranking:
    """The probe's candidates ranked (best first) beside the declared one, and how the samples judge
    them: which wiring is confirmed, tied or separated, and what a config should say."""

    declared: Candidate
    candidates: list[Candidate]  # best first
    n_samples: int
    by: str = BY_LOSS  # BY_ACCEPT_LENGTH: a probe over traces, every candidate replayed exactly

    @property
    def best(self) -> Candidate:
        return self.candidates[0]

    @property
    def confirmed(self) -> bool:
        return self.best.aux_hf_indices == self.declared.aux_hf_indices or not separates(
            self.best, self.declared, self.by
        )

    @property
    def as_good(self) -> list[Candidate]:
        """Candidates other than the best these samples cannot tell from it (`separates`). In a deep
        target two neighbouring layers (HF 1 and 2, say) can carry nearly the same state, so a draft
        trained on one is served as well by the other."""
        return [c for c in self.candidates[1:] if not separates(self.best, c, self.by)]

    @property
    def tied(self) -> list[Candidate]:
        """The one set of wirings the samples cannot tell apart, lowest training loss first: every view
        names these (the headline, the evidence, the fix, the lint), and the first is the one a view
        uses when it needs one (the Decode reference, the live replays). Just the declared one when
        it is confirmed."""
        if self.confirmed:
            return [self.declared]
        return [self.best, *(c for c in self.as_good if c is not self.declared)]

    @property
    def separated(self) -> bool:
        """One wiring stands out: a fix may write it. Otherwise the fix says how to separate them."""
        return len(self.tied) == 1

    @property
    def written(self) -> Candidate:
        """The wiring a config should declare: the declared one when confirmed, else the best."""
        return self.declared if self.confirmed else self.best

    def samples_needed(self) -> int | None:
        """About how many samples would separate the tie if its differences hold (the closest pair
        decides); None when some tied wiring is not behind the best at all."""
        needed = [samples_to_separate(self.best, c, self.n_samples, self.by) for c in self.tied[1:]]
        return max(needed) if needed and None not in needed else None

    def how_to_separate(self, draft_dir: str | None = None) -> str:
        names = " / ".join(f"HF {list(c.aux_hf_indices)}" for c in self.tied)
        if all(_level(self.best, c) for c in self.tied[1:]):
            return (
                f"{names} score the same at every position of these {self.n_samples} samples: the draft reads "
                "none of the states they differ in, so no samples can separate them and each serves it equally. "
                "No wiring is written: declare the one your trainer used (its training config names the layers)."
            )
        needed = self.samples_needed()
        live = f" --live {needed or 4 * self.n_samples} --via trace" if self.by == BY_ACCEPT_LENGTH else ""
        why = f" (if the differences these samples show hold, about {needed} would)" if needed else ""
        return (
            f"{self.n_samples} samples cannot tell {names} apart{why}, so no wiring is written yet: run the probe "
            f"on more samples (python -m backend probe --draft {draft_dir or 'DRAFT'} --samples FILE --limit "
            f"{needed or 4 * self.n_samples}{live}, or the Wiring probe tab with more samples), or hold the served "
            "features against the draft's training features (Train vs serve). Until then each of them serves "
            "the draft about as well."
        )

    def result(
        self, verdict: str, declared_source: str, seconds: float, num_steps: int, **kept
    ) -> ProbeResult:
        """The probe's answer as every view keeps it (`kept`: the pair, the settings, who ran it)."""
        return ProbeResult(
            declared=DeclaredCandidate(
                **{f.name: getattr(self.declared, f.name) for f in fields(Candidate)}, source=declared_source
            ),
            candidates=self.candidates,
            best=self.best,
            verdict=verdict,
            confirmed=self.confirmed,
            confirm_margin=confirm_margin(self.best),
            separation=Separation(MEASURES[self.by], T_SEPARATE, BLOCK),
            as_good_as_best=[list(c.aux_hf_indices) for c in self.as_good],
            tied=[list(c.aux_hf_indices) for c in self.tied],
            separated=self.separated,
            config=ProbeConfig(
                {"eagle_config": {"eagle_aux_hidden_state_layer_ids": sglang_ids(self.written)}},
                {"eagle_aux_hidden_state_layer_ids": list(self.written.aux_hf_indices)},
            )
            if self.separated
            else None,
            how_to_separate=None if self.separated else self.how_to_separate(kept.get("draft")),
            seconds=seconds,
            num_steps=num_steps,
            n_samples=self.n_samples,
            **kept,
        )


def sglang_ids(candidate: Candidate) -> list[int]:
    """Its wiring as SGLang's output-of-layer ids (HF index - 1; -1 the embedding output)."""
    return [i - 1 for i in candidate.aux_hf_indices]


def describe(indices, num_layers: int) -> str:
    names = ["embedding output" if i == 0 else f"output of layer {i - 1}" for i in indices]
    return f"HF {list(indices)} ({', '.join(names)})"


def verdict(report: Ranking, num_layers: int) -> str:
    best, declared = report.best, report.declared
    config = (
        f"For SGLang write eagle_config.eagle_aux_hidden_state_layer_ids = {sglang_ids(report.written)} "
        f"(nested, output-of-layer ids{'; -1 = embedding output' if 0 in best.aux_hf_indices else ''}); "
        f"for vLLM write top-level eagle_aux_hidden_state_layer_ids = {list(report.written.aux_hf_indices)} "
        "(HF indices)."
    )
    if report.confirmed and best is not declared:
        return (
            f"The declared wiring {describe(declared.aux_hf_indices, num_layers)} is the trained one as far as "
            f"{report.n_samples} samples can tell: {_score(declared)}, within the noise ({_noise(report, declared)}) "
            f"of the best of {len(report.candidates)} candidates, HF {list(best.aux_hf_indices)} at "
            f"{_score(best)}. {config}"
        )
    if report.confirmed:
        runner = next((c for c in report.candidates if c is not declared), None)
        margin = f" (next best HF {list(runner.aux_hf_indices)}: {_score(runner)})" if runner else ""
        return (
            f"The declared wiring {describe(declared.aux_hf_indices, num_layers)} is the trained one: "
            f"{_score(declared)}, the best of {len(report.candidates)} candidates{margin}. {config}"
        )
    loss = ""
    if best.simulated_accept_length and declared.simulated_accept_length is not None:
        predicted_best, predicted_declared = best.predicted_accept_length, declared.predicted_accept_length
        loss = (
            f"; predicted accept length {predicted_declared:.2f} with the declared HF "
            f"{list(declared.aux_hf_indices)} instead of {predicted_best:.2f} with HF {list(best.aux_hf_indices)} "
            f"({100 * (1 - predicted_declared / predicted_best):.0f}% lost)"
        )
    tied = [c for c in report.as_good if c is not declared]
    if not tied:
        return (
            f"The draft was trained on {describe(best.aux_hf_indices, num_layers)}, not on the declared "
            f"{describe(declared.aux_hf_indices, num_layers)}: {_score(best)} vs {_score(declared)} with the "
            f"declared wiring{loss}; the runner-up is {_runner_up(report)}. {config}"
        )
    others = ", ".join(f"HF {list(c.aux_hf_indices)} ({_score(c)})" for c in tied)
    return (
        f"The draft was not trained on the declared {describe(declared.aux_hf_indices, num_layers)}: "
        f"the best wiring, {describe(best.aux_hf_indices, num_layers)}, scores {_score(best)} vs "
        f"{_score(declared)} with the declared wiring{loss}. These samples cannot tell it from {others} "
        f"(the closest: {_noise(report, tied[0])}). " + report.how_to_separate()
    )


def _runner_up(report: Ranking) -> str:
    runner = next((c for c in report.candidates[1:]), None)
    if runner is None:
        return "none"
    return (
        f"HF {list(runner.aux_hf_indices)} ({_noise(report, runner)}{_above_on_other_scores(report, runner)})"
    )


def _above_on_other_scores(report: Ranking, runner: Candidate) -> str:
    """Where the ranking is by training loss and the runner-up scores higher on acc_0 or the predicted
    accept length, said: the table shows both, and a reader takes the higher number for the better."""
    if report.by == BY_ACCEPT_LENGTH:
        return ""
    best, higher = report.best, []
    if runner.acc_step0 > best.acc_step0:
        higher.append(f"acc_0 {runner.acc_step0:.3f} vs {best.acc_step0:.3f}")
    ours, theirs = best.predicted_accept_length, runner.predicted_accept_length
    if ours is not None and theirs is not None and theirs > ours:
        higher.append(f"predicted accept length {theirs:.2f} vs {ours:.2f}")
    if not higher:
        return ""
    return (
        f"; ranked by training loss, while its {' and '.join(higher)} are higher: the two are this close "
        "on these samples"
    )


def _score(candidate: Candidate) -> str:
    """A candidate's numbers in words: the live accept length where replayed (what a probe over
    traces ranks by), the training loss where measured, and acc_0."""
    said = f"acc_0 {candidate.acc_step0:.3f}"
    if candidate.loss is not None:
        said = f"training loss {candidate.loss:.3f} nats, " + said
    if candidate.live_accept_length is not None:
        said = f"live accept length {candidate.live_accept_length:.2f}, " + said
    return said


def _noise(report: Ranking, other: Candidate) -> str:
    """How far apart the samples put the best and another candidate: the paired t of their training
    losses, or (over traces) the t of their exact accept lengths, or the acc_0 margin where neither
    was measured."""
    best = report.best
    measured = measured_t(best, other, report.by)
    if measured is None:
        return f"±{confirm_margin(best):.3f} acc_0, two standard errors over {best.n_positions} positions"
    t, n, m = measured
    if report.by == BY_ACCEPT_LENGTH:
        return (
            f"over {n} and {m} verify steps, its accept length is {t:.1f} standard errors below the best's; "
            f"{T_SEPARATE:g} or more would tell them apart"
        )
    return (
        f"paired over {n} positions in {m} blocks of {BLOCK}, its training loss is {t:.1f} standard "
        f"errors above the best's; {T_SEPARATE:g} or more would tell them apart"
    )
