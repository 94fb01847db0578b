"""Checks the amnet-bench tests share (tests/test_bench_*.py)."""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from amnet_bench import SUITES
from amnet_bench._report import markdown


def check_tables(res: dict[str, Any], per_result: bool = False) -> str:
    """A suite's result with several tables: the tables in the order of its sections, the
    first one also as ``table``, ``notes`` every table's notes; every table with rows, each
    as wide as its columns (with ``per_result``, one row per result of its section, and
    no other result); the Markdown report with every title and every note. Returns the
    Markdown."""
    tables = res["tables"]
    assert [t["section"] for t in tables] == res["config"]["sections"]
    assert res["table"] == {"columns": tables[0]["columns"], "rows": tables[0]["rows"]}
    assert res["notes"] == [n for t in tables for n in t["notes"]]
    for t in tables:
        assert t["rows"] and all(len(r) == len(t["columns"]) for r in t["rows"])
        if per_result:
            assert len(t["rows"]) == sum(r["section"] == t["section"] for r in res["results"])
    if per_result:
        assert len(res["results"]) == sum(len(t["rows"]) for t in tables)
    text = markdown(res)
    assert text.startswith(f"## amnet-bench {res['suite']}")
    assert all(f"### {t['title']}" in text for t in tables)
    assert all(f"- {n}" in text for n in res["notes"])
    return text


def check_figures(res: dict[str, Any]) -> None:
    """Every figure of a suite's result: a file named as one of the plots the suite
    declares (``<part>`` for a part that varies), and series to draw."""
    plots = SUITES[res["suite"]].plots
    for fig in res.get("figures", ()):
        assert any(fnmatch.fnmatch(fig["file"], re.sub("<[^>]+>", "*", name))
                   for name in plots), fig["file"]
        assert fig["series"]
