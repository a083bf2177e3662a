"""Cross-page choices in st.session_state (database, target, drafts, selected run) behind small
helpers. Pages reach the store only through backend.service, with `state.db()` as the URL. Page-local state uses page-prefixed keys."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
from streamlit.errors import StreamlitPageNotFoundError

from backend import BadInput
from backend.defaults import REPO, active_pair, default_draft, default_target, pair_of
from backend.service import checkpoints, datasets
from backend.service.database import database_url, write_problem
from ui.html import md

# The navigation, drawn by `sidebar` (Streamlit's own list is hidden: it names the home page after
# its file, "app"). Paths are relative to the app's folder; URLs stay /Samples, /Decode, ...
PAGES = [
    ("app.py", "Home", "Home"),
    ("pages/1_Samples.py", "Samples", "Samples: browse and import datasets"),
    ("pages/2_Decode.py", "Decode", "Decode: run a replay and step through it"),
    ("pages/3_Compare.py", "Compare", "Compare: two drafts or two runs side by side"),
    ("pages/4_Diagnostics.py", "Diagnostics", "Diagnostics: probe, train-vs-serve diff, lint, doctor"),
    ("pages/5_Runs.py", "Runs", "Runs: history, delete, export"),
    (
        "pages/6_Where_lost.py",
        "Where lost",
        "Where lost: acceptance by position, token kind, confidence, over runs",
    ),
]


@dataclass(frozen=True)
class _Keys:
    """The session keys of the cross-page choices (`set_value`/`get_value` take their names)."""

    db_url: str = "global_db_url"
    target: str = "global_target"
    drafts: str = "global_drafts"
    draft: str = "global_draft"
    run: str = "global_run_id"
    compare: str = "global_compare_runs"


KEYS = _Keys()


def _init() -> None:
    state = st.session_state
    if KEYS.db_url not in state:
        state[KEYS.db_url] = database_url(os.environ.get("SPECLENS_DB_URL"))
    if KEYS.drafts not in state:
        # Draft directories beyond the target's bundled ones: the configured one, those added in
        # earlier sessions, then this session's. drafts() offers those that fit the active target.
        added = _remembered("draft")
        custom = os.environ.get("SPECLENS_DRAFT")
        state[KEYS.drafts] = ([custom] if custom else []) + [path for _, path in added]
        usable = [path for _, path in added if checkpoints.readable(path, "draft")]
        if KEYS.draft not in state and usable and not custom:
            state[KEYS.draft] = usable[-1]  # the draft added last survives a reload, if it still reads
    if KEYS.target not in state:
        targets = _remembered("target")
        state[KEYS.target] = (
            targets[-1][1] if targets and not os.environ.get("SPECLENS_TARGET") else default_target()
        )
    if KEYS.draft not in state:
        state[KEYS.draft] = default_draft()


def _remembered(role: str) -> list[tuple[str, str]]:
    """Directories added in earlier sessions (backend.service.checkpoints), those still on disk."""
    try:
        found = checkpoints.remembered(st.session_state[KEYS.db_url], role)
    except Exception:  # noqa: BLE001 - an unreachable store must not take the sidebar down
        return []
    return [(name, path) for name, path in found if Path(path, "config.json").is_file()]


def db_url() -> str:
    _init()
    return st.session_state[KEYS.db_url]


@st.cache_resource(show_spinner=False)
def _opened(url: str) -> bool:
    datasets.ensure_demo_dataset(url)
    return True


def db_backend() -> str:
    """The kind of store the active URL names, in words (shown beside the URL)."""
    scheme = db_url().split(":", 1)[0].split("+", 1)[0].lower()
    return {"sqlite": "SQLite", "postgresql": "PostgreSQL", "postgres": "PostgreSQL"}.get(scheme, scheme)


def db() -> str:
    """The active database URL, opened (and given the demo dataset when new) once per server."""
    url = db_url()
    _opened(url)
    return url


def target_path() -> str:
    _init()
    return st.session_state[KEYS.target]


def drafts() -> dict[str, str]:
    """The drafts offered beside the active target, by unambiguous name (backend.service.checkpoints)."""
    _init()
    listed = checkpoints.drafts_for(target_path(), st.session_state[KEYS.drafts], keep=draft_path())
    return listed or {"(none)": draft_path()}


def draft_path() -> str:
    _init()
    return st.session_state[KEYS.draft]


def draft_is_dflash() -> bool:
    return checkpoints.is_dflash_draft(draft_path())


def add_draft(path: str) -> None:
    """Keep the draft in the database (a reload finds it) and select it."""
    _init()
    checkpoints.remember(db(), "draft", path)
    st.session_state[KEYS.drafts] = [*st.session_state[KEYS.drafts], str(Path(path).expanduser())]
    st.session_state[KEYS.draft] = str(Path(path).expanduser())


def set_value(name: str, value) -> None:
    _init()
    st.session_state[getattr(KEYS, name)] = value


def get_value(name: str, default=None):
    _init()
    return st.session_state.get(getattr(KEYS, name), default)


def active_setup_note() -> str:
    """Which pair is active, in words: a bundled one (and why the toy, when it stands in for the real
    one), or the user's own."""
    pair = pair_of(target_path())
    change = "choose another in the sidebar or set SPECLENS_TARGET / SPECLENS_DRAFT / SPECLENS_DB_URL"
    unusable = checkpoints.problem(target_path(), "target")
    if unusable:
        return f"No usable target is active: {md(unusable)}; {change}."
    if pair is None:
        return f"Your own target is active (not a bundled pair); {change}."
    note = f"The bundled {pair.label} is active ({pair.target.relative_to(REPO)}); {change}."
    fallback = active_pair().fallback
    if pair.key == "toy" and fallback:
        note += f" It stands in for the real pair: {fallback}."
    return note


def draft_name(path: str) -> str:
    for name, known in drafts().items():
        if known == path:
            return name
    return Path(path).name


ADDRESS_DRAFT = "state_draft_in_address"  # the ?draft= name this session wrote or followed last


def follow_link() -> None:
    """A `?draft=NAME` in the address makes that draft active: Home's start-here links, and a reload or
    a copied address, since the sidebar writes the active draft's name there on every page
    (`keep_draft_in_address`). A name this session wrote or followed itself is not followed again, so
    a later choice in the sidebar is not overridden by it."""
    name = st.query_params.get("draft")
    if name is None or name == st.session_state.get(ADDRESS_DRAFT):
        return
    st.session_state[ADDRESS_DRAFT] = name
    if name in drafts():
        if drafts()[name] != draft_path():
            set_value("draft", drafts()[name])
            st.info(
                f"The address (a link, or a reload) made **{md(name)}** the active draft, on every page from "
                "now on; the sidebar's Draft box switches back.",
                icon="ℹ️",
            )
    else:
        st.warning(
            f"The address names a draft {md(name)!r} this session does not know; the active one is kept."
        )


def keep_draft_in_address() -> None:
    """The active draft's name in the page's address (`?draft=NAME`), so that a reload, which starts a
    new session, opens on the same draft; a draft without a name in the sidebar's list leaves none."""
    name = draft_name(draft_path())
    if drafts().get(name) == draft_path():
        if st.query_params.get("draft") != name:
            st.query_params["draft"] = name
        st.session_state[ADDRESS_DRAFT] = name
    elif "draft" in st.query_params:
        del st.query_params["draft"]


def linked_select(param: str, widget_key: str, options: list[str], default: str | None = None) -> dict:
    """How a keyed select box opens (pass it as **kwargs): on a link's `?param=VALUE` (Compare's
    `?a=final&b=miswired` from Home) when it names an option, else on `default`, else on the first.
    The parameter is read once and dropped from the address, so the user's later choice stands. A
    widget that already has state is given the link's value through its state, and then no index
    (Streamlit warns of an index beside state set that run)."""
    value = st.query_params.get(param)
    if value is not None:
        del st.query_params[param]
        if value in options:
            if widget_key in st.session_state:
                st.session_state[widget_key] = value
                return {}
            return {"index": options.index(value)}
    return {"index": options.index(default) if default in options else 0}


def sidebar() -> None:
    """The active database, target and draft, on every page; each page calls it first. The job worker
    starts with the first page a server draws: model work runs there, never in the server, which
    imports neither torch nor transformers (tests/test_torch_free.py)."""
    from backend.service.readers import READER
    from backend.service.worker import WORKER

    WORKER.prestart()  # both import torch at once, in their own processes, while the page draws
    READER.prestart()
    _init()
    follow_link()
    with st.sidebar:
        try:
            for path, title, _ in PAGES:
                st.page_link(path, label=title)
            st.divider()
        except StreamlitPageNotFoundError:
            pass  # a page script run on its own (AppTest of one file) has no other pages to link
        st.caption("Active setup (shared by all pages)")
        st.text(f"database ({db_backend()}): {db_url()}")
        unwritable = write_problem(db_url())
        if unwritable:
            st.warning(md(unwritable))
        target = st.text_input("Target model directory", value=target_path(), key="sidebar_target")
        unusable = checkpoints.problem(target, "target")
        if target != target_path():
            set_value("target", target)
            if not unusable:
                checkpoints.remember(db(), "target", target)
                _follow_target(target)
        if unusable:
            st.error(f"{md(unusable)}. Pick a local Hugging Face model directory.")
        names = list(drafts())
        current = draft_name(draft_path())
        shown = follow("sidebar_draft", current, names)  # a draft just added (or chosen elsewhere) is shown
        choice = st.selectbox("Draft", names, key="sidebar_draft", **shown)
        if drafts()[choice] != draft_path():
            set_value("draft", drafts()[choice])
            followed("sidebar_draft", choice)
        with st.expander("Add a draft directory"):
            new = st.text_input("Path", key="sidebar_new_draft")
            if st.button("Add", key="sidebar_add_draft") and new:
                try:
                    add_draft(new)
                except BadInput as error:
                    st.error(md(str(error)))
                else:
                    st.rerun()
        _preload_widgets()
    keep_draft_in_address()


PRELOADED = "preload_widgets"


def _preload_widgets() -> None:
    """One of each widget the forms use, never shown: Streamlit's browser code fetches a widget's
    component the first time one is drawn, so a form's number fields, check boxes and radios painted as
    empty grey boxes for 0.5-1.5 s on the first page that had them (issue 65 row 17: Diagnostics).
    Drawn here on every page's first paint, hidden by their container's CSS class (st-key-<key>); they
    hold nothing a page reads."""
    with st.container(key=PRELOADED):
        st.html(f"<style>.st-key-{PRELOADED} {{display: none}}</style>")
        hidden = {"label_visibility": "collapsed"}
        st.number_input("preload number", key="_preload_number", **hidden)
        st.checkbox("preload check box", key="_preload_check", **hidden)
        st.radio("preload radio", ["a"], key="_preload_radio", **hidden)
        st.toggle("preload toggle", key="_preload_toggle", **hidden)
        st.slider("preload slider", key="_preload_slider", **hidden)
        st.multiselect("preload choices", ["a"], key="_preload_choices", **hidden)
        st.text_area("preload text", key="_preload_text", **hidden)


def _follow_target(target: str) -> None:
    """A new target whose bundled pair (or any listed draft) fits it: a draft that does not fit gives way
    to its `final`, else to the first that fits."""
    if checkpoints.fits(draft_path(), target):
        return
    fitting = list(checkpoints.drafts_for(target, st.session_state[KEYS.drafts]).values())
    if fitting:
        final = [p for p in fitting if Path(p).name == "final"]
        set_value("draft", (final or fitting)[0])


def follow(widget_key: str, value, options, fallback: int = 0) -> dict:
    """Make a keyed select box show `value` when the value changed outside it (a job that finished,
    a row ticked in a table, another page). A keyed widget ignores its `index` once it has state, so
    without this the page would keep showing the previous choice. Call before creating the widget and
    pass it what this returns: its `index` (of `value`, else `fallback`), except in the run that sets
    its state here (Streamlit warns of an index beside state set that run). The index still matters:
    a page of a multipage app makes its widgets anew. A value the widget itself produced is recorded
    with `followed`."""
    marker = f"{widget_key}__followed"
    if value != st.session_state.get(marker):
        st.session_state[marker] = value
        if value in options:
            st.session_state[widget_key] = value
            return {}
    return {"index": options.index(value) if value in options else fallback}


def followed(widget_key: str, value) -> None:
    """The user picked `value` in the widget: it is the shared value now, not a change to follow."""
    st.session_state[f"{widget_key}__followed"] = value
