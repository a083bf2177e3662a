"""torch.load's refusals, said for a user: every torch file SpecLens reads (feature files, a target's or
a draft's .bin) is loaded with weights_only=True, and a refusal is one line naming the file."""

from __future__ import annotations

from pathlib import Path

from backend import BadInput, first_line


def load_refused(
    path: Path | str, error: Exception, expected: str = "a SpecForge feature file is a dict of tensors"
) -> BadInput:
    """torch.load(..., weights_only=True)'s refusal of `path`, said for a user in one line. torch's own
    text is a page long and ends by suggesting weights_only=False, an unpickling SpecLens never does."""
    text = str(error)
    if "unsupported global" in text.lower():  # a real pickle naming a class or function, not a tensor
        reason = f"it holds Python objects besides tensors, which SpecLens never unpickles ({expected})"
    else:  # torch's first line of a weights-only refusal is its advice to unpickle: the cause is below it
        said = [
            line.strip() for line in text.splitlines() if "Unsupported" in line or "invalid load key" in line
        ]
        detail = said[0] if said else "" if "Weights only load failed" in text else first_line(error)
        reason = f"not a torch.save file, or a cut one ({type(error).__name__}{': ' if detail else ''}{detail[:100]})"
    return BadInput(f"{path}: {reason}")
