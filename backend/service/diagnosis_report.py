"""One diagnosis as one file to attach to an issue for the training team: the verdict and its findings
with their fixes (the serving-flag lint's among them, when a serving command was given), what each check
did, the live accept length, the wiring probe's table, and the first verify steps of the pair's newest
finished run (drafted tokens, accepted count, bonus, the target's tokens), as JSON or as one
self-contained HTML page (every string from a file, a tokenizer or a user escaped). Torch-free: the page
and `diagnose --report` write it from a DiagnosisResult."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from pathlib import Path

from backend import BadInput

STEPS = 8  # verify steps of the newest run shown


def diagnosis_report(result, db_url: str | None = None, steps: int = STEPS) -> dict:
    """The report as a plain object (`result`: a DiagnosisResult; `db_url`: the store whose newest run of
    the pair it shows, None for none)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        speclens = version("speclens")
    except PackageNotFoundError:  # a checkout not installed
        speclens = "not installed"
    return {
        "speclens": speclens,
        "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "target": result.target,
        "draft": result.draft,
        "diagnosis": result.to_dict(),
        "run_excerpt": _run_excerpt(result.target, result.draft, db_url, steps),
    }


def _run_excerpt(target: str, draft: str, db_url: str | None, steps: int) -> dict | None:
    """The first verify steps of the newest finished run of this pair in the store (`db_url` None: no
    store to read), with token texts."""
    from backend.service.runs import get_run_with_steps, list_runs, token_text

    if db_url is None:
        return None
    try:
        runs = [r for r in list_runs(db_url, limit=500) if r.target_path == target and r.draft_path == draft]
    except BadInput:  # no store to read: the report holds the verdict alone
        return None
    finished = [r for r in runs if r.status == "finished"]
    if not finished:
        return None
    run, records = get_run_with_steps(db_url, finished[0].id)
    decode = token_text(target)  # None without a tokenizer.json: ids only

    def text(ids) -> list[str]:
        return [decode([i]) if decode is not None else str(i) for i in ids]

    verify = [s for s in records if s.drafted_ids][:steps]
    return {
        "run_id": run.id,
        "settings": run.request.settings_label if run.request else "",
        "accept_length": run.measured.mean_accept_length,
        "steps": [
            {
                "step": s.step_index + 1,
                "position": s.position,
                "drafted": text(s.drafted_ids),
                "accepted": s.accepted_count,
                "bonus": text([s.bonus_id])[0] if s.bonus_id is not None else None,
                "target": text(s.target_argmax_ids[: len(s.drafted_ids) + 1]),
            }
            for s in verify
        ],
    }


def check_report_path(path: str | Path) -> None:
    """BadInput, before any work, when the report could not be written there."""
    folder = Path(path).expanduser().parent
    if not folder.is_dir():
        raise BadInput(f"{path}: cannot write the report (no folder {folder})")


def write_report(report: dict, path: str | Path) -> Path:
    """`report` to `path`: HTML for a .html or .htm name, JSON otherwise."""
    path = Path(path)
    body = report_html(report) if path.suffix.lower() in (".html", ".htm") else report_json(report)
    try:
        path.write_text(body, encoding="utf-8")
    except OSError as error:
        raise BadInput(f"{path}: cannot write the report ({error.strerror or error})") from None
    return path


def report_json(report: dict) -> str:
    return json.dumps(report, indent=2, allow_nan=False, default=str) + "\n"


def report_html(report: dict) -> str:
    d = report["diagnosis"]
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>SpecLens diagnosis</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
        "text-align:left;vertical-align:top}th{background:#f4f4f4}.fail{color:#b71c1c}.warn{color:#e65100}"
        ".info{color:#1565c0}code{background:#f4f4f4;padding:0 3px}.ok{color:#2e7d32}</style></head><body>",
        f"<h1>SpecLens diagnosis: <span class='{e(d['verdict'])}'>{e(d['verdict'].upper())}</span></h1>",
        f"<p><b>{e(d['headline'])}</b></p>",
        f"<p>Target <code>{e(report['target'])}</code>, draft <code>{e(report['draft'])}</code>; read as "
        f"{e(d.get('engine') or '')}, aux HF indices {e(str(d.get('aux_hf_indices')))}; {d.get('n_samples', 0)} "
        f"samples. SpecLens {e(report['speclens'])}, written {e(report['written_at'])}.</p>",
    ]
    if d.get("next_step"):
        parts.append(f"<p><b>Next:</b> {e(d['next_step'])}.</p>")
    measured = d.get("measured")
    if measured:
        parts.append(
            f"<p>Live accept length {measured['live_accept_length']:.3f} over {measured['samples']} samples "
            f"({measured['verify_steps']} verify steps); teacher-forced prediction "
            f"{_number(measured.get('predicted_accept_length'))}; assuming {e(measured['assumes'])}. "
            f"{e(measured['definition'])}.</p>"
        )
    parts.append("<h2>Findings</h2>")
    parts.append(
        _table(
            ["severity", "class", "finding", "fix"],
            [
                (
                    f"<span class='{e(f['severity'])}'>{e(f['severity'])}</span>",
                    e(f["class"]),
                    e(f["message"]),
                    e(f.get("fix") or ""),
                )
                for f in d["findings"]
            ],
        )  # fmt: skip
        if d["findings"]
        else "<p>None.</p>"
    )
    parts.append("<h2>Checks</h2>")
    parts.append(_table(["check", "what it did"], [(e(k), e(str(v))) for k, v in d["checks"].items()]))
    probe = d.get("probe")
    if probe and probe.get("candidates"):
        parts.append("<h2>Wiring probe</h2>")
        parts.append(f"<p>{e(probe.get('verdict') or '')}</p>")
        parts.append(
            _table(
                ["HF indices", "loss (nats)", "acc_0", "predicted AL", "live AL", "why tried"],
                [
                    (
                        e(str(c.get("aux_hf_indices"))),
                        _number(c.get("loss")),
                        _number(c.get("acc_step0")),
                        _number(c.get("predicted_accept_length")),
                        _number(c.get("live_accept_length")),
                        e(c.get("label") or ""),
                    )
                    for c in probe["candidates"]
                ],
            )  # fmt: skip
        )
    excerpt = report.get("run_excerpt")
    if excerpt:
        parts.append(
            f"<h2>The first verify steps of run {excerpt['run_id']}</h2><p>{e(excerpt['settings'])}; accept "
            f"length {_number(excerpt['accept_length'])}. Drafted tokens against the target's at the same "
            "verify rows: the first differing one is where the step rejected.</p>"
        )
        parts.append(
            _table(
                ["step", "position", "drafted", "target", "accepted", "bonus"],
                [
                    (
                        str(s["step"]),
                        str(s["position"]),
                        _tokens(s["drafted"]),
                        _tokens(s["target"]),
                        str(s["accepted"]),
                        _tokens([s["bonus"]] if s["bonus"] is not None else []),
                    )
                    for s in excerpt["steps"]
                ],
            )  # fmt: skip
        )
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _table(header: list[str], rows: list[tuple]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _tokens(texts: list[str]) -> str:
    return " ".join(f"<code>{html.escape(repr(t)[1:-1])}</code>" for t in texts)


def _number(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"
