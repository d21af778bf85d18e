"""The HTML report: lag over time for the worst groups, rebalances over time,
the status table and the run summary, in one self-contained page with
inline SVG plots (no plotting library)."""
from __future__ import annotations

import html
import math
import time
from pathlib import Path

from . import burrow

SEVERITY = {"OK": 0, "WARN": 1, "ERR": 2, "STOP": 3, "STALL": 3, "REWIND": 3}
COLORS = ["#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f"]
STATUS_COLORS = {"OK": "#2ca02c", "WARN": "#ff7f0e", "ERR": "#d62728", "STOP": "#d62728",
                 "STALL": "#d62728", "REWIND": "#9467bd"}
MAX_GROUP_ROWS = 500
BUCKETS = 120


def worst_groups(status_rows: list[dict], n: int = 5) -> list[dict]:
    groups = [r for r in status_rows if r["scope"] == "group"]
    groups.sort(key=lambda r: (-SEVERITY.get(r["status"], 0), -(r["current_lag"] or 0), r["group"]))
    return groups[:n]


def lag_series(events, obs: dict, groups: list[str], span) -> dict[str, list[tuple[int, int]]]:
    """{group: [(time ms, total lag)]} over up to BUCKETS time buckets of `span` (lo, hi ms)."""
    from pyspark.sql import functions as F
    if not groups or span is None:
        return {}
    lo, hi = span
    width = max(1, math.ceil((hi - lo + 1) / BUCKETS))
    commits = events.filter(F.col("group").isin(groups) & ~F.col("tombstone")
                            & (F.col("txn").isNull() | (F.col("txn") == "committed")))
    rows = commits.withColumn("b", F.floor((F.col("commit_timestamp") - F.lit(lo)) / width)) \
        .groupBy("group", "topic", "partition", "b") \
        .agg(F.max_by("committed_offset", "offset").alias("c")).collect()
    hist = {tp: burrow.LogEndHistory(o) for tp, o in obs.items()}
    by_group: dict[str, dict[int, list]] = {}
    for r in rows:
        by_group.setdefault(r["group"], {}).setdefault(int(r["b"]), []).append(
            ((r["topic"], r["partition"]), r["c"]))
    out = {}
    nb = (hi - lo) // width + 1
    for g, buckets in by_group.items():
        last: dict = {}
        series = []
        for b in range(0, nb):  # past a group's last commit too: a stopped group's lag grows
            for tp, c in buckets.get(b, []):
                last[tp] = c
            if not last:
                continue
            t = lo + (b + 1) * width - 1
            total = 0
            for tp, c in last.items():
                h = hist.get(tp)
                end = h.at(t) if h else None
                if end is not None:
                    total += max(0, end - c)
            series.append((t, total))
        out[g] = series
    return out


def rebalance_series(gens) -> tuple[list[tuple[int, int]], int, list[tuple[str, int]]]:
    """([(bucket start ms, generations)], bucket width ms, [(group, generations)] top 10)."""
    pairs = [(r["group"], r["timestamp"]) for r in gens.select("group", "timestamp").collect()]
    if not pairs:
        return [], 1, []
    lo = min(t for _, t in pairs)
    hi = max(t for _, t in pairs)
    width = max(1, math.ceil((hi - lo + 1) / 60))
    buckets: dict[int, int] = {}
    per_group: dict[str, int] = {}
    for g, t in pairs:
        b = lo + (t - lo) // width * width
        buckets[b] = buckets.get(b, 0) + 1
        per_group[g] = per_group.get(g, 0) + 1
    top = sorted(per_group.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    return sorted(buckets.items()), width, top


# ------------------------------------------------------------------ SVG


def _fmt_time(ms: int) -> str:
    return time.strftime("%m-%d %H:%M", time.gmtime(ms / 1000))


def _fmt_num(v: float) -> str:
    if abs(v) >= 1e9:
        return f"{v / 1e9:.1f}G"
    if abs(v) >= 1e6:
        return f"{v / 1e6:.1f}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:.0f}" if v == int(v) else f"{v:.1f}"


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * exp:
            return m * exp
    return 10 * exp


def line_chart(series: dict[str, list[tuple[int, float]]], title: str, width: int = 860,
               height: int = 320) -> str:
    pad_l, pad_r, pad_t, pad_b = 70, 180, 30, 40
    pts = [p for s in series.values() for p in s]
    if not pts:
        return f"<p><em>{html.escape(title)}: no data</em></p>"
    x0 = min(p[0] for p in pts)
    x1 = max(p[0] for p in pts)
    if x1 == x0:
        x1 = x0 + 1
    ymax = _nice_max(max(p[1] for p in pts))
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b

    def sx(x):
        return pad_l + (x - x0) / (x1 - x0) * pw

    def sy(y):
        return pad_t + ph - y / ymax * ph

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{html.escape(title)}">',
             f'<text x="{pad_l}" y="18" font-size="14" font-weight="bold">{html.escape(title)}</text>']
    for i in range(5):
        y = ymax * i / 4
        parts.append(f'<line x1="{pad_l}" x2="{pad_l + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" '
                     f'stroke="#ddd"/><text x="{pad_l - 6}" y="{sy(y) + 4:.1f}" font-size="11" '
                     f'text-anchor="end">{_fmt_num(y)}</text>')
    for i in range(5):
        x = x0 + (x1 - x0) * i / 4
        parts.append(f'<text x="{sx(x):.1f}" y="{pad_t + ph + 16}" font-size="11" '
                     f'text-anchor="middle">{_fmt_time(x)}</text>')
    parts.append(f'<line x1="{pad_l}" x2="{pad_l}" y1="{pad_t}" y2="{pad_t + ph}" stroke="#333"/>'
                 f'<line x1="{pad_l}" x2="{pad_l + pw}" y1="{pad_t + ph}" y2="{pad_t + ph}" '
                 f'stroke="#333"/>')
    for i, (name, s) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        path = " ".join(f"{'M' if j == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}"
                        for j, (x, y) in enumerate(s))
        parts.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="1.8"/>')
        ly = pad_t + 14 + i * 18
        parts.append(f'<rect x="{pad_l + pw + 12}" y="{ly - 9}" width="12" height="3" fill="{color}"/>'
                     f'<text x="{pad_l + pw + 30}" y="{ly - 4}" font-size="11">{html.escape(name)}</text>')
    parts.append(f'<text x="14" y="{pad_t + ph / 2}" font-size="11" transform="rotate(-90 14 '
                 f'{pad_t + ph / 2})" text-anchor="middle">lag (records)</text>')
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(series: list[tuple[int, int]], width_ms: int, title: str, width: int = 860,
              height: int = 260) -> str:
    pad_l, pad_r, pad_t, pad_b = 70, 50, 30, 40
    if not series:
        return f"<p><em>{html.escape(title)}: no generations in the log</em></p>"
    x0 = series[0][0]
    x1 = series[-1][0] + width_ms
    ymax = _nice_max(max(c for _, c in series))
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b

    def sx(x):
        return pad_l + (x - x0) / max(1, x1 - x0) * pw

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{html.escape(title)}">',
             f'<text x="{pad_l}" y="18" font-size="14" font-weight="bold">{html.escape(title)}</text>']
    for i in range(5):
        y = ymax * i / 4
        yy = pad_t + ph - y / ymax * ph
        parts.append(f'<line x1="{pad_l}" x2="{pad_l + pw}" y1="{yy:.1f}" y2="{yy:.1f}" '
                     f'stroke="#ddd"/><text x="{pad_l - 6}" y="{yy + 4:.1f}" font-size="11" '
                     f'text-anchor="end">{_fmt_num(y)}</text>')
    bw = max(1.0, pw * width_ms / max(1, x1 - x0) - 1)
    for x, c in series:
        h = c / ymax * ph
        parts.append(f'<rect x="{sx(x):.1f}" y="{pad_t + ph - h:.1f}" width="{bw:.1f}" '
                     f'height="{h:.1f}" fill="#1f77b4"><title>{_fmt_time(x)}: {c}</title></rect>')
    for i in range(5):
        x = x0 + (x1 - x0) * i / 4
        parts.append(f'<text x="{sx(x):.1f}" y="{pad_t + ph + 16}" font-size="11" '
                     f'text-anchor="middle">{_fmt_time(x)}</text>')
    parts.append(f'<line x1="{pad_l}" x2="{pad_l + pw}" y1="{pad_t + ph}" y2="{pad_t + ph}" '
                 f'stroke="#333"/></svg>')
    return "".join(parts)


# ------------------------------------------------------------------ page


def _badge(status: str) -> str:
    color = STATUS_COLORS.get(status, "#555")
    return f'<span class="b" style="background:{color}">{html.escape(status)}</span>'


def status_table(status_rows: list[dict]) -> str:
    groups = [r for r in status_rows if r["scope"] == "group"]
    groups.sort(key=lambda r: (-SEVERITY.get(r["status"], 0), -(r["current_lag"] or 0), r["group"]))
    parts_by_group: dict[str, list[dict]] = {}
    for r in status_rows:
        if r["scope"] == "partition":
            parts_by_group.setdefault(r["group"], []).append(r)
    out = ['<table><tr><th>group</th><th>status</th><th>total lag</th><th>partitions</th>'
           '<th>complete</th><th>max lag partition</th><th>partitions not OK</th></tr>']
    for g in groups[:MAX_GROUP_ROWS]:
        bad = sorted((p for p in parts_by_group.get(g["group"], []) if p["status"] != "OK"),
                     key=lambda p: (p["topic"], p["partition"]))
        bad_txt = ", ".join(f'{html.escape(p["topic"])}/{p["partition"]} {_badge(p["status"])} '
                            f'(lag {p["current_lag"]})' for p in bad[:8])
        if len(bad) > 8:
            bad_txt += f", ... {len(bad) - 8} more"
        out.append(
            f'<tr><td>{html.escape(g["group"])}</td><td>{_badge(g["status"])}</td>'
            f'<td class="n">{g["current_lag"] or 0:,}</td><td class="n">{g["partitions"]}</td>'
            f'<td class="n">{g["complete"]:.2f}</td>'
            f'<td>{html.escape(str(g["max_lag_topic"]))}/{g["max_lag_partition"]}</td>'
            f'<td>{bad_txt}</td></tr>')
    out.append("</table>")
    if len(groups) > MAX_GROUP_ROWS:
        out.append(f"<p>{len(groups) - MAX_GROUP_ROWS} more groups (all OK or less severe) are "
                   f"in the status table.</p>")
    return "".join(out)


def render(summary: dict, status_rows: list[dict], lag: dict, rebalances, as_of: int) -> str:
    series, width_ms, top = rebalances
    bad = summary.get("bad_input", {})
    bad_html = ("<p>none</p>" if not bad else
                "<ul>" + "".join(f"<li>{html.escape(k)}: {v}</li>" for k, v in bad.items())
                + "</ul><details><summary>details</summary><ul>"
                + "".join(f"<li>partition {d['log_partition']}, segment {d['segment']}, offset "
                          f"{d['offset']}: {html.escape(d['error'])}: "
                          f"{html.escape(str(d['error_detail']))}</li>"
                          for d in summary.get("bad_input_details", [])) + "</ul></details>")
    counts = summary.get("statuses", {})
    by_type = "".join(f"<tr><td>{html.escape(k)}</td><td class='n'>{v:,}</td></tr>"
                      for k, v in summary.get("records_by_type", {}).items())
    tables = "".join(f"<tr><td>{html.escape(k)}</td><td class='n'>{v:,}</td></tr>"
                     for k, v in summary.get("table_rows", {}).items())
    top_html = "".join(f"<tr><td>{html.escape(g)}</td><td class='n'>{c}</td></tr>" for g, c in top)
    lag_chart = line_chart(lag, "Lag over time, worst groups (sum over partitions)")
    reb_chart = bar_chart(series, width_ms,
                          f"Generations / epochs started per {_duration(width_ms)} (all groups)")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>kcoord consumer lag report</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; margin: 8px 0 20px; font-size: 13px; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; }}
td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
.b {{ color: white; border-radius: 3px; padding: 0 5px; font-size: 12px; }}
</style></head><body>
<h1>Consumer lag and group health</h1>
<p>Evaluated as of {html.escape(summary.get('as_of_utc', str(as_of)))} over
{html.escape(summary.get('data_dir', ''))}. Group statuses: {html.escape(str(counts.get('groups', {})))};
partition statuses: {html.escape(str(counts.get('partitions', {})))}.</p>
<h2>Lag</h2>{lag_chart}
<h2>Rebalances</h2>{reb_chart}
<table><tr><th>most generations</th><th>count</th></tr>{top_html}</table>
<h2>Status (Burrow's rules)</h2>{status_table(status_rows)}
<h2>Run summary</h2>
<table><tr><th>records</th><th>count</th></tr>{by_type}
<tr><td>tombstones</td><td class='n'>{summary.get('tombstones', 0):,}</td></tr>
<tr><td>control records</td><td class='n'>{summary.get('control_records', 0):,}</td></tr></table>
<h3>Bad input (skipped, not fatal)</h3>{bad_html}
<table><tr><th>table</th><th>rows</th></tr>{tables}</table>
</body></html>
"""


def _duration(ms: int) -> str:
    for unit, size in (("day", 86400000), ("h", 3600000), ("min", 60000), ("s", 1000)):
        if ms >= size:
            return f"{ms / size:.3g} {unit}"
    return f"{ms} ms"


def write_report(out_dir: Path, events, obs: dict, status_rows: list[dict], gens,
                 summary: dict, as_of: int, span=None) -> Path:
    """span: (first, last) commit timestamp of the whole log, the lag plot's time range."""
    worst = [g["group"] for g in worst_groups(status_rows)]
    lag = lag_series(events, obs, worst, span)
    lag = {g: lag[g] for g in worst if g in lag}
    page = render(summary, status_rows, lag, rebalance_series(gens), as_of)
    path = Path(out_dir) / "report.html"
    path.write_text(page)
    return path
