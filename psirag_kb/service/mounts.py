"""Which file system holds a folder, from /proc/self/mountinfo, and whether inotify can be
trusted there: changes other machines make on a network or FUSE mount never reach it."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MOUNTINFO = Path("/proc/self/mountinfo")
NETWORK_TYPES = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "smb", "ncpfs", "afs", "openafs", "9p", "ceph",
    "glusterfs", "lustre", "gpfs", "beegfs", "orangefs", "pvfs2", "ocfs2", "gfs2", "davfs",
    "coda", "virtiofs", "vboxsf", "vmhgfs", "fuse",
})
"""File systems whose changes may come from elsewhere than this kernel (plus every fuse.* but
fuseblk, a local disk through FUSE)."""
_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo: where it is mounted, its file system type and source."""

    point: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    """Undo mountinfo's octal escapes (\\040 for a space, \\134 for a backslash)."""
    return _OCTAL.sub(lambda m: chr(int(m[1], 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a mountinfo text in its order (later mounts shadow earlier ones); lines
    that do not parse are left out."""
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            dash = fields.index("-", 6)
            point, fstype = fields[4], fields[dash + 1]
        except (ValueError, IndexError):
            continue
        source = fields[dash + 2] if len(fields) > dash + 2 else ""
        mounts.append(Mount(_unescape(point), fstype, _unescape(source)))
    return mounts


def mount_of(path: Path | str, mounts: list[Mount]) -> Mount | None:
    """The mount a path lies on: the longest mount point above it, the last mounted if two
    share one."""
    real = os.path.realpath(path)
    best: Mount | None = None
    for mount in mounts:
        point = mount.point.rstrip("/") or "/"
        if real == point or real.startswith(point + "/") or point == "/":
            if best is None or len(point) >= len(best.point.rstrip("/") or "/"):
                best = mount
    return best


def is_remote(fstype: str) -> bool:
    """Whether a file system type is a network or FUSE one (inotify misses remote changes)."""
    return fstype in NETWORK_TYPES or (fstype.startswith("fuse.") and fstype != "fuseblk")


def poll_reason(folder: Path, mode: str, mountinfo: Path = MOUNTINFO) -> str | None:
    """Why a watched folder is polled ([watch] poll = always, or auto on a remote mount), or
    None when inotify watches it."""
    if mode == "never":
        return None
    if mode == "always":
        return '[watch] poll = "always"'
    try:
        mounts = parse_mountinfo(mountinfo.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        log.warning("cannot read %s (%s): watching %s with inotify", mountinfo, exc, folder)
        return None
    mount = mount_of(folder, mounts)
    if mount is None or not is_remote(mount.fstype):
        return None
    return (f"on a {mount.fstype} mount at {mount.point} ({mount.source}), where inotify does "
            "not hear other machines' changes")
