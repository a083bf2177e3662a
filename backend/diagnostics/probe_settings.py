"""The wiring probe's settings and its report as a value, torch-free: pages compare a stored probe's
settings with the ones on screen and draw its report without loading the engine
(backend/diagnostics/probe.py runs it; backend/service/kept_results.py keeps it with the pair)."""

from __future__ import annotations

from dataclasses import dataclass, field

from backend.plain import OMIT, Plain
from backend.run.metrics import simulated_accept_length

# How candidates are ranked and separated (backend/diagnostics/probe.py): a stored probe of another
# method does not answer a request, and a kept probe of this method is preferred to older ones.
METHOD = "training loss, paired per position in blocks"


@dataclass(frozen=True)
class ProbeSettings:
    """How far the probe looks: K of the teacher-forced scores, how many candidates the search may
    add, and the live replays (on the first `live_samples` samples, 0: none, `live_tokens` new tokens
    each): `via` step replays the best, declared and runner-up with the target verifying each step;
    `via` trace captures the target once per sample (every layer) and replays every candidate over it,
    the draft alone (the exact accept length of each, docs/traces.md)."""

    num_steps: int = 4
    search_budget: int = 40
    live_samples: int = 0
    live_tokens: int = 64
    via: str = "step"

    def describe(self, samples: list) -> SettingsUsed:
        """What a run of the probe used, to tell whether a stored report answers another request."""
        return SettingsUsed(
            self.num_steps, self.search_budget, self.live_samples, sample_keys(samples), METHOD, self.via
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
    via: str = "step"  # how its live replays ran: step (older probes too), or trace


@dataclass
class Candidate(Plain):
    """One candidate wiring the probe scored: its training loss and acc_k, and, while the probe runs,
    its per-position losses (what separates two candidates; never stored). Stored probes of older
    versions may hold only some of these."""

    DERIVED = ("acc_step0", "simulated_accept_length", "predicted_accept_length")

    aux_hf_indices: tuple[int, ...] = ()
    label: str = ""  # why it is a candidate ("declared; SpecForge default"), "; "-joined
    acc_per_step: list[float | None] = field(default_factory=list)
    n_positions: int = 0
    live_accept_length: float | None = None
    mean_prob: float | None = None  # p(the target's greedy token) at TTT step 0, over every counted position
    loss: float | None = None  # the draft's training loss at TTT step 0, nats per counted position
    position_loss: list = field(default_factory=list, repr=False, compare=False, metadata={OMIT: True})
    # the accepted count of every verify step of its live replays (what separates two over traces)
    live_counts: list = field(default_factory=list, repr=False, compare=False, metadata={OMIT: True})

    @property
    def acc_step0(self) -> float:
        if not self.acc_per_step or self.acc_per_step[0] is None:
            return 0.0
        return self.acc_per_step[0]

    @property
    def simulated_accept_length(self) -> float | None:
        if not self.acc_per_step or any(a is None for a in self.acc_per_step):
            return None
        return simulated_accept_length(self.acc_per_step)

    @property
    def predicted_accept_length(self) -> float | None:
        simulated = self.simulated_accept_length
        return None if simulated is None else 1 + simulated

    @property
    def score(self) -> tuple[float, float]:
        """What ranks candidates: the lower training loss, then acc_0 (where no loss was measured: the
        predicted accept length, then acc_0)."""
        if self.loss is not None:
            return (-self.loss, self.acc_step0)
        return (self.simulated_accept_length or 0.0, self.acc_step0)

    def add_label(self, label: str) -> None:
        if label not in self.label.split("; "):
            self.label = f"{self.label}; {label}" if self.label else label


@dataclass
class DeclaredCandidate(Candidate):
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
    """A wiring probe's report (probe_report.Ranking.result), with the pair, the settings it ran with and
    who ran it where a view kept it. A probe stored by an older version reads with defaults."""

    declared: DeclaredCandidate | None = None
    candidates: list[Candidate] = field(default_factory=list)  # best first
    best: Candidate | None = None
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
