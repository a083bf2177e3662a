"""The benchmark scripts run end to end at toy sizes (their numbers are read in bench/, not here)."""

from __future__ import annotations

import json


def test_gpu_check_runs_on_cpu_and_is_exact_in_fp32(tmp_path):
    from bench import gpu_check

    out = tmp_path / "gpu_check.json"
    code = gpu_check.main(
        [
            "--device",
            "cpu",
            "--dtype",
            "fp32",
            "--layers",
            "4",
            "--hidden",
            "128",
            "--vocab",
            "100",
            "--new-tokens",
            "24",
            "--out",
            str(out),
        ]
    )
    result = json.loads(out.read_text())
    assert code == 0
    assert result["exactness"]["identical"] and result["timing"]["identical"]
    assert result["timing"]["accept_length"] >= 1.0
