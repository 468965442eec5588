"""`import opl.trl`: TRL and transformers' Trainer take report_to="opl" (see opl_client.integrations.trl)."""

from opl_client.integrations.trl import OplCallback

__all__ = ["OplCallback"]
