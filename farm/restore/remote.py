"""The DVC remote the composed `remote` config group names (conf/remote/), validated; credentials and
how a remote's failure is reported (one line, credentials scrubbed), never a traceback."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, TypedDict

from farm.core.errors import FarmError
from farm.table.config import FarmConfig

log = logging.getLogger(__name__)

REMOTE_KINDS = ("local", "s3")
# Credentials only ever come from the environment; these are scrubbed from anything the farm prints.
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# A terminal control sequence (CSI: colours, cursor moves), as DVC's rich output writes them.
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


class DvcRemoteConfig(TypedDict):
    """One `[remote "<name>"]` section of DVC's config, as the farm writes it."""

    url: str
    verify: bool
    endpointurl: NotRequired[str]
    region: NotRequired[str]


@dataclass(frozen=True)
class Remote:
    """The composed `remote` config group, validated."""

    kind: str
    name: str
    url: str  # absolute path for kind=local, s3://bucket/prefix for kind=s3
    endpointurl: str | None
    region: str | None
    verify: bool
    allow_anonymous_reads: bool

    def describe(self) -> str:
        """Where the objects go, safe to print (no credentials are part of a remote's config)."""
        return self.url + (f" (endpoint {self.endpointurl})" if self.endpointurl else "")

    def dvc_config(self) -> DvcRemoteConfig:
        conf = DvcRemoteConfig(url=self.url, verify=self.verify)
        if self.endpointurl:
            conf["endpointurl"] = self.endpointurl
        if self.region:
            conf["region"] = self.region
        return conf

    @property
    def anonymous(self) -> bool:
        """Reads go unsigned: an S3 remote that allows it, and no credentials to sign with."""
        return self.kind == "s3" and self.allow_anonymous_reads and not has_credentials()


def remote_of(cfg: FarmConfig) -> Remote:
    raw = cfg.extra.get("remote")
    if not isinstance(raw, dict):
        raise FarmError("no remote configured (the `remote` config group is missing)",
                        "add conf/remote/local.yaml and `- remote: local` to conf/config.yaml defaults")
    kind = str(raw.get("kind"))
    if kind not in REMOTE_KINDS:
        raise FarmError(f"remote.kind={kind!r} is not supported; accepted: {', '.join(REMOTE_KINDS)}",
                        "pick remote=local or remote=s3")
    url = raw.get("url")
    if url in (None, "", "???"):
        raise FarmError(f"remote.url is not set for remote={kind}",
                        "e.g. farm push remote=s3 remote.url=s3://bucket/prefix")
    url = _local_url(cfg, str(url)) if kind == "local" else _s3_url(str(url))
    name = str(raw.get("name") or f"farm-{kind}")
    return Remote(kind=kind, name=name, url=url,
                  endpointurl=str(raw["endpointurl"]) if raw.get("endpointurl") else None,
                  region=str(raw["region"]) if raw.get("region") else None,
                  verify=bool(raw.get("verify", True)),
                  allow_anonymous_reads=bool(raw.get("allow_anonymous_reads", False)))


def _local_url(cfg: FarmConfig, url: str) -> str:
    path = Path(url).expanduser()
    path = (path if path.is_absolute() else cfg.root / path).resolve()
    if path.is_relative_to(cfg.outputs_dir.resolve()):
        raise FarmError(f"the local remote {path} is inside outputs_dir {cfg.outputs_dir}",
                        "put remote.url outside outputs/ (the default is .farm/dvc-remote)")
    return str(path)


def _s3_url(url: str) -> str:
    if not url.startswith("s3://") or len(url) <= len("s3://"):
        raise FarmError(f"remote.url={url!r} is not an s3:// URL", "e.g. remote.url=s3://bucket/prefix")
    return url


def has_credentials() -> bool:
    """Whether AWS credentials are visible without asking any service (never a metadata endpoint)."""
    env = os.environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return True
    if any(env.get(k) for k in ("AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
                                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI")):
        return True
    files = (env.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"), env.get("AWS_CONFIG_FILE", "~/.aws/config"))
    return any(Path(f).expanduser().is_file() for f in files)


def scrub(text: str) -> str:
    """`text` with every credential value from the environment replaced by ***, and without the terminal
    colour codes DVC puts into some messages (the farm prints plain lines, to a terminal or not)."""
    for key in SECRET_ENV:
        value = os.environ.get(key)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return ANSI_ESCAPE.sub("", text)


def remote_errors() -> tuple[type[BaseException], ...]:
    """What talking to a remote can raise: DVC's own errors, OS errors, and those of the S3 client stack
    (botocore, aiohttp), which DVC lets through. Each becomes one line naming the remote, not a traceback."""
    # Imported here, not at the top: only needed once an error is being handled (an `except
    # remote_errors()` clause is evaluated only then). DVC costs a build ~0.05 s to import even when it
    # restores nothing; botocore and aiohttp are optional (installed only with DVC's S3 support).
    from dvc.exceptions import DvcException

    errors: list[type[BaseException]] = [DvcException, OSError]
    try:
        from botocore.exceptions import BotoCoreError, ClientError

        errors += [BotoCoreError, ClientError]
    except ImportError:
        pass
    try:
        from aiohttp import ClientError as HttpClientError

        errors.append(HttpClientError)
    except ImportError:
        pass
    return tuple(errors)


def say_error(verb: str, what: str, exc: BaseException) -> None:
    """One line on stderr: `farm <verb>: <what>: <the error, on one line, credentials scrubbed>`."""
    detail = scrub(" ".join(str(exc).split())) or type(exc).__name__
    log.error("farm %s: %s: %s", verb, what, detail)
