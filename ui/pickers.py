"""Pickers shared by the pages: a dataset (and its samples), and run labels."""

from __future__ import annotations

import streamlit as st

from backend.service import datasets as stored_datasets
from ui import state
from ui.html import md
from ui.numbers import whole


@st.cache_data(show_spinner=False, max_entries=8)
def samples_of(db_url: str, dataset_id: int) -> list:
    return stored_datasets.get_samples(db_url, dataset_id)


def tokenizer_warning(dataset_id: int, container=st) -> None:
    """A warning when the dataset's ids were not made by the active target's tokenizer."""
    fit = stored_datasets.tokenizer_fit(state.db(), dataset_id, state.target_path())  # cached there
    if fit is not None and fit.flags:
        container.warning(
            f"Dataset {dataset_id} looks tokenized for another model than the active target "
            f"({md(state.target_path())}); its text is this tokenizer's reading of the ids, and replays of "
            "it say nothing about this pair:\n" + "\n".join(f"- {md(flag)}" for flag in fit.flags),
            icon="⚠️",
        )


def default_dataset(ids: list[int]) -> int:
    """The active target's bundled eval set when registered, else the first."""
    preferred = stored_datasets.preferred_dataset(state.db(), state.target_path())
    return preferred if preferred in ids else ids[0]


def dataset_picker(key: str, preset: int | None = None, container=st):
    """A dataset select box; (dataset id, its samples), or (None, []) with a hint when there is none."""
    datasets = stored_datasets.list_datasets(state.db())
    if not datasets:
        container.warning("No dataset: import one on the Samples page.")
        return None, []
    ids = [d.id for d in datasets]
    names = {d.id: f"{d.id}: {d.name} ({d.sample_count})" for d in datasets}
    start = preset if preset in ids else default_dataset(ids)
    dataset_id = container.selectbox("Dataset", ids, index=ids.index(start), format_func=names.get, key=key)
    tokenizer_warning(dataset_id, container)
    return dataset_id, samples_of(state.db(), dataset_id)


def first_samples(key: str, default_n: int = 8) -> list | None:
    """A dataset and how many of its first samples to use."""
    left, right = st.columns(2)
    _, samples = dataset_picker(f"{key}_dataset", container=left)
    if not samples:
        return []
    count = whole(right, "Samples", 1, len(samples), min(default_n, len(samples)), f"{key}_n")
    return None if count is None else samples[:count]  # None: a count out of range, said under it


def pick_among(label: str, options: list, memory: str, format_func=str):
    """A select box over `options` that shows what it returns, whatever the options were before. A
    keyed select box whose options change (a filter narrowed to nothing, then cleared) can come back
    showing its first option while returning the browser's stale choice (the picker could name run 9
    while the facts, the export and delete acted on run 6). Here the widget's key follows the options,
    so a new set of options is a new widget, and its index is the last choice (kept under `memory`)
    when it is still offered, else the first."""
    import hashlib

    remembered = st.session_state.get(memory)
    index = options.index(remembered) if remembered in options else 0
    digest = hashlib.sha1(repr(options).encode()).hexdigest()[:12]
    chosen = st.selectbox(label, options, index=index, key=f"{memory}_{digest}", format_func=format_func)
    st.session_state[memory] = chosen
    return chosen


def run_label(run, unfinished_al: bool = True) -> str:
    """`unfinished_al=False`: a run that is not finished shows no accept length (AL —), for a page that
    says such a run has none (Compare); elsewhere its steps so far give one."""
    al = run.measured.mean_accept_length
    shown = "—" if run.status != "finished" and not unfinished_al else "n/a" if al is None else f"{al:.2f}"
    return (
        f"run {run.id} · {run.status} · {state.draft_name(run.draft_path)} · K={run.resolved.num_steps} · "
        f"{run.resolved.mode} · {run.resolved.engine or ''} · "
        f"{run.sample_ref or ''} · {len(run.output_ids)} tokens · AL {shown}"
    )


PREVIEW_LINES = 6


def prompt_tail(prompt_ids, target_path: str | None, lines: int = PREVIEW_LINES) -> str:
    """The prompt's last `lines` lines as text (the target's tokenizer), with a mark where it was cut."""
    from ui.tokens import Pieces

    text = Pieces(target_path).text(list(prompt_ids))
    kept = text.rstrip("\n").split("\n")
    tail = "\n".join(kept[-lines:])
    return ("…\n" if len(kept) > lines else "") + tail


def sample_preview(sample, target_path: str | None, container=None) -> None:
    """What a picked sample is before anything runs: its size, source and the prompt's last lines."""
    from ui.tokens import Pieces

    where = container or st
    answer = len(sample.input_ids) - sample.prompt_len
    readable = Pieces(target_path).tokenizer is not None
    where.caption(
        f"{sample.prompt_len} prompt tokens, {answer} answer tokens"
        + (f", source {md(sample.source)}" if sample.source else "")
        + (
            f"; the prompt ends (last {PREVIEW_LINES} lines):"
            if readable
            else "; the target's tokenizer cannot be read (a missing or moved target), so the prompt's "
            "last ids are shown as ids:"
        )
    )
    where.code(prompt_tail(sample.prompt_ids, target_path), language=None, wrap_lines=True)
