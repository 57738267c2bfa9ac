"""Running compiles on Ray: a private loopback cluster per build, a standing one, or any cluster by address.

Ray reads these switches when it is first imported, and this package's modules import Ray: they are set
here, before any of them runs. With them, a local cluster binds and advertises 127.0.0.1 only (Ray's
switch for clusters on one machine; otherwise it takes the machine's network address) and sends no usage
reports. farm/execute/ray_compat.py sets Ray's copy too when Ray was imported before this package.
"""

import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
