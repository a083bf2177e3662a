"""What a per-request reader produces: one request's counts (`RequestNumbers`) with the metrics
SpecLens computes from them and the definitions they follow, the file's result (`RequestsFile`: the
requests, their pooled numbers, a profile's or a window's own), and `Where`, which names a place in the
file for one-line errors. Plain Python."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from backend import BadInput
from backend.plain import Plain
from backend.run.metrics import definitions, position_rates

MEAN_TOLERANCE = 1e-3  # an engine's own ratio vs the one its counts give (ModelOpt rounds to 6 digits)


@dataclass(frozen=True)
class PooledDefinitions(Plain):
    """The definitions the pooled numbers follow, one per number (`DEFINITIONS` below)."""

    accept_length: str
    pooled_accept_length: str
    accept_length_per_request_mean: str
    accept_length_per_request_ci95: str
    acceptance_rate: str
    per_position_marginal: str
    per_position_conditional: str


DEFINITIONS = PooledDefinitions(  # the per-request result's keys, from the one DEFINITIONS
    **definitions(
        {
            "accept_length": "mean_accept_length",
            "pooled_accept_length": "pooled_accept_length",
            "accept_length_per_request_mean": "mean_accept_length_over_prompts",
            "accept_length_per_request_ci95": "mean_ci95",
            "acceptance_rate": "acceptance_rate",
            "per_position_marginal": "per_position_marginal",
            "per_position_conditional": "per_position_conditional",
        }
    )
)

CONVERTED = {
    "vllm": "vLLM metrics.speculative_decoding: a from acceptance_histogram (index = accepted drafts, "
    "length K+1, bonus excluded); accept length = 1 + num_accepted_draft_tokens / num_spec_steps, which "
    "is vLLM's mean_acceptance_length (checked against it)",
    "sglang": "SGLang meta_info: verify steps = spec_verify_ct, accepted = spec_num_correct_drafts "
    "(histogram spec_correct_drafts_histogram, index = correct drafts); accept length = 1 + correct / "
    "verify steps. NOT spec_accept_length = completion_tokens / spec_verify_ct, which also counts the "
    "token the prefill emits before the first verify step",
    "sglang-derived": "SGLang meta_info without draft counts (older releases): accepted = completion_tokens "
    "- 1 - spec_verify_ct (the prefill emits the first token; every later token comes from a verify step)",
    "sglext": "SGLang sglext.spec_tokens_details (the same counts as meta_info): accept length = 1 + "
    "spec_num_correct_drafts / spec_verify_ct",
    "trtllm": "TensorRT-LLM choices[].speculative_decoding: accept length = 1 + total_accepted_draft_tokens "
    "/ num_spec_steps (TensorRT-LLM reports no mean length); histogram padded to K+1",
    "llamacpp": "llama.cpp timings: acceptance rate = draft_n_accepted / draft_n; it reports no step count",
    "llamacpp-k": "llama.cpp timings with K given: verify steps = draft_n / K, ASSUMING every step drafted K "
    "tokens (llama.cpp drafts fewer when the draft is unsure or the budget ends, so the true count is "
    "higher and the true accept length lower); accept length = 1 + draft_n_accepted / steps",
    "modelopt": "ModelOpt speculation_profile.json: pooled acceptance_length_histogram keyed by tokens "
    "emitted per step (a + 1, bonus included): a = key - 1; mean_accept_length is step-weighted, "
    "mean_accept_length_per_request averages requests",
    "sglang-server-info": "SGLang /server_info internal_states[0].avg_spec_accept_length: cumulative since "
    "the server started (accepted tokens incl. bonus / verify steps), updated when a decode log line is "
    "written",
}


@dataclass
class RequestNumbers(Plain):
    """One request's counts as an engine reported them, and SpecLens's metrics from them. Not frozen:
    the readers fill it in as they check the counts (`finish`), and a prompt given as text gets its ids
    later (backend/service/per_request.py recover_prompts)."""

    record: str  # where it is in the file: "line 3", "line 3, choice 1", "record 2"
    engine: str
    status: str = "ok"  # ok | no-verify-steps | not-reported | cumulative | not-measured
    note: str | None = None  # why a status is not ok, or the assumption made
    request_id: str | None = None
    verify_steps: int | None = None
    accepted_drafts: int | None = None
    drafted_tokens: int | None = None
    num_speculative_tokens: int | None = None  # K, where the engine says or the user gave it
    accept_histogram: list[int] | None = None  # steps accepting exactly a drafts, index a
    per_step_accepted: list[int] | None = None
    draft_lengths: list[int] | None = None  # the distinct numbers of drafts its verify steps ran
    completion_tokens: int | None = None
    prompt_ids: list[int] | None = None
    prompt_text: str | None = None
    prompt_messages: list | None = None  # a chat request's messages (the target's template renders them)
    engine_accept_length: float | None = None  # the engine's own figure, under its own definition
    accept_length: float | None = None
    acceptance_rate: float | None = None
    per_position_marginal: list[float | None] | None = None
    per_position_conditional: list[float | None] | None = None
    converted_from: str = ""


@dataclass(frozen=True)
class Pooled(Plain):
    """A file's requests pooled (backend/data/per_request.py pooled): step-weighted over every request
    with verify steps, the per-request mean beside it."""

    requests: int
    with_accept_length: int
    statuses: dict[str, int]  # status -> requests
    verify_steps: int
    accepted_drafts: int
    drafted_tokens: int | None
    num_speculative_tokens: int | None
    accept_length: float | None
    accept_length_per_request_mean: float | None
    accept_length_per_request_ci95: list[float] | None
    acceptance_rate: float | None
    per_position_marginal: list[float | None] | None
    per_position_conditional: list[float | None] | None
    accept_histogram: list[int] | None
    definitions: PooledDefinitions = DEFINITIONS
    pooled_only: bool = False  # a ModelOpt profile: one pooled histogram, no requests


@dataclass(frozen=True)
class ModelOptProfile(Plain):
    """What a speculation_profile.json says beyond its histogram (backend/data/formats_other.py)."""

    mean_accept_length_per_request: float | None = None  # ModelOpt's Average_AL over requests
    per_category: dict | None = None
    method: str | None = None
    measurement_conditions: dict | None = None
    schema_version: str | None = None
    disagreements: list[str] = field(default_factory=list)  # the profile's own rates against its histogram's


@dataclass(frozen=True)
class ServerWindow(Plain):
    """Two SGLang /server_info reads differenced (backend/data/formats_sglang.py): the accept length
    between them, or the note saying why there is none."""

    accept_length: float | None = None
    verify_steps: int | None = None
    note: str | None = None
    definition: str | None = None


@dataclass
class RequestsFile:
    source: str
    format: str
    requests: list[RequestNumbers]
    pooled: Pooled
    skipped_chunks: int = 0  # streaming chunks that carry no statistics (they ride the last one)
    profile: ModelOptProfile | None = None  # a speculation_profile.json's own numbers
    window: ServerWindow | None = None  # two /server_info reads differenced


class Where:
    """Names a place in the file for error messages: 'FILE: line N: field: reason'."""

    def __init__(self, source: str, record: str):
        self.source, self.record = source, record

    def fail(self, reason: str):
        raise BadInput(f"{self.source}: {self.record}: {reason}")

    def count(self, value, name: str, optional: bool = False) -> int | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{name} is {json.dumps(value)[:40]}, expected an integer >= 0")
        if value < 0:
            self.fail(f"{name} is {value}: a count is >= 0")
        return value

    def counts(self, value, name: str) -> list[int]:
        if not isinstance(value, list):
            self.fail(f"{name} is {json.dumps(value)[:40]}, expected a list of integers >= 0")
        return [self.count(v, f"{name}[{i}]") for i, v in enumerate(value)]

    def number(self, value, name: str, optional: bool = True) -> float | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(f"{name} is {json.dumps(value)[:40]}, expected a finite number")
        if value < 0:
            self.fail(f"{name} is {value}: expected a number >= 0")
        return float(value)

    def obj(self, value, name: str) -> dict:
        if not isinstance(value, dict):
            self.fail(f"{name} is {type(value).__name__}, expected a JSON object")
        return value


# ---------------------------------------------------------------------------------- metrics


def dense(histogram: dict | list, where: Where, name: str) -> list[int]:
    """A histogram as a dense list indexed by a; a dict with string keys (JSON) is accepted."""
    if isinstance(histogram, dict):
        try:
            keyed = {int(k): v for k, v in histogram.items()}
        except ValueError:
            where.fail(f"{name} has a key that is not an integer")
        if any(k < 0 for k in keyed):
            where.fail(f"{name} has a negative key")
        out = [0] * (max(keyed, default=-1) + 1)
        for k, v in keyed.items():
            out[k] = where.count(v, f"{name}[{k}]")
        return out
    return where.counts(histogram, name)


def histogram_metrics(histogram: list[int], k: int | None) -> tuple[list, list]:
    """(marginal, conditional) for positions 1..K, K = the configured draft length where known, else
    the largest a observed (positions past it are then not reported: nothing says they were drafted)."""
    return position_rates(histogram, k if k is not None else len(histogram) - 1)


def check_histogram(n: RequestNumbers, where: Where) -> None:
    """The histogram against the step and accepted counts and K; it then gives both counts (and is cut
    to K + 1 entries where K is known)."""
    steps = sum(n.accept_histogram)
    accepted = sum(a * c for a, c in enumerate(n.accept_histogram))
    if n.verify_steps is not None and steps != n.verify_steps:
        where.fail(
            f"the accept histogram sums to {steps} steps but the verify step count is {n.verify_steps}"
        )
    if n.accepted_drafts is not None and accepted != n.accepted_drafts:
        where.fail(
            f"the accept histogram gives {accepted} accepted drafts but the accepted count is {n.accepted_drafts}"
        )
    k = n.num_speculative_tokens
    if k is not None and len(n.accept_histogram) > k + 1:
        if any(n.accept_histogram[k + 1 :]):
            where.fail(f"the accept histogram has steps accepting more than K = {k}")
        n.accept_histogram = n.accept_histogram[: k + 1]
    n.verify_steps, n.accepted_drafts = steps, accepted


def check_per_step(n: RequestNumbers, where: Where) -> None:
    """One per_step_accepted entry a verify step, summing to the accepted count."""
    if n.verify_steps is not None and len(n.per_step_accepted) != n.verify_steps:
        where.fail(f"per_step_accepted has {len(n.per_step_accepted)} entries for {n.verify_steps} steps")
    if n.accepted_drafts is not None and sum(n.per_step_accepted) != n.accepted_drafts:
        where.fail(f"per_step_accepted sums to {sum(n.per_step_accepted)}, not {n.accepted_drafts}")


def check_bounds(n: RequestNumbers, where: Where) -> None:
    """No more accepted drafts than were drafted, nor than K a verify step allows."""
    if n.accepted_drafts is None:
        return
    if n.drafted_tokens is not None and n.accepted_drafts > n.drafted_tokens:
        where.fail(f"{n.accepted_drafts} accepted drafts of {n.drafted_tokens} drafted tokens")
    if (
        n.verify_steps is not None
        and n.num_speculative_tokens
        and n.accepted_drafts > n.verify_steps * n.num_speculative_tokens
    ):
        where.fail(
            f"{n.accepted_drafts} accepted drafts in {n.verify_steps} steps of at most K = "
            f"{n.num_speculative_tokens}"
        )


def compute_metrics(n: RequestNumbers) -> None:
    """SpecLens's metrics from the checked counts (DEFINITIONS)."""
    if n.verify_steps and n.accepted_drafts is not None:
        n.accept_length = 1 + n.accepted_drafts / n.verify_steps
    if n.drafted_tokens:
        n.acceptance_rate = (n.accepted_drafts or 0) / n.drafted_tokens
    if n.accept_histogram is not None:
        n.per_position_marginal, n.per_position_conditional = histogram_metrics(
            n.accept_histogram, n.num_speculative_tokens
        )


def finish(numbers: RequestNumbers, where: Where) -> RequestNumbers:
    """Check the counts against each other and compute SpecLens's metrics from them."""
    if numbers.accept_histogram is not None:
        check_histogram(numbers, where)
    if numbers.per_step_accepted is not None:
        check_per_step(numbers, where)
    check_bounds(numbers, where)
    if numbers.status == "ok" and not numbers.verify_steps:
        numbers.status = "no-verify-steps"
        numbers.note = numbers.note or "the request ran no verify step: it has no accept length"
    if numbers.status == "ok":
        compute_metrics(numbers)
    return numbers


def check_engine_mean(numbers: RequestNumbers, where: Where, name: str) -> None:
    """An engine's own mean must agree with its counts: a file where it does not is not trusted."""
    own, ours = numbers.engine_accept_length, numbers.accept_length
    if own is not None and ours is not None and abs(own - ours) > MEAN_TOLERANCE:
        where.fail(f"{name} is {own:g} but the counts give {ours:.6g}")
