"""Persistence: SQL tables for runs, steps and metrics; safetensors artifacts for big tensors."""
