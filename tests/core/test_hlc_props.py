"""Properties of the hybrid logical clock (PROTOCOL.md §2; ``core/hlc.py``)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from lakesync_platform.core.errors import ClockDriftError
from lakesync_platform.core.hlc import HLC, MAX_COUNTER, MAX_DRIFT_MS, MAX_HLC, decode, encode


class FakeClock:
    """An injected wall clock the test moves by hand."""

    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@given(st.integers(0, 2**48 - 1), st.integers(0, MAX_COUNTER))
def test_encode_decode_round_trip(wall: int, counter: int) -> None:
    ts = encode(wall, counter)
    assert decode(ts) == (wall, counter)
    assert 0 <= ts <= MAX_HLC


def test_encode_extremes_and_order() -> None:
    assert encode(2**48 - 1, MAX_COUNTER) == MAX_HLC
    assert encode(1700000000000, 0) == 111411200000000000
    assert encode(1, 0) > encode(0, MAX_COUNTER)


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=60))
def test_now_is_strictly_monotonic_even_when_the_clock_goes_back(readings: list[int]) -> None:
    clock = FakeClock()
    hlc = HLC(clock)
    issued = []
    for reading in readings:
        clock.now = reading
        issued.append(hlc.now())
        assert decode(issued[-1])[0] >= reading  # never behind the wall clock
    assert all(a < b for a, b in itertools.pairwise(issued))
    assert hlc.state == decode(issued[-1])


ops = st.lists(
    st.tuples(
        st.booleans(),  # True: now(), False: recv()
        st.integers(0, 20_000),  # wall clock reading
        st.integers(-20_000, MAX_DRIFT_MS),  # remote wall relative to the reading
        st.integers(0, MAX_COUNTER),
    ),
    min_size=1,
    max_size=50,
)


@given(ops)
def test_now_and_recv_interleaved_stay_monotonic(
    operations: list[tuple[bool, int, int, int]],
) -> None:
    clock = FakeClock()
    hlc = HLC(clock)
    last = -1
    for is_now, reading, offset, counter in operations:
        clock.now = reading
        if is_now:
            ts = hlc.now()
        else:
            remote = encode(max(reading + offset, 0), counter)
            ts = hlc.recv(remote)
            assert ts > remote
        assert ts > last
        last = ts


@given(st.integers(0, 10**9), st.integers(-(10**6), 10**6), st.integers(0, MAX_COUNTER))
def test_drift_check(physical: int, offset: int, counter: int) -> None:
    remote_wall = physical + offset
    assume(remote_wall >= 0)
    hlc = HLC(FakeClock(physical))
    if offset > MAX_DRIFT_MS:
        with pytest.raises(ClockDriftError):
            hlc.recv(encode(remote_wall, counter))
        assert hlc.state == (0, 0)  # a rejected timestamp changes nothing
    else:
        assert hlc.recv(encode(remote_wall, counter)) > encode(remote_wall, counter)


def test_drift_boundary() -> None:
    hlc = HLC(FakeClock(1000))
    assert hlc.recv(encode(6000, 0)) == encode(6000, 1)  # exactly 5000 ms ahead is fine
    with pytest.raises(ClockDriftError) as info:
        HLC(FakeClock(1000)).recv(encode(6001, 0))
    assert info.value.message == "Remote clock is 5001ms ahead (max drift: 5000ms)"
    assert info.value.code == "CLOCK_DRIFT"


def test_drift_is_measured_against_the_wall_clock_not_the_hlc() -> None:
    clock = FakeClock(1000)
    hlc = HLC(clock)
    hlc.recv(encode(6000, 0))  # the HLC is now at wall 6000
    with pytest.raises(ClockDriftError):
        hlc.recv(encode(6001, 0))  # still 5001 ms ahead of the physical clock


def test_counter_overflow_carries_into_the_wall() -> None:
    hlc = HLC(FakeClock(1000))
    results = [hlc.now() for _ in range(65537)]
    assert decode(results[0]) == (1000, 0)
    assert decode(results[65535]) == (1000, MAX_COUNTER)
    assert decode(results[-1]) == (1001, 0)
    assert hlc.state == (1001, 0)


def test_recv_cases() -> None:
    clock = FakeClock(1000)
    hlc = HLC(clock)
    assert decode(hlc.recv(encode(1000, 7))) == (1000, 8)  # equal walls: max counter + 1
    assert decode(hlc.recv(encode(500, 99))) == (1000, 9)  # remote behind: local counter + 1
    assert decode(hlc.recv(encode(2000, MAX_COUNTER))) == (2001, 0)  # remote ahead + overflow
    clock.now = 3000
    assert decode(hlc.now()) == (3000, 0)
