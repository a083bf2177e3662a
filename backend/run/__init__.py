"""The run's torch-free vocabulary: what a user asks for, what a run resolved and recorded, its metrics
and wiring (db/ and the pages import this room)."""
