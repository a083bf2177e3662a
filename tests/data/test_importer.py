"""Dataset import: every format, and malformed files of every kind (validated records, each bad one
reported by line and reason). Storing what was read is tests/service/test_datasets.py."""

from __future__ import annotations

import json
import pickle

import pytest

from backend import BadInput
from backend.data.importer import detect_format, read_dataset
from tests.support.datasets import VOCAB, mixed_jsonl, write_lines

TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }};{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def character_tokenizer(vocab: int):
    from tests.support.synthetic import character_tokenizer as make  # transformers: imported when used

    return make(vocab)


@pytest.fixture(scope="module")
def tokenizer():
    tok = character_tokenizer(VOCAB)
    tok.chat_template = TEMPLATE
    return tok


def test_jsonl_keeps_good_records_and_reports_each_bad_one(tmp_path):
    path = mixed_jsonl(tmp_path / "mixed.jsonl")
    assert detect_format(path) == "jsonl"
    result = read_dataset(path, vocab_size=VOCAB)
    assert result.format == "jsonl"
    assert [s.line for s in result.samples] == [1, 14]
    assert [r.line for r in result.rejected] == list(range(2, 14))
    reasons = {r.line: r.reason for r in result.rejected}
    assert (
        "invalid JSON" in reasons[2] and "not a JSON object" in reasons[3] and "missing field" in reasons[4]
    )
    assert "outside the vocabulary" in reasons[6] and "seq_len" in reasons[7] and "UTF-8" in reasons[10]
    samples = result.samples
    assert [s.source for s in samples] == ["a", "b"] and samples[0].prompt_ids == [1, 2]
    assert samples[0].loss_coverage == pytest.approx(4 / 6)


def test_file_without_good_records_yields_none(tmp_path):
    result = read_dataset(write_lines(tmp_path / "bad.jsonl", [b"{", b"[]"]), vocab_size=VOCAB)
    assert not result.samples and [r.line for r in result.rejected] == [1, 2]
    empty = read_dataset(write_lines(tmp_path / "empty.jsonl", [b""]))
    assert not empty.samples and not empty.rejected
    with pytest.raises(BadInput, match="no such file"):
        read_dataset(tmp_path / "missing.jsonl")
    with pytest.raises(BadInput, match="unknown format"):
        read_dataset(tmp_path / "bad.jsonl", format="csv")


def test_sharegpt_rendered_with_the_chat_template(tmp_path, tokenizer):
    conversations = [
        {
            "id": "c1",
            "conversations": [
                {"from": "human", "value": "hi"},
                {"from": "gpt", "value": "yo"},
                {"from": "human", "value": "ok?"},
                {"from": "gpt", "value": "sure"},
            ],
        },
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"}]},
        {"conversations": [{"from": "gpt", "value": "first"}]},
        {"conversations": [{"from": "robot", "value": "x"}]},
        {"conversations": [{"from": "human", "value": 5}]},
        {"conversations": []},
        "just a string",
    ]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(conversations))
    assert detect_format(path) == "sharegpt"
    result = read_dataset(path, tokenizer, VOCAB)
    assert [r.line for r in result.rejected] == [3, 4, 5, 6, 7]
    first, second = result.samples
    text = tokenizer.decode(first.input_ids)
    assert text == "<user>hi;<assistant>yo;<user>ok?;<assistant>sure;"
    masked = tokenizer.decode([t for t, m in zip(first.input_ids, first.loss_mask, strict=True) if m])
    assert masked == "yo;sure;"  # assistant turns only
    assert tokenizer.decode(first.prompt_ids) == "<user>hi;<assistant>"
    assert sum(second.loss_mask) == 0 and tokenizer.decode(second.prompt_ids).endswith("<assistant>")


def test_sharegpt_needs_a_chat_template_and_valid_json(tmp_path):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi"}]}]))
    with pytest.raises(BadInput, match="chat template"):
        read_dataset(path, character_tokenizer(VOCAB), VOCAB)
    with pytest.raises(BadInput, match="needs the target's tokenizer"):
        read_dataset(path, None, VOCAB)
    path.write_text('[{"conversations": ')
    tok = character_tokenizer(VOCAB)
    tok.chat_template = TEMPLATE
    with pytest.raises(BadInput, match="invalid JSON"):
        read_dataset(path, tok, VOCAB)


class NotATensor:
    pass


@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")  # data_3.ckpt is a raw pickle
def test_specforge_feature_files(tmp_path):
    import torch

    folder = tmp_path / "features"
    folder.mkdir()
    ids = torch.arange(1, 9)
    good = {
        "input_ids": ids,
        "loss_mask": torch.tensor([0, 0, 0, 1, 1, 1, 1, 1]),
        "hidden_state": torch.randn(1, 8, 16),
        "aux_hidden_state": torch.randn(1, 8, 48),
    }
    torch.save(good, folder / "data_0.ckpt")
    torch.save({**good, "aux_hidden_state": torch.randn(1, 7, 48)}, folder / "data_1.ckpt")
    torch.save({"input_ids": ids}, folder / "data_2.ckpt")
    with open(folder / "data_3.ckpt", "wb") as handle:
        pickle.dump({"input_ids": NotATensor()}, handle)
    (folder / "data_4.ckpt").write_bytes(b"garbage")
    torch.save([1, 2], folder / "data_5.ckpt")
    torch.save({**good, "input_ids": ids + VOCAB}, folder / "data_6.ckpt")
    assert detect_format(folder) == "specforge"
    result = read_dataset(folder, vocab_size=VOCAB)
    assert result.format == "specforge"
    (sample,) = result.samples
    assert sample.prompt_len == 3 and sample.extra["feature_file"].endswith("data_0.ckpt")
    reasons = {r.line: r.reason for r in result.rejected}
    assert set(reasons) == {2, 3, 4, 5, 6, 7}
    assert "does not match" in reasons[2] and "lacks aux_hidden_state" in reasons[3]
    assert "not a torch.save file" in reasons[4] and "not a torch.save file" in reasons[5]
    assert "expected a dict" in reasons[6] and "vocabulary" in reasons[7]
    (tmp_path / "nothing").mkdir()
    with pytest.raises(BadInput, match="no .ckpt feature files"):
        read_dataset(tmp_path / "nothing")


def test_plain_text_prompts(tmp_path, tokenizer):
    path = tmp_path / "prompts.txt"
    path.write_text("def f(x):\\n    return\n\n  \nhello\n")
    assert detect_format(path) == "prompts"
    result = read_dataset(path, tokenizer, VOCAB)
    assert [s.line for s in result.samples] == [1, 4]
    assert result.samples[0].extra["text"] == "def f(x):\n    return"  # the escape became a newline
    assert tokenizer.decode(result.samples[1].input_ids) == "hello"
    assert all(sum(s.loss_mask) == 0 and s.prompt_len == len(s.input_ids) for s in result.samples)
    path.write_bytes(b"\xff\xfe\n")
    with pytest.raises(BadInput, match="UTF-8"):
        read_dataset(path, tokenizer, VOCAB)


def test_prompt_records_as_benchmark_and_eval_sets_write_them(tmp_path, tokenizer):
    """JSONL of {"prompt"} (with an optional answer), {"text"}, {"question"}: raw-text prompts, the
    answer's tokens after the prompt's under the loss mask; a record without prompt text is refused."""
    path = tmp_path / "bench.jsonl"
    records = [
        {"prompt": "def f(x):", "completion": " return x", "task_id": "T/0"},
        {"text": "hello"},
        {"question": "why?", "answer": "because"},
        {"prompt": ""},
        {"id": 3},
        [1, 2],
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "not json\n")
    assert detect_format(path) == "prompts"
    result = read_dataset(path, tokenizer, VOCAB)
    first, second, third = result.samples
    assert tokenizer.decode(first.prompt_ids) == "def f(x):" and first.source == "T/0"
    assert tokenizer.decode(first.input_ids[first.prompt_len :]) == " return x"
    assert first.loss_mask == [0] * first.prompt_len + [1] * (len(first.input_ids) - first.prompt_len)
    assert tokenizer.decode(second.input_ids) == "hello" and second.prompt_len == len(second.input_ids)
    assert tokenizer.decode(third.input_ids[third.prompt_len :]) == "because"
    reasons = {r.line: r.reason for r in result.rejected}
    assert sorted(reasons) == [4, 5, 6, 7] and "no prompt text" in reasons[4] and "invalid JSON" in reasons[7]
    training = tmp_path / "train.jsonl"  # a training record naming its text too stays a training record
    training.write_text(json.dumps({"input_ids": [1, 2], "loss_mask": [0, 1], "text": "ab"}) + "\n")
    assert detect_format(training) == "jsonl"


def realistic_conversations() -> list[dict]:
    """20 ShareGPT conversations as people write them: code answers that begin with a newline or
    indentation, fenced blocks, multi-turn exchanges and a system prompt."""
    answers = [
        "\ndef add(a, b):\n    return a + b\n",
        "    return sorted(items, key=len)\n",
        "\n\n```python\nfor i in range(3):\n    print(i)\n```\n",
        "  x = [n * n for n in range(10)]",
        "\n    if not values:\n        return None\n    return max(values)",
        "Sure!\n\n```python\nimport json\nprint(json.dumps({'a': 1}))\n```",
        "\tindented with a tab\n\tsecond line",
        "\n# a comment first\nclass Stack:\n    def __init__(self):\n        self.items = []\n",
    ]
    conversations = []
    for number in range(20):
        turns = []
        if number % 4 == 0:
            turns.append({"from": "system", "value": "You write short Python."})
        turns.append({"from": "human", "value": f"Question {number}: write some code"})
        turns.append({"from": "gpt", "value": answers[number % len(answers)]})
        if number % 3 == 0:
            turns.append({"from": "human", "value": "And indented?\n    like this"})
            turns.append({"from": "gpt", "value": answers[(number + 3) % len(answers)]})
        conversations.append({"id": f"real-{number}", "conversations": turns})
    return conversations


def test_sharegpt_code_answers_import_with_masks_on_exactly_the_assistant_text(tmp_path):
    """Replies that start with a newline or indentation merge with the template's newline into one
    token; they import (0 rejections) and the loss mask covers each reply, nothing of the prompt."""
    from backend.defaults import DEMO_TARGET
    from backend.engine.loading import load_tokenizer

    tokenizer = load_tokenizer(DEMO_TARGET)
    conversations = realistic_conversations()
    path = tmp_path / "real.json"
    path.write_text(json.dumps(conversations))
    result = read_dataset(path, tokenizer, tokenizer.vocab_size if hasattr(tokenizer, "vocab_size") else None)
    assert result.rejected == [] and len(result.samples) == 20
    roles = {"human": "user", "gpt": "assistant", "system": "system"}
    for sample, record in zip(result.samples, conversations, strict=True):
        messages = [{"role": roles[t["from"]], "content": t["value"]} for t in record["conversations"]]
        whole = tokenizer.apply_chat_template(messages, tokenize=False)
        assert tokenizer.decode(sample.input_ids) == whole  # the whole conversation, once
        masked = tokenizer.decode([t for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m])
        unmasked = tokenizer.decode(
            [t for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if not m]
        )
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        rest = masked
        for reply in replies:  # every reply is masked, in order; what is left is template newlines
            assert reply in rest, (reply, masked)
            rest = rest.replace(reply, "", 1)
        assert set(rest) <= {"\n"}, repr(rest)
        for message in messages:
            if message["role"] != "assistant":
                assert message["content"] in unmasked  # no prompt text is trained on
        assert sample.prompt_len > 0 and not any(sample.loss_mask[: sample.prompt_len])
