"""Checkpoint doctor: the preflight report plus vocab-mapping facts a serving engine never checks (docs/reference.md §1).

- coverage: share of a dataset's target tokens the draft can propose at all (t2d true), over every
  token and over the loss-masked (response) tokens;
- d2t comparison of two drafts: with the same draft vocab size, a different d2t means the mapping
  was regenerated; a head fine-tuned from the other draft then has every lm_head row pointing at
  the wrong token (SpecForge PR #534), while its training accuracy looks normal.

The result types are torch-free (the page draws them); the reading imports the engine when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from backend.drafts.engine_table import PreflightResult
from backend.plain import Plain

if TYPE_CHECKING:
    import torch

COVERAGE = "share of the dataset's target tokens present in the draft vocabulary (t2d)"


@dataclass(frozen=True)
class Coverage(Plain):
    """The share of a dataset's target tokens the draft can propose: over every token and over the
    loss-masked (response) ones (None: no such token)."""

    all_tokens: float | None
    loss_masked_tokens: float | None
    n_tokens: int
    n_loss_masked: int
    draft_vocab_size: int
    definition: str = COVERAGE


@dataclass(frozen=True)
class MappingComparison(Plain):
    """Two drafts' d2t: `comparable` when both have one of one size; then the share of lm_head rows
    that map to the same target token, the share of the vocabulary both hold, and whether the mapping
    was regenerated."""

    comparable: bool
    message: str
    same_rows: float | None = None
    shared_vocab: float | None = None
    regenerated: bool = False


@dataclass(frozen=True)
class DoctorResult(Plain):
    """The doctor's answer for a draft on a target: preflight's report, the coverage (with samples, when
    preflight passed) and the d2t comparison (with a second draft)."""

    preflight: PreflightResult
    coverage: Coverage | None = None
    mapping_comparison: MappingComparison | None = None
    target: str = ""
    draft: str = ""


def draft_vocab_ids(draft_dir: str, target_vocab: int) -> torch.Tensor | None:
    """Target ids the draft can propose (sorted), or None when Vd == V (no mapping)."""
    import torch

    from backend.engine.loading import read_draft

    files = read_draft(draft_dir)
    if files.config.draft_vocab_size >= target_vocab and "d2t" not in files.tensors:
        return None
    d2t = files.tensors.get("d2t")
    if d2t is None:
        return torch.arange(files.config.draft_vocab_size)  # read as target ids: what engines do
    return (torch.arange(len(d2t)) + d2t.long()).sort().values


def coverage(draft_dir: str, target_vocab: int, samples: list) -> Coverage:
    import torch

    ids = draft_vocab_ids(draft_dir, target_vocab)
    reachable = torch.ones(target_vocab, dtype=torch.bool)
    if ids is not None:
        reachable = torch.zeros(target_vocab, dtype=torch.bool)
        reachable[ids[(ids >= 0) & (ids < target_vocab)]] = True
    every = [t for s in samples for t in s.input_ids if 0 <= t < target_vocab]
    masked = [
        t
        for s in samples
        for t, m in zip(s.input_ids, s.loss_mask, strict=True)
        if m and 0 <= t < target_vocab
    ]

    def share(tokens):
        return float(reachable[torch.tensor(tokens)].float().mean()) if tokens else None

    return Coverage(share(every), share(masked), len(every), len(masked), int(reachable.sum()))


def compare_mappings(draft_a: str, draft_b: str) -> MappingComparison:
    import torch

    from backend.engine.loading import read_draft

    a, b = read_draft(draft_a), read_draft(draft_b)
    d2t_a, d2t_b = a.tensors.get("d2t"), b.tensors.get("d2t")
    if d2t_a is None or d2t_b is None:
        return MappingComparison(False, "one of the drafts has no d2t (no vocab mapping)")
    if len(d2t_a) != len(d2t_b):
        return MappingComparison(False, f"different draft vocab sizes ({len(d2t_a)} vs {len(d2t_b)})")
    ids_a = torch.arange(len(d2t_a)) + d2t_a.long()
    ids_b = torch.arange(len(d2t_b)) + d2t_b.long()
    same_rows = float((ids_a == ids_b).float().mean())
    shared = len(set(ids_a.tolist()) & set(ids_b.tolist())) / len(ids_a)
    regenerated = same_rows < 1.0
    message = (
        "identical d2t: lm_head rows mean the same tokens in both drafts"
        if not regenerated
        else f"d2t differs: only {same_rows:.1%} of lm_head rows map to the same target token "
        f"({shared:.1%} of the vocabulary is shared). If one draft was fine-tuned from the other, its "
        "mapping was regenerated and its lm_head rows are misaligned (SpecForge PR #534)."
    )
    return MappingComparison(True, message, same_rows, shared, regenerated)


def doctor(
    draft_dir: str, target_dir: str, samples: list | None = None, other_draft: str | None = None
) -> DoctorResult:
    from backend.drafts.dflash_config import is_dflash
    from backend.engine.loading import read_target_config
    from backend.engine.preflight import preflight

    report = preflight(draft_dir, target_dir, max((len(s.input_ids) for s in samples or []), default=None))
    if is_dflash(draft_dir):  # the target's own head: every token reachable, no d2t to compare
        return DoctorResult(report.result(), target=target_dir, draft=draft_dir)
    target_vocab = read_target_config(target_dir).vocab_size
    return DoctorResult(
        report.result(),
        coverage(draft_dir, target_vocab, samples) if samples and report.ok else None,
        compare_mappings(draft_dir, other_draft) if other_draft else None,
        target=target_dir,
        draft=draft_dir,
    )
