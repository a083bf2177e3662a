"""One projection, x @ weight^T (+ bias), for the target's lean forward and the draft's forward.

One row, more than MM_ROWS, or any product off the CPU is `F.linear`, as transformers computes it.
Between, on the CPU, it is (weight @ x^T)^T: the same products summed in another order. On this machine's CPU (AMD EPYC, MKL)
`F.linear` takes a slow path for a few rows: a 5-row verify chunk through the real pair's lm_head
costs 20.8 ms as `F.linear` and 6.7 ms as weight @ x^T, about what one row costs (7.4 ms), and with
every projection of the target so, the bare replay on the real pair went from 17.2 to 24-25 tok/s
(bench/product_bench.py, bench/replay_bench.py --demo). Past MM_ROWS rows (a batch of samples, a
prefill) the products are compute-bound and the transposed copy back costs more than it saves.

The last places differ from `F.linear`'s, as a verify chunk's rows already differ from one-token
decodes under transformers itself: the lean forward checks its agreement with transformers when a
target loads (backend/target/lean_target.py), and near-ties are recorded (sampling.near_tie_rows).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

MM_ROWS = 32  # the most rows a projection computes as weight @ x^T


def product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., in] -> [..., out]: x @ weight^T + bias (module docstring)."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if rows <= 1 or rows > MM_ROWS or x.device.type != "cpu":  # a GPU's F.linear has no such slow path
        return F.linear(x, weight, bias)
    out = torch.mm(weight, x.reshape(rows, x.shape[-1]).t()).t().contiguous()
    if bias is not None:
        out = out + bias
    return out.view(*x.shape[:-1], weight.shape[0])
