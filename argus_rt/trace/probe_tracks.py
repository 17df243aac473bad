"""Forced-wait probe results as Chrome/Perfetto tracks: issue -> completion, linked by flows.

A probe run (``argus.op_events/1``, one row per CTA that recorded the probe, per launch) times one
async operation at one loop iteration: ``issue`` is %globaltimer read right after the op is issued,
``complete`` right after the forced wait for it returned. Each probe run is its own process in the
timeline (it is its own run: nothing in it happened during the region trace), one pair of threads per
(launch, CTA):

* ``... issue``: the slice ``<kind> <op>@<it> in flight``, from issue to completion (its duration is
  the probe's latency), the start of a flow;
* ``... completion``: the slice ``<kind> <op>@<it> complete``, one %globaltimer step (32 ns) wide
  from the completion stamp (the step the stamp falls in), the end of that flow.

Flows are Perfetto's "v2" form on the slices themselves (``bind_id`` with ``flow_out`` / ``flow_in``),
which Perfetto's JSON importer binds to the very slice that carries them. A zero latency (both stamps
in one timer step) gives a zero-length in-flight slice, which nothing can bind to: it gets no flow.
"""
from __future__ import annotations

from .anchors import TIMER_STEP_NS

PROBE_CATEGORY = "argus.probe"
PROBE_PID_BASE = 1 << 20  # above any SM number (the region tracks' pids)


class ProbeTrackError(ValueError):
    """op_events that cannot be drawn; the message names the run and the problem."""


def probe_events(runs: list[dict], origin_ns: int, first_flow_id: int = 1) -> list[dict]:
    """Chrome trace events of probe ``runs`` on the axis whose 0 is ``origin_ns`` (microseconds).

    Each run: ``{"doc": argus.op_events/1 document, "label": str (the task), "kind": async family
    or None}``. Every row must have ``complete >= issue`` (ns)."""
    events: list[dict] = []
    flow = first_flow_id
    for n, run in enumerate(runs):
        doc, label = run["doc"], run["label"]
        if doc.get("format") != "argus.op_events/1" or doc.get("clock", "ns") != "ns":
            raise ProbeTrackError(f"probe run {label}: expected argus.op_events/1 in ns, got format "
                                  f"{doc.get('format')!r}, clock {doc.get('clock')!r}")
        cols = doc["columns"]
        rows = len(cols["issue"])
        for key in ("op_id", "iteration", "complete", "cta"):
            if len(cols.get(key, ())) != rows:
                raise ProbeTrackError(f"probe run {label}: column {key!r} has {len(cols.get(key, ()))} rows, "
                                      f"'issue' has {rows}")
        pid = PROBE_PID_BASE + n
        ops = sorted({(str(o), int(i)) for o, i in zip(cols["op_id"], cols["iteration"])})
        what = ", ".join(f"{o}@{i}" for o, i in ops) or "no records"
        family = f"{run['kind']} " if run.get("kind") else ""
        events.append({"ph": "M", "name": "process_name", "pid": pid,
                       "args": {"name": f"probe {family}{what} ({label})"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
        launches = cols.get("launch") or [0] * rows
        sms = cols.get("sm") or [None] * rows
        ctas = int(doc.get("ctas") or (1 + max(cols["cta"], default=0)))
        named = set()
        for r in range(rows):
            issue, complete = int(cols["issue"][r]), int(cols["complete"][r])
            if complete < issue:
                raise ProbeTrackError(f"probe run {label}: row {r} (CTA {cols['cta'][r]}) completes at {complete} ns, "
                                      f"before its issue at {issue} ns")
            launch, cta = int(launches[r]), int(cols["cta"][r])
            tid = 2 * (launch * ctas + cta)
            if tid not in named:
                named.add(tid)
                for t, side in ((tid, "issue"), (tid + 1, "completion")):
                    events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": t,
                                   "args": {"name": f"launch {launch} CTA {cta} {side}"}})
                    events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": t,
                                   "args": {"sort_index": t}})
            op = f"{family}{cols['op_id'][r]}@{int(cols['iteration'][r])}"
            args = {"op_id": str(cols["op_id"][r]), "iteration": int(cols["iteration"][r]), "launch": launch,
                    "cta": cta, "latency_ns": complete - issue}
            if sms[r] is not None:
                args["sm"] = int(sms[r])
            in_flight = {"ph": "X", "cat": PROBE_CATEGORY, "name": f"{op} in flight", "pid": pid, "tid": tid,
                         "ts": (issue - origin_ns) * 1e-3, "dur": (complete - issue) * 1e-3, "args": args}
            done = {"ph": "X", "cat": PROBE_CATEGORY, "name": f"{op} complete", "pid": pid, "tid": tid + 1,
                    "ts": (complete - origin_ns) * 1e-3, "dur": TIMER_STEP_NS * 1e-3,
                    "args": dict(args, timer_step_ns=TIMER_STEP_NS)}
            if complete > issue:
                in_flight.update(bind_id=flow, flow_out=True)
                done.update(bind_id=flow, flow_in=True)
                flow += 1
            events += [in_flight, done]
    return events


def flow_problems(doc: dict, limit: int = 20) -> list[str]:
    """Flows a viewer would not draw as meant: a ``bind_id`` without exactly one ``flow_out`` slice and
    one ``flow_in`` slice, a zero-length slice carrying one, or a flow that ends before it starts."""
    ends: dict = {}
    problems = []
    for ev in doc.get("traceEvents", []):
        if ev.get("ph") == "X" and "bind_id" in ev:
            side = "out" if ev.get("flow_out") else "in" if ev.get("flow_in") else None
            if side is None:
                problems.append(f"flow {ev['bind_id']}: slice {ev['name']!r} has a bind_id but neither flow_out "
                                "nor flow_in")
                continue
            if ev["dur"] <= 0:
                problems.append(f"flow {ev['bind_id']}: slice {ev['name']!r} has no length to bind to")
            ends.setdefault(ev["bind_id"], {}).setdefault(side, []).append(ev)
    for flow, sides in sorted(ends.items()):
        outs, ins = sides.get("out", []), sides.get("in", [])
        if len(outs) != 1 or len(ins) != 1:
            problems.append(f"flow {flow}: {len(outs)} start slice(s) and {len(ins)} end slice(s), want 1 and 1")
        elif ins[0]["ts"] < outs[0]["ts"]:
            problems.append(f"flow {flow}: ends at {ins[0]['ts']} before it starts at {outs[0]['ts']}")
        if len(problems) >= limit:
            break
    return problems[:limit]
