"""The target's forwards and where they come from: the local runner (transformers, or a lean CPU forward
checked against it at load), the hooks that capture its hidden states, its caches, a target split across
devices (torch)."""
