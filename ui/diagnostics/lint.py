"""The serving-flag lint tab: an SGLang launch command, vLLM arguments or a llama-server command against
the active draft."""

from __future__ import annotations

import streamlit as st

from backend import BadInput
from backend.service import kept_results, serving_lint
from ui import state
from ui.diagnostics.common import show_finding
from ui.html import md

ENGINE_NAMES = {"sglang": "SGLang", "vllm": "vLLM", "llamacpp": "llama.cpp"}


def _example(engine: str) -> str:
    if engine == "SGLang":
        return (
            f"python -m sglang.launch_server --model-path {state.target_path()} --speculative-algorithm EAGLE "
            f"--speculative-draft-model-path {state.draft_path()} --speculative-num-steps 1 "
            "--speculative-eagle-topk 1 --speculative-num-draft-tokens 16"
        )
    if engine == "llama.cpp":
        return (
            "llama-server -m target-f32.gguf -md draft-f32.gguf --spec-type draft-eagle3 "
            "--spec-draft-n-max 4 -c 2048"
        )
    return (
        f"vllm serve {state.target_path()} --speculative-config "
        f'\'{{"method": "eagle3", "model": "{state.draft_path()}", "num_speculative_tokens": 3}}\''
    )


def _recommended(report) -> None:
    """The command with every fix the findings make on it, above the findings it comes from."""
    if not report.recommended_command:
        return
    st.markdown("**Recommended command**: yours with the fixes below applied")
    st.code(report.recommended_command, language="bash", wrap_lines=True)
    notes = ["applies " + ", ".join(f"`{code}`" for code in report.recommended_applies)]
    if report.recommended_leaves:
        notes.append(
            "outside the command (the draft's files, the requests): "
            + ", ".join(f"`{code}`" for code in report.recommended_leaves)
        )
    st.caption("; ".join(notes) + ".")


def _render(report, trained) -> None:
    """`report`: the lint's LintResult (backend/diagnostics/lint.py)."""
    if not report.findings:
        st.success("No findings.")
    _recommended(report)
    for finding in report.findings:
        show_finding(finding)
    if report.effective_flags:
        engine = ENGINE_NAMES.get(report.engine, report.engine)
        st.caption(f"{engine} will run: `{report.effective_flags}`")
    if trained:
        st.caption(
            "Wiring findings use the layers the wiring probe found this draft trained on: "
            + " or ".join(f"HF {w}" for w in trained)
            + " (the declared wiring was rejected"
            + ("; the probe cannot tell these apart)." if len(trained) > 1 else ").")
        )
    else:
        st.caption(
            "Wiring suggestions here (aux layer ids) follow the draft's declared wiring. If the "
            "declaration is wrong, so are they: the Wiring probe tab checks it."
        )


def lint_tab() -> None:
    st.markdown(
        "Paste an SGLang launch command, vLLM arguments or a llama-server command; findings are checked "
        "against the active draft (for llama.cpp: the GGUF named by -md when it is on this machine, else what "
        "llama.cpp's converter writes from the draft's config)."
    )
    engine = st.radio("Engine", ["SGLang", "vLLM", "llama.cpp"], horizontal=True, key="lint_engine")
    command = st.text_area(  # keyed by the active draft: switching drafts shows its own example
        "Command line",
        _example(engine),
        key=f"lint_command_{engine}_{abs(hash(state.draft_path()))}",
        height=100,
    )
    if st.button("Lint", key="lint_run"):
        try:
            report = serving_lint.lint(state.draft_path(), command, engine, state.target_path(), state.db())
            trained = kept_results.trained_wirings(state.target_path(), state.draft_path(), state.db())
        except BadInput as error:
            st.error(md(error))
        else:
            _render(report, trained)
