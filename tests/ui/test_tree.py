"""The step-tree figure: layout (depth left to right, siblings stacked), statuses, and escaping."""

from __future__ import annotations

from dataclasses import replace

from backend.run.records import StepTree
from ui.tree import node_statuses, tree_figure, tree_layout

TREE = StepTree(
    tokens=[10, 11, 12, 13, 14],
    parents=[-1, -1, 0, 0, 2],
    scores=[0.6, 0.3, 0.3, 0.2, 0.1],
    draft_probs=[0.6, 0.3, 0.5, 0.33, 0.33],
    accepted_path=[0],
    decisions=["accepted", "unreached", "rejected", "rejected", "unreached"],
    argmax=[10, 99, 12, 13, 14, 15],
    argmax_probs=[0.9, 0.5, 0.4, 0.3, 0.2, 0.1],
)


def test_layout_puts_depth_on_x_and_stacks_siblings_in_order():
    layout = tree_layout(TREE.parents)
    assert [depth for depth, _ in layout] == [1, 1, 2, 2, 3]
    rows = [row for _, row in layout]
    assert rows[2] < rows[3]  # siblings keep their order (the draft's favourite on top)
    assert rows[0] == (rows[2] + rows[3]) / 2  # a parent sits between its children
    assert rows[4] == rows[2] and rows[1] > rows[3]


def test_statuses_mark_the_first_rejected_node_after_the_accepted_path():
    assert node_statuses(TREE) == ["accepted", "unreached", "first rejected", "rejected", "unreached"]
    everything = replace(
        TREE,
        accepted_path=[0, 2, 4],
        decisions=["accepted", "unreached", "accepted", "unreached", "accepted"],
    )
    assert "first rejected" not in node_statuses(everything)


def test_token_strings_are_escaped_in_labels_and_hovers():
    hostile = {10: "<script>alert(1)</script>", 11: "<b>x</b>"}
    figure = tree_figure(TREE, 5, lambda token: hostile.get(token, f"t{token}"))
    nodes = figure.data[1]
    rendered = " ".join(list(nodes.text) + list(nodes.hovertext))
    assert "<script>" not in rendered and "&lt;script&gt;" in rendered
    assert "<b>x</b>" not in rendered
    # hovertext[0] is the root; node 1 is hovertext[2], and its own verify row is row 2
    assert "target argmax here: &#x27;t12&#x27; (id 12), p=0.400" in nodes.hovertext[2]
