"""Diagnostics: why a draft that trains well is rejected when served.

Checkpoint doctor, wiring probe, train-vs-serve hidden-state diff, serving-flag lint, training accuracy
vs live acceptance, and the speed-up what-if. Model work runs as background tasks."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from backend import BadInput
from backend.diagnostics.mismatch import is_mismatch
from backend.diagnostics.whatif import MODEL, TREE_MODEL, predict, predict_tree
from backend.engine.wiring import parse_aux_indices
from backend.service import checks, tasks
from backend.service.requests import ReplayRequest
from ui import charts, state
from ui.diagnosis import diagnose_form, show_diagnosis
from ui.html import CSS, md, mismatch_html
from ui.pickers import first_samples, run_label
from ui.runs import ACCEPT_LENGTH_HELP, get_run, list_runs
from ui.tables import engine_readings as engine_table
from ui.taskview import task_panel
from ui.tokens import Pieces
from ui.verdict import show_verdict

PROBE_HINT = (
    "This check takes the draft's declared wiring as true. It cannot tell which target layers the draft "
    "was trained on: a draft declared with the wrong layers passes it. The Wiring probe tab checks that."
)


st.set_page_config(page_title="SpecLens · Diagnostics", layout="wide")
state.sidebar()
st.title("Diagnostics")
st.caption(f"Target {md(state.target_path())} · draft {md(state.draft_path())} (change them in the sidebar)")


def feature_path() -> str | None:
    """The training feature file the user named for the active draft (the verdict's input), if any:
    a feature file says what one training run fed, so it is never assumed to belong to a draft."""
    return (st.session_state.get("verdict_features") or "").strip() or None


def stale_note(signals: dict) -> str | None:
    pair = (signals.get("target"), signals.get("draft"))
    if pair != (state.target_path(), state.draft_path()):
        return f"Stale: these signals are for draft {pair[1]} on {pair[0]}, not the active pair."
    return None


st.subheader("Verdict")
st.caption(
    "Why is this draft accepted less than it should be? One verdict over every failure class users report "
    "(aux wiring, variant flags, vocab mapping, RoPE and context, position offset, chat template, repetition, "
    "serving flags, precision, train-vs-serve gap): the same object as `python -m backend diagnose --json`. "
    "With samples the wiring and reading probes, the template check and live replays run."
)
asked = diagnose_form()
if asked is not None:
    samples, options = asked
    st.session_state["diagnose_task"] = tasks.start_diagnose(
        state.target_path(), state.draft_path(), samples, options
    )


def render_diagnosis(result: dict) -> None:
    show_diagnosis(result, stale_note(result))


task_panel("diagnose_task", render_diagnosis, adopt="diagnose")

with st.expander(
    "Cheap checks only (no samples): preflight, the lint of the draft's own config, train-vs-serve"
):
    st.text_input(
        "Training feature file of this draft (optional .ckpt)",
        "",
        key="verdict_features",
        help="A SpecForge feature file from the run that trained the active draft (the bundled miswired draft's "
        "are demo/data/features/data_0.ckpt). With it the verdict compares what serving feeds with what "
        "training fed; without it only the probe can see the wiring.",
    )
    if st.button("Run the cheap checks", key="verdict_run"):
        st.session_state["verdict_task"] = tasks.start_signals(
            state.target_path(), state.draft_path(), feature_path()
        )

    def render_signals(signals: dict) -> None:
        show_verdict(checks.verdict(signals, signals["target"], signals["draft"]), stale_note(signals))

    task_panel("verdict_task", render_signals, adopt="signals")

doctor_tab, probe_tab, diff_tab, lint_tab, agreement_tab, whatif_tab, server_tab = st.tabs(
    [
        "Checkpoint doctor",
        "Wiring probe",
        "Train vs serve",
        "Serving-flag lint",
        "Accuracy vs live",
        "Speed-up what-if",
        "Server vs replay",
    ]
)

with doctor_tab:
    st.markdown(
        "The preflight report with the resolved wiring, the share of a dataset's tokens the draft vocab can "
        "reach, and a d2t comparison with a second draft (a regenerated mapping is flagged)."
    )
    samples = first_samples("doctor", default_n=48)
    others = ["(none)"] + [n for n, p in state.drafts().items() if p != state.draft_path()]
    other = st.selectbox("Compare d2t with", others, key="doctor_other")
    if st.button("Run the doctor", key="doctor_run"):
        st.session_state["doctor_task"] = tasks.start_doctor(
            state.target_path(), state.draft_path(), samples, state.drafts().get(other), feature_path()
        )

    def render_doctor(result):
        report = result["preflight"]
        signals = result["signals"]
        show_verdict(checks.verdict(signals, signals["target"], signals["draft"]), stale_note(signals))
        st.markdown(
            f"Preflight: **{'passed' if report['ok'] else 'FAILED'}** · declared aux HF indices "
            f"{report['aux_hf_indices']} ({md(report.get('wiring_source', ''))})"
        )
        st.dataframe(pd.DataFrame(report["checks"]), hide_index=True, key="doctor_checks")
        if report.get("engines"):
            st.markdown("**How each engine reads this draft**")
            engine_table(report, key="doctor_engines")
        if "coverage" in result:
            cover = result["coverage"]
            c1, c2 = st.columns(2)
            c1.metric("Vocab coverage, all tokens", f"{cover['all_tokens']:.1%}", help=cover["definition"])
            c2.metric(
                "Vocab coverage, loss-masked tokens",
                f"{(cover['loss_masked_tokens'] or 0):.1%}",
                help=cover["definition"],
            )
        if "mapping_comparison" in result:
            comparison = result["mapping_comparison"]
            (st.warning if comparison.get("regenerated") else st.info)(comparison["message"])

    task_panel("doctor_task", render_doctor, adopt="doctor")

with probe_tab:
    st.markdown(
        "Which three target hidden states was this draft trained on? Teacher-forced accuracy under "
        "candidate wirings (declared in each convention, defaults, ±1 shifts, embedding output, local search)."
    )
    samples = first_samples("probe", default_n=8)
    c1, c2, c3 = st.columns(3)
    steps = int(c1.number_input("K (TTT steps)", 1, 8, 4, key="probe_steps"))
    budget = int(c2.number_input("Search budget (extra candidates)", 0, 200, 40, key="probe_budget"))
    live = int(c3.number_input("Live replays on first N samples", 0, 5, 2, key="probe_live"))
    if st.button("Run the probe", key="probe_run") and samples:
        st.session_state["probe_task"] = tasks.start_probe(
            state.target_path(), state.draft_path(), samples, steps, budget, live
        )

    def render_probe(report):
        (st.success if report["confirmed"] else st.error)(report["verdict"])
        table = pd.DataFrame(
            [
                {
                    "HF indices": str(c["aux_hf_indices"]),
                    "acc_0": c["acc_step0"],
                    "predicted accept length": c["predicted_accept_length"],
                    "live accept length": c["live_accept_length"],
                    "why tried": c["label"],
                }
                for c in report["candidates"]
            ]
        )
        st.dataframe(table, hide_index=True, key="probe_table")
        st.caption(
            f"{len(report['candidates'])} candidates on {report['n_samples']} samples in "
            f"{report['seconds']:.1f} s. acc_0: teacher-forced top-1 accuracy at TTT step 0; predicted accept "
            "length = 1 + sum_k prod_(j<=k) acc_j."
        )
        st.code(
            f"# SGLang (draft config.json)\n{json.dumps(report['config']['sglang'])}\n"
            f"# vLLM (draft config.json)\n{json.dumps(report['config']['vllm'])}",
            language="json",
        )

    def remember(report):
        checks.remember_probe(report["target"], report["draft"], report)

    task_panel("probe_task", render_probe, on_finish=remember, adopt="probe")

with diff_tab:
    st.markdown(
        "Compare the features serving feeds with those training stored (SpecForge .ckpt), per token and "
        "per layer chunk; name the first mismatch and find which HF index each training chunk really is."
    )
    path = st.text_input("Feature file (.ckpt)", "demo/data/features/data_0.ckpt", key="diff_path")
    if st.button("Diff", key="diff_run"):
        st.session_state["diff_task"] = tasks.start_train_vs_serve(
            state.target_path(), state.draft_path(), path
        )

    def render_diff(result):
        first = result["first_mismatch"]
        if first is None:
            st.success("Serving features equal the training features at every token and chunk.")
        else:
            pieces = Pieces(result["target"])
            token = result["input_ids"][first["position"]]
            st.error(
                f"First mismatch: {first['chunk']} at token {first['position']} ({pieces(token)!r}): cosine "
                f"{first['cosine']:.3f}, norm ratio {first['norm_ratio']:.2f}."
            )
        st.caption(
            "Tokens of the feature file: red where a chunk mismatches (hover for each chunk's cosine and "
            "norm ratio)"
        )
        st.html(
            CSS + mismatch_html(result["input_ids"], result["rows"], Pieces(result["target"]), is_mismatch)
        )
        trained = result["training_aux_hf_indices"]
        st.markdown(
            f"Serving feeds HF **{result['serving_aux_hf_indices']}**; the stored training chunks equal HF "
            f"**{trained}** (None = no layer matches)."
        )
        st.dataframe(pd.DataFrame(result["training_chunk_matches"]), hide_index=True, key="diff_matches")
        st.dataframe(pd.DataFrame(result["summary"]), hide_index=True, key="diff_summary")
        auto = st.toggle("Auto colour range", key="diff_auto", help="Off: the scales are fixed by meaning.")
        left, right = st.columns(2)
        left.plotly_chart(
            charts.heatmap(
                result["rows"], "cosine", "cosine (serve vs train)", result["chunk_names"], auto_range=auto
            ),
            key="diff_cosine",
        )
        right.plotly_chart(
            charts.heatmap(
                result["rows"],
                "norm_ratio",
                "norm ratio |serve| / |train|",
                result["chunk_names"],
                auto_range=auto,
            ),
            key="diff_ratio",
        )
        st.caption("; ".join(f"{k}: {v}" for k, v in result["definitions"].items()))

    task_panel("diff_task", render_diff, adopt="diff")

with lint_tab:
    st.markdown(
        "Paste an SGLang launch command or vLLM arguments; findings are checked against the active draft."
    )
    engine = st.radio("Engine", ["SGLang", "vLLM"], horizontal=True, key="lint_engine")
    example = (
        f"python -m sglang.launch_server --model-path {state.target_path()} --speculative-algorithm EAGLE "
        f"--speculative-draft-model-path {state.draft_path()} --speculative-num-steps 1 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 16"
        if engine == "SGLang"
        else f"vllm serve {state.target_path()} --speculative-config "
        f'\'{{"method": "eagle3", "model": "{state.draft_path()}", "num_speculative_tokens": 3}}\''
    )
    command = st.text_area(  # keyed by the active draft: switching drafts shows its own example
        "Command line", example, key=f"lint_command_{engine}_{abs(hash(state.draft_path()))}", height=100
    )
    if st.button("Lint", key="lint_run"):
        try:
            trained = checks.trained_wiring(state.target_path(), state.draft_path())
            report = checks.lint(state.draft_path(), command, engine, state.target_path(), trained)
        except BadInput as error:
            st.error(md(error))
        else:
            if not report["findings"]:
                st.success("No findings.")
            for finding in report["findings"]:
                show = {"error": st.error, "warning": st.warning, "info": st.info}[finding["severity"]]
                show(
                    f"**{finding['severity'].upper()} · {finding['code']}**: {finding['message']}\n\n"
                    f"Fix: {finding['fix']}"
                )
            if report["effective"]:
                st.caption(f"{report['engine']} will run: {md(report['effective'])}")
            if trained is not None:
                st.caption(
                    f"Wiring findings use the layers the wiring probe found this draft trained on: HF {trained} "
                    "(the declared wiring was rejected)."
                )
            else:
                st.caption(
                    "Wiring suggestions here (aux layer ids) follow the draft's declared wiring. If the "
                    "declaration is wrong, so are they: the Wiring probe tab checks it."
                )

with agreement_tab:
    st.markdown("Teacher-forced accuracy (what training reports) next to live accept length, per sample.")
    samples = first_samples("agreement", default_n=6)
    c1, c2, c3 = st.columns(3)
    steps = int(c1.number_input("K", 1, 8, 4, key="agreement_steps"))
    max_new = int(c2.number_input("Max new tokens", 8, 512, 96, key="agreement_max_new"))
    claimed = c3.text_input(
        "Training wiring (HF indices, optional)",
        "",
        key="agreement_training_wiring",
        help="The wiring the training run fed (e.g. the probe's answer). Empty: the serving wiring.",
    )
    if st.button("Measure", key="agreement_run") and samples:
        try:
            training = parse_aux_indices(claimed)
        except BadInput as error:
            st.error(f"Training wiring: {md(error)}")
        else:
            st.session_state["agreement_task"] = tasks.start_agreement(
                state.target_path(), state.draft_path(), samples, steps, max_new, training
            )

    def render_agreement(result):
        frame = pd.DataFrame(result["rows"]).drop(columns=["acc_per_step"])
        summary = result["summary"]
        if summary["samples"]:
            m = st.columns(4)
            m[0].metric("Mean teacher acc_0", f"{summary['mean acc_0']:.3f}")
            m[1].metric("Mean predicted accept length", f"{summary['mean predicted accept length']:.2f}")
            m[2].metric("Mean live accept length", f"{summary['mean live accept length']:.2f}")
            m[3].metric("Live / predicted", f"{summary['live / predicted']:.2f}")
            if summary["flagged"]:
                st.error(
                    f"This draft's live accept length is far below what its teacher accuracy predicts "
                    f"(mean live < {summary['flag_ratio']} x mean predicted): served, it does not see what it "
                    "was trained on. Check the wiring (Wiring probe tab) and the vocab mapping (doctor)."
                )
            st.plotly_chart(
                charts.predicted_vs_live(result["rows"], summary["flag_ratio"]), key="agreement_scatter"
            )
        st.dataframe(frame, hide_index=True, key="agreement_table")
        flagged = int(frame["flagged"].sum())
        (st.warning if flagged else st.info)(
            f"{flagged} of {len(frame)} samples flagged. {result['definition']}."
        )
        if not flagged:
            st.info(
                "Without a claimed training wiring, teacher-forced and live acceptance both use the declared "
                "wiring, so a wrong declaration shows in neither. " + PROBE_HINT
            )

    task_panel("agreement_task", render_agreement, adopt="agreement")

with whatif_tab:
    st.markdown(
        "Predict accept length and speed-up for other K from a run's measured per-position conditional "
        "acceptance and draft/verify times; check the prediction against a real replay at another K."
    )
    runs = [
        r
        for r in list_runs(limit=200)
        if r.status == "finished"
        and r.metrics.get("accept_histogram")
        and int(r.params.get("topk") or 1) == 1
        and not r.params.get("sampling_rule")
    ]
    if not runs:
        st.info(
            "Needs a finished greedy chain run (the model reads a chain's acceptance): start one on Decode."
        )
    else:
        labels = {r.id: run_label(r) for r in runs}
        run_id = st.selectbox("Run", list(labels), key="whatif_run", format_func=labels.get)
        run, steps = get_run(run_id)
        counts = [s.accepted_count for s in steps]
        num_steps = run.params.get("num_steps")
        rows = [
            r.to_dict()
            for r in predict(
                counts, num_steps, run.metrics.get("draft_ms_total", 0), run.metrics.get("verify_ms_total", 0)
            )
        ]
        measured = {
            num_steps: run.metrics.get("mean_accept_length"),
            **st.session_state.get("whatif_measured", {}).get(run_id, {}),
        }
        st.plotly_chart(charts.whatif(rows, measured), key="whatif_chart")
        st.dataframe(pd.DataFrame(rows), hide_index=True, key="whatif_table")
        st.caption(f"Model: {MODEL}. {ACCEPT_LENGTH_HELP}. 'extrapolated' rows reuse the last measured rate.")
        st.markdown("**Check with a real replay** (SGLang's flags; topk 1 is a chain of K)")
        w1, w2, w3 = st.columns(3)
        other_k = int(w1.number_input("K (steps)", 1, 8, 2 if num_steps != 2 else 3, key="whatif_k"))
        other_topk = int(w2.number_input("topk", 1, 16, 1, key="whatif_topk"))
        other_tokens = int(
            w3.number_input(
                "Draft tokens N (0: K+1)", 0, 256, 0 if other_topk == 1 else 8, key="whatif_tokens"
            )
        )
        shape = (other_k, other_topk, other_tokens or other_k + 1)
        tree_guess = None
        if other_topk > 1 and not other_tokens:
            st.info("Set the draft tokens N: SGLang needs --speculative-num-draft-tokens with topk > 1.")
        elif other_topk > 1:
            tree_guess = predict_tree(steps, *shape)
            if tree_guess is None:
                st.info("A tree prediction needs a recorded greedy run (its top alternatives).")
            else:
                st.markdown(
                    f"Tree (steps {shape[0]}, topk {shape[1]}, N {shape[2]}): predicted accept length "
                    f"**{tree_guess.predicted_accept_length:.2f}**"
                    + (
                        " (N - 1 < topk x steps: the budget may cut siblings)"
                        if tree_guess.budget_limited
                        else ""
                    )
                    + (
                        " (extrapolated past the recorded depth or alternatives)"
                        if tree_guess.extrapolated
                        else ""
                    ),
                    help=TREE_MODEL,
                )
        if st.button("Replay with these settings", key="whatif_replay"):
            try:
                request = ReplayRequest(
                    run.target_path,
                    run.draft_path,
                    prompt_ids=tuple(run.prompt_ids),
                    num_steps=other_k,
                    max_new_tokens=max(1, len(run.output_ids)),
                    sample_ref=run.sample_ref,
                    sample_id=run.sample_id,
                    aux_hf_indices=run.params.get("wiring_override") or None,
                    engine=run.params.get("engine_requested") or "auto",
                    topk=other_topk,
                    num_draft_tokens=other_tokens or None,
                )
            except BadInput as error:
                st.error(str(error))
            else:
                predicted = (
                    tree_guess.predicted_accept_length
                    if tree_guess is not None
                    else next((r["predicted_accept_length"] for r in rows if r["num_steps"] == other_k), None)
                )
                st.session_state["whatif_pending"] = (run_id, shape, predicted)
                st.session_state["whatif_task"] = tasks.start_replay(
                    state.db(), request, label=f"what-if check steps={shape[0]} topk={shape[1]} N={shape[2]}"
                )

        def keep_measurement(result: dict) -> None:
            checked_run, checked, _ = st.session_state.get("whatif_pending", (None, None, None))
            if checked_run is not None and checked[1] == 1:  # chains join the chart at their K
                st.session_state.setdefault("whatif_measured", {}).setdefault(checked_run, {})[checked[0]] = (
                    result["mean_accept_length"]
                )

        def show_measurement(result: dict) -> None:
            checked_run, checked, predicted = st.session_state.get("whatif_pending", (None, None, None))
            if checked_run == run_id and result["mean_accept_length"] is not None:
                st.success(
                    f"steps {checked[0]}, topk {checked[1]}, N {checked[2]}: measured accept length "
                    f"{result['mean_accept_length']:.2f} (run {result['run_id']})"
                    + ("" if predicted is None else f", predicted {predicted:.2f}")
                )

        task_panel("whatif_task", show_measurement, on_finish=keep_measurement)
with server_tab:
    st.markdown(
        "Put the server's own numbers beside the replay: paste an SGLang server log or a vLLM `/metrics` scrape "
        "(or give a file path or URL). The accept length, the settings the server ran with, the flag findings and "
        "the offline replay of the active draft at the same K are shown together. The bundled demo has a log in "
        "the seed story's situation to try: `demo/data/serving/sglang_seed.log` (constructed from SpecLens's "
        "replay of `miswired`, as its first line says; give it as the path below with `miswired` active)."
    )
    engine_name = st.radio("Engine", ["SGLang log", "vLLM metrics"], horizontal=True, key="server_engine")
    pasted = st.text_area("Paste the log or the scrape", "", height=160, key="server_text")
    upload = st.file_uploader("...or upload it", type=["log", "txt", "prom"], key="server_upload")
    location = st.text_input("...or a file path or URL (read with a 10 s timeout)", "", key="server_location")
    earlier = ""
    if engine_name == "vLLM metrics":
        earlier = st.text_area(
            "Optional earlier scrape (the window is the later minus the earlier)",
            "",
            height=80,
            key="server_earlier",
        )
    if st.button("Compare", key="server_compare"):
        from backend.service import observations

        engine_key = "sglang" if engine_name == "SGLang log" else "vllm"
        try:
            if location.strip():
                texts = [observations.read_source(location.strip())]
            elif upload is not None:
                try:
                    texts = [(upload.getvalue().decode("utf-8"), upload.name)]
                except UnicodeDecodeError as error:
                    raise BadInput(f"{upload.name}: not UTF-8 text") from error
            elif pasted.strip():
                texts = [(pasted, "pasted text")]
            else:
                raise BadInput("paste a log or a scrape, upload one, or give a path or URL")
            if earlier.strip():
                texts = [(earlier, "earlier pasted scrape"), *texts]
            st.session_state["server_result"] = observations.observe_texts(
                state.db(), engine_key, texts, state.draft_path(), state.target_path()
            )
        except BadInput as error:
            st.session_state["server_result"] = {"error": str(error)}
    result = st.session_state.get("server_result")
    if result and "error" in result:
        st.error(result["error"])
    elif result:
        replay = result["replay"]
        c1, c2, c3 = st.columns(3)
        c1.metric(
            "Server accept length",
            "n/a" if result["accept_length"] is None else f"{result['accept_length']:.2f}",
            help=result["definition"],
        )
        c2.metric(
            f"Replay accept length (K={result['num_steps']})",
            "n/a" if replay["accept_length"] is None else f"{replay['accept_length']:.2f}",
            help=f"{ACCEPT_LENGTH_HELP}; pooled over {replay['runs']} finished replays of the active draft",
        )
        c3.metric("Observation", f"#{result['observation_id']}", help=result["source"])
        (st.warning if "suspect" in result["verdict"] else st.info)(result["verdict"])
        if result.get("settings"):
            st.caption("Settings the server ran with (after its own rewrites):")
            st.dataframe(pd.DataFrame([result["settings"]]), hide_index=True, key="server_settings")
        series = {}
        if result.get("per_position"):
            series["server P(a >= i)"] = result["per_position"]
        if replay.get("per_position_marginal"):
            series["replay P(a >= i)"] = replay["per_position_marginal"]
        if series:
            st.plotly_chart(
                charts.acceptance_bars(series, "Per-position acceptance, server vs replay"),
                key="server_positions",
            )
        for finding in result["lint"]:
            show = {"error": st.error, "warning": st.warning, "info": st.info}[finding["severity"]]
            show(f"**{finding['severity'].upper()} · {finding['code']}**: {finding['message']}")
st.html(CSS)
