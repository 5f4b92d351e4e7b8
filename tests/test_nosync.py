"""The no-sync ("independent") variant is each strategy's own step minus its collective: real runs on
CPU workers. At N=2 with different data per rank its replicas drift apart (nothing is exchanged);
at N=1, where the collective has nothing to exchange, it computes the same numbers as the real step and
runs as fast."""

import dataclasses
import statistics
from concurrent.futures import ThreadPoolExecutor

import pytest

from distbench.core.strategies import STRATEGIES
from distbench.run.launch import run_point
from tests.builders import tiny_config
from tests.conftest import require
from tests.test_multinode import run_two_tf_workers

pytestmark = pytest.mark.slow

STRATEGY_MODULES = {
    "ddp": ("torch",),
    "horovod-torch": ("torch", "horovod.torch"),
    "mirrored": ("tensorflow",),
    "horovod-tf": ("tensorflow", "horovod.tensorflow"),
}
PARAMS = [pytest.param(s, marks=require(*mods)) for s, mods in STRATEGY_MODULES.items()]


def _cfg(strategy, n, **kw):
    return tiny_config(strategy, n, **{"num_classes": 10, "steps": 3, **kw})


def _run(strategy, cfg, tmp_path, name):
    record = run_point(STRATEGIES[strategy], cfg, tmp_path / name, 300)
    assert record["status"] == "ok", record.get("reason")
    return record


@pytest.mark.parametrize("strategy", PARAMS)
def test_the_variant_exchanges_nothing(strategy, tmp_path):
    # Verify mode: every rank starts from rank 0's weights (the wrapper's one initial broadcast) and
    # trains on its own shard of one global batch. A synchronized step keeps the replicas equal
    # (test_verify: within 1e-6); in the variant each replica's update is its own.
    record = _run(strategy, _cfg(strategy, 2, sync=False, verify=True), tmp_path, "nosync")
    assert record["sync"] is False
    assert record["replica_max_rel_diff"] > 1e-2
    assert record["nosync_variant"] and "removed" in record["nosync_variant"]
    if strategy == "ddp":
        assert record["nosync_hook_calls"] > 0  # the no-op comm hook really replaced the all-reduce
        assert record["nosync_buffer_sync"] is False  # and DDP broadcasts no buffers before each forward


@require("tensorflow")
def test_the_multiworker_variant_exchanges_nothing(tmp_path):
    cfg = _cfg("mirrored", 2, nodes=2, sync=False, verify=True)
    record = run_two_tf_workers(cfg, tmp_path)
    assert record["replica_max_rel_diff"] > 1e-2
    assert "only the cross-replica gradient all-reduce" in record["nosync_variant"]


@pytest.mark.parametrize("strategy", PARAMS)
def test_at_one_device_the_variant_computes_what_the_real_step_computes(strategy, tmp_path):
    # With one rank the collective has nothing to exchange, so a variant that keeps everything else
    # (the forward, backward, gradient scaling, optimizer update, data) produces the real step's
    # numbers: the same per-step losses and weight updates. Deterministic, so unlike the timing
    # comparison below it does not depend on the machine's load.
    with ThreadPoolExecutor(2) as pool:
        real, variant = pool.map(
            lambda sync: _run(strategy, _cfg(strategy, 1, sync=sync, verify=True), tmp_path, f"sync{sync}"),
            (True, False),
        )
    assert (real["sync"], variant["sync"]) == (True, False)
    assert variant["verify_losses"] == pytest.approx(real["verify_losses"], rel=1e-6)
    flat = lambda r: [v for tensor in r["update_checksums"] for v in tensor]  # noqa: E731
    assert flat(variant) == pytest.approx(flat(real), rel=1e-6, abs=1e-12)
    assert max(abs(v) for v in flat(real)) > 0  # the weights did move


# A 2-core machine shared with other work: identical runs a minute apart differ by 2x in median step
# time here (measured while writing this test, at load average 7: the real mirrored step read 0.09 s
# and 0.24 s per step in two runs of one config). So the two variants run side by side, at the same
# time, and see the same load (their measured windows overlap); then their median step times agreed
# within 1.01..1.16 in four pairs. The bound, 0.7..1.4, is wide for that noise and still catches a
# variant that drops or adds a whole phase of the step.
TOLERANCE = (0.7, 1.4)


@pytest.mark.parametrize("strategy", [p for p in PARAMS if p.values[0] in ("ddp", "mirrored")])
def test_at_one_device_the_variant_runs_like_the_real_step(strategy, tmp_path):
    # ddp: the no-op hook against gloo's one-rank all-reduce; mirrored: replica-local updates against
    # the one-replica all-reduce. (Horovod's variant is the real step at N=1: horovod_init returns
    # the global process set, test below.)
    with ThreadPoolExecutor(2) as pool:
        real, variant = pool.map(
            lambda sync: _run(strategy, _cfg(strategy, 1, sync=sync, steps=60, warmup=3), tmp_path, f"sync{sync}"),
            (True, False),
        )
    ratio = statistics.median(variant["step_times_s"]) / statistics.median(real["step_times_s"])
    assert TOLERANCE[0] <= ratio <= TOLERANCE[1], f"{strategy}: no-sync / sync median step time = {ratio:.2f}"


def test_horovod_variant_reduces_over_the_rank_alone_and_is_the_real_step_at_one_rank():
    class FakeHvd:  # records what distbench asks of horovod's init
        global_process_set = "global"

        @staticmethod
        def ProcessSet(ranks):
            return tuple(ranks)

        @staticmethod
        def rank():
            return 1

        def init(self, process_sets=None):
            self.sets = process_sets

    from distbench.workers.comm_common import horovod_init

    hvd = FakeHvd()
    assert horovod_init(hvd, _cfg("horovod-torch", 1, sync=False)) == {True: "global", False: "global"}
    assert hvd.sets is None
    assert horovod_init(hvd, _cfg("horovod-torch", 2, sync=True))[True] == "global" and hvd.sets is None
    assert horovod_init(hvd, _cfg("horovod-torch", 2, sync=False))[False] == (1,) and hvd.sets == [(0,), (1,)]
    # both runs in one process (nosync_order): the rank's own set registered beside the global one
    sets = horovod_init(hvd, dataclasses.replace(_cfg("horovod-torch", 2), nosync_order="AB"))
    assert sets == {True: "global", False: (1,)} and hvd.sets == [(0,), (1,)]


@pytest.mark.parametrize("strategy", PARAMS)
def test_the_variant_runs_in_the_synchronized_runs_processes(strategy, tmp_path):
    """nosync_order 'BA': the variant first, then the real step, in one process tree (the order that
    must switch the collective back on); both measure the same number of steps."""
    assert STRATEGIES[strategy].nosync_in_process
    record = _run(strategy, _cfg(strategy, 2, steps=4, measure_comm=True, nosync_order="BA"), tmp_path, "ba")
    [seg] = record["segments"]
    assert (
        seg["variant"] == "B"
        and record["sync"] is True
        and len(seg["step_times_s"]) == len(record["step_times_s"]) == 4
    )
    assert seg["stopping"]["window"][1] <= record["stopping"]["warmup_start"]  # B ran before A
    assert seg["stopping"]["segment_start"] <= seg["stopping"]["window"][0]
    assert record["allreduce_s"] and "allreduce_s" not in seg  # the all-reduce benchmark belongs to A
    if strategy == "ddp":
        assert seg["nosync_hook_calls"] > 0 and "nosync_hook_calls" not in record


@require("tensorflow")
def test_mirrored_variant_switch_restores_the_all_reduce():
    """The mirrored variant replaces one optimizer method on the instance; switching back restores the class's."""
    import keras

    from distbench.workers.tf_common import replica_local_updates

    opt = keras.optimizers.SGD()
    assert replica_local_updates(opt) is False  # it was off
    assert opt._all_reduce_sum_gradients([(1, 2)]) == [(1, 2)]
    assert replica_local_updates(opt, on=False) is True  # it was on: a real step after it re-syncs the replicas
    assert opt._all_reduce_sum_gradients.__func__ is type(opt)._all_reduce_sum_gradients


@pytest.mark.parametrize("strategy", PARAMS)
def test_the_tiny_variant_runs_between_the_real_steps(strategy, tmp_path):
    """A T B T A in one process tree: every run measures as many steps; the tiny variant's collective ran once
    per step (warmup included) where the worker can count it (torch)."""
    cfg = _cfg(strategy, 2, model="linear", num_classes=2, steps=4, measure_comm=True, nosync_order="ATBTA")
    record = _run(strategy, cfg, tmp_path, "atbta")
    segs = record["segments"]
    assert [s["variant"] for s in segs] == list("TBTA")
    assert all(len(s["step_times_s"]) == 4 for s in segs) and len(record["step_times_s"]) == 4
    starts = [s["stopping"]["segment_start"] for s in segs]
    assert record["stopping"]["window"][1] <= starts[0] and starts == sorted(starts)
    if strategy != "mirrored":  # counted where the worker issues it (mirrored: inside strategy.run, not counted)
        assert [s.get("tiny_collective_calls") for s in segs if s["variant"] == "T"] == [5, 5]
    # the standalone all-reduce ran after the closing A (no gap inside the order), its figures the point's
    assert record["allreduce_s"] > 0 and not any("allreduce_s" in s for s in segs)
    assert record["stopping"]["allreduce_window"][0] >= segs[-1]["stopping"]["window"][1]


@require("torch")
def test_zero_communication_reads_zero_with_the_wait_apart(tmp_path):
    """Issue 20's check on real CPU workers: ddp N=2 on the 'linear' model at 2 classes (8 gradient values,
    32 bytes: the tiny collective moves the same message) reports communication within noise of 0, and the
    wait for the slower rank (with the tiny collective's latency) as a term of its own (the old exposed
    communication counted it as communication). Five repeats, judged on a 99% paired t-interval over the
    repeats' own values (comm_split.communication_per_repeat): a true 0 fails it 1% of the time, not the 5%
    of the record's 95% CI, and five repeats keep it narrower than three at 95% (t 4.60/sqrt 5 vs 4.30/sqrt 3)."""
    from distbench.kinds.measure import measure_point
    from distbench.results import stats
    from distbench.run.plan import PlannedPoint

    cfg = _cfg("ddp", 2, model="linear", num_classes=2, steps=300, warmup=20, measure_comm=True)
    record = measure_point(PlannedPoint(STRATEGIES["ddp"], cfg), tmp_path, timeout_s=300, repeats=5)
    assert record["status"] == "ok", record.get("reason")
    split = record["comm_split"]
    assert split["ci_scope"] == "run-to-run (paired t over 5 repeats)"
    values = split["communication_per_repeat"]
    _, low, high = stats.mean_ci(values, level=0.99)
    assert low <= 0 <= high, (values, split)
    assert split["wait_s"] > 0 and split["wait_ci"] is not None
    assert split["communication_s"] == pytest.approx(record["exposed_comm_s"])  # exposed comm: A - T, no wait
    assert split["tiny_collective_calls"] == 10 * (300 + 20)
    assert len(record["stragglers"]["ranks"]) == 2 and record["stragglers"]["skipped_runs"] == 0
