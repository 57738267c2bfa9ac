"""The restore stage: rows whose published objects are still current come back from the DVC cache or remote
instead of compiling, the way a remote build cache works (docs/remote-cache.md).

  remote   the `remote` config group -> a validated Remote; credentials; one-line remote errors (publish uses it)
  view     the published tree read through DVC's public filesystem, every blob checked against its MD5
  stage    which rows to restore (their cached entries judged as `decide` judges one on disk), verified with
           the build's own acceptance, written with their manifest entries
"""
