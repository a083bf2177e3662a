"""Per-request server numbers on the Diagnostics page: the file form, the served vs replayed
accept-length distribution, the per-request table (worst first) and the replay of the worst
requests as a background task. The numbers are the service's (backend/service/per_request.py)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from backend import BadInput
from backend.service import tasks
from backend.service.per_request import (
    FORMATS,
    ReplayedRequest,
    RequestRow,
    ServedNumbers,
    ServedRequests,
    observe_requests,
    with_replays,
)
from ui.charts import LEGEND_BELOW, histogram
from ui.html import md
from ui.numbers import whole
from ui.taskview import task_panel

KEY = "server_requests"


def requests_form() -> ServedRequests | None:
    """What the user asked to read (a path or URL, else the upload, with format and K), on click."""
    st.markdown(
        "**Per-request numbers**: a JSONL of responses (or one JSON document) as the engine returned them: "
        "vLLM `metrics.speculative_decoding`, SGLang `meta_info` or `sglext.spec_tokens_details`, "
        "TensorRT-LLM `choices[].speculative_decoding`, llama.cpp `timings`, a ModelOpt "
        "`speculation_profile.json`, or two SGLang `/server_info` reads."
    )
    upload = st.file_uploader("Upload the responses", type=["jsonl", "json", "txt"], key=f"{KEY}_upload")
    location = st.text_input("...or a file path or URL", "", key=f"{KEY}_location")
    left, right = st.columns(2)
    format = left.selectbox("Format", ["auto", *FORMATS], key=f"{KEY}_format")
    k = whole(
        right, "K (num speculative tokens), where the file does not say (0 = unknown)", 0, 64, 0, f"{KEY}_k"
    )
    if not st.button("Read the requests", key=f"{KEY}_read", disabled=k is None):
        return None
    asked = {"format": format, "num_speculative_tokens": int(k) or None}
    if location.strip() or upload is None:
        return ServedRequests(source=location.strip() or None, **asked)
    return ServedRequests(data=upload.getvalue(), name=upload.name, **asked)


def distribution(served: list[float], replayed: list[float], k: int | None) -> go.Figure:
    figure = go.Figure()
    bins = dict(start=1.0, end=float((k or 8) + 1) + 0.25, size=0.25)
    figure.add_histogram(x=served, name=f"served ({len(served)} requests)", xbins=bins, opacity=0.7)
    if replayed:
        figure.add_histogram(x=replayed, name=f"replayed ({len(replayed)} runs)", xbins=bins, opacity=0.7)
    figure.update_layout(
        title="Accept length per request, served vs replayed",
        barmode="overlay",
        xaxis_title="accept length (mean of a + 1 over the request's verify steps)",
        yaxis_title="requests",
        height=360,
        margin=dict(l=10, r=10, t=40, b=70),
        legend={**LEGEND_BELOW, "y": -0.3},  # below the x-axis title, not on it
    )
    return figure


def table(rows: list[RequestRow]) -> pd.DataFrame:
    frame = pd.DataFrame([row.to_dict() for row in rows])
    frame = frame.sort_values("served_accept_length", na_position="last", kind="stable")
    frame = frame.fillna({"note": ""})
    for column in (
        "served_accept_length",
        "replay_accept_length",
        "served_minus_replay",
        "served_acceptance_rate",
    ):
        frame[column] = frame[column].astype(float).round(3)
    return frame[
        [
            "record",
            "status",
            "served_accept_length",
            "replay_accept_length",
            "served_minus_replay",
            "verify_steps",
            "served_acceptance_rate",
            "served_tokens",
            "replay_tokens",
            "replay_run",
            "note",
        ]
    ].rename(
        columns={
            "served_accept_length": "served AL",
            "replay_accept_length": "replay AL",
            "served_minus_replay": "served - replay",
            "verify_steps": "verify steps",
            "served_acceptance_rate": "acceptance rate",
            "served_tokens": "served tokens",
            "replay_tokens": "replay tokens",
            "replay_run": "replay run",
        }
    )


def merge_replays(replayed: list[ReplayedRequest]) -> None:
    """The replays in the shown rows; the chart's replayed side becomes the replays of those prompts."""
    shown = st.session_state.get(KEY)
    if not isinstance(shown, ServedNumbers):
        return
    st.session_state[KEY] = with_replays(shown, replayed)


def _signatures(result: ServedNumbers) -> None:
    """The per-step signatures observe_requests found (a hand-off gap, K varying)."""
    first = result.first_step
    if first and first.message:
        st.warning("disaggregation: " + md(first.message), icon=":material/warning:")
    elif first:
        st.caption(
            f"First verify step accepts {first.first_step_accepted_mean:.2f} drafts on average, later steps "
            f"{first.later_steps_accepted_mean:.2f} ({first.requests} requests): no hand-off gap. "
            + md(first.definition)
        )
    varied = result.draft_lengths
    if varied and varied.message:
        st.warning("synthetic-acceptance: " + md(varied.message), icon=":material/warning:")


def show_requests(
    result: ServedNumbers | str | None, db_url: str | None, target_path: str, draft_path: str
) -> None:
    """`result`: what observe_requests gave, or the message of the BadInput it raised."""
    if not result:
        return
    if isinstance(result, str):
        st.error(result)
        return
    pooled = result.pooled
    st.caption(
        f"{md(result.source)}: {result.format}, {pooled.requests} requests ("
        + ", ".join(f"{n} {status}" for status, n in pooled.statuses.items())
        + ")"
    )
    c1, c2, c3, c4 = st.columns(4)
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
    definitions = pooled.definitions
    c1.metric(
        "Served accept length (pooled)",
        fmt(pooled.accept_length),
        help=definitions.pooled_accept_length,
    )
    ci = pooled.accept_length_per_request_ci95
    c2.metric(
        "Per-request mean",
        fmt(pooled.accept_length_per_request_mean),
        delta=None if not ci else f"95% CI {ci[0]:.2f}-{ci[1]:.2f}",
        delta_color="off",
        help=definitions.accept_length_per_request_mean + ". " + definitions.accept_length_per_request_ci95,
    )
    c3.metric("Acceptance rate", fmt(pooled.acceptance_rate), help=definitions.acceptance_rate)
    c4.metric("Verify steps", f"{pooled.verify_steps:g}", help="over the requests with an accept length")
    _signatures(result)
    if result.window is not None:
        window = result.window
        st.info(
            f"Window between the two reads: accept length {fmt(window.accept_length)}"
            + (f" ({window.note})" if window.note else "")
        )
    if result.profile:
        st.caption(
            "ModelOpt profile, pooled: per-request mean as ModelOpt measured it "
            f"{fmt(result.profile.mean_accept_length_per_request)}"
        )
    converted = sorted({r.converted_from for r in result.requests if r.converted_from})
    with st.expander("How these numbers were converted"):
        for line in converted:
            st.caption(md(line))
    replay = result.replay
    served = [row.served_accept_length for row in result.rows if row.served_accept_length is not None]
    if pooled.pooled_only and pooled.accept_histogram:
        # a profile has no requests to distribute: its pooled histogram is what it holds
        st.plotly_chart(
            histogram(pooled.accept_histogram, "Pooled verify steps by accepted drafts (the profile)"),
            key=f"{KEY}_chart",
        )
    elif served:
        st.plotly_chart(distribution(served, replay.accept_lengths, result.num_steps), key=f"{KEY}_chart")
    st.caption(
        f"Replayed: {md(replay.which)}; {replay.matched} of {len(result.rows)} requests matched by "
        "prompt to a finished greedy replay of the active draft"
        + (f" at K={result.num_steps}" if result.num_steps else "")
        + (f". {md(replay.unmatched_text_prompts)}" if replay.unmatched_text_prompts else "")
    )
    st.dataframe(table(result.rows), hide_index=True, key=f"{KEY}_table")
    if result.worst:
        left, right = st.columns([1, 3])
        n = whole(left, "Worst requests", 1, len(result.worst), min(3, len(result.worst)), f"{KEY}_n")
        if n is not None and right.button(f"Replay the {n} worst with the active draft", key=f"{KEY}_replay"):
            st.session_state[f"{KEY}_task"] = tasks.start_replay_worst(
                db_url, result, int(n), target_path, draft_path
            )
        task_panel(f"{KEY}_task", on_finish=merge_replays, failure="The replay failed: ")


def requests_section(db_url: str | None, target_path: str, draft_path: str) -> None:
    """The form, one service call, the render: what the Diagnostics page's server tab calls."""
    asked = requests_form()
    if asked is not None:
        try:
            st.session_state[KEY] = observe_requests(db_url, asked, draft_path, target_path)
        except BadInput as error:
            st.session_state[KEY] = str(error)
    show_requests(st.session_state.get(KEY), db_url, target_path, draft_path)
