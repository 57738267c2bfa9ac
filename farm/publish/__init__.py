"""farm push / pull / status / golden: publish outputs/ with DVC, fetch it back, say how the two compare.

Git carries `outputs.dvc` (the pointer: the hash of a DVC directory listing) and the sources; the object
bytes live on a DVC remote chosen by conf/remote/ (`remote=local` by default, `remote=s3`). Everything
that touches hashes, caches or remotes goes through DVC's own API (`dvc.repo.Repo`): the farm never
hashes for DVC nor speaks a remote's protocol; it runs its drift guard before publishing and after
fetching, and reads DVC's per-file status to report what changed.

  (the remote: farm/restore/remote.py, shared with the restore stage below)
  repo      the DVC repository: paths inside it, opening it with the remote, per-file status
  pointer   outputs.dvc: read, record (`dvc add`), restore
  survey    the <op>/<target>/ directories, their missing rows, strays, the drift guard
  commands  the `farm ...` fix commands printed in reports
  pushing, pulling, status_report, seal   the verbs (not named push, pull, status: the functions
            exported here would hide modules of the same name)
"""

from __future__ import annotations

from farm.publish.pointer import Pointer, record_pointer
from farm.publish.pulling import pull
from farm.publish.pushing import push
from farm.publish.seal import seal_golden
from farm.publish.status_report import status

__all__ = ["Pointer", "pull", "push", "record_pointer", "seal_golden", "status"]
