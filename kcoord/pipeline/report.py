"""The HTML report: lag over time for the worst groups, rebalances over time,
the status table and the run summary, in one self-contained page with
inline SVG plots (no plotting library)."""
from __future__ import annotations

import html
import math
import time
from pathlib import Path

from ..observe import burrow_rules as burrow

SEVERITY = {"OK": 0, "WARN": 1, "ERR": 2, "STOP": 3, "STALL": 3, "REWIND": 3}
STATUS_COLORS = {"OK": "#2ca02c", "WARN": "#ff7f0e", "ERR": "#d62728", "STOP": "#d62728",
                 "STALL": "#d62728", "REWIND": "#9467bd"}
MAX_GROUP_ROWS = 500
BUCKETS = 120


def bucket_times(span) -> list[int]:
    """The times lag_series evaluates at: the end of each bucket of `span`."""
    lo, hi = span
    width = max(1, math.ceil((hi - lo + 1) / BUCKETS))
    return [lo + (b + 1) * width - 1 for b in range((hi - lo) // width + 1)]


def spark_buckets(events):
    """lag_series' bucket rows from commit events (a Spark DataFrame): ->
    f(groups, lo, width) -> [(group, topic, partition, bucket, committed offset of
    the bucket's last applied commit)]."""
    def buckets(groups: list[str], lo: int, width: int) -> list[tuple]:
        from pyspark.sql import functions as F
        commits = events.filter(F.col("group").isin(groups) & ~F.col("tombstone")
                                & (F.col("txn").isNull() | (F.col("txn") == "committed")))
        rows = commits.withColumn("b", F.floor((F.col("commit_timestamp") - F.lit(lo)) / width)) \
            .groupBy("group", "topic", "partition", "b") \
            .agg(F.max_by("committed_offset", "offset").alias("c")).collect()
        return [(r["group"], r["topic"], r["partition"], int(r["b"]), r["c"]) for r in rows]
    return buckets


def arrow_buckets(read):
    """lag_series' bucket rows (as spark_buckets) from commits-table rows read with
    pyarrow: read(groups) -> pa.Table of those groups' commits (group, topic,
    partition, log_offset, committed_offset, commit_timestamp, txn).  A group's
    commits sit in one log partition, so its log offsets order them."""
    def buckets(groups: list[str], lo: int, width: int) -> list[tuple]:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        t = read(groups)
        txn = t["txn"]
        applied = pc.or_(pc.is_null(txn), pc.fill_null(pc.equal(txn, "committed"), False))
        t = t.filter(pc.and_(pc.and_(applied, pc.is_valid(t["commit_timestamp"])),
                             pc.is_in(t["group"], pa.array(groups, pa.string()))))
        if len(t) == 0:
            return []
        b = np.floor_divide(t["commit_timestamp"].to_numpy() - lo, width)
        names = ["group", "topic", "partition", "b"]
        t = t.append_column("b", pa.array(b, pa.int64())).sort_by(
            [(c, "ascending") for c in names + ["log_offset"]])
        last = np.zeros(len(t), bool)  # the last row (newest commit) of each key
        last[-1] = True
        for c in names:
            k = t[c].to_numpy(zero_copy_only=False)
            last[:-1] |= k[1:] != k[:-1]
        rows = t.filter(pa.array(last)).select(names + ["committed_offset"]).to_pylist()
        return [tuple(r.values()) for r in rows]
    return buckets


def lag_series(buckets, obs: dict, groups: list[str], span) -> dict[str, list[tuple[int, int]]]:
    """{group: [(time ms, total lag)]} over up to BUCKETS time buckets of `span` (lo, hi ms);
    buckets: spark_buckets or arrow_buckets."""
    if not groups or span is None:
        return {}
    lo, hi = span
    width = max(1, math.ceil((hi - lo + 1) / BUCKETS))
    hist = {tp: burrow.LogEndHistory(o) for tp, o in obs.items()}
    by_group: dict[str, dict[int, list]] = {}
    for g, topic, partition, b, c in buckets(groups, lo, width):
        by_group.setdefault(g, {}).setdefault(b, []).append(((topic, partition), c))
    out = {}
    nb = (hi - lo) // width + 1
    for g, per_bucket in by_group.items():
        last: dict = {}
        series = []
        for b in range(0, nb):  # past a group's last commit too: a stopped group's lag grows
            for tp, c in per_bucket.get(b, []):
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


def rebalance_series(pairs: list[tuple[str, int]], live_groups: set | None = None
                     ) -> tuple[list[tuple[int, int]], int, list[tuple[str, int]]]:
    """(group, timestamp) of each generation -> ([(bin start ms, generations)], bin width
    ms, [(group, generations)] top 10).

    Bins have a round width (1 min, 5 min, 1 h, 1 day, ...) aligned on UTC, at
    most MAX_BINS of them.  Groups not in `live_groups` (deleted, or all their
    offsets gone) are left out."""
    if live_groups is not None:
        pairs = [(g, t) for g, t in pairs if g in live_groups]
    if not pairs:
        return [], 60_000, []
    lo = min(t for _, t in pairs)
    hi = max(t for _, t in pairs)
    width = round_width(hi - lo + 1, MAX_BINS)
    buckets: dict[int, int] = {}
    per_group: dict[str, int] = {}
    for g, t in pairs:
        b = t // width * width
        buckets[b] = buckets.get(b, 0) + 1
        per_group[g] = per_group.get(g, 0) + 1
    top = sorted(per_group.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    first, last = lo // width * width, hi // width * width
    return [(b, buckets.get(b, 0)) for b in range(first, last + width, width)], width, top


# ------------------------------------------------------------ formatting

MAX_BINS = 60
ROUND_MS = [1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000,
            900_000, 1_800_000, 3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000,
            86_400_000, 172_800_000, 604_800_000, 2_592_000_000]


def round_width(span_ms: int, most: int) -> int:
    """The smallest round interval that cuts span_ms into at most `most` pieces."""
    for w in ROUND_MS:
        if span_ms / w <= most:
            return w
    return ROUND_MS[-1] * max(1, math.ceil(span_ms / ROUND_MS[-1] / most))


def fmt_utc(ms: int | None, seconds: bool = False) -> str:
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M",
                         time.gmtime(ms / 1000)) + " UTC"


def fmt_duration(seconds: float | None) -> str:
    """3 h 12 min, 45 s, 2 d 4 h; '-' when unknown."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 and s < 600 else f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _fmt_num(v: float) -> str:
    if abs(v) >= 1e9:
        return f"{v / 1e9:.3g}G"
    if abs(v) >= 1e6:
        return f"{v / 1e6:.3g}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:.3g}k"
    return f"{v:,.0f}" if v == int(v) else f"{v:.1f}"


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * exp:
            return m * exp
    return 10 * exp


def _int_ticks(vmax: int, most: int = 5) -> tuple[int, int]:
    """(step, top) for a whole-number axis from 0 with at most `most` steps."""
    vmax = max(1, vmax)
    step = 1
    for m in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000):
        step = m
        if math.ceil(vmax / m) <= most:
            break
    else:
        step = int(_nice_max(vmax / most))
    return step, step * math.ceil(vmax / step)


def _time_ticks(x0: int, x1: int, most: int = 6) -> list[int]:
    w = round_width(max(1, x1 - x0), most)
    first = -(-x0 // w) * w
    return list(range(first, x1 + 1, w))


def _time_axis(ticks: list[int], sx, y: float) -> str:
    """Tick labels: the time on each, the date under the first and wherever it changes."""
    out = []
    last_day = None
    for t in ticks:
        day = time.strftime("%Y-%m-%d", time.gmtime(t / 1000))
        hm = time.strftime("%H:%M", time.gmtime(t / 1000))
        x = sx(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y - 14}" y2="{y - 10}" stroke="#333"/>'
                   f'<text x="{x:.1f}" y="{y}" font-size="11" text-anchor="middle">{hm}</text>')
        if day != last_day:
            out.append(f'<text x="{x:.1f}" y="{y + 13}" font-size="10" fill="#555" '
                       f'text-anchor="middle">{day}</text>')
            last_day = day
    return "".join(out)


# ------------------------------------------------------------------ SVG


def _nice_ticks(vmax: float, most: int = 5) -> tuple[float, float]:
    """(step, top) of an axis from 0: a 1-2-5 step, at most `most` steps."""
    if vmax <= 0:
        return 1.0, 1.0
    raw = vmax / most
    exp = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        step = m * exp
        if vmax / step <= most:
            break
    step = max(step, 1.0)
    return step, step * math.ceil(vmax / step)


def lag_plot(name: str, series: list[tuple[int, float]], status: str, x0: int, x1: int,
             width: int = 400, height: int = 190) -> str:
    """One group's total lag over time (its own scale), its status in the title."""
    pad_l, pad_r, pad_t, pad_b = 58, 24, 12, 34  # room for the last tick's label
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b
    if x1 <= x0:
        x1 = x0 + 1
    step, ymax = _nice_ticks(max((y for _, y in series), default=0))

    def sx(x):
        return pad_l + (x - x0) / (x1 - x0) * pw

    def sy(y):
        return pad_t + ph - y / ymax * ph

    color = STATUS_COLORS.get(status, "#1f77b4")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="lag of {html.escape(name)}">']
    for i in range(int(round(ymax / step)) + 1):
        y = step * i
        parts.append(f'<line x1="{pad_l}" x2="{pad_l + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" '
                     f'stroke="#e3e3e3"/><text x="{pad_l - 5}" y="{sy(y) + 4:.1f}" '
                     f'font-size="10" text-anchor="end">{_fmt_num(y)}</text>')
    parts.append(_time_axis(_time_ticks(x0, x1, 5), sx, pad_t + ph + 15))
    parts.append(f'<line x1="{pad_l}" x2="{pad_l}" y1="{pad_t}" y2="{pad_t + ph}" stroke="#333"/>'
                 f'<line x1="{pad_l}" x2="{pad_l + pw}" y1="{pad_t + ph}" y2="{pad_t + ph}" '
                 f'stroke="#333"/>')
    if series:
        path = " ".join(f"{'M' if j == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}"
                        for j, (x, y) in enumerate(series))
        parts.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
    parts.append(f'<text x="11" y="{pad_t + ph / 2}" font-size="10" transform="rotate(-90 11 '
                 f'{pad_t + ph / 2})" text-anchor="middle">records</text>')
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(series: list[tuple[int, int]], width_ms: int, title: str, width: int = 900,
              height: int = 260) -> str:
    pad_l, pad_r, pad_t, pad_b = 58, 20, 30, 40
    if not series:
        return f"<p><em>{html.escape(title)}: no generations in the log</em></p>"
    x0 = series[0][0]
    x1 = series[-1][0] + width_ms
    step, top = _int_ticks(max(c for _, c in series))
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b

    def sx(x):
        return pad_l + (x - x0) / max(1, x1 - x0) * pw

    def sy(y):
        return pad_t + ph - y / top * ph

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{html.escape(title)}">',
             f'<text x="{pad_l}" y="18" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    for y in range(0, top + 1, step):
        parts.append(f'<line x1="{pad_l}" x2="{pad_l + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" '
                     f'stroke="#e3e3e3"/><text x="{pad_l - 6}" y="{sy(y) + 4:.1f}" '
                     f'font-size="11" text-anchor="end">{y:,}</text>')
    bw = max(1.0, pw * width_ms / max(1, x1 - x0) - 1)
    for x, c in series:
        if c:
            parts.append(f'<rect x="{sx(x):.1f}" y="{sy(c):.1f}" width="{bw:.1f}" '
                         f'height="{sy(0) - sy(c):.1f}" fill="#1f77b4"><title>'
                         f'{fmt_utc(x)}: {c}</title></rect>')
    parts.append(_time_axis(_time_ticks(x0, x1), sx, pad_t + ph + 17))
    parts.append(f'<line x1="{pad_l}" x2="{pad_l + pw}" y1="{pad_t + ph}" y2="{pad_t + ph}" '
                 f'stroke="#333"/></svg>')
    return "".join(parts)


# ------------------------------------------------------------------ page


def _badge(status: str) -> str:
    color = STATUS_COLORS.get(status, "#555")
    return f'<span class="b" style="background:{color}">{html.escape(status)}</span>'


def status_counts(counts: dict) -> str:
    """{"ERR": 3, "OK": 20} -> badges with counts, most severe first."""
    if not counts:
        return "none"
    order = sorted(counts, key=lambda s: (-SEVERITY.get(s, 0), s))
    return " ".join(f"{_badge(s)}&nbsp;{counts[s]:,}" for s in order)


def status_table(status_rows: list[dict]) -> str:
    groups = [r for r in status_rows if r["scope"] == "group"]
    groups.sort(key=lambda r: (-SEVERITY.get(r["status"], 0), -(r["current_lag"] or 0), r["group"]))
    parts_by_group: dict[str, list[dict]] = {}
    for r in status_rows:
        if r["scope"] == "partition":
            parts_by_group.setdefault(r["group"], []).append(r)
    out = ['<table><tr><th>group</th><th>status</th><th>lag (records)</th><th>time lag</th>'
           '<th>last commit</th><th>partitions</th>'
           '<th title="Burrow\'s complete: the share of partitions whose window holds a full '
           'set of commits">window fill</th><th>most lag</th>'
           '<th>partitions not OK</th></tr>']
    for g in groups[:MAX_GROUP_ROWS]:
        bad = sorted((p for p in parts_by_group.get(g["group"], []) if p["status"] != "OK"),
                     key=lambda p: (p["topic"], p["partition"]))
        bad_txt = ", ".join(f'<span class="w">{html.escape(p["topic"])}/{p["partition"]} '
                            f'{_badge(p["status"])} (lag {p["current_lag"] or 0:,})</span>'
                            for p in bad[:6])
        if len(bad) > 6:
            bad_txt += f", and {len(bad) - 6} more"
        out.append(
            f'<tr><td>{html.escape(g["group"])}</td><td>{_badge(g["status"])}</td>'
            f'<td class="n">{g["current_lag"] or 0:,}</td>'
            f'<td class="n">{fmt_duration(g.get("time_lag_seconds"))}</td>'
            f'<td class="t">{fmt_utc(g.get("last_commit_timestamp"))}</td>'
            f'<td class="n">{g["partitions"]}</td><td class="n">{g["complete"]:.0%}</td>'
            + (f'<td class="w">{html.escape(str(g["max_lag_topic"]))}/{g["max_lag_partition"]}'
               '</td>' if (g["current_lag"] or 0) > 0 and g.get("max_lag_topic") is not None
               else '<td class="w">-</td>')
            + f'<td>{bad_txt}</td></tr>')
    out.append("</table>")
    out.append('<p class="note">Window fill is Burrow\'s <code>complete</code>: the share of '
               "the group's partitions whose window already holds the full number of commits "
               "Burrow evaluates (<code>--window</code>, 10 by default); below 100% some "
               "statuses rest on fewer commits. Most lag names the partition with the largest "
               "lag, when there is any.</p>")
    if len(groups) > MAX_GROUP_ROWS:
        out.append(f"<p>{len(groups) - MAX_GROUP_ROWS:,} more groups (all OK or less severe) are "
                   f"in the status table.</p>")
    return "".join(out)


def lag_section(lag: dict, status_rows: list[dict], span, live_ends: bool) -> str:
    groups = {r["group"]: r for r in status_rows if r["scope"] == "group"}
    plotted = [g for g in lag if g in groups]
    if not plotted or span is None:
        return "<p><em>No lag to plot.</em></p>"
    x0, x1 = span
    cells = []
    why: dict[str, set] = {}
    for r in status_rows:
        if r["scope"] == "partition" and r["status"] != "OK":
            why.setdefault(r["group"], set()).add(r["status"])
    single = []
    for name in plotted:
        g = groups[name]
        if len(lag[name]) < 2:  # one observation draws no line: listed below instead
            single.append(name)
            continue
        causes = "".join(" " + _badge(c) for c in sorted(why.get(name, ()))
                         if c != g["status"])
        cells.append(
            f'<div class="cell"><div class="ct">{_badge(g["status"])}{causes} '
            f'<b>{html.escape(name)}</b>'
            f'<span class="cs">lag {g["current_lag"] or 0:,} records, '
            f'{fmt_duration(g.get("time_lag_seconds"))}</span></div>'
            f'{lag_plot(name, lag[name], g["status"], x0, x1)}</div>')
    if single:
        cells.append('<div class="cell"><div class="ct">One observation only (no chart): '
                     + ", ".join(f'{_badge(groups[n]["status"])} <b>{html.escape(n)}</b> lag '
                                 f'{groups[n]["current_lag"] or 0:,}' for n in single)
                     + '</div></div>')
    note = ("Lag is the sum over the group's partitions of log end minus committed offset, "
            "at each point in time" + (" (past log ends from ListOffsets by timestamp)."
                                       if live_ends else "."))
    return f'<p class="note">{note} Each plot has its own scale.</p>' \
           f'<div class="grid">{"".join(cells)}</div>'


def render(summary: dict, status_rows: list[dict], lag: dict, rebalances, as_of: int,
           span=None, live_ends: bool = False) -> str:
    series, width_ms, top = rebalances
    bad = summary.get("bad_input", {})
    bad_html = ("<p>none</p>" if not bad else
                "<ul>" + "".join(f"<li>{html.escape(k)}: {v:,}</li>" for k, v in bad.items())
                + "</ul><details><summary>details</summary><ul>"
                + "".join(f"<li>log partition {d['log_partition']}, segment {d['segment']}, "
                          f"offset {d['offset']}: {html.escape(d['error'])}: "
                          f"{html.escape(str(d['error_detail']))}</li>"
                          for d in summary.get("bad_input_details", [])) + "</ul></details>")
    counts = summary.get("statuses", {})
    by_type = "".join(f"<tr><td>{html.escape(k)}</td><td class='n'>{v:,}</td></tr>"
                      for k, v in summary.get("records_by_type", {}).items())
    tables = "".join(f"<tr><td>{html.escape(k)}</td><td class='n'>{v:,}</td></tr>"
                     for k, v in summary.get("table_rows", {}).items())
    top_html = "".join(f"<tr><td>{html.escape(g)}</td><td class='n'>{c:,}</td></tr>"
                       for g, c in top)
    reb_chart = bar_chart(series, width_ms,
                          f"Generations / epochs started per {_duration(width_ms)} "
                          f"(live groups, time in UTC)")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>kcoord consumer lag report</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; max-width: 1360px; }}
table {{ border-collapse: collapse; margin: 8px 0 20px; font-size: 13px; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }}
th {{ background: #f4f4f4; }}
td.n {{ text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }}
td.t, td.w, span.w {{ white-space: nowrap; }}
.b {{ color: white; border-radius: 3px; padding: 0 5px; font-size: 12px; font-weight: bold; }}
.grid {{ display: flex; flex-wrap: wrap; gap: 10px 18px; }}
.cell {{ border: 1px solid #ddd; padding: 6px; }}
.ct {{ font-size: 13px; margin-bottom: 2px; }}
.cs {{ color: #555; margin-left: 8px; font-size: 12px; }}
.note {{ color: #555; font-size: 13px; }}
.summary td {{ border: none; padding: 2px 10px 2px 0; font-size: 14px; }}
</style></head><body>
<h1>Consumer lag and group health</h1>
<table class="summary">
<tr><td>Evaluated at</td><td><b>{html.escape(fmt_utc(as_of, seconds=True))}</b></td></tr>
<tr><td>Source</td><td>{html.escape(str(summary.get('source') or summary.get('data_dir', '')))}</td></tr>
<tr><td>Groups</td><td>{status_counts(counts.get('groups', {}))}</td></tr>
<tr><td>Partitions</td><td>{status_counts(counts.get('partitions', {}))}</td></tr>
</table>
<h2>Lag of the groups that need attention</h2>{lag_section(lag, status_rows, span, live_ends)}
<h2>Status (Burrow's rules)</h2>
<p class="note">Time lag: how long the oldest record a group has not consumed has waited.
Deleted groups and partitions whose offsets were deleted or expired are not listed.</p>
{status_table(status_rows)}
<h2>Share groups</h2>{share_section(summary.get("share_partitions", []))}
<h2>Rebalances</h2>{reb_chart}
<table><tr><th>most generations</th><th>count</th></tr>{top_html}</table>
<h2>Run summary</h2>
<table><tr><th>records</th><th>count</th></tr>{by_type}
<tr><td>tombstones</td><td class='n'>{summary.get('tombstones', 0):,}</td></tr>
<tr><td>control records</td><td class='n'>{summary.get('control_records', 0):,}</td></tr></table>
<h3>Bad input (skipped, not fatal)</h3>{bad_html}
<table><tr><th>table</th><th>rows</th></tr>{tables}</table>
</body></html>
"""


def _count(v) -> str:
    return "-" if v is None else f"{v:,}"


def share_section(rows: list[dict], most: int = 200) -> str:
    """The share partitions (KIP-932), those with problems first."""
    if not rows:
        return "<p>none</p>"
    rows = sorted(rows, key=lambda r: (not r["problems"], -(r["lag"] or 0), r["group"],
                                       r["topic"], r["partition"]))
    cells = []
    for r in rows[:most]:
        badges = "".join(_badge(p) for p in r["problems"]) or _badge("OK")
        cells.append(
            f"<tr><td>{html.escape(r['group'])}</td><td>{html.escape(r['topic'])}</td>"
            + "".join(f"<td class='n'>{_count(r[k])}</td>" for k in (
                "partition", "start_offset", "log_end_offset", "in_flight", "acknowledged",
                "archived", "archived_at_limit", "lag")) +
            f"<td>{badges}</td></tr>")
    more = (f"<p class='note'>{len(rows) - most:,} more in the share_groups table.</p>"
            if len(rows) > most else "")
    return ("<p class='note'>Share lag: records between the share-partition start offset "
            "and the log end not yet acknowledged or archived. In flight: records delivered "
            "and not finished; archived at limit: records given up after the delivery-count "
            "limit (poison records).</p><table><tr><th>share group</th><th>topic</th>"
            "<th>partition</th><th>start offset</th><th>log end</th><th>in flight</th>"
            "<th>acknowledged</th><th>archived</th><th>archived at limit</th><th>share lag</th>"
            "<th>problems</th></tr>" + "".join(cells) + "</table>" + more)


def _duration(ms: int) -> str:
    for unit, size in (("day", 86400000), ("h", 3600000), ("min", 60000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            n = ms // size
            return unit if n == 1 else f"{n} {unit}"
    return f"{ms} ms"


def attention_groups(status_rows: list[dict], most: int = 12) -> list[str]:
    """Groups not OK, most severe and most lagging first; if all are OK, the 4 most lagging."""
    groups = [r for r in status_rows if r["scope"] == "group"]
    groups.sort(key=lambda r: (-SEVERITY.get(r["status"], 0), -(r["current_lag"] or 0), r["group"]))
    bad = [r["group"] for r in groups if r["status"] != "OK"]
    return bad[:most] if bad else [r["group"] for r in groups[:4]]


def write_report(out_dir: Path, buckets, obs: dict, status_rows: list[dict], gen_pairs,
                 summary: dict, as_of: int, span=None, live_ends: bool = False,
                 history=None) -> Path:
    """buckets: the commits' lag_series input (spark_buckets / arrow_buckets); gen_pairs:
    (group, timestamp) of each generation.  span: (first, last) commit timestamp of the whole log, the lag plots' time range.

    history: for log ends from a running server (one observation each), a
    function ({(topic, partition)}, [times]) -> {(topic, partition): [(end, time)]}
    giving the plotted partitions' past log ends."""
    chosen = attention_groups(status_rows)
    if span is not None:
        span = (span[0], max(span[1], min(as_of, span[1] + (span[1] - span[0]) // 10)))
    if history is not None and span is not None and chosen:
        wanted = set(chosen)
        tps = {(r["topic"], r["partition"]) for r in status_rows
               if r["scope"] == "partition" and r["group"] in wanted}
        obs = {**obs, **history(tps, bucket_times(span))}
    lag = lag_series(buckets, obs, chosen, span)
    lag = {g: lag[g] for g in chosen if g in lag}
    live = {r["group"] for r in status_rows if r["scope"] == "group"}
    page = render(summary, status_rows, lag, rebalance_series(gen_pairs, live), as_of, span, live_ends)
    path = Path(out_dir) / "report.html"
    path.write_text(page)
    return path
