"""The wiring probe's settings and its report as a value, torch-free: pages compare a stored probe's
settings with the ones on screen and draw its report without loading the engine
(backend/diagnostics/probe.py runs it; backend/service/kept_results.py keeps it with the pair)."""

from __future__ import annotations

from dataclasses import dataclass, field

from backend.plain import Plain

# How candidates are ranked and separated (backend/diagnostics/probe.py): a stored probe of another
# method does not answer a request, and a kept probe of this method is preferred to older ones.
METHOD = "training loss, paired per position in blocks"


@dataclass(frozen=True)
class ProbeSettings:
    """How far the probe looks: K of the teacher-forced scores, how many candidates the search may
    add, and the live replays of the best candidates (on the first `live_samples` samples, 0: none,
    `live_tokens` new tokens each)."""

    num_steps: int = 4
    search_budget: int = 40
    live_samples: int = 0
    live_tokens: int = 64

    def describe(self, samples: list) -> SettingsUsed:
        """What a run of the probe used, to tell whether a stored report answers another request."""
        return SettingsUsed(
            self.num_steps, self.search_budget, self.live_samples, sample_keys(samples), METHOD
        )


def sample_keys(samples: list) -> list[int]:
    """The samples' identities (their token ids; ints hash the same in every process)."""
    return [hash(tuple(s.input_ids)) for s in samples]


@dataclass(frozen=True)
class SettingsUsed(Plain):
    """The settings a probe ran with (`ProbeSettings.describe`); a stored probe may lack any of them."""

    num_steps: int | None = None
    search_budget: int | None = None
    live_samples: int | None = None
    sample_keys: list[int] | None = None
    method: str | None = None  # METHOD of the version that ran it (older probes: none, acc_0 ranked)


@dataclass(frozen=True)
class CandidateResult(Plain):
    """One candidate wiring's scores (probe.Candidate written out). Stored probes of older versions
    may hold only some of them."""

    aux_hf_indices: list[int] = field(default_factory=list)
    label: str = ""
    acc_step0: float = 0.0
    acc_per_step: list[float | None] = field(default_factory=list)
    simulated_accept_length: float | None = None
    predicted_accept_length: float | None = None
    n_positions: int = 0
    live_accept_length: float | None = None
    mean_prob: float | None = None  # of the target's greedy token at TTT step 0
    loss: float | None = None  # the draft's training loss at TTT step 0 (nats; older probes: none)


@dataclass(frozen=True)
class DeclaredCandidate(CandidateResult):
    source: str = ""  # where the declared wiring was read from


@dataclass(frozen=True)
class Separation(Plain):
    """The rule that told candidates apart: the measure, the paired t it needs, the block size."""

    measure: str = ""
    t_separate: float = 0.0
    block: int = 0


@dataclass(frozen=True)
class ProbeConfig(Plain):
    """The config.json fields that declare the found wiring, per engine (copied as they are)."""

    sglang: dict
    vllm: dict


@dataclass(frozen=True)
class ProbeResult(Plain):
    """A wiring probe's report (probe.ProbeReport.to_dict), with the pair, the settings it ran with and
    who ran it where a view kept it. A probe stored by an older version reads with defaults."""

    declared: DeclaredCandidate | None = None
    candidates: list[CandidateResult] = field(default_factory=list)  # best first
    best: CandidateResult | None = None
    verdict: str = ""
    confirmed: bool = False
    confirm_margin: float | None = None
    separation: Separation | None = None  # how tied and separated were told apart (older probes: none)
    as_good_as_best: list[list[int]] = field(default_factory=list)
    tied: list[list[int]] = field(default_factory=list)
    separated: bool = False
    config: ProbeConfig | None = None  # None while tied: nothing to paste
    how_to_separate: str | None = None
    seconds: float = 0.0
    num_steps: int | None = None
    n_samples: int = 0
    target: str | None = None
    draft: str | None = None
    settings: SettingsUsed = field(default_factory=SettingsUsed)
    ran_by: str | None = None
