"""Finished wiring probes and diagnose verdicts, kept per (target, draft) with the draft's file stamp
when they ran."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import VerdictRow, WiringProbeRow


def add_probe(session: Session, target_path: str, draft_path: str, draft_stamp: list, report: dict) -> int:
    row = WiringProbeRow(
        target_path=target_path, draft_path=draft_path, draft_stamp=list(draft_stamp), report=report
    )
    session.add(row)
    session.flush()
    return row.id


def largest_probe(
    session: Session, target_path: str, draft_path: str, draft_stamp: list, method: str | None = None
) -> dict | None:
    """The probe of this pair on the draft's files as they are now (same stamp) that ran on the most
    samples, the newest of those, one run by `method` (its settings' method) before any other; None
    when none ran, or the draft changed since."""
    rows = session.scalars(
        select(WiringProbeRow)
        .where(WiringProbeRow.target_path == target_path, WiringProbeRow.draft_path == draft_path)
        .order_by(WiringProbeRow.id.desc())
    )
    kept = [dict(row.report or {}) for row in rows if list(row.draft_stamp or []) == list(draft_stamp)]
    return (
        max(kept, key=lambda report: (_method(report) == method, report.get("n_samples") or 0))
        if kept
        else None
    )


def _method(report: dict) -> str | None:
    settings = report.get("settings")
    return settings.get("method") if isinstance(settings, dict) else None


def add_verdict(session: Session, target_path: str, draft_path: str, draft_stamp: list, result: dict) -> int:
    row = VerdictRow(
        target_path=target_path, draft_path=draft_path, draft_stamp=list(draft_stamp), result=result
    )
    session.add(row)
    session.flush()
    return row.id


def newest_verdict(
    session: Session, target_path: str, draft_path: str, draft_stamp: list
) -> tuple[dict, datetime] | None:
    """The newest verdict of this pair on the draft's files as they are now, with when it was kept."""
    rows = session.scalars(
        select(VerdictRow)
        .where(VerdictRow.target_path == target_path, VerdictRow.draft_path == draft_path)
        .order_by(VerdictRow.id.desc())
    )
    for row in rows:
        if list(row.draft_stamp or []) == list(draft_stamp):
            return dict(row.result or {}), row.created_at
    return None
