"""`preflight`: a draft checked against a target from the files, the fix for an engine written to a copy
(`--write-fix`), and that copy measured against the draft (`--measure`, service/fix_measure.py)."""

from __future__ import annotations

from pathlib import Path

from backend import BadInput
from backend.cli.pair import checked_vocab, load_samples
from backend.cli.render import percent_bar
from backend.drafts.dflash_config import is_dflash


def cmd_preflight(args) -> tuple[dict, str]:
    from backend.engine.loading import pick_device, pick_dtype
    from backend.engine.preflight import preflight

    pick_dtype(pick_device(args.device), args.dtype)  # what a replay would refuse, refused here too
    if args.measure and not args.write_fix:
        raise BadInput(
            "--measure SAMPLES goes with --write-fix OUT (it replays the draft and the fixed copy)"
        )
    report = preflight(args.draft, args.target, args.sample_length, args.aux_hf_indices).result().to_dict()
    training = report["engines"].get(report["training_engine"]) if report["engines"] else None
    if args.aux_hf_indices is None and args.engine == "auto" and training and not training["loads"]:
        # a replay with the same flags (auto: the training reading) refuses this draft: so does preflight
        report["ok"] = False
        report["checks"].append(
            {
                "name": "wiring",
                "status": "fail",
                "message": f"{Path(args.draft) / 'config.json'}: {training['refusal']} (--engine NAME runs "
                "another reading)",
            }
        )
    lines = [f"{c['status'].upper():5} {c['name']}: {c['message']}" for c in report["checks"]]
    if args.write_fix:
        report["fixed_draft"] = _write_fix(args, report)
        lines.append(report["fixed_draft"]["said"])
    if report["engines"]:
        lines.append(f"how each engine reads this draft (training reading: {report['training_engine']}):")
        lines.append(f"  {'engine':<12} {'aux HF':<14} {'feedback':<9} {'embedding':<25} loads")
        for name, view in report["engines"].items():
            loads = "yes" if view["loads"] else f"no: {view['refusal']}"
            lines.append(
                f"  {name:<12} {str(view['aux_hf_indices']):<14} {view['feedback']:<9} "
                f"{view['embedding']:<25} {loads}"
            )
    lines.append(f"aux HF indices: {report['aux_hf_indices']}  ->  {'OK' if report['ok'] else 'FAILED'}")
    return report, "\n".join(lines)


def _write_fix(args, report: dict) -> dict:
    from backend.drafts.readings import SERVING_ENGINES
    from backend.service.draft_fix import write_fixed_draft

    if args.engine not in SERVING_ENGINES:
        raise BadInput(
            f"--write-fix goes with --engine {' / '.join(SERVING_ENGINES)} (the engine to fix for)"
        )
    fix = next((f for f in report["serving_fixes"] if f["engine"] == args.engine), None)
    if is_dflash(args.draft):  # every engine reads a DFlash config's fields alike
        from backend.engine.dflash_preflight import dflash_config_fix
        from backend.engine.loading import read_target_config

        update, words = dflash_config_fix(args.draft, read_target_config(args.target))
        fix = {"config_update": update, "message": f"Fix: {words}"} if update else None
    if fix is None:
        nothing = "no config field to fix" if is_dflash(args.draft) else "already feeds the trained wiring"
        return {"path": None, "said": f"no fix to write: {args.engine} {nothing}"}
    path = write_fixed_draft(args.draft, args.write_fix, fix["config_update"])
    written = {
        "path": str(path),
        "config_update": fix["config_update"],
        "said": f"wrote {path}: {fix['message']}",
    }
    if args.measure:  # apply the fix and measure again
        from backend.service.database import database_url
        from backend.service.fix_measure import measure_fix

        samples, _ = load_samples(args.measure, checked_vocab(args), args.measure_limit)
        bar, progress = percent_bar("measuring the fix")
        try:
            measured = measure_fix(
                database_url(None),
                args.target,
                args.draft,
                str(path),
                args.engine,
                samples,
                args.measure,
                progress=progress,
            )
        finally:
            bar.close()
        written["measured"] = measured.to_dict()
        written["said"] += f"\nmeasured: {measured.said}"
    return written
