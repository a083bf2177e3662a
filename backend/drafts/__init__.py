"""What a draft on disk is and how each engine reads it: its config, tensor layouts, the engines'
readings and their fixes, the header checks (torch-free but for draft_llama, which builds transformers'
LlamaConfig)."""
