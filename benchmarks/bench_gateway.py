"""Gateway benchmark: durable push throughput and pull latency, over HTTP, against a real
``lakesync gateway`` (uvicorn) subprocess on 127.0.0.1.

Sections (each is also a script of its own, whose docstring tells the details)
  1. push   — durable push throughput (deltas/s), SQLite and Postgres WAL, 1/4/16 concurrent
              clients, batches of 100 and 500 new-row deltas (4 columns), ``--workers`` 1 and 2,
              a fresh WAL per configuration (``bench_gateway_push.py``).
  2. pull   — pull latency p50/p99 of 1 000-delta pages (``limit=1000``; TS format and
              ``format=stamped``) at random cursors, one sequential client.
  3. scale  — push throughput (4 clients x 500) and pull latency with 10k and with 1M deltas
              already in the WAL, and the slowdown between the two.  (Section 2's numbers are
              the pull measurements of this section; ``bench_gateway_scale.py``, which also
              tells how the WAL is filled and what ``--pg-fill`` does.)
  profile — py-spy profiles of the server under push and pull load (``--profile``;
              ``bench_gateway_profile.py``).

Shared hosts: every row reports the CPU used by other processes ("other cpu"); section 3 keeps
the best of ``--repeat`` rounds per state (full: 2) and ``--wait-quiet S`` waits up to S seconds
before each measurement for the host to calm down.

Code under test: the product packages are copied at start (``--no-snapshot`` to run the live
tree), so a repository edited during the run still yields one coherent measurement; the commit,
a hash of the code and whether the live tree changed meanwhile are stored in the JSON.

Load generation: one forked process per client (http.client, keep-alive), request bodies are
pre-built before the timed window; generator, server and Postgres CPU are all reported (the
machine has 2 cores shared by all three). The harness is ``benchmarks/harness/``.

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_gateway.py --quick      # ~1 minute
    .venv/bin/python benchmarks/bench_gateway.py              # full run, ~8-9 minutes
    .venv/bin/python benchmarks/bench_gateway.py --profile    # + py-spy profiles (~1 min)
    .venv/bin/python benchmarks/bench_gateway.py --profile-only   # py-spy profiles only
Results: a table on stdout and JSON in benchmarks/results/gateway.json (``--out``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import snapshot

snapshot.activate(__name__ == "__main__" and "--no-snapshot" not in sys.argv)

from benchmarks.bench_gateway_profile import PROFILE  # noqa: E402
from benchmarks.bench_gateway_push import PUSH  # noqa: E402
from benchmarks.bench_gateway_scale import SCALE  # noqa: E402
from benchmarks.harness.gateway_run import parser, run  # noqa: E402

SCENARIOS = [PUSH, SCALE, PROFILE]
"""The sections, in the order they run and are reported."""


def main(argv: list[str] | None = None) -> int:
    """Run the sections chosen by ``--sections`` / ``--profile`` / ``--profile-only``."""
    ap = parser(__doc__, SCENARIOS, "gateway.json", quick_help="small run (~1-2 min)")
    ap.add_argument("--sections", default="push,scale", help="push,scale (and/or profile)")
    ap.add_argument("--profile", action="store_true", help="also record py-spy profiles")
    ap.add_argument("--profile-only", action="store_true")
    args = ap.parse_args(argv)
    sections = set(args.sections.split(","))
    if args.profile:
        sections.add("profile")
    if args.profile_only:
        sections = {"profile"}
    return run(args, SCENARIOS, sections)


if __name__ == "__main__":
    sys.exit(main())
