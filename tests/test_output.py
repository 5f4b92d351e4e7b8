import json

from distbench.output import json_document, stopping_line, wrapper_lines


def test_stopping_line_says_which_points_met_the_target():
    recs = [
        {"status": "ok", "strategy": "ddp", "world_size": 2, "stopping": {"rule": "max_time"}},
        {"status": "ok", "strategy": "torch", "world_size": 1, "stopping": {"rule": "target_ci_met"}},
        {"status": "failed", "strategy": "tf", "world_size": 1, "stopping": None},
    ]
    assert stopping_line(recs) == (
        "adaptive stopping: 1 point(s) reached the CI target; 1 stopped at --max-time before reaching it (ddp@2)"
    )
    assert (
        stopping_line([{"status": "ok", "strategy": "t", "world_size": 1, "stopping": {"rule": "fixed_steps"}}]) is None
    )


def test_wrapper_lines_and_json_fields():
    recs = [{"strategy": "ddp", "framework": "torch", "world_size": 1, "wrapper_overhead": 0.05, "status": "ok"}]
    assert wrapper_lines(recs) == [
        "1-device wrapper cost: ddp at N=1 is 5.0% slower than the plain 'torch' loop (CIs: distbench report)"
    ]
    faster = [dict(recs[0], wrapper_overhead=-0.422)]
    assert wrapper_lines(faster)[0].startswith("1-device wrapper cost: ddp at N=1 is 42.2% faster than")
    doc = json.loads(json_document(recs))
    for key in (
        "strategy",
        "framework",
        "world_size",
        "device",
        "status",
        "reason",
        "throughput",
        "step_time_median_s",
        "step_time_p95_s",
        "speedup",
        "efficiency",
        "scaling",
        "comm_overhead",
        "exposed_comm_s",
        "allreduce_s",
        "grad_bytes",
        "overlap",
    ):
        assert key in doc[0]


def test_an_unbounded_ci_is_shown_not_crashed_on():
    """A step-time CI half-width of 100% or more leaves the throughput CI without an upper end (None)."""
    from rich.console import Console

    from distbench.commands.scale import _ok_detail
    from distbench.output import results_table
    from distbench.stats import rate_ci

    low, high = rate_ci(10.0, 1.2)
    assert high is None
    r = {"strategy": "ddp", "world_size": 2, "status": "ok", "throughput": 10.0, "measured_steps": 160}
    r.update(throughput_ci_low=low, throughput_ci_high=high, stopping={"rule": "max_time"})
    assert _ok_detail(r).startswith("10.00 samples/s, 95% CI 4.55..unbounded, stopped at --max-time")
    console = Console(width=250, record=True)
    console.print(results_table([r], title="t"))
    assert "4.55..unbounded" in console.export_text()
