"""Talking to Slurm through slurmrestd: a small typed client with one adapter per
wire-format family (v0.0.38 for Slurm 22.05-23.11, v0.0.40-42 for 23.11-25.x), JWT
auth, job script rendering and the Slurm state vocabulary in plain words."""
