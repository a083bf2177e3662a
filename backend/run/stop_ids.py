"""The ids that end a generation in an engine that decides them by token text (llama.cpp)."""

from __future__ import annotations

# src/llama-vocab.cpp llama_vocab::impl::load (its "special_eog_ids" block): a token whose text is one of
# these ends the generation, beside the GGUF's eos / eot / eom ids (read from the target's tokenizer
# files by the converter, as the target's EOS ids here).
LLAMACPP_EOG_TEXTS = frozenset(
    {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<｜end▁of▁sentence｜>", "[e~[",
    }
)  # fmt: skip


# The same function, before that block: the FIM pad / repo / separator tokens found by these texts (when
# the GGUF names none) end the generation too (Qwen2/3 vocabularies have <|fim_pad|>, <|repo_name|>,
# <|file_sep|>).
LLAMACPP_FIM_TEXTS = frozenset(
    {
        "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
        "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
        "<|file_sep|>",
    }
)  # fmt: skip


def llamacpp_stop_ids(tokenizer, eos_ids) -> frozenset[int]:
    """llama.cpp's end-of-generation ids for this target: its EOS ids and every vocabulary entry whose
    text is in LLAMACPP_EOG_TEXTS or LLAMACPP_FIM_TEXTS."""
    vocab = tokenizer.get_vocab() if tokenizer is not None else {}
    texts = LLAMACPP_EOG_TEXTS | LLAMACPP_FIM_TEXTS
    return frozenset(eos_ids) | frozenset(i for text, i in vocab.items() if text in texts)
