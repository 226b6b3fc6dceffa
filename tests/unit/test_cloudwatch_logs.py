"""LogStreamMerger against moto's CloudWatch Logs: discovery, pagination, merge order, exactly-once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from smlaunch.sdk.backends.sagemaker.cloudwatch import LOG_GROUP, LogStreamMerger, host_of_stream
from tests.functional._sagemaker_moto import FakeSageMaker, fake_aws

JOB = "pytorch-training-2026-11-22-02-27-47-316"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSageMaker]:
    with fake_aws(monkeypatch, role=False) as fake:
        yield fake


def lines(merger: LogStreamMerger) -> list[str]:
    return [event.line() for event in merger.poll()]


def test_host_of_stream() -> None:
    assert host_of_stream(JOB, f"{JOB}/algo-2-1700000000") == "algo-2"
    assert host_of_stream(JOB, f"{JOB}/algo-12") == "algo-12"
    assert host_of_stream(JOB, f"{JOB}/custom") == "custom"


def test_three_hosts_interleaved_over_several_pages_merge_in_time_order(aws: FakeSageMaker) -> None:
    expected = aws.interleaved(JOB, ["algo-1", "algo-2", "algo-3"], lines_per_host=7)
    # Another job whose name starts the same must not leak in (the prefix ends with "/").
    aws.log(JOB + "-2", "algo-1", "other job")
    merger = LogStreamMerger(aws.logs, JOB, streams_page_size=2, events_page_size=3)

    assert merger.discover() == [f"{JOB}/algo-{n}-1700000000" for n in (1, 2, 3)]
    assert lines(merger) == expected
    assert lines(merger) == []  # nothing new, nothing repeated


def test_new_events_are_returned_once_even_when_they_share_a_millisecond(aws: FakeSageMaker) -> None:
    (stamp,) = aws.log(JOB, "algo-1", "first")
    aws.log(JOB, "algo-2", "second", at=stamp)
    merger = LogStreamMerger(aws.logs, JOB, events_page_size=2)
    merger.discover()
    assert lines(merger) == ["[algo-1] first", "[algo-2] second"]

    # Five more lines in the very same millisecond: the SDK's (startTime, skip) position would lose or
    # repeat some of these; forward tokens return each exactly once.
    aws.log(JOB, "algo-1", *[f"same ms {i}" for i in range(5)], at=stamp)
    aws.log(JOB, "algo-2", "later")
    assert lines(merger) == [f"[algo-1] same ms {i}" for i in range(5)] + ["[algo-2] later"]
    assert lines(merger) == []


def test_missing_log_group_is_waited_for_not_an_error(aws: FakeSageMaker) -> None:
    merger = LogStreamMerger(aws.logs, JOB)
    assert merger.discover() == []
    assert merger.group_exists is False
    assert lines(merger) == []

    aws.ensure_group()  # the group exists before any stream of this job
    assert merger.discover() == []
    assert merger.group_exists is True

    aws.log(JOB, "algo-1", "hello\n")
    assert merger.discover() == [f"{JOB}/algo-1-1700000000"]
    assert lines(merger) == ["[algo-1] hello"]


def test_more_than_fifty_streams_are_all_discovered_in_host_order(aws: FakeSageMaker) -> None:
    hosts = [f"algo-{n}" for n in range(1, 56)]
    for host in hosts:
        aws.log(JOB, host, f"up on {host}")
    merger = LogStreamMerger(aws.logs, JOB)  # pages of 50: the SDK's loop would never end here

    merger.discover()
    assert [host_of_stream(JOB, name) for name in merger.streams] == hosts  # algo-10 after algo-9
    assert lines(merger) == [f"[{host}] up on {host}" for host in hosts]


def test_stream_that_appears_later_is_read_from_its_start(aws: FakeSageMaker) -> None:
    aws.log(JOB, "algo-1", "a1")
    merger = LogStreamMerger(aws.logs, JOB)
    merger.discover()
    assert lines(merger) == ["[algo-1] a1"]

    aws.log(JOB, "algo-2", "b1", "b2")
    aws.log(JOB, "algo-1", "a2")
    assert merger.discover() == [f"{JOB}/algo-2-1700000000"]
    assert lines(merger) == ["[algo-2] b1", "[algo-2] b2", "[algo-1] a2"]


def test_log_group_name_is_sagemakers() -> None:
    assert LOG_GROUP == "/aws/sagemaker/TrainingJobs"
