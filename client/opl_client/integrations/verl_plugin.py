"""Loaded by verl itself: verl's package reads the `verl.plugins` entry points when it is imported,
in every process (the driver and each Ray actor, where its TaskRunner builds `Tracking`). Loading
this module registers the "opl" backend, so `trainer.logger=['console','opl']` works without a
`register()` call in the script. A failure here must never stop verl from importing."""

import logging

try:
    from opl_client.integrations.verl import register

    register()
except Exception as exc:  # verl logs plugin failures only at debug level: say it here
    logging.getLogger("opl").warning("opl: could not register the 'opl' backend with verl's Tracking: %r", exc)
