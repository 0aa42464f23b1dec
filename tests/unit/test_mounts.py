"""Network and FUSE mounts are found in mountinfo and their watched folders polled: the parser on
real-looking lines, the mount of a path, and the watcher against an injected mountinfo file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_helpers import wait_for
from test_watcher import RecordingKB, ingested

from psirag_kb.service.mounts import is_remote, mount_of, parse_mountinfo, poll_reason
from psirag_kb.service.watcher import FolderWatcher

# Lines as a Debian 12 machine with an NFS share, a Samba share, sshfs and rclone shows them
# (written for these tests), and one line that is not a mount.
MOUNTINFO = (Path(__file__).resolve().parent.parent / "fixtures" / "mountinfo.txt").read_text()


def test_mountinfo_lines_are_parsed() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    assert len(mounts) == 9  # the line that is not one is left out
    by_point = {m.point: m for m in mounts}
    assert by_point["/mnt/team"].fstype == "nfs4"
    assert by_point["/mnt/team"].source == "fileserver:/export/team"
    assert by_point["/home/anna/remote box"].fstype == "fuse.sshfs"  # \040 is a space
    assert by_point["/mnt/scans"].source == "//nas/scans"


@pytest.mark.parametrize(("path", "point", "fstype"), [
    ("/mnt/team/projects/plan.md", "/mnt/team", "nfs4"),
    ("/mnt/team", "/mnt/team", "nfs4"),
    ("/mnt/teamwork/x", "/", "ext4"),  # a prefix of the name, not a parent folder
    ("/mnt/team/local/notes", "/mnt/team/local", "ext4"),  # a local disk inside the share
    ("/home/anna/remote box/docs", "/home/anna/remote box", "fuse.sshfs"),
    ("/home/anna/notes", "/home", "ext4"),
    ("/etc", "/", "ext4"),
])
def test_the_mount_of_a_path_is_the_nearest_above_it(path: str, point: str, fstype: str) -> None:
    mount = mount_of(path, parse_mountinfo(MOUNTINFO))
    assert mount is not None and (mount.point, mount.fstype) == (point, fstype)


def test_later_mounts_shadow_earlier_ones_on_the_same_point() -> None:
    text = MOUNTINFO + "70 27 0:60 / /mnt/scans rw - ext4 /dev/sde1 rw\n"
    assert mount_of("/mnt/scans/a", parse_mountinfo(text)).fstype == "ext4"


def test_remote_file_system_types() -> None:
    for fstype in ("nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "fuse.rclone", "9p",
                   "ceph", "glusterfs", "afs", "fuse"):
        assert is_remote(fstype), fstype
    for fstype in ("ext4", "xfs", "btrfs", "tmpfs", "fuseblk", "overlay", "zfs"):
        assert not is_remote(fstype), fstype


def test_poll_reasons(tmp_path: Path) -> None:
    share, local = tmp_path / "share", tmp_path / "local"
    share.mkdir()
    local.mkdir()
    fake = tmp_path / "mountinfo"
    fake.write_text(MOUNTINFO + f"90 27 0:70 / {share} rw - nfs4 server:/export rw\n")
    assert poll_reason(share, "auto", fake) == (
        f"on a nfs4 mount at {share} (server:/export), where inotify does not hear other "
        "machines' changes")
    assert poll_reason(local, "auto", fake) is None
    assert poll_reason(share, "never", fake) is None
    assert poll_reason(local, "always", fake) == '[watch] poll = "always"'
    assert poll_reason(share, "auto", tmp_path / "missing") is None  # no mountinfo: inotify


@pytest.fixture
def two_roots(tmp_path: Path) -> Iterator[tuple[FolderWatcher, RecordingKB, Path, Path]]:
    """A watcher over a folder on a (fake) NFS mount and a local one, polling every 0.2 s."""
    share, local = tmp_path / "share", tmp_path / "local"
    share.mkdir()
    local.mkdir()
    fake = tmp_path / "mountinfo"
    fake.write_text(MOUNTINFO + f"90 27 0:70 / {share} rw - nfs4 server:/export rw\n")
    kb = RecordingKB()
    watcher = FolderWatcher(kb, [share, local], 0.2, tmp_path / "data", poll="auto",
                            poll_interval_s=0.2, mountinfo=fake)
    watcher.start()
    yield watcher, kb, share, local
    watcher.stop()


def test_a_folder_on_a_network_mount_is_polled(two_roots) -> None:
    watcher, kb, share, local = two_roots
    status = {Path(s["folder"]): s for s in watcher.poll_status()}
    assert status[share]["polled"] and status[share]["interval_s"] == 0.2
    assert status[share]["reason"].startswith("on a nfs4 mount")
    assert status[local] == {"folder": str(local), "polled": False, "reason": "inotify"}
    # the polled folder's changes come from the poll: inotify does not watch it at all
    assert [e.watch.path for e in watcher._observer.emitters] == [str(local)]
    assert [e.watch.path for e in watcher._poller.emitters] == [str(share)]
    note = share / "plan.md"
    note.write_text("first draft")
    wait_for(lambda: str(note) in ingested(kb))
    (share / "sub").mkdir()
    moved = share / "sub" / "plan.md"
    note.rename(moved)
    wait_for(lambda: kb.of("rename") == [(str(note), str(moved))])
    moved.unlink()
    wait_for(lambda: [str(moved)] in kb.of("remove"))
    (local / "here.md").write_text("local")
    wait_for(lambda: str(local / "here.md") in ingested(kb))
