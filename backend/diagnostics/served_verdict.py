"""A diagnosis that starts from the user's engine: the accept length the server reported beside the
replay's under the wiring the engine reads (the declared one, as that engine reads it) and under the
wiring the probe found the draft trained on. Which of the two the server's number sits with says whether
the wiring is the cause on that server; below both, the cause is elsewhere on the serving side."""

from __future__ import annotations

from backend.data.served_acceptance import ServedAcceptance
from backend.diagnostics.findings import Finding

# Two accept lengths are "the same" within this much (absolute, tokens per step): the served number pools
# other prompts, lengths and batches than the replay's few samples; a wiring error moves it far more.
SAME_WITHIN = 0.15


def served_findings(
    served: ServedAcceptance,
    num_steps: int,
    declared: tuple[list[int], float],
    found: tuple[list[int], float] | None,
) -> list[Finding]:
    """`declared`: (HF indices the engine reads, the replay's accept length under them); `found`: the same
    under the wiring the probe found trained, None when the probe confirmed the declared one."""
    evidence = {
        "served": served.to_dict(),
        "replay_num_steps": num_steps,
        "declared": {"aux_hf_indices": declared[0], "accept_length": round(declared[1], 3)},
        "found": None if found is None else {"aux_hf_indices": found[0], "accept_length": round(found[1], 3)},
        "same_within": SAME_WITHIN,
    }
    said = (
        f"the server's accept length {served.accept_length:.2f} ({served.engine}, {served.source}: "
        f"{served.counted})"
    )
    if served.num_steps is not None and served.num_steps != num_steps:
        return [
            Finding(
                "served-numbers",
                "warn",
                f"{said} is at K = {served.num_steps}; the replay ran K = {num_steps}: not comparable",
                evidence,
                f"Diagnose again with K = {served.num_steps} (CLI --steps; page: K).",
            )
        ]
    at_declared = f"the replay's {declared[1]:.2f} under HF {declared[0]} (what the engine reads)"
    near_declared = abs(served.accept_length - declared[1]) <= SAME_WITHIN
    if found is not None:
        at_found = f"{found[1]:.2f} under HF {found[0]} (the wiring the probe found trained)"
        near_found = abs(served.accept_length - found[1]) <= SAME_WITHIN
        if near_declared and not near_found:
            return [
                Finding(
                    "aux-wiring",
                    "fail",
                    f"{said} equals {at_declared}, not {at_found}: the server runs the misread wiring, "
                    "and that is what costs it",
                    evidence,
                    "Declare the trained wiring (the wiring finding's fix), restart the server, and compare again.",
                )
            ]
        if near_found:
            return [
                Finding(
                    "served-numbers",
                    "info",
                    f"{said} equals the replay's {at_found}, not {at_declared}: the server already feeds the "
                    "trained layers (another config than the one diagnosed, or an engine that reads it otherwise)",
                    evidence,
                )
            ]
        best = max(declared[1], found[1])
    else:
        if near_declared:
            return [Finding("served-numbers", "info", f"{said} equals {at_declared}", evidence)]
        best = declared[1]
    if served.accept_length < best - SAME_WITHIN:
        return [
            Finding(
                "served-numbers",
                "fail",
                f"{said} is below {at_declared}"
                + ("" if found is None else f" and below {at_found}")
                + ": the draft and its wiring do not explain it; the cause is on the serving side (flags, "
                "sampling, precision, chat template, batch or context: the other findings)",
                evidence,
                "Run the serving-flag lint on the server's command and serve-check the engine on these samples.",
            )
        ]
    return [
        Finding(
            "served-numbers",
            "info",
            f"{said} is above the replay's ({at_declared}): its prompts accept more than these samples",
            evidence,
        )
    ]
