"""The pacer's token bucket: never more than `burst + rate * T` tokens granted in any window of T
seconds, a full bucket grants `burst` at once, and nobody waits longer than the refill needs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appdb.pacer import BucketState, reserve

rates = st.floats(min_value=0.1, max_value=100.0)
bursts = st.integers(min_value=1, max_value=20)
gaps = st.lists(st.floats(min_value=0.0, max_value=2.0), min_size=1, max_size=60)


def grants(rate: float, burst: int, arrivals: list[float], sizes: list[int]) -> list[tuple[float, int]]:
    state: BucketState | None = None
    granted = []
    for now, size in zip(arrivals, sizes, strict=False):
        state, wait = reserve(state, rate=rate, burst=burst, tokens=size, now=now)
        assert wait >= 0
        granted.append((now + wait, size))
    return granted


def arrival_times(gaps_: list[float]) -> list[float]:
    times, now = [], 1000.0
    for gap in gaps_:
        now += gap
        times.append(now)
    return times


@settings(max_examples=300, deadline=None)
@given(rates, bursts, gaps, st.data())
def test_no_window_gets_more_than_burst_plus_rate_times_its_length(
    rate: float, burst: int, gaps_: list[float], data: st.DataObject
) -> None:
    sizes = data.draw(st.lists(st.integers(1, burst), min_size=len(gaps_), max_size=len(gaps_)))
    granted = sorted(grants(rate, burst, arrival_times(gaps_), sizes))
    for i, (start, _) in enumerate(granted):
        taken = 0
        for end, size in granted[i:]:
            taken += size
            assert taken <= burst + rate * (end - start) + 1e-6


@settings(max_examples=200, deadline=None)
@given(rates, bursts, gaps)
def test_callers_are_served_in_the_order_they_asked(rate: float, burst: int, gaps_: list[float]) -> None:
    granted = [at for at, _ in grants(rate, burst, arrival_times(gaps_), [1] * len(gaps_))]
    assert granted == sorted(granted)


@settings(max_examples=200, deadline=None)
@given(rates, bursts)
def test_a_full_bucket_grants_a_whole_burst_at_once_and_then_paces(rate: float, burst: int) -> None:
    granted = [at for at, _ in grants(rate, burst, [0.0] * (burst + 3), [1] * (burst + 3))]
    assert granted[:burst] == [0.0] * burst
    for index, at in enumerate(granted[burst:], start=1):
        assert at == pytest.approx(index / rate)


@settings(max_examples=200, deadline=None)
@given(rates, bursts, st.floats(min_value=0.0, max_value=1000.0))
def test_an_idle_bucket_refills_to_its_burst_and_no_further(rate: float, burst: int, idle: float) -> None:
    state, _ = reserve(None, rate=rate, burst=burst, tokens=burst, now=0.0)
    state, _ = reserve(state, rate=rate, burst=burst, tokens=0, now=idle)
    assert state.tokens == pytest.approx(min(burst, idle * rate))


def test_a_clock_that_reads_earlier_than_the_bucket_waits_for_the_buckets_time() -> None:
    state, _ = reserve(None, rate=1.0, burst=1, tokens=1, now=100.0)
    _, wait = reserve(state, rate=1.0, burst=1, tokens=1, now=50.0)
    assert wait == pytest.approx(51.0)  # the bucket's time (100) plus one token's refill, from 50


def test_bad_settings_are_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="rate > 0"):
        reserve(None, rate=0.0, burst=1, tokens=1, now=0.0)
    with pytest.raises(ValueError, match="cannot take 3 tokens"):
        reserve(None, rate=1.0, burst=2, tokens=3, now=0.0)
