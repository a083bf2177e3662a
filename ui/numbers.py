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
