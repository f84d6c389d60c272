"""Routing experiments kept for their findings (README.md); imported by nothing else."""
