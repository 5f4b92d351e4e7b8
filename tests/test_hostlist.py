"""Slurm host lists: expanded by `scontrol show hostnames` where Slurm is installed, by python-hostlist elsewhere."""

import os

import pytest

from distbench.core.multinode import expand_hostlist


@pytest.fixture
def no_slurm(tmp_path, monkeypatch):
    """A PATH with no scontrol on it, so the python-hostlist parser answers."""
    monkeypatch.setenv("PATH", str(tmp_path))


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("r[1-2]-n[01-02]", ["r1-n01", "r1-n02", "r2-n01", "r2-n02"]),  # the regex gave ['r1-n', 'r2-n', '01-02]']
        ("gpu[01-03,7],login1", ["gpu01", "gpu02", "gpu03", "gpu7", "login1"]),
        ("node[008-011]", ["node008", "node009", "node010", "node011"]),
        ("a[9-10]b,c[1,3]", ["a9b", "a10b", "c1", "c3"]),
        ("rack[1-2]-gpu[7,10],head", ["rack1-gpu7", "rack1-gpu10", "rack2-gpu7", "rack2-gpu10", "head"]),
        ("node9", ["node9"]),
    ],
)
def test_host_lists_expand_like_slurm(no_slurm, text, hosts):
    assert expand_hostlist(text) == hosts


def test_a_malformed_host_list_is_named(no_slurm):
    with pytest.raises(ValueError, match=r"not a Slurm host list: 'n\[1-'"):
        expand_hostlist("n[1-")


def test_scontrol_expands_where_slurm_is_installed(tmp_path, monkeypatch):
    fake = tmp_path / "scontrol"
    fake.write_text('#!/bin/sh\necho "$*" > "$(dirname "$0")/args"\nprintf "x1\\nx2\\n"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert expand_hostlist("x[1-2]") == ["x1", "x2"]
    assert (tmp_path / "args").read_text().split() == ["show", "hostnames", "x[1-2]"]


def test_a_failing_scontrol_falls_back_to_the_parser(tmp_path, monkeypatch):
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\necho 'scontrol: error: no slurm.conf' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert expand_hostlist("r[1-2]-n[01-02]") == ["r1-n01", "r1-n02", "r2-n01", "r2-n02"]
