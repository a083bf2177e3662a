"""The job runner: drives the engine and persists what it yields, step by step.

The CLI and the dashboard both start work through here. A run is written as it goes: each verify
step is committed when it arrives, so a crash leaves a run marked failed with the steps it had.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from sqlalchemy.orm import sessionmaker

from backend.checkpoints import Target
from backend.draft_model import Eagle3Draft
from backend.metrics import acceptance_metrics
from backend.replay import PrefillRecord, ReplayConfig, StepRecord, replay
from backend.wiring import Wiring
from db import store
from db.artifacts import write_artifact

Progress = Callable[[int, int], None]  # (tokens produced so far, max_new_tokens)


@dataclass
class ReplayOutcome:
    run_id: int
    output_ids: list[int]
    steps: list[StepRecord]
    metrics: dict
    wiring: Wiring
    prefill_ms: float = 0.0
    artifact_path: str | None = None


def step_info(record: StepRecord) -> store.StepInfo:
    return store.StepInfo(**{name: getattr(record, name) for name in store.STEP_FIELDS})


def chunk_norms(features: torch.Tensor, first_position: int, indices) -> list[dict]:
    """Per position and per aux chunk L2 norm of the fused features the draft received."""
    norms = torch.stack([c.float().norm(dim=-1) for c in features.chunk(len(indices), dim=-1)], dim=-1).tolist()
    return [{"position": first_position + row, "chunk": f"hf{index}", "norm": value}
            for row, values in enumerate(norms) for index, value in zip(indices, values, strict=True)]


def run_replay_job(factory: sessionmaker, artifact_dir, target: Target, draft: Eagle3Draft, draft_path: str,
                   prompt_ids: list[int], wiring: Wiring, config: ReplayConfig, sample_ref: str | None = None,
                   sample_id: int | None = None, progress: Progress | None = None) -> ReplayOutcome:
    params = {"num_steps": config.num_steps, "max_new_tokens": config.max_new_tokens, "record": config.record,
              "device": str(target.device), "dtype": str(target.dtype).replace("torch.", ""),
              "wiring_source": wiring.source}
    with store.session_scope(factory) as session:
        run_id = store.create_run(session, kind="replay", target_path=target.path, draft_path=draft_path,
                                  params=params, aux_hf_indices=list(wiring.aux_hf_indices),
                                  prompt_ids=prompt_ids, sample_ref=sample_ref, sample_id=sample_id)
    output: list[int] = []
    steps: list[StepRecord] = []
    tensors: dict[str, list[torch.Tensor]] = {"aux_features": [], "aux_positions": [], "draft_hidden": []}
    outcome = ReplayOutcome(run_id, output, steps, {}, wiring)
    session = factory()  # one session for the run; each record is committed as it arrives
    try:
        for record in replay(target, draft, prompt_ids, wiring, config):
            if isinstance(record, PrefillRecord):
                output.append(record.first_token)
                outcome.prefill_ms = record.prefill_ms
                if record.aux_features is not None:
                    tensors["prompt_aux_features"] = [record.aux_features]
                    store.add_token_stats(session, run_id, chunk_norms(record.aux_features, 0,
                                                                       wiring.aux_hf_indices))
            else:
                steps.append(record)
                output.extend(record.committed_ids)
                store.add_step(session, run_id, step_info(record))
                if record.aux_features is not None:
                    rows = record.aux_features.shape[0]
                    tensors["aux_features"].append(record.aux_features)
                    tensors["aux_positions"].append(torch.arange(record.position, record.position + rows))
                    tensors["draft_hidden"].append(record.draft_hidden)
                    store.add_token_stats(session, run_id, chunk_norms(record.aux_features, record.position,
                                                                       wiring.aux_hf_indices))
            session.commit()
            if progress:
                progress(len(output), config.max_new_tokens)
    except BaseException as error:
        session.rollback()  # a half-added record never lands; every committed step stays
        session.close()
        artifact = _save_tensors(artifact_dir, run_id, tensors)
        with store.session_scope(factory) as session:
            status = "interrupted" if isinstance(error, KeyboardInterrupt) else "failed"
            store.fail_run(session, run_id, error=f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=3)}",
                           output_ids=output, metrics=_metrics(steps, config), status=status, **artifact)
        raise
    session.close()
    artifact = _save_tensors(artifact_dir, run_id, tensors)
    outcome.metrics = _metrics(steps, config)
    outcome.artifact_path = artifact["artifact_path"]
    with store.session_scope(factory) as session:
        store.finish_run(session, run_id, output_ids=output, metrics=outcome.metrics, **artifact)
    return outcome


def _metrics(steps: list[StepRecord], config: ReplayConfig) -> dict:
    metrics = acceptance_metrics([s.accepted_count for s in steps], config.num_steps).to_dict()
    metrics["draft_ms_total"] = sum(s.draft_ms for s in steps)
    metrics["verify_ms_total"] = sum(s.verify_ms for s in steps)
    return metrics


def _save_tensors(artifact_dir, run_id: int, tensors: dict[str, list[torch.Tensor]]) -> dict:
    present = {name: torch.cat(parts) if name != "draft_hidden" else torch.stack(parts)
               for name, parts in tensors.items() if parts}
    if not present or artifact_dir is None:
        return {"artifact_path": None, "artifact_sha256": None}
    path, sha = write_artifact(Path(artifact_dir) / str(run_id), "hidden_states", present)
    return {"artifact_path": path, "artifact_sha256": sha}
