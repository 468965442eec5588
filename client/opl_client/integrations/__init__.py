"""Adapters that let other trainers log through the `opl` SDK: TRL/transformers and verl."""
