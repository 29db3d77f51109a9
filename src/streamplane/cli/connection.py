"""What every control-plane command shares: --url, --token, --json, KEY=VALUE options.

``--url`` (env ``STREAMPLANE_URL``) may name several replicas of one control plane,
separated by commas (``http://a:8470,http://b:8470``): a command goes to the first and
moves to the next when one cannot serve (``ControlPlaneClient``).

The token is taken from ``--token``, else ``STREAMPLANE_API_TOKEN``, else the file
``.streamplane/api-token`` that ``streamplane control-plane serve`` writes. The names
of the variables are the client's (``URL_ENV``, ``TOKEN_ENV``):
``ControlPlaneClient.from_env()`` reads the same two.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from streamplane.client.control_plane import DEFAULT_URL, ControlPlaneClient

# Re-exported (the other commands import them from here): one definition, the client's.
from streamplane.client.control_plane import TOKEN_ENV as TOKEN_ENV
from streamplane.client.control_plane import URL_ENV as URL_ENV
from streamplane.exceptions import ConfigError, Unauthorized

STATE_DIR = Path(".streamplane")
TOKEN_FILE = STATE_DIR / "api-token"
LOCAL_TAGS = {"env": "local"}


def connection_options(f: click.decorators.FC) -> click.decorators.FC:
    f = click.option(
        "--token",
        envvar=TOKEN_ENV,
        default=None,
        help=f"API token for changes (env {TOKEN_ENV}; default: the file {TOKEN_FILE}).",
    )(f)
    return click.option(
        "--url",
        envvar=URL_ENV,
        default=DEFAULT_URL,
        show_default=True,
        help=(
            "Control-plane URL, or several replicas' URLs separated by commas: a command "
            f"moves to the next when one cannot serve (env {URL_ENV})."
        ),
    )(f)


def json_option(f: click.decorators.FC) -> click.decorators.FC:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")(f)


def read_token_file(path: Path = TOKEN_FILE) -> str | None:
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read the API token from {path}: {exc.strerror}") from exc
    return token or None


def write_new_token(path: Path = TOKEN_FILE) -> str:
    """A fresh random token, written to ``path`` readable by its owner only."""
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    path.chmod(0o600)
    return token


@contextmanager
def connect(url: str, token: str | None) -> Iterator[ControlPlaneClient]:
    """A client for one command (``url``: one URL or several, comma-separated); a token
    error says where tokens come from."""
    with ControlPlaneClient(url, token or read_token_file()) as client:
        try:
            yield client
        except Unauthorized as exc:
            raise Unauthorized(
                f"{exc} (give --token, set {TOKEN_ENV}, or keep it in {TOKEN_FILE})",
                status=exc.status,
            ) from exc


def echo_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=True, default=str))


def parse_key_values(items: Iterable[str], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        out[key.strip()] = value.strip()
    return out


def format_tags(tags: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(tags.items())) or "-"
