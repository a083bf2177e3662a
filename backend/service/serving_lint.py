"""The serving-flag lint as the pages and the CLI run it (no model is loaded): one answer for the same draft,
command and database, its wiring findings held to a kept wiring probe (kept_results.py) and the chain it
recommends read off the draft's runs (the Speed-up what-if)."""

from __future__ import annotations

from pathlib import Path

from backend.diagnostics.lint_result import LintResult
from backend.service.kept_results import trained_wirings


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
    """(K, why) of the highest predicted speed-up (backend/diagnostics/whatif.py) on the finished greedy
    chain run of `draft_path` replayed alone with the most verify steps, the newest of equals (a batched run's times are its share of a batch
    forward: no cost of a served step); None without one. `trained`: the wirings the probe found the draft
    trained on when it rejected the declared one: a run fed one of them is preferred, and a K read off a
    run of another (broken) wiring says so."""
    from pathlib import Path

    from backend.diagnostics.whatif import predict
    from backend.service.runs import list_runs

    wanted = str(Path(draft_path).resolve())
    runs = list_runs(db_url, limit=200)
    # runs of a trained wiring first; then the run with the most verify steps (a K read off a few steps
    # moves with a few more), the newest of equals
    runs = sorted(
        runs,
        key=lambda r: (
            bool(trained) and list(r.aux_hf_indices) not in [list(t) for t in trained],
            -sum(r.measured.accept_histogram),
        ),
    )
    for run in runs:
        metrics, k = run.measured, run.resolved.num_steps
        histogram, chain = metrics.accept_histogram, run.resolved.greedy_chain
        timed = metrics.verify_ms_total and metrics.draft_ms_total
        alone = not metrics.batch_size  # a batched run's times are a batch forward's shares
        dflash = run.resolved.draft_method == "dflash"  # its rates do not carry to another K (whatif tab)
        if (
            run.status != "finished"
            or not histogram
            or not k
            or not chain
            or not timed
            or not alone
            or dflash
            or (run.request is not None and run.request.via == "trace")  # no target forward was timed
        ):
            continue
        if str(Path(run.draft_path).resolve()) != wanted:
            continue
        counts = [a for a, n in enumerate(histogram) for _ in range(n)]
        rows = predict(counts, k, metrics.draft_ms_total, metrics.verify_ms_total)
        if rows:
            top = max(rows, key=lambda r: r.predicted_speedup)
            return top.num_steps, (
                f"the Speed-up what-if's best K on run #{run.id}, {sum(histogram)} verify steps: predicted speed-up "
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
