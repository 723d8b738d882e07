"""No secret on Tether's own command line.

Any process on the machine reads any other's command line (`/proc/PID/cmdline`, `ps`), an agent run as
another user (`--agent-user`) included; another user's environment (`/proc/PID/environ`) and a `0600`
file it cannot read. So keys and passwords come from the environment or a file: an option that would
carry one (`--upstream-key KEY`, `--token TOKEN`, a URL with a password or a key in it, as user info or
as a parameter: `postgresql://db/x?password=PW`, `https://api/v1?api_key=K`; a libpq `password=PW`
string as a store) is refused with the fix, before anything runs. The variables are named in
`tether/contracts.py` (`SECRET_ENV`), and agents never inherit them (`tether/runner/agents.py`).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import parse_qsl, urlsplit

from tether.contracts import JUDGE_KEY_ENV, OPTIMIZER_KEY_ENV, TEACHER_KEY_ENV, UPSTREAM_KEY_ENV
from tether.experiment.secrets import Secrets
from tether.store.backends import STORE_ENV, TOKEN_ENV

WHY = "where every process on this machine can read it (/proc/PID/cmdline)"
PGPASS = "PostgreSQL's client reads the password from PGPASSWORD or ~/.pgpass (PGPASSFILE names another)"


@dataclass(frozen=True)
class SecretOption:
    """A secret an option used to take as its value: now read from `env`, or the file `FLAG-file` names."""

    flag: str  # the refused spelling, e.g. --upstream-key
    env: str
    what: str
    file: str | None = None  # the option naming its file (default: FLAG-file)

    @property
    def file_flag(self) -> str:
        return self.file or f"{self.flag}-file"

    @property
    def file_dest(self) -> str:
        return self.file_flag.removeprefix("--").replace("-", "_")

    def fix(self) -> str:
        return f"set {self.env} in the environment, or give {self.file_flag} FILE (a file only you can read)"


UPSTREAM_KEY = SecretOption("--upstream-key", UPSTREAM_KEY_ENV, "the API key for --upstream")
OPTIMIZER_KEY = SecretOption("--optimizer-key", OPTIMIZER_KEY_ENV, "the API key for --optimizer-endpoint")
JUDGE_KEY = SecretOption("--judge-key", JUDGE_KEY_ENV, "the API key for --judge-url")
TEACHER_KEY = SecretOption("--teacher-key", TEACHER_KEY_ENV, "the API key for --teacher")
# Not --token-file: `tether store migrate --to` would then be an ambiguous abbreviation.
STORE_TOKEN = SecretOption("--token", TOKEN_ENV, "the admin token of an http(s) store", "--admin-token-file")

# What to do instead of a secret in the URL of an option (abbreviated or not); any other option: DEFAULT_FIX.
STORE_FIX = f"set {STORE_ENV}=URL in the environment instead, or drop the password from the URL: {PGPASS}"
URL_FIXES = {
    "--store": STORE_FIX,
    "--url": STORE_FIX,  # `tether store`'s older spelling of --store
    "--from": f"drop the password from the URL: {PGPASS}",
    "--to": f"drop the password from the URL: {PGPASS}",
    "--upstream": f"drop it from the URL: {UPSTREAM_KEY.fix()}",
    "--optimizer-endpoint": f"drop it from the URL: {OPTIMIZER_KEY.fix()}",
    "--judge-url": f"drop it from the URL: {JUDGE_KEY.fix()}",
    "--teacher": f"drop it from the URL: {TEACHER_KEY.fix()}",
}
STORE_OPTIONS = ("--store", "--url", "--from", "--to")  # they take libpq's URLs, so its strings too
DEFAULT_FIX = "give the URL without its credentials"
VLLM_FIX = "vLLM reads its API key from VLLM_API_KEY in the environment"
SECRET_FLAG = re.compile(r"^--?[\w.-]*(key|token|password|secret)(=|$)", re.IGNORECASE)
OPTION = re.compile(r"^(--[\w-]+)(?:=(.*))?$", re.DOTALL)  # --flag, or --flag=value
# A URL parameter (query or fragment) that carries a secret, by its name (lowercased, `-` read as `_`):
# libpq's password options and the usual names of keys and tokens, whole, or ending in one of SECRET_ENDINGS
# (`client_secret`, `x-api-key`). So `sslkey` (the path of a file) and `cache_key` are none.
SECRET_PARAMS = frozenset(
    {"password", "passwd", "pwd", "pass", "sslpassword", "passfile", "secret", "token", "access_token"}
    | {"key", "apikey", "api_key", "sig", "signature", "credential", "credentials"}
)
SECRET_ENDINGS = tuple(
    f"_{name}" for name in "password passwd pwd secret token api_key apikey access_key secret_key".split()
)
# libpq's keyword/value connection string (`host=db password=PW`): its options that carry a password.
CONNINFO_SECRET = re.compile(r"(?:^|\s)(password|sslpassword|passfile)\s*=", re.IGNORECASE)


class _Refused(argparse.Action):
    """`--upstream-key VALUE` and the like: refused as soon as it is parsed, naming the fix."""

    def __init__(self, option_strings: Sequence[str], dest: str, secret: SecretOption, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.secret = secret

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> NoReturn:
        what = f"{self.secret.flag} puts {self.secret.what} on the command line"
        raise SystemExit(f"{parser.prog}: {what}, {WHY}: {self.secret.fix()}")


def add_secret_arg(parser: argparse._ActionsContainer, secret: SecretOption, otherwise: str = "") -> None:
    """`FLAG-file FILE`, and `FLAG` itself only to refuse it (hidden from --help)."""
    parser.add_argument(secret.flag, action=_Refused, secret=secret, help=argparse.SUPPRESS)
    parser.add_argument(
        secret.file_flag,
        metavar="FILE",
        help=f"read {secret.what} from FILE (default: ${secret.env}{otherwise}); never on the command line",
    )


def secret_value(args: argparse.Namespace, secret: SecretOption) -> str | None:
    """The secret from `FLAG-file`, else from its environment variable, else None."""
    path = getattr(args, secret.file_dest, None)
    if path is None:
        return os.environ.get(secret.env) or None
    try:
        text = Path(path).read_text().strip()
    except OSError as exc:
        raise SystemExit(f"tether: {secret.file_flag} {path}: {exc.strerror or exc}") from None
    if not text:
        raise SystemExit(f"tether: {secret.file_flag} {path} is empty")
    return text


def secrets_of(args: argparse.Namespace) -> Secrets:
    """The keys the command's secret options and the environment give (None where neither does)."""
    return Secrets(
        upstream_key=secret_value(args, UPSTREAM_KEY),
        judge_key=secret_value(args, JUDGE_KEY),
        teacher_key=secret_value(args, TEACHER_KEY),
        optimizer_key=secret_value(args, OPTIMIZER_KEY),
    )


def refuse_secrets(argv: Sequence[str]) -> None:
    """Every word of the command line that carries a secret (`secret_in`: a URL with a password or a
    secret parameter, also as `--option=URL`, the URL of `ALIAS=URL`, one of a comma-separated list or
    a word of a longer value; for a store option, also libpq's `password=` strings), and a key in
    `--vllm-args`, is refused, naming the option and the fix (never the secret). Checked before the
    command line is parsed, so that no usage error repeats the secret either."""
    prog = "tether" + (f" {argv[0]}" if argv and not argv[0].startswith("-") else "")
    option = "an argument"
    for word in argv:
        match = OPTION.match(word)
        if match and match.group(2) is None:
            option = match.group(1)  # its value, if it takes one, is the next word
            continue
        _check_value(match.group(1) if match else option, match.group(2) if match else word, prog)
        option = "an argument"


def _check_value(option: str, value: str, prog: str) -> None:
    found = next(filter(None, map(secret_in, _texts(value))), None)
    if found is None and _names_a_store(option):
        found = conninfo_secret(value)
    if found is not None:
        raise SystemExit(f"{prog}: {option} has {found}, {WHY}: {_fix(option)}")
    if option != "--vllm-args":
        return
    for word in shlex.split(value):
        if SECRET_FLAG.match(word):
            flag = word.split("=")[0]
            raise SystemExit(
                f"{prog}: --vllm-args {flag} puts a secret on vLLM's command line, {WHY}: {VLLM_FIX}"
            )


def _texts(value: str) -> Iterator[str]:
    """The value, each of its comma-separated items and whitespace-separated words, and the URL of
    each `ALIAS=URL` among them."""
    for text in dict.fromkeys([value, *value.split(","), *value.split()]):
        yield text.strip()
        yield text.partition("=")[2].strip()


def _names_a_store(option: str) -> bool:
    return len(option) > 2 and any(name.startswith(option) for name in STORE_OPTIONS)


def _fix(option: str) -> str:
    """The fix for `option`, or for the option it abbreviates (argparse takes any unique prefix)."""
    meant = [name for name in URL_FIXES if name.startswith(option)]
    return URL_FIXES.get(option) or (URL_FIXES[meant[0]] if len(meant) == 1 else DEFAULT_FIX)


def secret_in(text: str) -> str | None:
    """How `text`, if a URL, carries a secret, in words that never repeat it: a password in its user
    info (`scheme://user:password@host`), or a parameter named as a secret in its query or fragment
    (`?password=`, `&sslpassword=`, `#access_token=`, percent-encoded or not, as libpq reads them). None
    when it carries none, or is no URL."""
    try:
        parts = urlsplit(text)
        if not parts.scheme or "://" not in text:
            return None
        if parts.password:
            return "a password in its URL"
    except ValueError:  # not a URL at all (e.g. an unbalanced [ in a host)
        return None
    for name, _ in [*parse_qsl(parts.query), *parse_qsl(parts.fragment)]:
        if is_secret_param(name):
            return f"a secret in its URL (its {name.strip()!r} parameter)"
    return None


def is_secret_param(name: str) -> bool:
    words = name.strip().lower().replace("-", "_")
    return words in SECRET_PARAMS or f"_{words}".endswith(SECRET_ENDINGS)


def conninfo_secret(value: str) -> str | None:
    """How a libpq keyword/value connection string (`host=db password=PW`) carries a password, or None."""
    found = CONNINFO_SECRET.search(value)
    return None if found is None else f"a password in its connection string ({found.group(1).lower()}=)"
