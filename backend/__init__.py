"""SpecLens backend, in layers; each imports only the layers below it (tests/test_architecture.py
checks this):

    backend.run          the run's vocabulary, torch-free: request, records, metrics, wiring (db/, pages)
      request            what a user asks for: one frozen ReplayRequest, its fields' flags and widgets (torch-free)
      settings           what one request field is: role, check, flag, widget; the checks its fields use
      run_value          a run stored and read back typed: the request as asked, what the pair resolved
      records            the records the engine yields, one type per concept (torch-free)
      metrics            acceptance metrics, each with the definition it is computed by
      wiring             the one parser of an aux-index list: the HF indices that feed fc
      shapes             a speculative step's shape and SGLang's rules for its flags (torch-free)
      stop_ids           the ids that end a generation where an engine decides them by text (llama.cpp)
      engine_names       the engines and training tools whose reading a run names, with their descriptions
    backend.drafts       what a draft on disk is and how each engine reads it (torch-free but draft_llama)
      draft_config       a draft's config.json, whatever its layout, as one typed description
      json_config        model config files read as plain, checked JSON (torch-free)
      layouts            every draft format's tensor names, read and write
      readings           how a draft is read as an engine: the shared checks, what is fed (the override, else the wiring)
      engine_readers     each engine's reading of a draft, rule by rule with its source (one function an engine)
      reading_fixes      where the readings part ways; the config change a serving engine needs
      engine_table       how every engine reads a draft, from its config and weight names (torch-free)
      safetensors_header a safetensors header checked before any tensor is read
      torch_files        torch.load's refusals said in one line naming the file (weights_only=True)
      draft_llama        a draft's LlamaConfig and the checks transformers leaves to build time
      dflash_config      a DFlash draft's config.json as z-lab reads it, its method, the layer ids (torch-free)
      dflash_readings    how each engine reads a DFlash draft (block, layers, last layer, mask, RoPE), with sources
    backend.target       the target's forwards and their sources: the local runner, its captures and caches (torch)
      capture            forward hooks on the target capturing the residual stream at HF indices
      dispatch           a target split across devices (accelerate's device_map, max_memory)
      kv_cache           the KV caches: one protocol, three kinds of entries
      lean_target        a lean CPU forward for Llama targets: transformers' arithmetic, checked at load
      product            one projection: F.linear, or weight @ x^T for a few rows (faster with MKL)
      target_runner      the target's forward behind one interface, chosen at load
      trace              a trace (the target once per sample) and the runner that answers a replay from it
      trace_capture      traces computed by the target loaded here, the prompts decoding together
      forced_trace       a trace along tokens the target did not choose (an engine's sampled answer)
    backend.engine       the algorithm (torch): the draft network, the steps (chain, tree, verify, accounting), loading
      draft_model        the EAGLE-3 draft network, each step written out
      loading            a Hugging Face target and an EAGLE-3 draft loaded from local directories
      draft_side         the target as a draft needs it where it does not run here: config, tokenizer, embeddings
      penalties          sampling penalties on the target's (and the draft's) logits
      preflight          a draft checked against a target before anything runs
      preflight_report   a preflight's answer as a value; the refusal of a draft that failed it
      replay             speculative decoding replayed one verify step at a time (the loop)
      step_state         what a step reads and leaves: ReplayConfig, caches, cursor, catch-up, budget
      chain_step         one greedy chain step: draft, verify, accept, roll back, record
      batch              a set of samples replayed as one batch: one target verify forward for all
      tree_step          one tree (or sampled) step: draft tree, tree-masked verify, acceptance walk
      sampling           temperature sampling and each engine's acceptance rule
      teacher            teacher-forced accuracy acc_k (SpecForge's definition)
      tree               tree drafting and verification as SGLang runs them
      dflash_model       the DFlash draft network: context K/V from the target's layers, the block both ways
      dflash_step        a DFlash chain of blocks: the block proposal beside the chain's verify; the loader
      dflash_objective   the DFlash training objective (anchors, blocks, decayed loss): the trainer's and the probe's
      dflash_preflight   a DFlash draft checked against a target: each finding names the field and value
    backend.data         files in, validated records out
      conversations      a chat conversation rendered: tokens, and the mask on each reply (linear)
      features           SpecForge offline feature files (.ckpt)
      formats_other      per-request readers: vLLM, TensorRT-LLM, llama.cpp, ModelOpt's profile
      formats_sglang     per-request readers: SGLang meta_info, sglext, /server_info reads
      importer           every dataset format to validated samples, bad records by line
      per_request        per-request numbers: a file read, each record to its reader, pooled
      request_numbers    one request's counts, the metrics computed from them, their definitions
      samples            the training JSONL, validated record by record
      serving            what a serving engine reports (SGLang logs, vLLM metrics)
      served_acceptance  a server's accept length from whatever it wrote (log, scrape, responses)
      serving_command    a serving command read as the engine reads it (flags, knobs, target facts)
      serving_rewrite    a serving command with the lint's fixes applied: the one command to copy
      step_signature     the first verify step against the later ones (a hand-off's signature)
      tokenizer_fit      whether a dataset's ids were made by the target's tokenizer
    backend.diagnostics  one question per file, engine objects in, a report out
      agreement          training accuracy vs live acceptance, per sample
      cheap_checks       diagnose's checks without samples: preflight by class, vocab, context, precision
      diagnose           one verdict over every failure class users report
      findings           one finding: class, severity, message, evidence, fix; the verdict over them
      doctor             the preflight report plus vocab-mapping facts
      draft_head         the draft's own head: there, finite, trained, whose
      feature_match      the features a server fed the draft, slot by slot against the layers
      hidden_diff        the features a draft is fed vs a reference, per token and chunk
      lint               serving flags: what SGLang or vLLM will really run
      lint_result        the lint's answer as values: findings, what will run, the command with the fixes
      lint_wiring        the lint's wiring rules: which field, in which convention, each engine reads
      lint_llamacpp      the lint of a llama-server command: the GGUF's wiring and the flags that change a run
      lint_dflash        the lints of a DFlash draft: method, block length vs K, last layer, mask id, RoPE
      mismatch           when a compared chunk is a mismatch; summaries over rows
      penalty_check      what served sampling penalties cost, measured on live replays
      precision          the target's own verify-vs-decode disagreement in a dtype
      probe              which wiring a draft was trained on
      dflash_probe       which target layers a DFlash draft was trained on: the declared ids and their shifts
      dflash_diagnose    diagnose on a DFlash draft: preflight's traps, the lint, the layer probe, live replays
      dflash_teacher     a DFlash draft's teacher-forced blocks: slot accuracy, the run at every anchor
      probe_report       what the wiring probe found and how it judges it: candidates, separation, the verdict
      probe_settings     the probe's settings and report as values, torch-free (pages read a stored probe)
      reading_probe      which reading (RoPE, flags, positions) a draft was trained with
      sample_checks      diagnose's checks on samples: the chat template, live replays, the context curve
      probe_findings     the probes' answers as findings; the engines' wiring held against the wiring probe
      serving_features   features that cost acceptance: penalties, grammar, LoRA, caches, PD
      train_serve        the train-vs-serve diff as diagnose's findings (the cheap check that sees wiring)
      served_verdict     the server's accept length beside the replay's under the read and the found wiring
      whatif             accept length and speed-up for other K and for trees
      threshold_whatif   where-lost's what-if: stop drafting below a draft probability, with a predicted speed-up
      where_lost         where stored runs lose acceptance: position, token kind, confidence, calibration
      where_lost_result  where-lost's input and answer as values, each number with its definition
      where_lost_tree    where-lost for trees (per depth and sibling rank) and sampled chains (drawn vs expected)
    backend.service      the only layer that touches db/ and threads
      checkpoints        directories added in the dashboard, kept in the database
      serving_lint       the serving-flag lint as the pages and the CLI run it: one answer, held to a kept probe
      kept_results       a pair's wiring probes and verdicts, kept across reloads and servers while its files stay
      engine_readings    how each engine reads a draft on a target (preflight's table), kept until files change
      database           one engine and session factory per URL
      datasets           datasets: import, list, read samples
      demo_story         the active bundled pair's story for Home, read from the pair's own files
      diagnosis          `diagnose` with its models loaded once (CLI and page alike)
      draft_fix          a copy of a draft with the serving fix written into its config.json
      engine_check       the replay against a running vLLM or llama.cpp, step for step; the wiring it ran named
      engine_check_result what an engine check found, as stored (result.json) and read back beside a run
      served_engines     the interface of an engine beside the replay: launch, connect, ask, a typed answer
      server_process     a serving engine's process on loopback: started, waited on, stopped; its HTTP API
      llamacpp_server    llama.cpp beside the replay: the pair converted to GGUF, llama-server launched, its trace read
      diagnosis_report   one diagnosis as one file to attach to an issue (HTML or JSON)
      evaluate           every (draft, sample) pair of a dataset, summed per draft
      feature_check      serve-check --features: a server's returned features against the layers
      fix_measure        apply a fix and measure again: the draft and its fixed copy replayed under the engine's reading
      jobs               the job runner: engine records persisted step by step
      forced_replay      a replay along an engine's sampled answer, over its forced trace
      trace_guesses      guesses a trace's capture verifies: the answer after the prompt in each replay's sample
      traces             traces kept beside the database: captured once, reused, refused when stale
      run_writer         a run's records written as they arrive, in batches with its heartbeat
      replay_answer      what `replay --json` answers: the run's tokens, steps, metrics and reading, typed
      batch_jobs         samples of one draft replayed in batches, each stored as its own run
      where_lost         where_lost over stored runs: runs grouped by draft, sources, the tokenizer
      models             loaded targets and drafts kept in small LRUs
      observations       server numbers stored and compared with the replay
      per_request        per-request server numbers beside the replay; the worst requests replayed
      plan               a request resolved once against the loaded pair (ReplayPlan: reading, wiring, shape)
      readers            reads that need torch or transformers, for the dashboard, in a process of their own
      ray_eval           `evaluate` fanned out to Ray actors
      references         hidden-state references for a stored run
      reference_spec     a reference as asked and as computed (torch-free: the pages build and read them)
      runs               stored runs: list, read, delete, export
      tasks              background tasks the dashboard polls
      vllm_server        vLLM beside the replay: its OpenAI server launched on the pair, asked, its counts read
      vllm_trace         traces computed by a vLLM serving the target (extract_hidden_states and a connector)
      worker             model work in a worker process, not the Streamlit server
      run_tensors        a run's recorded tensors on disk: part files as it commits, one artifact at its end
      stamps             a cache key for files: their modification times
      eval_pairs         the (draft, sample) pairs an evaluation replays: found stored or replayed
    backend.cli          argparse over the service (`python -m backend`); backend.defaults the bundled pairs

run <- drafts <- target <- engine <- data <- diagnostics <- service <- cli / pages. Only `backend.service` and `backend.cli`
import `db` (db itself imports only the torch-free room `backend.run` and `backend.data.samples`). Only `pages/` and `ui/` import streamlit; pages and ui never import torch
or transformers (directly or through what they import) and define no work that touches a model:
they build requests and call `backend.service`. The reference the code cites is docs/reference.md.
"""


class BadInput(ValueError):
    """The user's input (paths, files, flags, checkpoints) cannot be used; the message says why."""


def first_line(error: BaseException | str) -> str:
    """The first non-blank line of an error's message, else its type's name (an EOFError or a
    KeyError may carry no message at all)."""
    for line in str(error).splitlines():
        if line.strip():
            return line.strip()
    return type(error).__name__ if isinstance(error, BaseException) else ""


class Terminated(KeyboardInterrupt):
    """SIGTERM (timeout, systemd, docker stop): a replay ends as interrupted, like Ctrl-C."""
