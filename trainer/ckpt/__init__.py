"""Checkpoints: the files (checkpoint_files.py is torch-free, the dashboard reads it), save and
resume, the sharded format, resharding and the Hugging Face export."""
