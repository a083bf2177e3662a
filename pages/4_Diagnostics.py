"""Diagnostics: why a draft that trains well is rejected when served.

Checkpoint doctor, wiring probe, train-vs-serve hidden-state diff, serving-flag lint, training accuracy
vs live acceptance, and the speed-up what-if. Model work runs as background tasks."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from backend import BadInput, tasks
from db import store
from ui import charts, state
from ui.html import CSS
from ui.runs import ACCEPT_LENGTH_HELP, get_run, list_runs
from ui.taskview import task_panel
from ui.tokens import Pieces

st.set_page_config(page_title="SpecLens · Diagnostics", layout="wide")
state.sidebar()
st.title("Diagnostics")
st.caption(f"Target `{state.target_path()}` · draft `{state.draft_path()}` (change them in the sidebar)")

with store.session_scope(state.factory()) as session:
    datasets = store.list_datasets(session)


def dataset_samples(key: str, default_n: int = 8):
    if not datasets:
        st.warning("No dataset: import one on the Samples page.")
        return []
    ids = [d.id for d in datasets]
    c1, c2 = st.columns(2)
    dataset_id = c1.selectbox("Dataset", ids, key=f"{key}_dataset",
                              format_func=lambda i: next(f"{d.id}: {d.name} ({d.sample_count})"
                                                         for d in datasets if d.id == i))
    with store.session_scope(state.factory()) as session:
        samples = store.get_samples(session, dataset_id)
    count = c2.number_input("Samples", 1, max(1, len(samples)), min(default_n, len(samples)), key=f"{key}_n")
    return samples[: int(count)]


doctor_tab, probe_tab, diff_tab, lint_tab, agreement_tab, whatif_tab = st.tabs(
    ["Checkpoint doctor", "Wiring probe", "Train vs serve", "Serving-flag lint", "Accuracy vs live", "Speed-up what-if"])

with doctor_tab:
    st.markdown("The preflight report with the resolved wiring, the share of a dataset's tokens the draft vocab can "
                "reach, and a d2t comparison with a second draft (a regenerated mapping is flagged).")
    samples = dataset_samples("doctor", default_n=48)
    others = ["(none)"] + [n for n, p in state.drafts().items() if p != state.draft_path()]
    other = st.selectbox("Compare d2t with", others, key="doctor_other")
    if st.button("Run the doctor", key="doctor_run"):
        from backend.doctor import doctor

        draft, target, second = state.draft_path(), state.target_path(), state.drafts().get(other)
        st.session_state["doctor_task"] = tasks.start_batch(
            "doctor", "checkpoint doctor", lambda progress: doctor(draft, target, samples, second))

    def render_doctor(result):
        report = result["preflight"]
        (st.success if report["ok"] else st.error)(
            f"Preflight {'passed' if report['ok'] else 'FAILED'}; aux HF indices {report['aux_hf_indices']} "
            f"({report.get('wiring_source', '')})")
        st.dataframe(pd.DataFrame(report["checks"]), hide_index=True, key="doctor_checks")
        if "coverage" in result:
            cover = result["coverage"]
            c1, c2 = st.columns(2)
            c1.metric("Vocab coverage, all tokens", f"{cover['all_tokens']:.1%}", help=cover["definition"])
            c2.metric("Vocab coverage, loss-masked tokens", f"{(cover['loss_masked_tokens'] or 0):.1%}",
                      help=cover["definition"])
        if "mapping_comparison" in result:
            comparison = result["mapping_comparison"]
            (st.warning if comparison.get("regenerated") else st.info)(comparison["message"])
    task_panel("doctor_task", render_doctor)

with probe_tab:
    st.markdown("Which three target hidden states was this draft trained on? Teacher-forced accuracy under "
                "candidate wirings (declared in each convention, defaults, ±1 shifts, embedding output, local search).")
    samples = dataset_samples("probe", default_n=8)
    c1, c2, c3 = st.columns(3)
    steps = int(c1.number_input("K (TTT steps)", 1, 8, 4, key="probe_steps"))
    budget = int(c2.number_input("Search budget (extra candidates)", 0, 200, 40, key="probe_budget"))
    live = int(c3.number_input("Live replays on first N samples", 0, 5, 2, key="probe_live"))
    if st.button("Run the probe", key="probe_run") and samples:
        st.session_state["probe_task"] = tasks.start_probe(state.target_path(), state.draft_path(), samples, steps,
                                                           budget, live)

    def render_probe(report):
        (st.success if report["confirmed"] else st.error)(report["verdict"])
        table = pd.DataFrame([{"HF indices": str(c["aux_hf_indices"]), "acc_0": c["acc_step0"],
                               "predicted accept length": c["predicted_accept_length"],
                               "live accept length": c["live_accept_length"], "why tried": c["label"]}
                              for c in report["candidates"]])
        st.dataframe(table, hide_index=True, key="probe_table")
        st.caption(f"{len(report['candidates'])} candidates on {report['n_samples']} samples in "
                   f"{report['seconds']:.1f} s. acc_0: teacher-forced top-1 accuracy at TTT step 0; predicted accept "
                   "length = 1 + sum_k prod_(j<=k) acc_j.")
        st.code(f"# SGLang (draft config.json)\n{json.dumps(report['config']['sglang'])}\n"
                f"# vLLM (draft config.json)\n{json.dumps(report['config']['vllm'])}", language="json")
    task_panel("probe_task", render_probe)

with diff_tab:
    st.markdown("Compare the features serving feeds with those training stored (SpecForge .ckpt), per token and "
                "per layer chunk; name the first mismatch and find which HF index each training chunk really is.")
    path = st.text_input("Feature file (.ckpt)", "demo/data/features/data_0.ckpt", key="diff_path")
    if st.button("Diff", key="diff_run"):
        target_dir, draft_dir = state.target_path(), state.draft_path()

        def diff_work(progress):
            from backend.diffs import load_feature_file, train_vs_serve

            progress(0.1, "loading models")
            target, _, wiring = tasks.load_pair(target_dir, draft_dir)
            features = load_feature_file(path, target.hidden_size)
            progress(0.4, "recomputing serving features")
            diff = train_vs_serve(target, features, list(wiring.aux_hf_indices))
            return {**diff.to_dict(), "rows": diff.rows, "chunk_names": diff.chunk_names,
                    "input_ids": features.input_ids, "target": target_dir}
        st.session_state["diff_task"] = tasks.start_batch("diff", f"train vs serve {path}", diff_work)

    def render_diff(result):
        first = result["first_mismatch"]
        if first is None:
            st.success("Serving features equal the training features at every token and chunk.")
        else:
            pieces = Pieces(result["target"])
            token = result["input_ids"][first["position"]]
            st.error(f"First mismatch: {first['chunk']} at token {first['position']} ({pieces(token)!r}): cosine "
                     f"{first['cosine']:.3f}, norm ratio {first['norm_ratio']:.2f}.")
        from backend.mismatch import is_mismatch
        from ui.html import mismatch_html

        st.caption("Tokens of the feature file: red where a chunk mismatches (hover for each chunk's cosine and "
                   "norm ratio)")
        st.html(CSS + mismatch_html(result["input_ids"], result["rows"], Pieces(result["target"]), is_mismatch))
        trained = result["training_aux_hf_indices"]
        st.markdown(f"Serving feeds HF **{result['serving_aux_hf_indices']}**; the stored training chunks equal HF "
                    f"**{trained}** (None = no layer matches).")
        st.dataframe(pd.DataFrame(result["training_chunk_matches"]), hide_index=True, key="diff_matches")
        st.dataframe(pd.DataFrame(result["summary"]), hide_index=True, key="diff_summary")
        left, right = st.columns(2)
        left.plotly_chart(charts.heatmap(result["rows"], "cosine", "cosine (serve vs train)", result["chunk_names"]),
                          key="diff_cosine")
        right.plotly_chart(charts.heatmap(result["rows"], "norm_ratio", "norm ratio |serve| / |train|",
                                          result["chunk_names"]), key="diff_ratio")
        st.caption("; ".join(f"{k}: {v}" for k, v in result["definitions"].items()))
    task_panel("diff_task", render_diff)

with lint_tab:
    st.markdown("Paste an SGLang launch command or vLLM arguments; findings are checked against the active draft.")
    engine = st.radio("Engine", ["SGLang", "vLLM"], horizontal=True, key="lint_engine")
    example = ("python -m sglang.launch_server --model-path demo/target --speculative-algorithm EAGLE "
               "--speculative-draft-model-path demo/drafts/final --speculative-num-steps 1 "
               "--speculative-eagle-topk 1 --speculative-num-draft-tokens 16" if engine == "SGLang" else
               "vllm serve demo/target --speculative-config "
               "'{\"method\": \"eagle3\", \"model\": \"demo/drafts/final\", \"num_speculative_tokens\": 3}'")
    command = st.text_area("Command line", example, key=f"lint_command_{engine}", height=100)
    if st.button("Lint", key="lint_run"):
        from backend.lint import lint_command

        try:
            report = lint_command(state.draft_path(), command if engine == "SGLang" else None,
                                  command if engine == "vLLM" else None, state.target_path()).to_dict()
        except BadInput as error:
            st.error(str(error))
        else:
            if not report["findings"]:
                st.success("No findings.")
            for finding in report["findings"]:
                show = {"error": st.error, "warning": st.warning, "info": st.info}[finding["severity"]]
                show(f"**{finding['severity'].upper()} · {finding['code']}**: {finding['message']}\n\n"
                     f"Fix: {finding['fix']}")
            if report["effective"]:
                st.caption(f"{report['engine']} will run: {report['effective']}")

with agreement_tab:
    st.markdown("Teacher-forced accuracy (what training reports) next to live accept length, per sample.")
    samples = dataset_samples("agreement", default_n=6)
    c1, c2, c3 = st.columns(3)
    steps = int(c1.number_input("K", 1, 8, 4, key="agreement_steps"))
    max_new = int(c2.number_input("Max new tokens", 8, 512, 96, key="agreement_max_new"))
    claimed = c3.text_input("Training wiring (HF indices, optional)", "", key="agreement_training_wiring",
                            help="The wiring the training run fed (e.g. the probe's answer). Empty: the serving wiring.")
    if st.button("Measure", key="agreement_run") and samples:
        target_dir, draft_dir = state.target_path(), state.draft_path()
        try:
            training = [int(x) for x in claimed.replace(" ", "").split(",") if x] or None
        except ValueError:
            training = None
            st.error(f"{claimed!r}: expected comma-separated integers")

        def agreement_work(progress):
            from backend.agreement import teacher_vs_live
            from backend.wiring import Wiring, check_indices

            target, draft, wiring = tasks.load_pair(target_dir, draft_dir)
            if training:
                check_indices(training, target.num_layers)
            claimed_wiring = Wiring(tuple(training), "claimed training wiring") if training else None
            return teacher_vs_live(target, draft, wiring, samples, steps, max_new, progress, claimed_wiring)
        st.session_state["agreement_task"] = tasks.start_batch("agreement", "accuracy vs live", agreement_work)

    def render_agreement(rows):
        from backend.agreement import DEFINITION

        frame = pd.DataFrame(rows).drop(columns=["acc_per_step"])
        st.dataframe(frame, hide_index=True, key="agreement_table")
        flagged = int(frame["flagged"].sum())
        (st.warning if flagged else st.success)(f"{flagged} of {len(frame)} samples flagged. {DEFINITION}.")
    task_panel("agreement_task", render_agreement)

with whatif_tab:
    st.markdown("Predict accept length and speed-up for other K from a run's measured per-position conditional "
                "acceptance and draft/verify times; check the prediction against a real replay at another K.")
    runs = [r for r in list_runs(limit=200) if r.status == "finished" and r.metrics.get("accept_histogram")]
    if not runs:
        st.info("Needs a finished run: start one on the Decode page.")
    else:
        from backend.whatif import MODEL, predict

        run_id = st.selectbox("Run", [r.id for r in runs], key="whatif_run",
                              format_func=lambda i: next(f"run {r.id} · {state.draft_name(r.draft_path)} · K="
                                                         f"{r.params.get('num_steps')}" for r in runs if r.id == i))
        run, steps = get_run(run_id)
        counts = [s.accepted_count for s in steps]
        num_steps = run.params.get("num_steps")
        rows = [r.to_dict() for r in predict(counts, num_steps, run.metrics.get("draft_ms_total", 0),
                                             run.metrics.get("verify_ms_total", 0))]
        measured = {num_steps: run.metrics.get("mean_accept_length")}
        checks = st.session_state.get("whatif_checks", {})
        for other in checks.get(run_id, []):
            task = tasks.MANAGER.get(other["task"])
            if task and task.status == "done":
                measured[other["k"]] = task.result["mean_accept_length"]
        st.plotly_chart(charts.whatif(rows, measured), key="whatif_chart")
        st.dataframe(pd.DataFrame(rows), hide_index=True, key="whatif_table")
        st.caption(f"Model: {MODEL}. {ACCEPT_LENGTH_HELP}. 'extrapolated' rows reuse the last measured rate.")
        other_k = int(st.number_input("Check with a real replay at K =", 1, 8, 2 if num_steps != 2 else 3,
                                      key="whatif_k"))
        if st.button("Replay at this K", key="whatif_replay"):
            task_id = tasks.start_replay(state.db_url(), run.target_path, run.draft_path, run.prompt_ids, other_k,
                                         len(run.output_ids), sample_ref=run.sample_ref,
                                         label=f"what-if check K={other_k}")
            checks.setdefault(run_id, []).append({"task": task_id, "k": other_k})
            st.session_state["whatif_checks"] = checks
        for other in checks.get(run_id, []):
            task = tasks.MANAGER.get(other["task"])
            predicted = next((r["predicted_accept_length"] for r in rows if r["num_steps"] == other["k"]), None)
            if task and task.active:
                st.progress(task.progress, text=f"replay at K={other['k']}: {task.message}")
                if st.button("Refresh", key=f"whatif_refresh_{task.id}"):
                    st.rerun()
            elif task and task.status == "done":
                st.success(f"K={other['k']}: measured accept length {task.result['mean_accept_length']:.2f}, "
                           f"predicted {predicted:.2f}")
            elif task:
                st.error(task.error.splitlines()[0] if task.error else "failed")
st.html(CSS)
