"""A conversation's layout (where each message's rendering ends, where each reply starts) found in
linear time equals the exact prefix-by-prefix layout on the template families users serve, and the
fast path declines (the exact one decides) where a template's wrapping depends on position or content."""

from __future__ import annotations

import pytest

from backend.data.conversations import _layout_exact, _layout_fast, render_conversation

CHATML_DEFAULT_SYSTEM = (  # SmolLM2 / Qwen2 style: a default system turn when the first is not one
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
LLAMA3 = (  # trims every content; the bos only on the first message
    "{% for message in messages %}{% set content = '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = '<|begin_of_text|>' + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
GEMMA = (  # the assistant is rendered as "model"; roles must alternate
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
NUMBERED = (  # the wrapping depends on the position: the fast path must decline
    "{% for m in messages %}[{{ loop.index }}] {{ m['role'] }}: {{ m['content'] }}\\n{% endfor %}"
    "{% if add_generation_prompt %}[{{ messages | length + 1 }}] assistant: {% endif %}"
)
SHOUTED_CODE = (  # the wrapping depends on the content: the fast path must decline
    "{% for m in messages %}<|{{ m['role'] }}|>{% if 'def ' in m['content'] %}[code]{% endif %}"
    "{{ m['content'] }}\\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def alternating(turns: int, system: bool = False, end_with_user: bool = False) -> list[dict]:
    replies = [
        "  padded reply  ",
        "\n    indented = True\n",
        "user",
        "",
        "def f():\n    return 1",
        "<|im_end|>",
    ]
    messages = [{"role": "system", "content": "be brief"}] if system else []
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i}?\n"})
        messages.append({"role": "assistant", "content": replies[i % len(replies)]})
    if end_with_user:
        messages.append({"role": "user", "content": "and then?"})
    return messages


@pytest.fixture(scope="module")
def tokenizer():
    from backend.defaults import DEMO_TARGET
    from backend.engine.loading import load_tokenizer

    return load_tokenizer(DEMO_TARGET)


CONVERSATIONS = [
    alternating(1),
    alternating(7),
    alternating(7, system=True),
    alternating(4, end_with_user=True),
    alternating(3, system=True, end_with_user=True),
]


@pytest.mark.parametrize(
    "template", [CHATML_DEFAULT_SYSTEM, LLAMA3, GEMMA], ids=["chatml", "llama3", "gemma"]
)
def test_the_linear_layout_equals_the_exact_one(tokenizer, template, monkeypatch):
    monkeypatch.setattr(tokenizer, "chat_template", template)
    for messages in CONVERSATIONS:
        if template == GEMMA and messages[0]["role"] == "system":
            continue  # this template refuses a system turn; the exact path reports it
        exact = _layout_exact(tokenizer, messages)
        assert exact is not None
        assert _layout_fast(tokenizer, messages) == exact


@pytest.mark.parametrize("template", [NUMBERED, SHOUTED_CODE], ids=["numbered", "content-dependent"])
def test_the_linear_layout_declines_where_the_wrapping_varies(tokenizer, template, monkeypatch):
    monkeypatch.setattr(tokenizer, "chat_template", template)
    messages = alternating(7)
    assert _layout_fast(tokenizer, messages) is None
    sample = render_conversation(tokenizer, messages, 1, "unit")  # the exact layout decides
    exact = _layout_exact(tokenizer, messages)
    assert tokenizer.decode(sample.input_ids) == exact.text


def test_a_long_conversation_renders_a_bounded_number_of_messages(tokenizer, monkeypatch):
    """Linear, counted rather than timed: the old per-turn prefix rendering walked ~n**2 messages."""
    monkeypatch.setattr(tokenizer, "chat_template", CHATML_DEFAULT_SYSTEM)
    rendered = []
    render = tokenizer.apply_chat_template

    def counting(messages, **kwargs):
        rendered.append(len(messages))
        return render(messages, **kwargs)

    monkeypatch.setattr(tokenizer, "apply_chat_template", counting)
    messages = alternating(1000)
    sample = render_conversation(tokenizer, messages, 1, "unit")
    assert sum(rendered) <= 4 * len(messages), (len(rendered), sum(rendered))
    assert tokenizer.decode(sample.input_ids) == render(messages, tokenize=False)
    masked = [t for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m]
    assert (
        tokenizer.decode(masked).count("<|im_end|>") == 1000 + 1000 // 6
    )  # each end of turn, and the literal reply
