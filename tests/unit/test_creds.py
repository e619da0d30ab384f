"""kill(2)'s rule as act/creds.py applies it for a worker: plain data."""

from __future__ import annotations

import os

from trainprobe.sidecar.act.creds import Creds, may_signal, read_creds

NOBODY = 65534
WORKER = Creds(ruid=NOBODY, euid=NOBODY, suid=NOBODY, cap_kill=False, userns=7)


def test_a_setuid_helper_is_the_workers_until_it_changes_its_real_uid() -> None:
    # Just exec'd setuid-root: real uid still the worker's, so the kernel lets it signal.
    assert may_signal(WORKER, Creds(NOBODY, 0, 0, True, 7)) == ""
    # After setresuid(0, 0, 0), as sudo does: EPERM for the worker, so left alone.
    why = may_signal(WORKER, Creds(0, 0, 0, True, 7))
    assert "uid 0" in why and f"uid {NOBODY}" in why


def test_the_saved_uid_and_the_senders_effective_uid_count() -> None:
    assert may_signal(WORKER, Creds(0, 0, NOBODY, True, 7)) == ""  # target's saved uid
    sender = Creds(ruid=1000, euid=NOBODY, suid=1000, cap_kill=False, userns=7)
    assert may_signal(sender, Creds(NOBODY, NOBODY, NOBODY, False, 7)) == ""
    # A target's effective uid alone does not count (kill_ok_by_cred ignores it).
    assert may_signal(WORKER, Creds(0, NOBODY, 0, False, 7)) != ""


def test_cap_kill_counts_only_in_the_same_known_user_namespace() -> None:
    root = Creds(0, 0, 0, cap_kill=True, userns=7)
    other = Creds(1000, 1000, 1000, False, 7)
    assert may_signal(root, other) == ""
    assert may_signal(root, Creds(1000, 1000, 1000, False, 8)) != ""
    assert may_signal(Creds(0, 0, 0, True, 0), Creds(1000, 1000, 1000, False, 0)) != ""
    # Root without CAP_KILL (dropped): the uid rule alone.
    assert may_signal(Creds(0, 0, 0, False, 7), other) != ""


def test_read_creds_reads_the_kernels_uids() -> None:
    creds = read_creds(os.getpid())
    assert creds is not None
    assert (creds.ruid, creds.euid, creds.suid) == os.getresuid()
    assert creds.userns == os.stat("/proc/self/ns/user").st_ino
    assert read_creds(0) is None
