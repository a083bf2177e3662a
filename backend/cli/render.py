"""What the CLI prints beside its JSON: progress bars on stderr and numbers as text."""

from __future__ import annotations

import sys


def progress_bar(total: int, description: str, unit: str = "tok"):
    from tqdm import tqdm

    return tqdm(total=total, desc=description, file=sys.stderr, unit=unit, leave=False)


def percent_bar(description: str):
    """(bar, progress): a stderr bar in percent and the `progress(fraction, message)` that moves it."""
    bar = progress_bar(100, description, unit="%")

    def progress(fraction: float, message: str) -> None:
        bar.set_postfix_str(message[-60:], refresh=False)
        bar.update(round(100 * fraction) - bar.n)

    return bar, progress


def fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def ci_text(interval) -> str:
    """' (95% CI [a, b] over requests)' when there is one."""
    return "" if not interval else f" (95% CI [{interval[0]:.2f}, {interval[1]:.2f}] over requests)"
