"""Sweeps: plan children, find-or-run by config hash, local and SLURM executors."""
