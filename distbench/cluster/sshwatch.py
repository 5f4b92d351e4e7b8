"""The one-machine cluster's sshd runs every remote command under this (ForceCommand; standard library only,
run by path). It runs $SSH_ORIGINAL_COMMAND in a process group of its own and stops that whole group (TERM,
then KILL) when its ssh session ends: the session's sshd exits when the client is gone (a launcher killed,
a link cut past the keep-alives), and the kernel then signals this process (parent-death signal). Without
it a rank started over ssh outlives the launcher that started it."""

import ctypes
import os
import signal
import subprocess
import sys
import time

GRACE_S = 5.0


def main() -> int:
    command = os.environ.get("SSH_ORIGINAL_COMMAND")
    if not command:
        print("this node's sshd runs commands only (ssh HOST COMMAND)", file=sys.stderr)
        return 1
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the session ended before the signal was armed
        return 255
    child = subprocess.Popen(["/bin/sh", "-c", command], start_new_session=True)

    def stop(signum, _frame):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(child.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + GRACE_S
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, stop)
    code = child.wait()
    try:  # anything the command left running in its group goes with it
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
