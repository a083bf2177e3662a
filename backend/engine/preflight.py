"""Check a draft against a target before anything runs (docs/reference.md §1-2).

The report lists every check with pass / warn / fail and a sentence a user understands; a draft that
fails preflight is never run: the silent failures of real deployments (missing d2t, skipped tensor
names, an fc of the wrong width) are exactly what this refuses.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from backend import BadInput, first_line
from backend.drafts.dflash_config import is_dflash
from backend.drafts.draft_config import KNOWN_ARCHITECTURES, VARIANT_FLAGS, DraftConfig
from backend.drafts.engine_table import (
    OWN_EMBEDDING,
    Check,
    EngineTable,
    engine_table,
)
from backend.drafts.readings import DESCRIPTIONS, fed_wiring
from backend.engine.dflash_preflight import dflash_report
from backend.engine.draft_model import Eagle3Draft
from backend.engine.loading import (
    IGNORABLE_SUFFIXES,
    DraftFiles,
    Target,
    build_draft,
    read_draft,
    read_target_config,
)
from backend.engine.preflight_report import PreflightRefused, PreflightReport
from backend.run.wiring import Wiring, check_indices


def preflight(
    draft_dir: str | Path, target_dir: str | Path, sample_length: int | None = None, aux_hf_indices=None
) -> PreflightReport:
    """Check a draft against a target without loading the target's weights."""
    target_config = read_target_config(target_dir)
    if is_dflash(draft_dir):
        return dflash_report(draft_dir, target_config)
    try:
        files = read_draft(draft_dir)
    except BadInput as error:
        return PreflightReport([Check("files", "fail", str(error))], None)
    report = check_draft(files, target_config, aux_hf_indices)
    if sample_length is not None:
        report.checks.append(context_check(files.config, sample_length))
    return report


def load_checked_draft(
    draft_dir: str | Path, target: Target, aux_hf_indices=None
) -> tuple[Eagle3Draft, PreflightReport]:
    """Read the draft once, check it against the loaded target, and build it; PreflightRefused when
    a check fails. The report (warnings included) comes back for the caller to show."""
    if is_dflash(draft_dir):
        from backend.engine.dflash_step import load_dflash

        report = dflash_report(draft_dir, target.model.config)
        if not report.ok:
            raise PreflightRefused(draft_dir, report)
        return load_dflash(draft_dir, target), report
    files = read_draft(draft_dir)
    report = check_draft(files, target.model.config, aux_hf_indices)
    if not report.ok:
        raise PreflightRefused(draft_dir, report)
    return build_draft(files, target), report


def context_check(config: DraftConfig, sequence_length: int) -> Check:
    limit = config.max_position_embeddings
    if sequence_length > limit:
        return Check(
            "context",
            "warn",
            f"the sequence ({sequence_length} tokens) is longer than the draft's "
            f"max_position_embeddings ({limit}); drafts degrade past their trained context",
        )
    return Check(
        "context", "pass", f"sequence of {sequence_length} tokens fits the draft's context ({limit})"
    )


def check_draft(files: DraftFiles, target_config, aux_hf_indices=None) -> PreflightReport:
    checks: list[Check] = []
    add = lambda name, status, message: checks.append(Check(name, status, message))  # noqa: E731
    target_hidden, target_vocab = target_config.hidden_size, target_config.vocab_size
    config, tensors = files.config, files.tensors
    add(
        "files",
        "pass",
        f"read {files.weights_file} ({len(tensors)} tensors)"
        + (f"; {'; '.join(files.renamed)}" if files.renamed else ""),
    )
    _check_config_keys(config, add)
    _check_architecture(config, add)
    table = engine_table(config, target_config.num_hidden_layers, OWN_EMBEDDING in tensors)
    wiring = _check_wiring(config, target_config.num_hidden_layers, aux_hf_indices, table, add)
    for finding in table.disagreements:
        add("engines", "warn", finding["message"])
    fixes = table.fixes(wiring)
    for finding in fixes:
        add("serving wiring", "warn", finding["message"])
    _check_sizes(config, tensors, target_hidden, target_vocab, add)
    _check_vocab_mapping(config, tensors, target_vocab, add)
    _check_tensor_names(config, files, add)
    _check_dtypes(tensors, add)
    return PreflightReport(checks, wiring, table.engines, table.training, table.disagreements, fixes)


def _check_config_keys(config: DraftConfig, add) -> None:
    """Refusals first (the real reason leads), then what is ignored and why, then unknown keys."""
    for reason in config.refused:
        add("config", "fail", f"needs math SpecLens does not have: {reason}; refusing this checkpoint")
    if config.ignored_keys:
        add(
            "config keys",
            "pass",
            f"{len(config.ignored_keys)} keys known to be harmless: "
            + "; ".join(f"{k} ({why})" for k, why in sorted(config.ignored_keys.items())),
        )
    if config.unknown_keys:
        add(
            "config keys",
            "warn",
            f"config keys SpecLens does not know (not used): {', '.join(config.unknown_keys)}",
        )


def _check_architecture(config: DraftConfig, add) -> None:
    if config.architecture in KNOWN_ARCHITECTURES:
        add(
            "architecture",
            "pass",
            f"{config.architecture}, {config.num_layers} decoder layer(s), "
            f"hidden {config.hidden_size}, RoPE {config.rope_description}",
        )
    else:
        add(
            "architecture",
            "warn",
            f"unknown architecture {config.architecture}; read as an EAGLE-3 Llama "
            f"draft ({', '.join(KNOWN_ARCHITECTURES)} are known)",
        )
    if not config.use_aux_hidden_state:
        add(
            "variant",
            "fail",
            "eagle_config.use_aux_hidden_state is false (EAGLE-1/2 style: last hidden, no "
            "fc); SpecLens replays EAGLE-3 drafts only",
        )
    declared = {f: getattr(config, f) for f in VARIANT_FLAGS if getattr(config, f) is not None}
    add(
        "variant",
        "pass",
        "variant flags as declared: "
        + (", ".join(f"{k}={v}" for k, v in declared.items()) or "none")
        + (f"; decoder layer {config.layer_model_type} (q/k norms)" if config.qk_norm else ""),
    )


def _check_wiring(config: DraftConfig, num_layers: int, override, table: EngineTable, add) -> Wiring | None:
    """The wiring the draft declares (the training reading's, or the override), checked against the
    target. A training reading that cannot run the draft is a finding about that reading: the reading a
    replay or a server uses decides (requests.reading_of refuses there), so it fails here only when no
    engine loads the draft."""
    training = table.declared
    if override is None and not training.loads:
        loading = [name for name, view in table.engines.items() if view.loads]
        if not loading:
            add("wiring", "fail", f"no engine can run this draft; {training.refusal}")
            return None
        add(
            "training reading",
            "warn",
            f"{DESCRIPTIONS[training.engine]} cannot run this draft: {training.refusal}. The reading asked "
            f"for decides: {', '.join(loading)} load it (--engine NAME); the default (auto) is refused",
        )
        try:
            check_indices(training.wiring.aux_hf_indices, num_layers)
        except BadInput as error:
            add(
                "wiring",
                "warn",
                f"the declared wiring does not fit this target ({error}); replay with --engine NAME",
            )
            return None
        training = replace(training, loads=True, refusal=None)
    try:
        wiring = fed_wiring(training, override, num_layers)  # the one rule (wiring.fed_wiring)
    except BadInput as error:
        add("wiring", "fail", str(error))
        return None
    reading = "" if override is not None else f" (the training reading: {DESCRIPTIONS[training.engine]})"
    add("wiring", "pass", f"aux HF indices {list(wiring.aux_hf_indices)} from {wiring.source}{reading}")
    indices = list(wiring.aux_hf_indices)
    if len(set(indices)) < 3 or indices != sorted(indices):
        add(
            "wiring",
            "warn",
            f"aux HF indices {indices} are not three distinct ascending layers: the engines "
            "concatenate in ascending order; a target this shallow or an override like this rarely matches training",
        )
    return wiring


def _check_sizes(config: DraftConfig, tensors, target_hidden: int, target_vocab: int, add) -> None:
    if config.target_hidden_size != target_hidden:
        add(
            "target hidden",
            "fail" if "own_embedding.weight" not in tensors else "warn",
            f"draft target_hidden_size {config.target_hidden_size} != target hidden_size {target_hidden}",
        )
    fc = tensors.get("fc.weight")
    if fc is not None:
        if fc.shape[1] == 3 * target_hidden:
            add(
                "fc width",
                "pass",
                f"fc.weight {list(fc.shape)}: input 3 x {target_hidden} (three target states)",
            )
        else:
            add(
                "fc width",
                "fail",
                f"fc.weight input width {fc.shape[1]} != 3 x target hidden size {target_hidden} "
                f"(= {3 * target_hidden}): this draft was not trained on this target's three hidden states",
            )
    if config.vocab_size != target_vocab:
        add("vocab", "warn", f"draft config vocab_size {config.vocab_size} != target vocab {target_vocab}")
    else:
        add("vocab", "pass", f"target vocab {target_vocab}, draft vocab {config.draft_vocab_size}")


def _check_vocab_mapping(config: DraftConfig, tensors, target_vocab: int, add) -> None:
    d2t, t2d = tensors.get("d2t"), tensors.get("t2d")
    draft_vocab = config.draft_vocab_size
    if d2t is None:
        if draft_vocab < target_vocab:
            add(
                "d2t",
                "fail",
                f"draft vocab {draft_vocab} < target vocab {target_vocab} but the checkpoint has no "
                "d2t: draft ids would be read as target ids and every proposal would be garbage "
                "(EAGLE, SGLang and vLLM all do this silently)",
            )
        else:
            add("d2t", "pass", "no d2t needed: draft and target share the vocabulary")
        return
    if d2t.ndim != 1 or d2t.shape[0] != draft_vocab:
        add("d2t", "fail", f"d2t has shape {list(d2t.shape)}, expected [{draft_vocab}] (draft_vocab_size)")
        return
    target_ids = torch.arange(draft_vocab) + d2t.long()
    if target_ids.min() < 0 or target_ids.max() >= target_vocab:
        add(
            "d2t",
            "fail",
            f"d2t maps draft ids to target ids {int(target_ids.min())}..{int(target_ids.max())}, "
            f"outside the target vocab 0..{target_vocab - 1}",
        )
        return
    if not bool((target_ids[1:] > target_ids[:-1]).all()):
        add(
            "d2t",
            "fail",
            "d2t does not map draft ids to strictly increasing target ids (the layout EAGLE and "
            "SpecForge build); the mapping is corrupt or from another tool",
        )
        return
    add(
        "d2t",
        "pass",
        f"d2t maps {draft_vocab} draft ids into target ids {int(target_ids[0])}..{int(target_ids[-1])}",
    )
    identity = draft_vocab == target_vocab and not bool(d2t.any())
    if identity and t2d is not None and t2d.shape[0] == target_vocab and not bool(t2d.bool().any()):
        # EAGLE's inference class writes and loads this for a full-vocabulary draft (eagle/model/ea_model.py
        # drops both maps when the vocabularies are equal); SGLang's hot_token_id = d2t + arange and vLLM's
        # scatter to arange + d2t read the zeros as the identity; t2d is read by none of them at inference.
        add(
            "t2d",
            "pass",
            "all-zero d2t and all-False t2d under a full vocabulary: EAGLE's own placeholder maps; EAGLE drops "
            "both, SGLang and vLLM read d2t as the identity and skip t2d (every engine runs the identity)",
        )
    elif t2d is None:
        add("t2d", "warn", "no t2d tensor (not used for replay; training tools need it)")
    elif (
        t2d.shape[0] != target_vocab
        or int(t2d.bool().sum()) != draft_vocab
        or not bool(t2d.bool()[target_ids].all())
    ):
        add(
            "t2d",
            "fail",
            "t2d disagrees with d2t: they mark different target ids as in the draft vocab "
            "(a regenerated mapping? lm_head rows would not match their tokens)",
        )
    else:
        add("t2d", "pass", "t2d agrees with d2t")


def _expected_shapes(config: DraftConfig) -> dict[str, tuple]:
    """The tensor shapes the config implies; BadInput when no tensor of those sizes can exist."""
    try:
        with torch.device("meta"):  # shapes only: no memory, no init cost
            model = Eagle3Draft(config, target_embedding=None)
    except (RuntimeError, ValueError, OverflowError) as error:  # sizes past what torch can describe
        raise BadInput(
            f"the config's sizes (hidden_size {config.hidden_size}, intermediate_size "
            f"{config.intermediate_size}, draft vocab {config.draft_vocab_size}) describe no buildable draft: "
            f"{first_line(error):.160}"
        ) from None
    return {name: tuple(t.shape) for name, t in model.state_dict().items() if name != "d2t"}


def _check_tensor_names(config: DraftConfig, files: DraftFiles, add) -> None:
    tensors, show = files.tensors, files.file_name
    try:
        expected = _expected_shapes(config)
    except BadInput as error:
        add("shapes", "fail", str(error))
        return
    optional = {"d2t", "t2d", "own_embedding.weight"}
    names = set(tensors)
    missing = sorted(set(expected) - names)
    ignorable = sorted(n for n in names - set(expected) - optional if n.endswith(IGNORABLE_SUFFIXES))
    unexpected = sorted(names - set(expected) - optional - set(ignorable))
    if missing:
        add("tensors", "fail", f"missing tensors (would stay random): {', '.join(map(show, missing))}")
    if unexpected:
        add(
            "tensors",
            "fail",
            f"unexpected tensors (would be skipped silently): {', '.join(map(show, unexpected))}",
        )
    if ignorable:
        add(
            "tensors",
            "warn",
            f"ignored buffers recomputed from the config: {', '.join(map(show, ignorable))}",
        )
    wrong = [
        f"{show(n)} {list(tensors[n].shape)} vs config {list(shape)}"
        for n, shape in expected.items()
        if n in tensors and tuple(tensors[n].shape) != shape
    ]
    if wrong:
        add("shapes", "fail", "tensor shapes do not match config.json: " + "; ".join(wrong))
    elif not missing:
        add(
            "shapes",
            "pass",
            f"all {len(expected)} expected tensors present with the shapes config.json implies",
        )
    if "own_embedding.weight" in tensors:
        if config.target_hidden_size != config.hidden_size:
            add(
                "embedding",
                "pass",
                "checkpoint carries its own embedding (target_hidden_size != hidden_size)",
            )
        else:
            add(
                "embedding",
                "pass",
                "checkpoint carries embed_tokens.weight: SGLang uses the target's embedding instead, vLLM keeps "
                "the draft's own when it differs from the target's, speculators and EAGLE use the draft's own",
            )
    elif config.target_hidden_size != config.hidden_size:
        add(
            "embedding",
            "fail",
            "target_hidden_size != hidden_size needs the draft's own embed_tokens.weight, "
            "which the checkpoint lacks",
        )


INTEGER_TENSORS = {"d2t", "t2d"}  # the vocab mapping: integers (or booleans) by design


def _check_dtypes(tensors, add) -> None:
    """Weights must be floating point (an int8 fc would be cast and run as garbage: quantized
    checkpoints need their scales, which SpecLens does not read) and finite (a NaN or inf weight
    makes every proposal the same token, silently)."""
    not_float = sorted(
        n for n, t in tensors.items() if n not in INTEGER_TENSORS and not t.is_floating_point()
    )
    if not_float:
        add(
            "dtype",
            "fail",
            "weights that are not floating point (quantized or corrupt; SpecLens reads float weights only): "
            + ", ".join(f"{n} ({str(tensors[n].dtype).replace('torch.', '')})" for n in not_float[:6]),
        )
    not_finite = sorted(
        n for n, t in tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())
    )
    if not_finite:
        add("weights", "fail", "NaN or infinite values in " + ", ".join(not_finite[:6]))
    dtypes = sorted({str(t.dtype).replace("torch.", "") for n, t in tensors.items() if t.is_floating_point()})
    add(
        "dtype",
        "pass" if len(dtypes) == 1 else "warn",
        f"weights stored as {', '.join(dtypes)}"
        + ("" if len(dtypes) == 1 else " (mixed precision in one checkpoint)"),
    )
