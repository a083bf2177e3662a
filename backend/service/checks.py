"""Quick checks the pages run inline (no model is loaded): the serving-flag lint."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

from backend.diagnostics.findings import DiagnosisResult
from backend.diagnostics.lint import LintResult
from backend.diagnostics.probe_settings import METHOD, ProbeResult, ProbeSettings, SettingsUsed
from backend.drafts.engine_table import EngineReadings
from backend.service.reference_spec import ReferenceSpec


def lint(
    draft_path: str | None,
    command: str,
    engine: str,
    target_path: str | None,
    db_url: str | None = None,
    request_file: str | None = None,
) -> LintResult:
    """Findings for an SGLang launch command (engine 'SGLang'), vLLM arguments ('vLLM') or a llama-server
    command ('llama.cpp': lint_llamacpp). Once the
    wiring probe ran on this pair and rejected the declared wiring, the findings use what it found (its
    best and the wirings it could not tell from it), so none suggests the declared wiring again. The
    chain every fix recommends is the Speed-up what-if's best K on the draft's newest greedy chain run
    (one of the trained wiring when the probe rejected the declared one). The dashboard's lint and
    `python -m backend lint` both call this: one answer for the same draft, command and database."""
    from backend.diagnostics.lint import lint_command, parse_sglang, parse_vllm

    if engine.lower() in ("llama.cpp", "llamacpp"):  # the GGUF's wiring and llama-server's flags
        from backend.diagnostics.lint_llamacpp import lint_llamacpp

        found = trained_wirings(target_path, draft_path, db_url) if target_path and draft_path else []
        return lint_llamacpp(command, draft_path, target_path, found)
    sglang, vllm = (command, None) if engine.lower() == "sglang" else (None, command)
    settings = parse_sglang(sglang) if sglang is not None else parse_vllm(vllm)
    draft_path = draft_path or settings.draft_path  # as lint_command reads them, to find the stored probe
    if target_path is None and settings.target_path and Path(settings.target_path, "config.json").is_file():
        target_path = settings.target_path
    found = trained_wirings(target_path, draft_path, db_url) if target_path and draft_path else []
    chain = whatif_best_k(db_url, draft_path, found) if db_url and draft_path else None
    facts = _bin_draft_facts(draft_path) if draft_path else None
    return lint_command(
        draft_path, sglang, vllm, target_path, found, chain_k=chain, facts=facts, request_file=request_file
    ).result()


def _bin_draft_facts(draft_path: str):
    """A pytorch_model.bin draft's facts for the lint, read in the reader process (only torch reads a
    pickle); None for safetensors weights (the lint reads their headers itself, and says why when it
    cannot) or none at all. Only which files exist is looked at here: the headers are read once."""
    from backend.diagnostics.lint import PICKLED_WEIGHTS
    from backend.drafts.safetensors_header import SAFETENSORS_WEIGHTS
    from backend.service.readers import in_reader

    present = [name for name in (*SAFETENSORS_WEIGHTS, *PICKLED_WEIGHTS) if Path(draft_path, name).is_file()]
    if not present or present[0] in SAFETENSORS_WEIGHTS:
        return None
    return in_reader(read_bin_draft_facts, draft_path)


def read_bin_draft_facts(draft_path: str, progress=None):
    """draft_facts of a .bin draft (a reader job: torch reads the pickle, weights only)."""
    from backend.diagnostics.lint import draft_facts

    return draft_facts(Path(draft_path))


def whatif_best_k(db_url: str | None, draft_path: str, trained: list | None = None) -> tuple[int, str] | None:
    """(K, why) of the highest predicted speed-up (backend/diagnostics/whatif.py) on the newest finished
    greedy chain run of `draft_path` replayed alone (a batched run's times are its share of a batch
    forward: no cost of a served step); None without one. `trained`: the wirings the probe found the draft
    trained on when it rejected the declared one: a run fed one of them is preferred, and a K read off a
    run of another (broken) wiring says so."""
    from pathlib import Path

    from backend.diagnostics.whatif import predict
    from backend.service.runs import list_runs

    wanted = str(Path(draft_path).resolve())
    runs = list_runs(db_url, limit=200)
    if trained:  # runs of a trained wiring first, each group newest first
        runs = sorted(runs, key=lambda r: list(r.aux_hf_indices) not in [list(t) for t in trained])
    for run in runs:
        histogram, k = run.metrics.get("accept_histogram"), run.resolved.num_steps
        chain = run.resolved.greedy_chain
        timed = run.metrics.get("verify_ms_total") and run.metrics.get("draft_ms_total")
        alone = not run.metrics.get("batch_size")  # a batched run's times are a batch forward's shares
        if run.status != "finished" or not histogram or not k or not chain or not timed or not alone:
            continue
        if str(Path(run.draft_path).resolve()) != wanted:
            continue
        counts = [a for a, n in enumerate(histogram) for _ in range(n)]
        rows = predict(counts, k, run.metrics.get("draft_ms_total", 0), run.metrics.get("verify_ms_total", 0))
        if rows:
            top = max(rows, key=lambda r: r.predicted_speedup)
            return top.num_steps, (
                f"the Speed-up what-if's best K on run #{run.id}: predicted speed-up "
                f"{top.predicted_speedup:.2f}x, accept length {top.predicted_accept_length:.2f}"
                + (", extrapolated past the run's K" if top.extrapolated else "")
                + ")"
                + (
                    f"; warning: run #{run.id} fed HF {list(run.aux_hf_indices)}, a wiring the probe rejects, "
                    "so its acceptance understates the draft; replay it on the trained wiring for a K to trust"
                    if trained and list(run.aux_hf_indices) not in [list(t) for t in trained]
                    else ""
                )
            ).replace(": predicted", " (predicted", 1)
    return None


def default_reference(
    target_path: str, draft_path: str, fed: list[int] | None = None, db_url: str | None = None
) -> ReferenceSpec:
    """The hidden-state reference a new Decode run opens on: one that tells a healthy draft from a broken
    one. The fed features against, in order: the wiring the probe found this draft
    trained on, when it rejected the declared one; a wiring a serving engine would feed instead (its
    reading of the config); the target's own hidden vs the draft's output, when every engine feeds the
    declared wiring. `fed`: the wiring the run feeds (default: the declared one); `db_url`: where a
    probe of an earlier server is kept."""
    found = trained_wirings(target_path, draft_path, db_url)
    if found and list(found[0]) != list(fed or []):
        tied = f", tied with {len(found) - 1} it cannot tell apart" if len(found) > 1 else ""
        return ReferenceSpec("wiring", list(found[0]), why=f"the wiring probe's best{tied}")
    try:
        readings = engine_readings(draft_path, target_path)
    except Exception:  # noqa: BLE001 - an unreadable pair has no reading to compare; the replay says why
        return ReferenceSpec("target_hidden", why="the draft's output against the target's hidden")
    training = readings.engines.get(readings.training_engine)
    declared = fed or (training.aux_hf_indices if training else None)
    for engine, view in readings.engines.items():
        if view.loads and declared and list(view.aux_hf_indices) != list(declared):
            return ReferenceSpec("wiring", list(view.aux_hf_indices), why=f"what {engine} feeds")
    return ReferenceSpec("target_hidden", why="every engine feeds the declared wiring")


def engine_readings(draft_path: str, target_path: str) -> EngineReadings:
    """How each engine reads the draft on this target, and where they disagree (preflight's table),
    read inline from the config and the safetensors headers (backend/drafts/engine_table.py); only a
    pytorch_model.bin draft is read by preflight in the reader process. Kept until the draft's or the
    target's files change."""
    from backend.service.stamps import stamp

    files = [Path(draft_path, name) for name in DRAFT_FILES]
    return _engine_readings(
        str(draft_path), str(target_path), stamp(*files, Path(target_path, "config.json"))
    )


@lru_cache(maxsize=32)
def _engine_readings(draft_path: str, target_path: str, _stamp: tuple) -> EngineReadings:
    from backend.drafts.engine_table import read_engine_table
    from backend.service.readers import in_reader

    return read_engine_table(draft_path, target_path) or in_reader(
        read_engine_readings, draft_path, target_path
    )


def read_engine_readings(draft_path: str, target_path: str, progress=None) -> EngineReadings:
    """engine_readings' reading of a draft only torch reads (a reader job): preflight's table."""
    from backend.engine.preflight import preflight

    report = preflight(draft_path, target_path).result()
    return EngineReadings(
        report.engines,
        report.disagreements,
        report.training_engine,
        report.aux_hf_indices,
        report.wiring_source,
    )


# ----------------------------------------------------------------------------- wiring probes
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


def probe_settings(num_steps: int, budget: int, live: int, samples: list) -> SettingsUsed:
    """What a probe with these settings on these samples would use (ProbeSettings.describe), to match
    it against a stored probe's."""
    return ProbeSettings(num_steps, budget, live).describe(samples)


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


def has_chat_template(target_path: str) -> bool:
    """Whether the target directory's tokenizer carries a chat template, read from its files as
    transformers finds it (chat_template.jinja, chat_template.json, or tokenizer_config.json's
    `chat_template`); no tokenizer or model is loaded."""
    import json
    from pathlib import Path

    folder = Path(target_path)
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("chat_template"))
