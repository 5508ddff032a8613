"""The audit report as text."""

from __future__ import annotations

from typing import Any

from esched.schemas.quantity import human_pairs
from esched.services.store.snapshots import format_anomalies


def format_report(report: dict[str, Any]) -> str:
    """The audit report as a human-readable table."""
    lines = [
        f"audit     {'OK' if report['ok'] else 'VIOLATIONS'}",
        f"position  {report['position']}",
    ]
    lines.append("checked   " + "  ".join(f"{k}={v}" for k, v in report["checked"].items()))
    if report["violations"]:
        lines.append("by kind   " + "  ".join(f"{k}={v}" for k, v in report["by_kind"].items()))
        lines.append(f"  {'POSITION':>10}  {'KIND':<16}DETAIL")
        for v in report["violations"]:
            lines.append(f"  {v['position']:>10}  {v['kind']:<16}{v['detail']}")
    lines += format_anomalies(report.get("anomalies") or {})
    if report.get("queues"):
        lines.append(f"  {'QUEUE':<24}{'STATE':<10}{'SHARE':>8}  ALLOCATED/FAIR SHARE")
        for name, q in report["queues"].items():
            res = human_pairs(q.get("allocated") or {}, q.get("fairShare") or {})
            lines.append(
                f"  {q.get('path', name):<24}{q.get('state', ''):<10}"
                f"{q.get('share', 0.0):>8.3f}  {res}"
            )
    return "\n".join(lines)
