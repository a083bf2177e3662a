"""SpecLens engine: loads a target and an EAGLE-3 draft, replays speculative decoding, yields records.

Nothing in this package touches Streamlit or the database; db/ persists what it yields.
"""


class BadInput(ValueError):
    """The user's input (paths, files, flags, checkpoints) cannot be used; the message says why."""
