"""A notification in words, for the channels that speak to people (Slack, email, Apprise)."""

from mldiag_schemas.alerts import Notification


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def detail_lines(notification: Notification) -> list[str]:
    """The facts under the summary, one per line."""
    lines: list[str] = []
    run, event = notification.run, notification.event
    if run is not None:
        shown = f"{run.display_name} ({run.run_id})" if run.display_name else run.run_id
        lines.append(f"Run: {shown}" + (f" · run set {run.run_set}" if run.run_set else ""))
    if event is not None:
        lines.append(f"Event: {event.display_name} [{event.type} · {event.severity}]")
        lines.append(f"Started: {event.start_time.isoformat()}")
        if event.end_time is not None:
            lines.append(f"Resolved: {event.end_time.isoformat()}")
    if notification.time_lost_seconds > 0:
        lines.append(f"Time lost: {_minutes(notification.time_lost_seconds)}")
    cause = notification.top_cause
    if cause is not None:
        lines.append(f"Top cause ({cause.analyzer}): {cause.details}")
        lines += [f"  - {item}" for item in cause.evidence[:5]]
    if notification.grouped:
        lines.append(f"Grouped: {len(notification.grouped)} events")
        lines += [
            f"  - {grouped.display_name} [{grouped.type}]" for grouped in notification.grouped
        ]
    if notification.link:
        lines.append(f"Link: {notification.link}")
    return lines


def plain_text(notification: Notification) -> str:
    """Summary, blank line, details."""
    return "\n".join([notification.summary, "", *detail_lines(notification)])
