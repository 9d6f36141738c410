"""A small file system of the test's own: a tmpfs in a private mount namespace."""

import os
import shutil

import pytest
from common.launch import launch

__all__ = ["private_mount"]


def private_mount(tmp_path, opts):
    """argv prefix running a command in a private mount namespace with a tmpfs mounted
    (``opts``) on ``tmp_path/mnt``; skips where namespaces or mounts are not allowed."""
    unshare = shutil.which("unshare")
    if not unshare:
        pytest.skip("unshare(1) not installed")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    flags = ["--mount"] if os.geteuid() == 0 else ["--mount", "--map-root-user"]
    script = f'mount -t tmpfs -o {opts} hpcio-test "{mnt}" && exec "$@"'
    prefix = [unshare] + flags + ["sh", "-c", script, "sh"]
    probe = launch(prefix + ["true"])
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private tmpfs here: {probe.stderr.strip()[:80]}")
    return prefix, mnt
