"""The live status page (`/`): groups, state, members, lag with each group's
Burrow verdict, a group's partitions (`/#group=NAME`), recent rebalances;
times in UTC with their date.  Share groups are listed beside the others
(protocol "share"): their lag is the share lag (share_metrics.py), their
"committed" column the share-partition start offset; no Burrow verdict
(Burrow watches committed offsets, which share groups do not have).

One static HTML page that polls `/status.json` every two seconds and fills
its tables (no framework, no external assets).
"""
from __future__ import annotations

from .events import ServerMetrics
from .lag import RecordTimes, group_lags
from ..coordinator import group_overviews, share_group_overviews
from .share_metrics import share_lags


def _share_lags(shares) -> list:
    """The share lag rows, or none without the share collector."""
    if shares is None:
        return []
    return share_lags(shares.state_runtime, shares.catalogue, shares.manager.hw)


def status_snapshot(runtime, catalogue, metrics: ServerMetrics, times: RecordTimes,
                    shares=None) -> dict:
    """What the page shows, as JSON-ready data."""
    now_ms = runtime.clock.ms()  # the server's one clock
    lag: dict[str, list] = {}
    for row in group_lags(runtime, catalogue, now_ms, times):
        if row.log_end < 0:
            continue
        acc = lag.setdefault(row.group, [0, 0.0, 0])
        acc[0] += max(row.lag, 0)
        acc[1] = max(acc[1], row.lag_seconds or 0.0)
        acc[2] += 1
    share_lag: dict[str, list] = {}
    for srow in _share_lags(shares):
        acc = share_lag.setdefault(srow.group, [0, None, 0])
        acc[0] += max(srow.lag, 0)
        acc[2] += 1
    groups = []
    answers, _ = runtime.read_all(lambda core, _now: group_overviews(core)
                                  + share_group_overviews(core))
    for entries in answers:
        for gid, protocol, state, members, epoch in entries:
            total, seconds, partitions = (share_lag if protocol == "share" else lag).get(
                gid, (0, 0.0 if protocol != "share" else None, 0))
            groups.append({"group": gid, "protocol": protocol, "state": state,
                           "members": members, "epoch": epoch, "partitions": partitions,
                           "lag": total,
                           "lag_seconds": None if seconds is None else round(seconds, 3),
                           "rebalancing": gid in metrics.open})
    groups.sort(key=lambda g: g["group"])
    recent = [dict(r, seconds=None if r["seconds"] is None else round(r["seconds"], 3))
              for r in reversed(metrics.recent)]
    return {"time": now_ms, "groups": groups, "recent_rebalances": recent,
            "rebalances_started": sum(metrics.rebalances_started.values()),
            "rebalances_completed": sum(metrics.rebalances_completed.values())}


def group_partitions(runtime, catalogue, times: RecordTimes, group: str,
                     burrow_status: dict | None, shares=None) -> dict:
    """The per-partition view of one group: committed offset, log end, lag and
    lag in seconds from the logs, Burrow's verdict and window from its view;
    a share group's start offset, high watermark and share lag."""
    now_ms = runtime.clock.ms()  # the server's one clock
    verdicts = {(p["topic"], p["partition"]): p
                for p in (burrow_status or {}).get("partitions", [])}
    rows = []
    for row in group_lags(runtime, catalogue, now_ms, times):
        if row.group != group:
            continue
        v = verdicts.get((row.topic, row.partition), {})
        rows.append({"topic": row.topic, "partition": row.partition,
                     "committed": row.committed, "log_end": row.log_end,
                     "lag": max(row.lag, 0) if row.log_end >= 0 else None,
                     "lag_seconds": None if row.lag_seconds is None else round(row.lag_seconds, 3),
                     "burrow": v.get("status"), "complete": v.get("complete"),
                     "last_commit": (v.get("end") or {}).get("timestamp")})
    rows += [{"topic": r.topic, "partition": r.partition, "committed": r.start_offset,
              "log_end": r.high_watermark, "lag": r.lag, "lag_seconds": None, "burrow": None,
              "complete": None, "last_commit": None}
             for r in _share_lags(shares) if r.group == group]
    rows.sort(key=lambda r: (r["topic"], r["partition"]))
    return {"time": now_ms, "group": group, "partitions": rows,
            "burrow": (burrow_status or {}).get("status")}


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kcoord status</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em;margin:0 0 .2em} h2{font-size:1.05em;margin:1.4em 0 .4em}
table{border-collapse:collapse;min-width:40em} th,td{padding:.25em .7em;text-align:left;
border-bottom:1px solid #ddd} th{background:#f3f3f3} td.n{text-align:right}
.Stable{color:#17702c}.Empty{color:#777}.PreparingRebalance,.CompletingRebalance,
.Assigning,.Reconciling{color:#b35c00;font-weight:bold}.Dead{color:#a00}
#meta{color:#666} .badge{padding:.05em .5em;border-radius:.7em;font-weight:bold;color:#fff}
.OK{background:#17702c}.WARN{background:#c27c00}.ERR,.STOP,.STALL,.REWIND{background:#b00020}
td.lag{background:#fff1d6;font-weight:bold} td.lagbad{background:#ffd9d9;font-weight:bold}
#groups tbody tr{cursor:pointer} #groups tbody tr:hover{background:#f6f9ff}
</style></head><body>
<h1>kcoord</h1><div id="meta">loading&hellip;</div>
<h2>Groups</h2>
<table id="groups"><thead><tr><th>group</th><th>protocol</th><th>state</th>
<th>members</th><th>generation / epoch</th><th>partitions</th><th>lag</th>
<th>lag (s)</th><th>Burrow</th></tr></thead><tbody></tbody></table>
<div id="detail" hidden><h2 id="detail-title"></h2>
<table id="partitions"><thead><tr><th>topic</th><th>partition</th><th>committed (share: start offset)</th>
<th>log end</th><th>lag</th><th>lag (s)</th><th>Burrow</th><th>window fill</th>
<th>last commit</th></tr></thead><tbody></tbody></table></div>
<h2>Recent rebalances</h2>
<table id="rebalances"><thead><tr><th>completed</th><th>group</th><th>protocol</th>
<th>generation / epoch</th><th>members</th><th>duration (s)</th><th>reason</th></tr></thead>
<tbody></tbody></table>
<script>
function cell(tr, text, cls){const td=document.createElement('td');td.textContent=text;
 if(cls)td.className=cls;tr.appendChild(td);}
function utc(ms){return ms==null||ms<0?'-':new Date(ms).toISOString().replace('T',' ')
 .slice(0,19)+' UTC';}
function badge(tr, st){const td=document.createElement('td');if(st){const b=document
 .createElement('span');b.className='badge '+st;b.textContent=st;td.appendChild(b);}
 else td.textContent='-';tr.appendChild(td);}
function lagcls(lag, st){return lag>0?(st&&st!=='OK'?'n lagbad':'n lag'):'n';}
let shown=new URLSearchParams(location.hash.slice(1)).get('group');
async function detail(){const d=document.getElementById('detail');
 if(!shown){d.hidden=true;return;}
 const s=await (await fetch('status.json?group='+encodeURIComponent(shown),
  {cache:'no-store'})).json();
 document.getElementById('detail-title').textContent='Group '+s.group+' by partition';
 fill('partitions', s.partitions, [(t,r)=>cell(t,r.topic),(t,r)=>cell(t,r.partition,'n'),
  (t,r)=>cell(t,r.committed,'n'),(t,r)=>cell(t,r.log_end,'n'),
  (t,r)=>cell(t,r.lag==null?'-':r.lag,lagcls(r.lag,r.burrow)),
  (t,r)=>cell(t,r.lag_seconds==null?'-':r.lag_seconds,'n'),(t,r)=>badge(t,r.burrow),
  (t,r)=>cell(t,r.complete==null?'-':Math.round(r.complete*100)+'%','n'),
  (t,r)=>cell(t,utc(r.last_commit))]);
 d.hidden=false;}
function fill(id, rows, cols){const body=document.querySelector('#'+id+' tbody');
 body.replaceChildren(...rows.map(r=>{const tr=document.createElement('tr');
 cols.forEach(c=>c(tr,r));return tr;}));}
async function refresh(){
 try{const s=await (await fetch('status.json',{cache:'no-store'})).json();
  document.getElementById('meta').textContent=s.groups.length+' groups, '+
   s.rebalances_started+' rebalances started, '+s.rebalances_completed+
   ' completed; updated '+utc(s.time);
  fill('groups', s.groups, [(t,r)=>cell(t,r.group),(t,r)=>cell(t,r.protocol),
   (t,r)=>cell(t,r.state,r.state),(t,r)=>cell(t,r.members,'n'),(t,r)=>cell(t,r.epoch,'n'),
   (t,r)=>cell(t,r.partitions,'n'),(t,r)=>cell(t,r.lag,lagcls(r.lag,r.burrow)),
   (t,r)=>cell(t,r.lag_seconds==null?'-':r.lag_seconds,'n'),(t,r)=>badge(t,r.burrow)]);
  document.querySelectorAll('#groups tbody tr').forEach((tr,i)=>{tr.onclick=()=>{
   shown=s.groups[i].group;location.hash='group='+encodeURIComponent(shown);detail();};});
  await detail();
  fill('rebalances', s.recent_rebalances, [(t,r)=>cell(t,utc(r.at*1000)),
   (t,r)=>cell(t,r.group),(t,r)=>cell(t,r.protocol),(t,r)=>cell(t,r.epoch,'n'),
   (t,r)=>cell(t,r.members,'n'),(t,r)=>cell(t,r.seconds===null?'-':r.seconds,'n'),
   (t,r)=>cell(t,r.reason)]);
  document.body.dataset.loaded='1';
 }catch(e){document.getElementById('meta').textContent='cannot reach kcoord: '+e;}
}
refresh();setInterval(refresh,2000);
</script></body></html>
"""
