"""The draft's own head: is it there, finite, trained, and whose is it (finding class draft-head).

What the engines do when the head is wrong, which is why a checkpoint's head is checked before
anything is replayed:
- missing from the checkpoint: SGLang leaves `lm_head` at its random initialisation and serves
  accept length ~1.00 with no error (sglang#27908); vLLM 0.32 shares the target's full-vocabulary
  head instead (vllm/v1/spec_decode/llm_base_proposer.py `_maybe_share_lm_head`: no weight named
  lm_head loaded, `has_own_lm_head` False, utils.py `process_eagle_weight`);
- identical to the target's: vLLM 0.32 shares the target's head (`torch.equal` there), harmless;
  earlier releases overwrote a distinct head with the target's (vllm#27732, AL 1.32 -> 2.49 after
  the fix of vllm#28549).

A head at random-init statistics is told from a trained one by the spread of its row norms: with
i.i.d. weights (any initialiser: normal, or nn.Linear's uniform) every row of H entries has the
same expected norm, and the norms' coefficient of variation is sqrt((kurtosis - 1) / (4 H)). Trained
heads spread far wider (frequent tokens grow longer rows): 0.16-0.20 on the bundled drafts, against
0.02-0.09 for their sizes at initialisation.
"""

from __future__ import annotations

import torch

from backend.diagnostics.findings import Finding

# Row-norm spread at most this many times the i.i.d. expectation: the weights are still the init.
UNTRAINED_SPREAD = 1.5
SAME_AS_TARGET = 0.9999  # mean row cosine with the target's rows: the head is the target's own
HEAD_FIX = (
    "Re-export the draft from the trained checkpoint with its own lm_head.weight (SpecForge and EAGLE "
    "save it beside the layers); check that the export did not drop or re-initialise it."
)


def head_statistics(weight: torch.Tensor) -> dict:
    """The head's spread, its entries' kurtosis, and its row norms' coefficient of variation beside
    the value i.i.d. weights of the same kurtosis would give."""
    w = weight.detach().float()
    entries = w.flatten()
    mean, std = entries.mean(), entries.std()
    kurtosis = float((((entries - mean) / std) ** 4).mean()) if float(std) > 0 else 0.0
    norms = w.norm(dim=1)
    spread = float(norms.std() / norms.mean()) if float(norms.mean()) > 0 else 0.0
    iid = (max(kurtosis - 1.0, 0.5) / (4 * w.shape[1])) ** 0.5
    return {
        "std": float(std),
        "kurtosis": kurtosis,
        "row_norm_spread": spread,
        "iid_row_norm_spread": iid,
        "definition": "row_norm_spread = std/mean of the rows' L2 norms; iid = sqrt((kurtosis - 1) / (4 H))",
    }


def looks_untrained(stats: dict) -> bool:
    return stats["row_norm_spread"] <= UNTRAINED_SPREAD * stats["iid_row_norm_spread"]


def target_rows(draft, target) -> torch.Tensor | None:
    """The target's output-embedding rows for the draft's vocabulary (row d: target id d + d2t[d]);
    None when the widths differ (a draft of another hidden size cannot carry the target's head)."""
    head = target.model.get_output_embeddings() if hasattr(target.model, "get_output_embeddings") else None
    if head is None or head.weight.shape[1] != draft.lm_head.weight.shape[1]:
        return None
    ids = draft.to_target_ids(torch.arange(draft.config.draft_vocab_size, device=draft.d2t.device))
    if int(ids.max()) >= head.weight.shape[0] or int(ids.min()) < 0:
        return None  # preflight's vocab checks say why
    return head.weight.detach().float()[ids.to(head.weight.device)].cpu()


def head_findings(draft, target) -> list[Finding]:
    """Untrained (fail) or the target's own (info); nothing for a trained head of its own."""
    weight = draft.lm_head.weight.detach().float().cpu()
    if not bool(torch.isfinite(weight).all()):
        return []  # preflight's weights check names it (draft-head via preflight_class)
    stats = head_statistics(weight)
    rows = target_rows(draft, target)
    if rows is not None:
        stats["mean_row_cosine_with_target"] = float(
            torch.nn.functional.cosine_similarity(weight, rows, dim=1).mean()
        )
    if looks_untrained(stats):
        return [
            Finding(
                "draft-head",
                "fail",
                f"the draft's lm_head has the statistics of an untrained initialisation: its rows' norms spread "
                f"{stats['row_norm_spread']:.3f}, as i.i.d. weights do ({stats['iid_row_norm_spread']:.3f}); a trained "
                "head's spread several times wider. Such a head proposes noise, and engines serve it at accept "
                "length ~1.0 without an error (sglang#27908)",
                stats,
                HEAD_FIX,
            )
        ]
    if stats.get("mean_row_cosine_with_target", 0.0) >= SAME_AS_TARGET:
        full = draft.config.draft_vocab_size == target.vocab_size
        return [
            Finding(
                "draft-head",
                "info",
                "the draft's lm_head is the target's own rows for the draft vocabulary (mean cosine "
                f"{stats['mean_row_cosine_with_target']:.4f}): copied rather than trained. "
                + (
                    "vLLM 0.32 then serves the target's head itself (torch.equal in _maybe_share_lm_head)."
                    if full
                    else "Engines serve it as the draft's own head."
                ),
                stats,
                "Nothing to change if the draft was trained with the target's head frozen; otherwise "
                "re-export the trained head.",
            )
        ]
    return []


def is_head_check(check: dict) -> bool:
    """A preflight failure about the head (missing or non-finite lm_head): class draft-head."""
    return check["name"] in ("tensors", "weights") and "lm_head" in check["message"]


def missing_head_fix(check: dict) -> str:
    if check["name"] == "weights":
        return "The head holds NaN or infinite values: the checkpoint is corrupt. " + HEAD_FIX
    return (
        "The checkpoint has no lm_head.weight: SGLang then runs the head at its random initialisation "
        "(sglang#27908, accept length ~1.00, no error) and vLLM 0.32 the target's full-vocabulary head "
        "(_maybe_share_lm_head). " + HEAD_FIX
    )
