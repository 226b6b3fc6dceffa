"""Backends: one module per place a job can run (local processes, Docker, SageMaker)."""
