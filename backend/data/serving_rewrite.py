"""A serving command with the lint's fixes applied: the one command a person can copy.

Edits are what the findings change on the command line, keyed as the engine spells them:
- SGLang: a launch flag (`--speculative-num-steps`) or an environment word before the command
  (`SGLANG_SIMULATE_ACC_LEN`);
- vLLM: a key of the JSON given to `--speculative-config` (`spec:num_speculative_tokens`) or a flag
  (`--max-model-len`).
A value of None removes the flag, word or key. Everything the command says that no edit touches is
kept as written, in its place; a flag that was absent is added at the end. Torch-free.
"""

from __future__ import annotations

import json
import shlex

from backend.data.serving_command import SGLANG_FLAGS, split_command

SPEC_FLAGS = ("--speculative-config", "--speculative_config")
SPEC_KEY = "spec:"
VLLM_SPELLINGS = {"--max-model-len": ("--max-model-len", "--max_model_len")}  # vllm/engine/arg_utils.py


def _aliases(flag: str) -> tuple[str, ...]:
    """The spellings the engine's parser accepts for one setting (SGLang: --model and --model-path)."""
    if flag in SGLANG_FLAGS:
        name = SGLANG_FLAGS[flag][0]
        return tuple(f for f, (other, _) in SGLANG_FLAGS.items() if other == name)
    return VLLM_SPELLINGS.get(flag, (flag,))


def _takes_value(word: str) -> bool:
    return "=" not in word


def _set_flag(words: list[str], flag: str, value) -> list[str]:
    """`words` with every spelling of `flag` removed and, unless value is None, `flag value` written
    where the first one stood (at the end when it was absent)."""
    out: list[str] = []
    at = None
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        name = word.partition("=")[0]
        if name in _aliases(flag):
            at = len(out) if at is None else at
            skip = _takes_value(word)
            continue
        out.append(word)
    if value is not None:
        position = len(out) if at is None else at
        out[position:position] = [flag, str(value)]
    return out


def _set_environment(words: list[str], name: str, value) -> list[str]:
    """An environment word (NAME=value before the command) removed or set."""
    kept = [w for w in words if w.partition("=")[0] != name]
    return kept if value is None else [f"{name}={value}", *kept]


def _set_spec(words: list[str], edits: dict) -> list[str]:
    """vLLM's --speculative-config JSON with `edits` (key -> value, None removes) applied."""
    for index, word in enumerate(words):
        flag, eq, inline = word.partition("=")
        if flag not in SPEC_FLAGS:
            continue
        raw = inline if eq else (words[index + 1] if index + 1 < len(words) else "{}")
        spec = json.loads(raw)  # parse_vllm read it already: it is a JSON object
        for key, value in edits.items():
            if value is None:
                spec.pop(key, None)
            else:
                spec[key] = value
        text = json.dumps(spec)
        if eq:
            return [*words[:index], f"{flag}={text}", *words[index + 1 :]]
        return [*words[: index + 1], text, *words[index + 2 :]]
    return words


def rewrite(command: str, engine: str, edits: dict) -> str:
    """The command with `edits` applied, quoted so that a shell reads it back word for word."""
    words = split_command(command)
    spec = {key[len(SPEC_KEY) :]: value for key, value in edits.items() if key.startswith(SPEC_KEY)}
    if engine == "vllm" and spec:
        words = _set_spec(words, spec)
    for key, value in edits.items():
        if key.startswith(SPEC_KEY):
            continue
        if key.startswith("--"):
            words = _set_flag(words, key, value)
        else:
            words = _set_environment(words, key, value)
    return shlex.join(words)
