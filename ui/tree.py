"""The draft tree of one verify step as a figure: depth left to right, siblings stacked, the root
(the pending token x_n) at depth 0. Pure data in, figure out; every token string is escaped before
plotly renders it (plotly treats text and hover labels as HTML)."""

from __future__ import annotations

from html import escape

import plotly.graph_objects as go

from backend.run.records import StepTree

STATUS_COLOURS = {
    "accepted": "#66bb6a",
    "first rejected": "#e53935",
    "rejected": "#ffab91",
    "unreached": "#cfd8dc",
    "root": "#90caf9",
}


def node_statuses(tree: StepTree) -> list[str]:
    """Per node: accepted, first rejected (the draft's favourite child of the last accepted node,
    where the accepted path ends), rejected (tried and refused) or unreached."""
    decisions = tree.decisions or ["unreached"] * len(tree.tokens)
    statuses = [d if d in ("accepted", "rejected") else "unreached" for d in decisions]
    path = tree.accepted_path
    last = path[-1] if path else -1
    children = [i for i, p in enumerate(tree.parents) if p == last]
    if children and statuses[children[0]] != "accepted":
        statuses[children[0]] = "first rejected"
    return statuses


def tree_layout(parents: list[int]) -> list[tuple[int, float]]:
    """(depth, row) per node: leaves take consecutive rows in depth-first order (siblings in their
    order), a parent sits at the mean row of its children. Row of the root: the mean of its children."""
    children: dict[int, list[int]] = {}
    for node, parent in enumerate(parents):
        children.setdefault(parent, []).append(node)
    rows: dict[int, float] = {}
    depths: dict[int, int] = {}
    next_row = [0]

    def place(node: int, depth: int) -> float:
        kids = children.get(node, [])
        if not kids:
            rows[node] = float(next_row[0])
            next_row[0] += 1
        else:
            rows[node] = sum(place(kid, depth + 1) for kid in kids) / len(kids)
        depths[node] = depth
        return rows[node]

    for kid in children.get(-1, []):
        place(kid, 1)
    return [(depths[node], rows[node]) for node in range(len(parents))]


def _root_row(layout: list[tuple[int, float]], parents: list[int]) -> float:
    top = [row for (depth, row), parent in zip(layout, parents, strict=True) if parent == -1]
    return sum(top) / len(top) if top else 0.0


def tree_figure(tree: StepTree, pending_token: int, piece) -> go.Figure:
    """`piece(id) -> str` names tokens. Node labels: token, draft probability and score; hover: the
    target's probability of the token, its argmax at the parent, the draw and the decision."""
    parents, tokens = tree.parents, tree.tokens
    layout = tree_layout(parents)
    root_row = _root_row(layout, parents)
    statuses = node_statuses(tree)
    argmax, argmax_probs = tree.argmax, tree.argmax_probs

    def at(values: list | None, index: int):
        return values[index] if values and index < len(values) and values[index] is not None else None

    def target_line(row: int) -> str:
        token, prob = at(argmax, row), at(argmax_probs, row)
        if token is None:
            return "target argmax here: not recorded"
        shown = escape(repr(piece(token)))
        return f"target argmax here: {shown} (id {token})" + ("" if prob is None else f", p={prob:.3f}")

    figure = go.Figure()
    edge_x, edge_y = [], []
    for node, parent in enumerate(parents):
        x0, y0 = (0, root_row) if parent == -1 else layout[parent]
        x1, y1 = layout[node]
        edge_x += [x0, x1, None]
        edge_y += [y0, y1, None]
    figure.add_scatter(
        x=edge_x, y=edge_y, mode="lines", line=dict(color="#b0bec5", width=1), hoverinfo="skip"
    )
    labels, hovers = [], []
    for node, token in enumerate(tokens):
        draft_p, score = at(tree.draft_probs, node), at(tree.scores, node)
        text = escape(repr(piece(token))[1:-1][:14])
        meta = " ".join(
            part
            for part in (
                f"q={draft_p:.2f}" if draft_p is not None else "",
                f"s={score:.3f}" if score is not None else "",
            )
            if part
        )
        labels.append(f"{text}<br><span style='font-size:10px'>{meta}</span>")
        details = [
            f"node {node}, depth {layout[node][0]}, {statuses[node]}",
            f"token {escape(repr(piece(token)))} (id {token})",
        ]
        for name, values in (
            ("draft p", tree.draft_probs),
            ("score", tree.scores),
            ("target p at parent", tree.target_probs),
        ):
            value = at(values, node)
            if value is not None:
                details.append(f"{name}: {value:.4f}")
        value = at(tree.accept_probs, node)
        if value is not None:
            details.append(f"P(accepted | parent accepted): {value:.4f}")
        draw = at(tree.draws, node)
        if draw is not None:
            details.append(f"draw: {draw:.4f}")
        details.append("parent's " + target_line(parents[node] + 1))
        details.append(target_line(node + 1))
        hovers.append("<br>".join(details))
    root_text = escape(repr(piece(pending_token))[1:-1][:14])
    xs = [0] + [depth for depth, _ in layout]
    ys = [root_row] + [row for _, row in layout]
    colours = [STATUS_COLOURS["root"]] + [STATUS_COLOURS[s] for s in statuses]
    figure.add_scatter(
        x=xs,
        y=ys,
        mode="markers+text",
        marker=dict(size=18, color=colours, line=dict(color="#455a64", width=1)),
        textfont=dict(family="monospace", size=13),
        text=[f"{root_text}<br><span style='font-size:10px'>root x_n</span>"] + labels,
        textposition="middle right",
        hovertext=[f"root: pending token {escape(repr(piece(pending_token)))}<br>{target_line(0)}"] + hovers,
        hoverinfo="text",
    )
    for status, colour in STATUS_COLOURS.items():  # a legend entry per status
        figure.add_scatter(
            x=[None],
            y=[None],
            mode="markers",
            marker=dict(size=10, color=colour),
            name=status,
            showlegend=True,
        )
    depth = max([d for d, _ in layout], default=0)
    figure.update_layout(
        height=max(260, 46 * (max(ys, default=0) + 2)),
        margin=dict(l=10, r=10, t=10, b=10),
        xaxis=dict(
            tickvals=list(range(depth + 1)),
            ticktext=["root"] + [f"depth {d}" for d in range(1, depth + 1)],
            range=[-0.3, depth + 0.9],
            showgrid=False,
            zeroline=False,
        ),
        yaxis=dict(visible=False, autorange="reversed"),
        showlegend=True,
        legend=dict(orientation="h", y=-0.05),
        plot_bgcolor="white",
    )
    figure.data[0].showlegend = False
    figure.data[1].showlegend = False
    return figure
