"""The wiring probe's settings, torch-free: pages compare a stored probe's settings with the ones on
screen without loading the engine (backend/diagnostics/probe.py runs it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProbeSettings:
    """How far the probe looks: K of the teacher-forced scores, how many candidates the search may
    add, and the live replays of the best candidates (on the first `live_samples` samples, 0: none,
    `live_tokens` new tokens each)."""

    num_steps: int = 4
    search_budget: int = 40
    live_samples: int = 0
    live_tokens: int = 64

    def describe(self, samples: list) -> dict:
        """What a run of the probe used, to tell whether a stored report answers another request."""
        return {
            "num_steps": self.num_steps,
            "search_budget": self.search_budget,
            "live_samples": self.live_samples,
            "sample_keys": sample_keys(samples),
        }


def sample_keys(samples: list) -> list[int]:
    """The samples' identities (their token ids; ints hash the same in every process)."""
    return [hash(tuple(s.input_ids)) for s in samples]
