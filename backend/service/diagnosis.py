"""`diagnose`: one verdict over every failure class (backend/diagnostics/diagnose.py), loaded once.
The CLI and the Diagnostics page both call `diagnose` here, so they print and show the same object."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from backend import BadInput
from backend.diagnostics.findings import DiagnosisResult
from backend.drafts.dflash_config import DFLASH
from backend.run.records import Progress, no_progress
from backend.service import models

# the engine whose numbers a served file holds -> the reading it runs (TensorRT-LLM, ModelOpt: none here)
SERVED_READINGS = {"sglang": "sglang", "sglext": "sglang", "vllm": "vllm", "llamacpp": "llamacpp"}


def serving_engine(engine: str, sglang: str | None, vllm: str | None, served: str | None = None) -> str:
    """The reading under test: the engine of the serving command when one is given, else --engine, else
    the engine whose numbers were given (`served`): the user's engine, whose misreading is the cause."""
    if sglang and vllm:
        raise BadInput("give one serving command: --sglang or --vllm, not both")
    named = "sglang" if sglang else "vllm" if vllm else None
    if named and engine not in (None, "", "auto", named):
        raise BadInput(f"--engine {engine} contradicts the {named} command; drop one of them")
    asked = engine if engine not in (None, "", "auto") else None
    return named or asked or SERVED_READINGS.get(served or "") or "auto"


def diagnose(
    target_path: str,
    draft_path: str,
    samples: list | None = None,
    options=None,
    progress: Progress = no_progress,
    db_url: str | None = None,
) -> DiagnosisResult:
    """The diagnosis of a target/draft pair on `samples` as `options` (a
    backend.diagnostics.diagnose.DiagnoseOptions; default: the CLI's defaults) says. Without samples,
    a wiring probe kept with the pair (in this server or at `db_url`) gives its answer."""
    from backend.data.features import load_feature_file
    from backend.diagnostics.diagnose import (
        DiagnoseOptions,
        Diagnosis,
        Subject,
        diagnose_loaded,
        preflight_findings,
    )
    from backend.diagnostics.lint import lint_command
    from backend.diagnostics.serving_features import request_lint
    from backend.drafts.readings import reading_of
    from backend.engine.preflight import preflight

    options = options or DiagnoseOptions()
    if options.served and options.served_numbers is None:  # read before any model loads
        from backend.data.served_acceptance import read_served
        from backend.service.observations import read_source

        numbers = read_served(*read_source(options.served), options.num_steps)
        options = replace(options, served_numbers=numbers)
    served = options.served_numbers.engine if options.served_numbers else None
    engine = serving_engine(options.engine, options.sglang, options.vllm, served)
    options = replace(options, engine=engine)
    if options.context is not None and options.context < 1:
        raise BadInput(f"--context {options.context}: must be a positive number of tokens")
    from backend.data.features import file_problem  # torch: imported where the work runs

    said = options.features and file_problem(Path(options.features), "training feature file")
    if said:
        raise BadInput(said)
    progress(0.0, "preflight")
    report = preflight(draft_path, target_path).result().to_dict()
    pair = {"target": str(target_path), "draft": str(draft_path)}
    if not report["ok"]:  # nothing else means anything until the draft loads
        diagnosis = Diagnosis(preflight_findings(report, engine), {"preflight": "ran: failed"})
        return diagnosis.result(**pair, engine=engine, aux_hf_indices=report["aux_hf_indices"])
    lint, penalties = None, {}
    if options.sglang or options.vllm:
        penalties = (
            lint_command(draft_path, options.sglang, options.vllm, target_path, request_file=options.request_file)
            .effective.get("penalties", {})
        )  # fmt: skip

        def lint(trained):  # once the probe has answered (diagnose_loaded)
            return (
                lint_command(
                    draft_path,
                    options.sglang,
                    options.vllm,
                    target_path,
                    trained,
                    request_file=options.request_file,
                )
                .result()
                .to_dict()["findings"]
            )

    elif options.request_file:
        request_findings, penalties = request_lint(options.request_file, engine)

        def lint(trained):
            return request_findings

    progress(0.02, "loading models")
    target, draft, _ = models.pair(target_path, draft_path, options.device, options.dtype)
    view, _ = reading_of(engine, None, draft, target.num_layers)  # BadInput when it cannot run the draft
    if getattr(draft.config, "method", None) == DFLASH:
        from backend.diagnostics.dflash_diagnose import diagnose_dflash

        found = lint([]) if lint is not None else []
        diagnosis = diagnose_dflash(
            target,
            draft,
            report,
            list(samples or []),
            found,
            options,
            progress,
            list(view.wiring.aux_hf_indices),
        )
        return diagnosis.result(
            **pair, engine=view.engine, aux_hf_indices=list(view.wiring.aux_hf_indices),
            wiring_source=view.wiring.source, n_samples=len(samples or []),
        )  # fmt: skip
    kept = None
    if not samples:
        from backend.service.kept_results import known_probe

        kept = known_probe(target_path, draft_path, db_url)
    subject = Subject(target, draft, draft_path, view, kept)
    features = load_feature_file(options.features, target.hidden_size) if options.features else None
    diagnosis = diagnose_loaded(
        subject, report, list(samples or []), lint, options, progress, penalties, features
    )
    return diagnosis.result(
        **pair,
        engine=view.engine,
        aux_hf_indices=list(view.wiring.aux_hf_indices),
        wiring_source=view.wiring.source,
        n_samples=len(samples or []),
    )
