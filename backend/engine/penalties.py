"""Sampling penalties on the target's logits and, optionally, on the draft's (finding class
sampling-penalties).

Semantics, as vLLM applies them (vllm/model_executor/layers/utils.py `apply_penalties`) and as
transformers' RepetitionPenaltyLogitsProcessor does for the repetition penalty:
- repetition_penalty r over every token seen in the prompt or the output so far: a positive logit
  is divided by r, a negative one multiplied by r;
- frequency_penalty f and presence_penalty p over the output tokens only: logit -= f * count and
  logit -= p * (count > 0).

The engines apply them to the target when it verifies; what they do for the draft differs
(vllm#48932: vLLM's draft proposes unpenalised; sglang#33643: SGLang accumulates per step), so a
replay runs them on the target only (what is served) or on both (what a draft that mirrors the
penalty would accept): the gap between the two is the penalty's cost in acceptance.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Penalties:
    repetition: float = 1.0
    frequency: float = 0.0
    presence: float = 0.0
    on_draft: bool = False  # the draft's proposals are penalised too

    def __post_init__(self):
        if not self.repetition > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition}")
        for name, value in (("frequency_penalty", self.frequency), ("presence_penalty", self.presence)):
            if not -2.0 <= value <= 2.0:
                raise ValueError(f"{name} must be in [-2, 2], got {value}")

    @property
    def active(self) -> bool:
        return self.repetition != 1.0 or self.frequency != 0.0 or self.presence != 0.0

    @property
    def label(self) -> str:
        parts = [
            f"{name}={value:g}"
            for name, value, neutral in (
                ("repetition_penalty", self.repetition, 1.0),
                ("frequency_penalty", self.frequency, 0.0),
                ("presence_penalty", self.presence, 0.0),
            )
            if value != neutral
        ]
        return ", ".join(parts) + (" on target and draft" if self.on_draft else " on the target only")


NONE = Penalties()


class History:
    """The tokens a penalty looks at: seen (prompt + output) and the output's counts, over the
    target vocabulary; `extended` gives the rows a verify or a draft chain needs."""

    def __init__(self, prompt_ids: list[int], vocab_size: int, device):
        self.seen = torch.zeros(vocab_size, dtype=torch.bool, device=device)
        self.counts = torch.zeros(vocab_size, dtype=torch.float32, device=device)
        self.seen[torch.tensor(prompt_ids, device=device)] = True

    def add(self, tokens: list[int]) -> None:
        for token in tokens:
            self.seen[token] = True
            self.counts[token] += 1

    def apply(self, logits: torch.Tensor, penalties: Penalties, then: list[int] = ()) -> torch.Tensor:
        """Rows r = 0..R-1 of `logits` [R, V] penalised as if then[:r] had been emitted after the
        history (a verify's rows; R = 1 and then = () for one next token)."""
        rows = []
        seen, counts = self.seen.clone(), self.counts.clone()
        for r in range(logits.shape[0]):
            if r:
                seen[then[r - 1]] = True
                counts[then[r - 1]] += 1
            rows.append(_penalised(logits[r], penalties, seen, counts))
        return torch.stack(rows)

    def apply_mapped(
        self, logits: torch.Tensor, penalties: Penalties, to_target: torch.Tensor, then: list[int]
    ):
        """One draft row over the draft vocabulary (draft id d is target id to_target[d])."""
        seen, counts = self.seen.clone(), self.counts.clone()
        for token in then:
            seen[token] = True
            counts[token] += 1
        return _penalised(logits, penalties, seen[to_target], counts[to_target])


def _penalised(
    row: torch.Tensor, penalties: Penalties, seen: torch.Tensor, counts: torch.Tensor
) -> torch.Tensor:
    row = row.float()
    if penalties.repetition != 1.0:
        scaled = torch.where(row > 0, row / penalties.repetition, row * penalties.repetition)
        row = torch.where(seen, scaled, row)
    if penalties.frequency:
        row = row - penalties.frequency * counts
    if penalties.presence:
        row = row - penalties.presence * (counts > 0).float()
    return row
