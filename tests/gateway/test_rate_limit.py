"""The optional per-caller rate limit (429 ``RATE_LIMITED`` with ``Retry-After``) and the
token leeway, on a real app (in process) and a real gateway process (auth off: by address)."""

from __future__ import annotations

from pathlib import Path

import httpx

from lakesync_platform.testing import GatewayProcess
from tests.gateway.conftest import GatewayFactory, assert_error
from tests.helpers import token


def test_callers_are_keyed_by_their_verified_sub(make_gateway: GatewayFactory) -> None:
    g = make_gateway(rate_limit=2)
    gw = "gw_rl_sub"
    # every request here comes from the same address
    assert [g.pull(gw, client_id="c1").status_code for _ in range(2)] == [200, 200]
    assert_error(g.pull(gw, client_id="c1"), 429, "RATE_LIMITED", "Too many requests")
    assert [g.pull(gw, client_id="c2").status_code for _ in range(2)] == [200, 200]
    assert_error(g.pull(gw, client_id="c2"), 429, "RATE_LIMITED")


def test_a_forged_token_spends_nobody_s_budget(make_gateway: GatewayFactory) -> None:
    g = make_gateway(rate_limit=2)
    gw = "gw_rl_forged"
    forged = {"Authorization": "Bearer " + token("c1", gw, secret="attacker-secret")}
    for _ in range(3):
        assert_error(g.pull(gw, headers=forged), 401, "AUTH_ERROR", "Invalid JWT signature")
    assert [g.pull(gw, client_id="c1").status_code for _ in range(2)] == [200, 200]


def test_retry_after_is_within_the_configured_window(make_gateway: GatewayFactory) -> None:
    g = make_gateway(rate_limit=1, rate_window_s=5)
    gw = "gw_rl_window"
    assert g.pull(gw).status_code == 200
    limited = g.pull(gw)
    assert_error(limited, 429, "RATE_LIMITED", "Too many requests")
    assert 1 <= int(limited.headers["retry-after"]) <= 5


def test_off_by_default(make_gateway: GatewayFactory) -> None:
    g = make_gateway()
    assert g.state.limiter is None
    assert all(g.pull("gw_rl_off").status_code == 200 for _ in range(30))


def test_without_auth_callers_are_keyed_by_address(tmp_path: Path) -> None:
    with GatewayProcess(tmp_path, None, extra_args=["--rate-limit", "2"]).start() as proc:
        url = proc.url + "/v1/sync/gw_rl_addr/pull?since=0&clientId=c1"
        with httpx.Client() as http:
            assert [http.get(url).status_code for _ in range(2)] == [200, 200]
            other = http.get(proc.url + "/v1/sync/gw_rl_addr/pull?since=0&clientId=c2")
        body = other.json()
        assert other.status_code == 429 and body["code"] == "RATE_LIMITED", body
        assert 1 <= int(other.headers["retry-after"]) <= 60
        assert httpx.get(proc.url + "/health").status_code == 200  # not a limited route


def test_token_leeway_setting(make_gateway: GatewayFactory) -> None:
    strict = make_gateway()
    lenient = make_gateway(jwt_leeway_s=5)
    gw = "gw_leeway"
    for g, status in ((strict, 401), (lenient, 200)):
        recent = {"Authorization": "Bearer " + token("c1", gw, exp=g.now_ms // 1000 - 3)}
        assert g.pull(gw, headers=recent).status_code == status
    old = {"Authorization": "Bearer " + token("c1", gw, exp=lenient.now_ms // 1000 - 5)}
    assert_error(lenient.pull(gw, headers=old), 401, "AUTH_ERROR", "JWT has expired")
