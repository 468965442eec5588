"""OffPolicy Lab client: `Client` for scripts and notebooks, `opl` on the command line.

    from opl_client import Client
    lab = Client()                                  # OPL_URL / OPL_TOKEN, or ~/.config/opl/config
    exp = lab.submit("sweep.yaml")                  # {"id": 12, "runs": [31, 32, ...]}
    lab.runs(query="experiment = 12 and state = succeeded")
    lab.metrics(31, ["train/reward_mean"])          # {"train/reward_mean": [(step, value), ...]}
    lab.cancel(32)

Every answer is plain Python: dicts, lists, tuples, floats (NaN and infinities as floats).
"""

from opl_client.client import Client, OplError
from opl_client.config import Settings, load_settings

__all__ = ["Client", "OplError", "Settings", "load_settings"]
