"""Teacher-forced acc_k (SpecForge definition) on tiny models, checked against the inference chain."""

from __future__ import annotations

import pytest


def greedy_sample(pair, prompt, new_tokens=40):
    from backend.engine.replay import ReplayConfig, output_ids_of, replay

    output = output_ids_of(
        list(replay(pair.target, pair.draft, prompt, pair.wiring, ReplayConfig(1, new_tokens)))
    )
    ids = prompt + output
    return ids, [0] * len(prompt) + [1] * len(output)


def test_copy_draft_accuracy_matches_a_direct_count_on_its_bigram_target(pairs):
    """On a context-free target with next token f(x), the copy draft proposes f(f(x_t)) at every TTT
    step, so acc_k can be counted by hand: index t is right at step k iff f(f(x_t)) == f(x_{t+1+k})."""
    import torch

    from backend.engine.teacher import teacher_forced_counts
    from backend.run.metrics import simulated_accept_length

    pair = pairs["copy-L4-bigram"]
    with torch.no_grad():
        f = pair.target.model(input_ids=torch.arange(32)[:, None]).logits[:, -1].argmax(-1).tolist()
    for prompt in ([1, 5, 9], [3], [30, 2]):
        ids, mask = greedy_sample(pair, prompt)
        ids = ids[:12] + [(i * 5 + 1) % 32 for i in range(12)] + ids[12:]  # break the greedy chain mid-sample
        mask = [1] * len(ids)
        counts = teacher_forced_counts(pair.target, pair.draft, pair.wiring, ids, mask, 3)
        for step in range(3):
            counted = [t for t in range(len(ids) - 1 - step)]
            correct = sum(f[f[ids[t]]] == f[ids[t + 1 + step]] for t in counted)
            assert (counts.counted[step], counts.correct[step]) == (len(counted), correct)
        assert counts.simulated_accept_length == pytest.approx(simulated_accept_length(counts.acc_per_step))


def test_loss_mask_selects_counted_positions(pairs):
    from backend.engine.teacher import teacher_forced_counts

    pair = pairs["copy-L5-context"]
    ids, mask = greedy_sample(pair, [2, 4, 6, 8])
    full = teacher_forced_counts(pair.target, pair.draft, pair.wiring, ids, [1] * len(ids), 2)
    masked = teacher_forced_counts(pair.target, pair.draft, pair.wiring, ids, mask, 2)
    none = teacher_forced_counts(pair.target, pair.draft, pair.wiring, ids, [0] * len(ids), 2)
    assert full.counted[0] == len(ids) - 1 and full.counted[1] == len(ids) - 2
    # SpecForge shifts the mask with the inputs: at step k index t counts when loss_mask[t+k] is 1
    assert masked.counted[0] == sum(mask[: len(ids) - 1]) and masked.counted[1] == sum(mask[1 : len(ids) - 1])
    assert none.counted == [0, 0] and none.acc_per_step == [None, None]


def test_target_argmax_outside_draft_vocab_counts_as_wrong(pairs):
    import torch

    from backend.engine.teacher import draft_vocab_mask, teacher_forced_counts

    pair = pairs["random-L2"]  # draft vocab 48 of 96
    ids = list(range(10, 60))
    counts = teacher_forced_counts(pair.target, pair.draft, pair.wiring, ids, [1] * len(ids), 2)
    in_vocab = draft_vocab_mask(pair.draft, pair.target.vocab_size, "cpu")
    with torch.no_grad():
        truth = pair.target.model(input_ids=torch.tensor([ids])).logits[0].argmax(-1)
    reachable = int(in_vocab[truth[1:]].sum())
    assert counts.correct[0] <= reachable and counts.counted[0] == len(ids) - 1


def test_ttt_mask_layout():
    from backend.engine.teacher import ttt_mask

    mask = ttt_mask(3, 2, "cpu").int().tolist()
    assert mask == [[1, 0, 0, 1, 0, 0, 1, 0, 0], [1, 1, 0, 0, 1, 0, 0, 1, 0], [1, 1, 1, 0, 0, 1, 0, 0, 1]]


@pytest.mark.parametrize("name", ["random-L6-eagle", "copy-L5-context"])
def test_ttt_step_equals_the_inference_chain_fed_true_tokens(pairs, name):
    """At step k and index t, the TTT forward must equal the cached inference path: catch-up over
    positions 0..t, then k chain steps fed the ground-truth tokens x_{t+2}..x_{t+1+k}."""
    import torch

    from backend.engine.teacher import ttt_mask
    from backend.target.capture import AuxCapture
    from backend.target.kv_cache import KVCache, TTTCache

    pair = pairs[name]
    draft = pair.draft
    ids = [(7 * i + 3) % 31 + 1 for i in range(24)]
    steps = 3
    with torch.no_grad(), AuxCapture(pair.target.model, pair.wiring.aux_hf_indices) as capture:
        pair.target.model(input_ids=torch.tensor([ids]))
        features = capture.features()
        length = len(ids) - 1
        tokens = torch.tensor(ids)
        index = torch.arange(length)
        hidden = draft.fuse(features[:length])
        ttt_cache, ttt_hidden = TTTCache(len(draft.layers)), []
        for step in range(steps):
            hidden = draft(
                hidden,
                tokens[(index + 1 + step).clamp(max=len(ids) - 1)],
                index + step,
                ttt_cache,
                mask=ttt_mask(length, step, "cpu"),
            )
            ttt_hidden.append(hidden)
        for t in (0, 5, 17):
            cache = KVCache(len(draft.layers))
            out = draft(draft.fuse(features[: t + 1]), tokens[1 : t + 2], torch.arange(t + 1), cache)
            chain = out[-1:]
            assert torch.allclose(chain, ttt_hidden[0][t : t + 1], atol=1e-5)
            for step in range(1, steps):
                chain = draft(chain, tokens[t + 1 + step : t + 2 + step], torch.tensor([t + step]), cache)
                assert torch.allclose(chain, ttt_hidden[step][t : t + 1], atol=1e-5), (t, step)


def test_counts_add_up_and_short_samples_count_nothing(pairs):
    from backend.engine.teacher import TeacherCounts, teacher_forced_counts

    pair = pairs["copy-L4-bigram"]
    assert teacher_forced_counts(pair.target, pair.draft, pair.wiring, [1, 2], [1, 1], 2).counted == [0, 0]
    totals = TeacherCounts([1, 0], [2, 2])
    totals.add(TeacherCounts([1, 1], [2, 0]))
    assert (totals.correct, totals.counted, totals.acc_per_step) == ([2, 1], [4, 2], [0.5, 0.5])
    assert totals.simulated_accept_length == pytest.approx(0.5 + 0.25)
    assert TeacherCounts([0], [0]).simulated_accept_length is None
