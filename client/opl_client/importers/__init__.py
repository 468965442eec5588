"""Histories from other trackers as runs: TensorBoard event files, JSON lines and CSV (`opl import`)."""
