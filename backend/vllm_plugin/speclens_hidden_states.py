"""A hidden-states KV connector for vLLM's CPU build, loaded by vLLM itself (its Python, not SpecLens's):
`--kv-transfer-config '{"kv_connector": "CpuHiddenStatesConnector", "kv_connector_module_path":
"speclens_hidden_states", ...}'` with this folder on vLLM's PYTHONPATH (backend/service/vllm_trace.py).

vLLM 0.32's `ExampleHiddenStatesConnector`
(vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py) extracts the states
the `extract_hidden_states` method caches and writes them through a CUDA copy stream into pinned memory,
which a CPU engine refuses ("pin_memory=True requires a CUDA or other accelerator backend"). This
subclass keeps its scheduler side (file names, lock files, `request_finished`, the `include_output_tokens`
request parameter) and extracts and saves synchronously on the worker (`_submit_async_write`,
`get_finished`). Imports only vLLM, torch and safetensors.
"""

from __future__ import annotations

import os

import torch
from safetensors.torch import save_file
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    ExampleHiddenStatesConnectorMetadata,
    extract_from_kv_cache,
)


class CpuHiddenStatesConnector(ExampleHiddenStatesConnector):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._saved: set[str] = set()

    def _submit_async_write(self, pending) -> None:
        """Extract the request's states from the cache and write them now (the file's lock released
        after the write, as the stock connector's writer thread does)."""
        if not self._is_tp_rank_zero:
            return
        blocks = torch.tensor(pending.block_ids, dtype=torch.long)
        offsets = torch.arange(self._block_size, dtype=torch.long)
        slots = (offsets.reshape(1, -1) + blocks.reshape(-1, 1) * self._block_size).flatten()
        states = extract_from_kv_cache(self._kv_cache, slots, pending.token_ids.shape[0]).clone()
        os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        try:
            save_file(
                {"hidden_states": states.contiguous(), "token_ids": pending.token_ids.clone()},
                pending.filename,
            )
        finally:
            if lock_fd is not None:
                os.close(lock_fd)
        self._saved.add(pending.req_id)

    def get_finished(self, finished_req_ids):
        if self.has_connector_metadata():
            metadata = self._get_connector_metadata()
            if isinstance(metadata, ExampleHiddenStatesConnectorMetadata):
                for pending in metadata.pending_saves:
                    self._submit_async_write(pending)
        self._accumulated_finished_req_ids.update(finished_req_ids)
        done = self._accumulated_finished_req_ids & self._saved
        self._accumulated_finished_req_ids -= done
        self._saved -= done
        return done or None, None
