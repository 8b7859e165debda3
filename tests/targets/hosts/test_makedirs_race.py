"""Two pdctl sessions creating the same folder at once (two hosts whose dataDir lies on one
shared filesystem, such as an NFS home; or the test hosts, which share this machine's) must
both succeed: a folder that appears between pdctl's check and its mkdir is not an error.

Over a real SFTP session to a real sshd host. The race is made certain, not timed: between
pdctl's stat (missing) and its mkdir, a second real SFTP session creates the folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pdctl.targets.ssh import Connection, SshOptions, makedirs
from tests.targets.testbed import SshEnv


class OtherWriterFirst:
    """A real SFTP client; the first time it is asked about `folder` and answers 'missing',
    `other` (another real session) creates that folder right after."""

    def __init__(self, sftp: Any, other: Any, folder: str) -> None:
        self.sftp, self.other, self.folder, self.raced = sftp, other, folder, False

    def stat(self, path: str) -> Any:
        try:
            return self.sftp.stat(path)
        except FileNotFoundError:
            if path == self.folder and not self.raced:
                self.raced = True
                self.other.mkdir(path, mode=0o700)
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sftp, name)


def test_makedirs_accepts_a_folder_made_meanwhile(ssh_env: SshEnv, tmp_path: Path) -> None:
    host = ssh_env.host("lo1")
    from pdctl.spec.model import Host

    spec_host = Host(
        name=host.name,
        address=host.address,
        port=host.port,
        user="root",
        identityFile=ssh_env.key,
    )
    options = SshOptions(known_hosts=ssh_env.known_hosts)
    first = Connection(spec_host, options).connect()
    second = Connection(spec_host, options).connect()
    try:
        shared = str(tmp_path / "shared")
        sftp = OtherWriterFirst(first.client.open_sftp(), second.client.open_sftp(), shared)
        makedirs(sftp, f"{shared}/deploy", 0o700)
        assert sftp.raced
        assert (tmp_path / "shared" / "deploy").is_dir()
    finally:
        first.close()
        second.close()
