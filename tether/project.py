"""Where a project keeps its state: `.tether/` in the project directory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tether.filemodes import make_private, private_dir
from tether.store.auth import TokenAuthority


@dataclass(frozen=True)
class Project:
    root: Path

    @classmethod
    def at(cls, directory: str | Path | None = None) -> Project:
        return cls(Path(directory or os.environ.get("TETHER_PROJECT_DIR") or ".").resolve())

    @property
    def state_dir(self) -> Path:
        return self.root / ".tether"

    @property
    def store_path(self) -> Path:
        return self.state_dir / "store.db"

    @property
    def secret_path(self) -> Path:
        return self.state_dir / "secret"

    @property
    def admin_token_path(self) -> Path:
        return self.state_dir / "admin_token"

    def authority(self) -> TokenAuthority:
        private_dir(self.state_dir)
        authority = TokenAuthority.load_or_create(self.secret_path)
        make_private(self.secret_path)
        return authority

    def write_admin_token(self, authority: TokenAuthority) -> Path:
        return self.write_key(self.admin_token_path, authority.admin_token)

    def write_session_keys(self, authority: TokenAuthority) -> tuple[Path, Path]:
        """The deploy key and the reward key of named sessions, each in a file only its owner reads."""
        deploy = self.write_key(self.state_dir / "deploy_key", authority.deploy_token)
        return deploy, self.write_key(self.state_dir / "reward_key", authority.reward_token)

    def write_key(self, path: Path, key: str) -> Path:
        private_dir(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key + "\n")
        return path
