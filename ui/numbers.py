"""Whole numbers on the pages: counts said in words (`plural`), and fields whose range is checked on
the page, not by the widget. With min_value/max_value Streamlit's field keeps showing a number typed
out of range (red, the reason only on hover) while the script goes on with the last good one, so a
button would act on a number the page does not show. Here the range goes in the help and, when it is
broken, in one visible line; the field's value is then None and the caller starts nothing."""

from __future__ import annotations


def whole(
    column, label: str, low: int, high: int, value: int, key: str, step: int = 1, help: str = ""
) -> int | None:
    """The field's number, or None (with a red line under it) when it is outside low..high."""
    bounds = f"{low} to {high}"
    number = int(
        column.number_input(
            label, value=value, step=step, key=key, help=f"{help} ({bounds})" if help else bounds
        )
    )
    if low <= number <= high:
        return number
    column.error(f"{label}: {number} is outside {bounds}.")
    return None


def plural(count: int, word: str, words: str | None = None) -> str:
    """'1 run', '2 runs' (`words` where adding an s is wrong)."""
    return f"{count} {word if count == 1 else words or word + 's'}"


def setting_number(column, name: str, key: str) -> int | None:
    """A whole-number request setting (K, max new tokens) as every form asks for it: the label, the range,
    the default and the help its ReplayRequest field declares (backend/run/request.py), so each setting has
    one label and one range on every page; None (a red line under it) when out of range."""
    from backend.run.request import settings_of

    meta, default = next((m, d) for n, m, d in settings_of() if n == name)
    widget = meta.widget
    value = default if widget.widget_value is None else widget.widget_value
    return whole(column, widget.label, int(widget.low), int(widget.high), value, key, help=meta.help)


def setting_widget(column, meta, default, key: str):
    """One request setting's widget, as its field declares it (backend/run/request.py `Widget`);
    returns what the widget holds (`setting_value` makes it the request's value)."""
    w, help = meta.widget, meta.help or None
    value = default if w.widget_value is None else w.widget_value
    if w.kind == "select":
        return column.selectbox(w.label, meta.choices, key=key, help=help)
    if w.kind == "checkbox":
        return column.checkbox(w.label, value=bool(value), key=key, help=help)
    if w.kind == "text":
        return column.text_input(w.label, "" if value is None else str(value), key=key, help=help)
    kind = float if isinstance(w.step, float) or isinstance(default, float) else int
    shown = w.none_at if value is None else value
    step = {"step": w.step} if w.step else {}
    # No min/max on the widget: out of range, the browser keeps the last good value and shows why only
    # on hover, and Start would run that value. The setting's own check refuses it on Start, in one
    # visible line; the help states the range.
    bounds = w.range or f"{kind(w.low)} to {kind(w.high)}"
    help = f"{help} ({bounds})" if help else bounds
    return column.number_input(w.label, value=kind(shown), key=key, help=help, **step)


def setting_value(meta, held):
    """The request's value of what a widget holds: text through the setting's parser (BadInput when
    it is not one), a number's `none_at` as None."""
    if meta.widget.kind == "text":
        return meta.parse(held)
    if meta.widget.none_at is not None and held == meta.widget.none_at:
        return None
    return held


def setting_input(column, name: str, key: str):
    """One request setting asked as the Decode form asks it (its field's widget), its request value."""
    from backend.run.request import settings_of

    meta, default = next((m, d) for n, m, d in settings_of() if n == name)
    return setting_value(meta, setting_widget(column, meta, default, key))
