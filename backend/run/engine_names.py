"""The engines and training tools whose reading of a draft a run names, with their descriptions:
what a request may ask for (`--engine`) and what a stored run says it ran as. How each one reads a
draft is in the drafts room (backend/drafts/readings.py)."""

from __future__ import annotations

ENGINES = ("sglang", "vllm", "vllm-v2", "llamacpp", "specforge", "speculators", "eagle")
SERVING_ENGINES = ("sglang", "vllm", "vllm-v2", "llamacpp")
DESCRIPTIONS = {
    "sglang": "SGLang (serving)",
    "vllm": "vLLM (serving)",
    "vllm-v2": "vLLM V2 runner (serving, GPU default)",
    "llamacpp": "llama.cpp (serving)",
    "specforge": "SpecForge (training)",
    "speculators": "speculators (training, vLLM format)",
    "eagle": "original EAGLE (SafeAILab)",
}
