"""Commands on stored data: import a dataset, export a run, where stored runs lose acceptance."""

from __future__ import annotations

from backend import BadInput


def cmd_import(args) -> tuple[dict, str]:
    from backend.service.datasets import ensure_demo_dataset, import_dataset

    ensure_demo_dataset(args.db)
    dataset_id, result = import_dataset(args.db, args.samples, args.name, args.target, args.format)
    rejected = [{"line": r.line, "reason": r.reason} for r in result.rejected]
    said = (
        f"dataset {dataset_id}: already imported (the same {result.format} samples); nothing added"
        if result.already is not None
        else f"dataset {dataset_id}: imported {result.imported} {result.format} samples, rejected {len(rejected)}"
    )
    lines = [said] + [f"  line {r['line']}: {r['reason']}" for r in rejected[:50]]
    return {
        "dataset_id": dataset_id,
        "imported": result.imported,
        "already_imported": result.already is not None,
        "rejected": rejected,
        "format": result.format,
    }, "\n".join(lines)


def read_store(url: str | None) -> str:
    """The database a read-only command reads; BadInput when there is none (an SQLite file that does
    not exist is not created just to say it holds no run)."""
    from backend.service.database import database_url, existing_store

    found = existing_store(url)
    if found is None:
        raise BadInput(f"{database_url(url)}: no database there (nothing stored yet)")
    return found


def cmd_export(args) -> tuple[dict, str]:
    from backend.service.runs import export

    path = export(read_store(args.db), args.run, args.format, args.out)
    return {"run_id": args.run, "format": args.format, "out": str(path)}, f"wrote {path}"


def cmd_lost(args) -> tuple[dict, str]:
    from pathlib import Path

    from backend.cli.render import where_lost_text
    from backend.service.where_lost import where_lost_file, where_lost_over

    if args.out and Path(args.out).suffix.lower() not in (".csv", ".parquet"):
        raise BadInput(f"{args.out}: --out writes .csv or .parquet")
    found = where_lost_over(read_store(args.db), args.runs)
    text = where_lost_text(found)
    if args.out:
        try:
            Path(args.out).write_bytes(where_lost_file(found, Path(args.out).suffix.lower()[1:]))
        except OSError as error:
            raise BadInput(f"{args.out}: cannot write it ({error.strerror or error})") from None
        text += f"\nwrote {args.out}"
    return found.to_dict(), text
