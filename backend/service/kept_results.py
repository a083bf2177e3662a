"""What a pair's diagnosis found, kept with the pair across reloads and servers: its wiring probes and
its verdicts, in this server and in the database (db/probes.py), each valid while the draft's files are
as they were."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from backend.diagnostics.findings import DiagnosisResult
from backend.diagnostics.probe_settings import METHOD, ProbeResult, ProbeSettings, SettingsUsed

# (target, draft) -> (the draft's stamp, the last wiring probe report of this server); the database
# keeps them across servers (db/probes.py).
_PROBES: dict[tuple[str, str], tuple[list, dict]] = {}

DRAFT_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def _pair_key(target_path: str, draft_path: str) -> tuple[str, str]:
    return str(Path(target_path).resolve()), str(Path(draft_path).resolve())


def _draft_stamp(draft_path: str) -> list[float]:
    from backend.service.stamps import stamp

    return list(stamp(*(Path(draft_path, name) for name in DRAFT_FILES)))


def _in_store(db_url: str | None, work: Callable):
    """`work(session)` on the database at `db_url`; None when there is none or it cannot be read or
    written (a read-only or unreachable store keeps what is kept in this server only)."""
    from sqlalchemy.exc import SQLAlchemyError

    from backend import BadInput
    from backend.service.database import open_database
    from db import store

    if db_url is None:
        return None
    try:
        with store.session_scope(open_database(db_url).factory) as session:
            return work(session)
    except (BadInput, SQLAlchemyError):
        return None


def _read(kind, raw):
    """A kept result read back typed; None where this code cannot read it (hand-edited, another
    version's)."""
    try:
        return kind.from_dict(raw) if raw else None
    except (TypeError, ValueError, AttributeError):
        return None


def remember_probe(target_path: str, draft_path: str, report: ProbeResult, db_url: str | None = None) -> None:
    """Keep a finished probe's report so the lint, the probe tab and Decode's default reference use what
    it found: in this server, and in the database when one is given (a later server reads it there;
    a database that cannot be written keeps it in this server only)."""
    from db import store

    key, drafted = _pair_key(target_path, draft_path), _draft_stamp(draft_path)
    _PROBES[key] = (drafted, report)
    _in_store(db_url, lambda session: store.add_probe(session, *key, drafted, report.to_dict()))


@dataclass(frozen=True)
class KeptVerdict:
    """A finished verdict of this pair and when it was reached (pages label it with that time)."""

    result: DiagnosisResult
    kept_at: datetime


_VERDICTS: dict[tuple[str, str], tuple[list, KeptVerdict]] = {}


def remember_verdict(result: DiagnosisResult, db_url: str | None = None) -> None:
    """Keep a finished `diagnose` verdict as a probe is kept (a verdict takes minutes: a reload must
    not lose it): in this server, and in the database when it can be written."""
    from db import store

    key, drafted = _pair_key(result.target, result.draft), _draft_stamp(result.draft)
    _VERDICTS[key] = (drafted, KeptVerdict(result, datetime.now(UTC)))
    _in_store(db_url, lambda session: store.add_verdict(session, *key, drafted, result.to_dict()))


def known_verdict(target_path: str, draft_path: str, db_url: str | None = None) -> KeptVerdict | None:
    """The newest verdict of this pair on the draft's files as they are now (this server's, else the
    database's); None when none was reached or the draft changed since."""
    from db import store

    key, drafted = _pair_key(target_path, draft_path), _draft_stamp(draft_path)
    stamped, kept = _VERDICTS.get(key, (None, None))
    if kept is not None and stamped == drafted:
        return kept
    stored = _in_store(db_url, lambda session: store.newest_verdict(session, *key, drafted))
    result = _read(DiagnosisResult, stored[0]) if stored else None
    if result is None:
        return None
    when = stored[1]
    return KeptVerdict(result, when.replace(tzinfo=when.tzinfo or UTC))


def probe_settings(num_steps: int, budget: int, live: int, samples: list, via: str = "step") -> SettingsUsed:
    """What a probe with these settings on these samples would use (ProbeSettings.describe), to match
    it against a stored probe's."""
    return ProbeSettings(num_steps, budget, live, via=via).describe(samples)


def known_probe(target_path: str, draft_path: str, db_url: str | None = None) -> ProbeResult | None:
    """The probe of this pair on the draft's files as they are now that ran on the most samples (the
    newest of those), this server's or the database's (the CLI keeps its probes there too); None when
    none ran (or the draft changed since)."""
    from db import store

    key, drafted = _pair_key(target_path, draft_path), _draft_stamp(draft_path)
    stamped, report = _PROBES.get(key, (None, None))
    here = report if stamped == drafted else None
    stored = _read(
        ProbeResult, _in_store(db_url, lambda session: store.largest_probe(session, *key, drafted, METHOD))
    )
    found = [r for r in (here, stored) if r]
    # one of this version's method first (an older probe ranked on acc_0 and tied more), then the
    # probe on the most samples (a 32-sample CLI probe must not lose to the page's 8); this
    # server's when they are as large
    return max(found, key=lambda r: (r.settings.method == METHOD, r.n_samples or 0)) if found else None


def probe_wirings(report: ProbeResult | None) -> list[list[int]]:
    """What a wiring probe found when it rejected the declared wiring: its best, then the wirings it
    could not tell from the best on its samples; [] when it confirmed the declared one (or none ran)."""
    if report is None or report.confirmed:
        return []
    if report.tied:
        return [list(w) for w in report.tied]
    best = list(report.best.aux_hf_indices)
    return [best, *(list(w) for w in report.as_good_as_best if list(w) != best)]


def trained_wirings(target_path: str, draft_path: str, db_url: str | None = None) -> list[list[int]]:
    """`probe_wirings` of the last probe of this pair (known_probe)."""
    return probe_wirings(known_probe(target_path, draft_path, db_url))


def trained_wiring(target_path: str, draft_path: str, db_url: str | None = None) -> list[int] | None:
    """The HF indices the probe found this draft trained on, when it rejected the declared wiring."""
    found = trained_wirings(target_path, draft_path, db_url)
    return found[0] if found else None
