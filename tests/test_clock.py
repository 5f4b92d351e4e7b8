"""One step clock for every torch strategy on GPUs (issue 34, "GPU clock"): CUDA events, tested here on CPU
with the device mocked (a fake per-device clock in milliseconds)."""

import inspect

import pytest

from distbench.core.strategies import STRATEGIES
from distbench.workers import common
from distbench.workers import stopping as stop_loop
from tests.builders import point_config
from tests.conftest import require

EVENTS = "CUDA events per step, host synchronized at segment ends"


def _cfg(**kw):
    return point_config("dp", 2, **{"per_device_batch": 1, "steps": 4, "warmup": 1, **kw})


class FakeDevices:
    """torch.cuda's Event and current_stream over fake devices whose clocks the test's step advances: a
    stream's wait_event makes its device's clock catch up with the event's time (a device-side wait)."""

    def __init__(self, n: int):
        self.clock = dict.fromkeys(range(n), 0.0)
        self.log: list[tuple[str, int]] = []
        devices = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self, stream=None):
                devices.log.append(("record", stream.device))
                self.at = devices.clock[stream.device]

            def elapsed_time(self, other):
                return other.at - self.at

        class Stream:
            def __init__(self, device):
                self.device = device

            def record_event(self):
                devices.log.append(("mark", self.device))
                event = Event()
                event.at = devices.clock[self.device]
                return event

            def wait_event(self, event):
                devices.log.append(("wait", self.device))
                devices.clock[self.device] = max(devices.clock[self.device], event.at)

        self.Event, self.Stream = Event, Stream

    def install(self, monkeypatch, torch):
        monkeypatch.setattr(torch.cuda, "Event", self.Event)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda d: self.Stream(d))


@require("torch")
def test_dp_events_wait_for_every_device_and_time_the_slowest(monkeypatch):
    """dp's clock is the CUDA events of every torch strategy, recorded on device 0 after its stream waited for
    the other devices: the no-sync variant's replicas (device 1 slower here, unsynchronized) are timed by
    the slowest one, as the host's per-step synchronize of every device did; without the join device 0's
    own 5 ms would be read."""
    import torch

    from distbench.workers import torch_dp

    fake = FakeDevices(2)
    fake.install(monkeypatch, torch)

    def step():  # both replicas' work, queued on their own devices
        fake.clock[0] += 5.0
        fake.clock[1] += 8.0
        return 0.0

    cfg = _cfg(sync=False)
    times, _, fields = common.measured_run(
        step, lambda out: None, cfg, stop_loop.single_gather, [], None, torch_dp.event_clock([0, 1])
    )
    assert times == pytest.approx([0.008] * 4)
    assert fields["stopping"]["clock"] == EVENTS
    # every boundary: device 1 marks, device 0 waits for it, then device 0 records the timing event
    assert fake.log[:3] == [("mark", 1), ("wait", 0), ("record", 0)]


@require("torch")
def test_wrapper_loops_get_events_recorded_after_their_step_hook(monkeypatch):
    """Lightning's Trainer and Ignite's Engine own their loop (wrapper_loop.SteppedLoop): on CUDA their steps
    get the same events, recorded by the measuring thread after the hand-over from the wrapper's step-end
    hook, so each event follows the work that step queued (no longer the host clock with a sync per step)."""
    import torch

    from distbench.workers import torch_common as tc
    from distbench.workers.wrapper_loop import SteppedLoop

    fake = FakeDevices(1)
    fake.install(monkeypatch, torch)
    new_event = tc.make_event_clock(torch.device("cuda", 0))
    assert new_event is not None
    stream = fake.Stream(0)

    class OnStream:  # measure() records events without a stream: the current one (device 0's here)
        def __init__(self):
            self.event = new_event()

        def record(self):
            self.event.record(stream)

        def elapsed_time(self, other):
            return self.event.elapsed_time(other.event)

    loop, durations = SteppedLoop(), iter([3.0, 2.0, 4.0, 6.0, 7.0, 1.0, 1.0])

    def wrapper_loop():  # the wrapper's own loop, in its thread: queue a step's work, then its end-of-step hook
        loop.ready()
        while True:
            fake.clock[0] += next(durations)
            if loop.boundary(0.0):
                return

    loop.start(wrapper_loop)
    syncs = []
    times, _, stopping = stop_loop.measure(loop.step, syncs.append, _cfg(world_size=1, steps=4), new_event=OnStream)
    loop.finish()
    assert times == pytest.approx([0.002, 0.004, 0.006, 0.007])
    assert len(syncs) == 3  # before warmup, after the warmup step, at the segment's end: not per step


@require("torch")
def test_every_torch_strategy_selects_the_event_clock():
    """Every torch training strategy reaches a clock factory on CUDA: through torch_common.run (its clock does
    not depend on the strategy any more) or dp's own event_clock; none calls measured_run without one."""
    import importlib

    import torch

    from distbench.workers import torch_common as tc

    assert tc.make_event_clock(torch.device("cpu")) is None
    assert callable(tc.make_event_clock(torch.device("cuda", 0)))
    checked = []
    for name, strategy in STRATEGIES.items():
        if strategy.framework != "torch":
            continue
        source = inspect.getsource(importlib.import_module(f"distbench.workers.{strategy.module}"))
        if 'status="skipped"' in source and "measured_run" not in source and "tc.run(" not in source:
            continue  # a worker that only records its point skipped (composer)
        assert "tc.run(" in source or "event_clock(devices)" in source, name
        checked.append(name)
    assert {"torch", "ddp", "dp", "fsdp", "accelerate", "lightning"} <= set(checked)


@require("torch")
def test_the_host_clock_diagnostic_switches_every_torch_strategy(monkeypatch):
    """DISTBENCH_STEP_CLOCK=host (the GPU check's measurement of what the clock changes on a short step) gives
    every torch strategy the host clock with a device synchronize per step, and the record names it."""
    import torch

    from distbench.workers import torch_common as tc
    from distbench.workers import torch_dp

    monkeypatch.setenv(tc.HOST_CLOCK_ENV, "host")
    assert tc.make_event_clock(torch.device("cuda", 0)) is None
    assert torch_dp.event_clock([0, 1]) is None
    _, _, fields = common.measured_run(lambda: 0.0, lambda out: None, _cfg(world_size=1), stop_loop.single_gather, [])
    assert fields["stopping"]["clock"] == "host clock, device synchronized"
    monkeypatch.delenv(tc.HOST_CLOCK_ENV)
    assert callable(tc.make_event_clock(torch.device("cuda", 0)))
