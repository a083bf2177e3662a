"""Token text whose steps can be clicked: a small Streamlit component (components v2, inline JS, no
build step) that shows already-escaped HTML and reports the `data-step` of the element clicked.

The HTML must come from ui/html.py, which escapes every token piece; the component adds no markup of
its own beyond a wrapper."""

from __future__ import annotations

import streamlit as st

_JS = """
export default function({ data, parentElement, setTriggerValue }) {
  let root = parentElement.querySelector('.sl-clickable');
  if (!root) {
    root = document.createElement('div');
    root.className = 'sl-clickable';
    parentElement.appendChild(root);
  }
  if (root.dataset.html !== data) {
    root.innerHTML = data;  // built by ui/html.py from escaped token pieces
    root.dataset.html = data;
  }
  root.onclick = (event) => {
    const hit = event.target.closest('[data-step]');
    if (hit) setTriggerValue('step', Number(hit.getAttribute('data-step')));
  };
}
"""
# Sent with the data: Streamlit reads a `css=` string holding "[...]" as a file glob.
_STYLE = "<style>[data-step]{cursor:pointer} [data-step]:hover{outline:1px dashed #ff9800}</style>"

_component = st.components.v2.component("speclens_clickable_steps", js=_JS)


def clickable_steps(html: str, key: str) -> int | None:
    """Show `html`; the step number of an element the user clicked in it (once), else None."""
    result = _component(data=_STYLE + html, key=key, on_step_change=lambda: None)
    step = getattr(result, "step", None)
    return None if step is None else int(step)
