"""The follower read benchmark: per page size, the rows read and the CPU per row."""

from __future__ import annotations

import pytest

from esched.services.bench_e2e.reads import run_reads_bench

pytestmark = pytest.mark.postgres


async def test_bench_reads_reads_the_newest_rows_once_per_page_size(pg_server: str) -> None:
    out = await run_reads_bench(pg_server, nodes=100, fill=0.5, rows=600, pages=(50, 600))
    assert out["events"] > 600
    first, second = out["reads"]
    assert (first["page"], first["rows"], first["reads"]) == (50, 600, 12)
    assert (second["page"], second["rows"], second["reads"]) == (600, 600, 1)
    # The client's CPU is this process's; the server's is 0 where its backend is not
    # on this host (a container), never negative.
    assert first["client_us_per_row"] > 0 and first["server_us_per_row"] >= 0
    # Read again as a follower: a payload subscription, timed from its second read.
    follow = out["follow"]
    assert [f["page"] for f in follow] == [50, 600]
    assert (follow[0]["rows"], follow[0]["reads"]) == (550, 11)
    assert follow[0]["client_us_per_row"] > 0 and follow[0]["server_us_per_row"] >= 0
