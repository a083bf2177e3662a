"""Hidden-state references for a stored run: compare the features the draft was fed, position by
position and chunk by chunk, with
- another wiring (the target recomputed over the run's tokens at other HF indices),
- stored training features (a SpecForge .ckpt whose tokens agree with the run's),
- a second run (where both runs have features and their tokens agree so far),
- the target's own hidden (the draft's output hidden vs the target's last-layer pre-norm state at the
  position it stands for: draft chain step k of a verify step at pending position n <-> n + k, for
  the accepted part of the chain).
Rows go to token_stats with `reference` naming the comparison; the page reads them from the store.
What is asked and what comes back are backend/service/reference_spec.py's (torch-free).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from backend import BadInput
from backend.data.features import load_feature_file
from backend.diagnostics.hidden_diff import compare_chunks
from backend.engine.teacher import target_pass
from backend.run.records import Progress
from backend.service import models
from backend.service.database import open_database
from backend.service.reference_spec import ReferenceResult, ReferenceSpec
from db import store
from db.artifacts import read_artifact


def fed_features(run: store.RunInfo) -> tuple[list[int], torch.Tensor]:
    """(positions, [n, 3*Ht]) of every feature row the run fed its draft, from its artifact."""
    if not run.artifact_path:
        raise BadInput(f"run {run.id} stored no hidden states (recorded with --no-record?)")
    tensors = read_artifact(run.artifact_path, run.artifact_sha256)
    parts, positions = [], []
    if "prompt_aux_features" in tensors:
        parts.append(tensors["prompt_aux_features"])
        positions += list(range(tensors["prompt_aux_features"].shape[0]))
    if "aux_features" in tensors:
        parts.append(tensors["aux_features"])
        positions += tensors["aux_positions"].tolist()
    if not parts:
        raise BadInput(f"run {run.id}: its artifact has no aux features")
    features = torch.cat(parts).float()
    latest = {p: row for row, p in enumerate(positions)}  # a position fed twice keeps its last row
    keep = sorted(latest)
    return keep, features[[latest[p] for p in keep]]


def _agreeing_prefix(a: list[int], b: list[int]) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


def compute_reference(
    db_url: str | None, run_id: int, reference: ReferenceSpec, progress: Progress
) -> ReferenceResult:
    factory = open_database(db_url).factory
    with store.session_scope(factory) as session:
        run = store.get_run(session, run_id)
        steps = store.get_steps(session, run_id) if run else []
    if run is None:
        raise BadInput(f"no run {run_id}")
    label = reference.label
    progress(0.05, "loading the run's features")
    sequence = run.prompt_ids + run.output_ids
    kind = reference.kind
    warning = None
    if kind == "target_hidden":
        rows = _draft_vs_target(run, steps, sequence, label, progress)
    elif kind in REFERENCE_KINDS:
        positions, fed = fed_features(run)
        found = REFERENCE_KINDS[kind](Compared(run, sequence, positions, fed, factory), reference, progress)
        if not found.usable:
            raise BadInput("no position where the run and the reference can be compared")
        row_of = {p: row for row, p in enumerate(positions)}
        mine = fed[[row_of[p] for p in found.usable]]
        chunk_names = [f"hf{i}" for i in run.aux_hf_indices]
        rows = compare_chunks(mine, found.features[found.usable], found.usable, chunk_names, label)
        warning = found.warning
    else:
        raise BadInput(f"unknown reference kind {kind!r}")
    progress(0.9, f"storing {len(rows)} rows")
    with store.session_scope(factory) as session:
        store.delete_token_stats(session, run_id, label)
        store.add_token_stats(session, run_id, rows)
    positions_compared = len({r["position"] for r in rows})
    return ReferenceResult(run_id, label, len(rows), positions_compared, warning)


@dataclass
class Compared:
    """The stored run a reference is compared with: its tokens and the features it was fed."""

    run: object  # db.store.RunInfo
    sequence: list[int]  # prompt + output
    positions: list[int]  # the positions of `fed`'s rows
    fed: torch.Tensor
    factory: object  # the database's session factory


@dataclass
class Found:
    """A reference's features (indexed by position), the positions both sides have, and a warning."""

    features: torch.Tensor
    usable: list[int]
    warning: str | None = None


def _wiring_reference(compared: Compared, reference: ReferenceSpec, progress: Progress) -> Found:
    """The target recomputed over the run's tokens at other HF indices."""
    progress(0.2, "loading the target")
    target = models.target(compared.run.target_path)
    indices = [int(i) for i in reference.aux_hf_indices or []]
    if len(indices) != 3 or not all(0 <= i <= target.num_layers for i in indices):
        raise BadInput(f"a wiring needs three HF indices in 0..{target.num_layers}, got {indices}")
    progress(0.4, "recomputing the target's states")
    sequence = compared.sequence
    passed = target_pass(target, sequence, [0] * len(sequence), indices)
    usable = [p for p in compared.positions if p < len(sequence)]
    return Found(passed.features(indices).float().cpu(), usable)


def _feature_reference(compared: Compared, reference: ReferenceSpec, progress: Progress) -> Found:
    """Stored training features (a SpecForge .ckpt) over the prefix whose tokens agree with the run's."""
    stored = load_feature_file(reference.path)
    name = Path(reference.path).name
    agree = _agreeing_prefix(compared.sequence, stored.input_ids)
    usable = [p for p in compared.positions if p < agree]
    if not usable:
        raise BadInput(f"{name}: its tokens differ from the run's from position 0")
    warning = _divergence(agree, compared.sequence, stored.input_ids, name)
    return Found(stored.aux_hidden_state.float(), usable, warning)


def _run_reference(compared: Compared, reference: ReferenceSpec, progress: Progress) -> Found:
    """A second stored run, where both runs have features and their tokens agree so far."""
    with store.session_scope(compared.factory) as session:
        other = store.get_run(session, int(reference.run_id))
    if other is None:
        raise BadInput(f"no run {reference.run_id}")
    other_positions, other_fed = fed_features(other)
    other_sequence = other.prompt_ids + other.output_ids
    agree = _agreeing_prefix(compared.sequence, other_sequence)
    index_of = {p: row for row, p in enumerate(other_positions)}
    usable = [p for p in compared.positions if p < agree and p in index_of]
    features = torch.zeros(max(usable, default=0) + 1, other_fed.shape[1])
    for p in usable:
        features[p] = other_fed[index_of[p]]
    if other_fed.shape[1] != compared.fed.shape[1]:
        raise BadInput(f"runs {compared.run.id} and {other.id} used targets of different widths")
    return Found(features, usable, _divergence(agree, compared.sequence, other_sequence, f"run {other.id}"))


REFERENCE_KINDS = {"wiring": _wiring_reference, "features": _feature_reference, "run": _run_reference}


def _divergence(agree: int, sequence: list[int], other: list[int], name: str) -> str | None:
    """A warning when the reference's tokens part from the run's before either ends: it is then
    another sequence (or another sample), and only the agreeing prefix was compared."""
    if agree >= min(len(sequence), len(other)):
        return None
    return (
        f"{name} holds another sequence: its tokens agree with the run's only for the first {agree} of "
        f"{len(sequence)} positions, so only those were compared"
    )


def _draft_vs_target(run, steps, sequence, label, progress: Progress) -> list[dict]:
    tensors = read_artifact(run.artifact_path, run.artifact_sha256) if run.artifact_path else {}
    if "draft_hidden" not in tensors:
        raise BadInput(f"run {run.id} stored no draft hidden states")
    progress(0.2, "loading the target")
    target = models.target(run.target_path)
    last = target.num_layers
    passed = target_pass(target, sequence, [0] * len(sequence), [last])
    target_hidden = passed.states[last].float().cpu()
    draft_hidden = tensors["draft_hidden"].float()  # [steps, K, H]
    if draft_hidden.shape[-1] != target_hidden.shape[-1]:
        raise BadInput("the draft's hidden size differs from the target's: nothing to compare")
    positions, mine, theirs = [], [], []
    for number, step in enumerate(steps[: draft_hidden.shape[0]]):
        for k in range(min(step.accepted_count + 1, len(step.drafted_ids), draft_hidden.shape[1])):
            position = step.position + k
            if position < len(sequence):
                positions.append(position)
                mine.append(draft_hidden[number, k])
                theirs.append(target_hidden[position])
    if not positions:
        raise BadInput("no step to compare")
    return compare_chunks(torch.stack(mine), torch.stack(theirs), positions, ["draft_out"], label)
