"""A worker that does its work and writes an ok record, then hangs in teardown (a non-daemon thread
that never ends, as a process-group or engine destructor can hang after the work is done)."""

import threading
import time

from distbench.workers import common

FRAMEWORK = "torch"


def body(cfg, out_path):
    common.emit(
        cfg,
        out_path,
        strategy="torch",
        framework="torch",
        status="ok",
        step_times=[0.1, 0.1, 0.1],
        measured_window_s=0.3,
    )
    threading.Thread(target=time.sleep, args=(3600,)).start()
