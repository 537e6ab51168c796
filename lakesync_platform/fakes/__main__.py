"""Serve a fake API in a process of its own, with generated records (the benchmarks' form)::

    python -m lakesync_platform.fakes jira --records 20000 [--port 0]
    python -m lakesync_platform.fakes salesforce --records 20000 [--port 0]

Prints one JSON line — ``{"url", …credentials}`` — once it listens, then serves until SIGTERM
or SIGINT. Jira: ``--records`` issues with one comment each over three projects; Salesforce:
``--records`` records split over Account, Contact, Opportunity and Lead.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from .jira import FakeJira
from .salesforce import FakeSalesforce
from .server import FakeServer


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, fill the fake, serve."""
    parser = argparse.ArgumentParser(prog="python -m lakesync_platform.fakes")
    parser.add_argument("api", choices=["jira", "salesforce"])
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    fake: FakeServer
    info: dict[str, Any]
    if args.api == "jira":
        jira = FakeJira(port=args.port)
        jira.generate(args.records)
        fake, info = jira, {"email": jira.email, "token": jira.token}
    else:
        org = FakeSalesforce(port=args.port, api_limit=10_000_000)
        org.generate(max(1, args.records // 4))
        info = {
            "client_id": org.client_id,
            "client_secret": org.client_secret,
            "username": org.username,
            "password": org.password,
        }
        fake = org
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    fake.start()
    print(json.dumps({"url": fake.url, **info}), flush=True)
    try:
        while not stop.wait(0.2):
            pass
    finally:
        fake.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
