"""The pairs an evaluation replays: a draft and a sample each, with the evaluation's settings (`Plan`),
found stored with the same settings (`existing_run`, what makes an evaluation resumable) or replayed
into the store (`run_pair`). The local runner (evaluate.py) and Ray's actors (ray_eval.py) take the
same pairs."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from backend.run.records import Progress, no_progress
from backend.run.request import ReplayRequest


@dataclass(frozen=True)
class Pair:
    """One replay to do: a draft on a sample, as the request that replays it (frozen: a pair keys a
    dict)."""

    request: ReplayRequest
    sample_index: int
    label: str = ""  # how progress messages name it

    @property
    def draft(self) -> str:
        return self.request.draft


def pairs_of(template: ReplayRequest, drafts: list[str], samples: list, ref, label) -> list[Pair]:
    """Each draft on each sample: `template` (validated when it was made) with the draft and the
    sample's prompt put in (dataclasses.replace, which validates them too). `ref(sample)` names the
    sample in the run, `label(draft, sample)` in progress messages."""
    return [
        Pair(
            replace(
                template,
                draft=draft,
                prompt_ids=tuple(sample.prompt_ids),
                sample_id=getattr(sample, "id", None),
                sample_ref=ref(sample),
            ),
            sample.index,
            label(draft, sample),
        )
        for draft in drafts
        for sample in samples
    ]


@dataclass
class Plan:
    template: ReplayRequest  # every pair's request: its draft and prompt are each pair's own
    drafts: list[str]
    samples: list  # backend.data.samples.Sample (index, prompt_ids, source, optional id)
    dataset_ref: str  # how a run names its sample: f"{dataset_ref}#{index}"
    names: dict[str, str] = field(default_factory=dict)  # draft path -> short name for the table

    @property
    def target(self) -> str:
        return self.template.target

    def pairs(self) -> list[Pair]:
        """Every (draft, sample) pair (the template was validated when it was made)."""
        if not self.drafts or not self.samples:
            return []
        return pairs_of(
            self.template,
            self.drafts,
            self.samples,
            lambda sample: f"{self.dataset_ref}#{sample.index}",
            lambda draft, sample: f"{self.names.get(draft, draft)} sample {sample.index}",
        )


def existing_run(db_url: str | None, pair: Pair):
    """The finished run that already answers this pair, if any (resume)."""
    from backend.engine.loading import pick_device, pick_dtype
    from backend.service.runs import find_finished_run

    device = pick_device(pair.request.device)
    dtype = str(pick_dtype(device, pair.request.dtype)).replace("torch.", "")
    return find_finished_run(db_url, pair.request, str(device), dtype)


def run_pair(db_url: str | None, pair: Pair, progress: Progress = no_progress) -> int:
    """Replay one pair into the store (or find it there): its run id."""
    from backend.service.jobs import run_replay

    found = existing_run(db_url, pair)
    if found is not None:
        return found.id
    return run_replay(pair.request, db_url, progress).run_id
