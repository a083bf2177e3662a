"""Schema version 1: the tables as they were before the schema was versioned.

Tolerant (helpers.ensure_table): on a database made before Alembic it creates only the tables,
nullable columns and indexes that are missing, keeping every row.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from db.migrations.helpers import ensure_table

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    ensure_table(
        "datasets",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("path", sa.Text, nullable=True),
        sa.Column("format", sa.String(40), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    ensure_table(
        "samples",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("dataset_id", sa.Integer, sa.ForeignKey("datasets.id", ondelete="CASCADE"), nullable=False),
        sa.Column("index", sa.Integer, nullable=False),
        sa.Column("line", sa.Integer, nullable=True),
        sa.Column("source", sa.String(200), nullable=False),
        sa.Column("input_ids", sa.JSON, nullable=False),
        sa.Column("loss_mask", sa.JSON, nullable=False),
        sa.Column("prompt_len", sa.Integer, nullable=False),
        sa.Column("seq_len", sa.Integer, nullable=False),
        sa.Column("extra", sa.JSON, nullable=True),
        indexes=(("ix_samples_dataset_id", ["dataset_id"], False),),
    )
    ensure_table(
        "checkpoints",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    ensure_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("target_path", sa.Text, nullable=False),
        sa.Column("draft_path", sa.Text, nullable=False),
        sa.Column("sample_id", sa.Integer, sa.ForeignKey("samples.id", ondelete="SET NULL"), nullable=True),
        sa.Column("sample_ref", sa.Text, nullable=True),
        sa.Column("prompt_ids", sa.JSON, nullable=False),
        sa.Column("params", sa.JSON, nullable=False),
        sa.Column("aux_hf_indices", sa.JSON, nullable=False),
        sa.Column("output_ids", sa.JSON, nullable=False),
        sa.Column("metrics", sa.JSON, nullable=False),
        sa.Column("artifact_path", sa.Text, nullable=True),
        sa.Column("artifact_sha256", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("finished_at", sa.DateTime, nullable=True),
    )
    ensure_table(
        "steps",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("step_index", sa.Integer, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("pending_token", sa.Integer, nullable=False),
        sa.Column("drafted_ids", sa.JSON, nullable=False),
        sa.Column("accepted_count", sa.Integer, nullable=False),
        sa.Column("bonus_id", sa.Integer, nullable=False),
        sa.Column("committed_ids", sa.JSON, nullable=False),
        sa.Column("target_argmax_ids", sa.JSON, nullable=False),
        sa.Column("target_argmax_probs", sa.JSON, nullable=False),
        sa.Column("draft_probs", sa.JSON, nullable=False),
        sa.Column("draft_top_ids", sa.JSON, nullable=False),
        sa.Column("draft_top_probs", sa.JSON, nullable=False),
        sa.Column("draft_ms", sa.Float, nullable=False),
        sa.Column("verify_ms", sa.Float, nullable=False),
        indexes=(("ix_steps_run_step", ["run_id", "step_index"], True),),
    )
    ensure_table(
        "token_stats",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("chunk", sa.String(40), nullable=False),
        sa.Column("norm", sa.Float, nullable=False),
        sa.Column("reference", sa.String(200), nullable=True),
        sa.Column("cosine", sa.Float, nullable=True),
        sa.Column("norm_ratio", sa.Float, nullable=True),
        sa.Column("max_abs_diff", sa.Float, nullable=True),
        sa.Column("relative_error", sa.Float, nullable=True),
        indexes=(("ix_token_stats_run", ["run_id", "position"], False),),
    )
    ensure_table(
        "serving_observations",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("engine", sa.String(20), nullable=False),
        sa.Column("version", sa.String(40), nullable=True),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("draft_path", sa.Text, nullable=True),
        sa.Column("accept_length", sa.Float, nullable=True),
        sa.Column("observation", sa.JSON, nullable=False),
        sa.Column("lint", sa.JSON, nullable=False),
    )
    ensure_table(  # the integer version older SpecLens builds read to refuse a newer database
        "speclens_schema",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    for table in (
        "speclens_schema",
        "serving_observations",
        "token_stats",
        "steps",
        "runs",
        "checkpoints",
        "samples",
        "datasets",
    ):
        op.drop_table(table)
