"""The results of the maintenance kinds of ``benchmarks/crash.py`` (``_crash_ops.py``): totals, the
compact trial table of ``crash_ops.json`` and the Markdown of ``crash_ops.md``."""

from __future__ import annotations

import json
from typing import Any, Callable

__all__ = ["failed_trial", "summarize", "compact", "markdown"]


def failed_trial(t: dict[str, Any]) -> bool:
    """Whether a trial shows a problem (a bad row, a failed rerun, a wrong result, a job that never started)."""
    return bool(t.get("harness_error") or t.get("started") is False or t.get("bad") or t.get("bad_after")
                or t.get("rerun") is False or t.get("result") is False)


def summarize(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over the trials, by kind and by kind and variant."""

    def totals(ts: list[dict[str, Any]]) -> dict[str, Any]:
        killed = [t for t in ts if t.get("killed")]
        return dict(
            trials=len(ts), killed=len(killed),
            ended_before_kill=sum(1 for t in ts if t.get("killed") is False),
            not_started=sum(1 for t in ts if t.get("started") is False),
            harness_errors=sum(1 for t in ts if t.get("harness_error")),
            rows=sum(t.get("rows", 0) for t in ts), bad_rows=sum(len(t.get("bad", [])) for t in ts),
            rerun_failures=sum(1 for t in ts if t.get("rerun") is False),
            rows_after=sum(t.get("rows_after", 0) for t in ts), bad_rows_after=sum(len(t.get("bad_after", [])) for t in ts),
            wrong_results=sum(1 for t in ts if t.get("result") is False),
            at=_at(killed),
            partial_exports_left=sum(t.get("leftovers_after", 0) for t in ts),
            files_left=sum(t.get("files_left", 0) for t in ts),
            orphan_objects=sum(t.get("orphan_objects", 0) for t in ts),
        )

    def by(key: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
        groups: dict[str, list[dict[str, Any]]] = {}
        for t in trials:
            groups.setdefault(key(t), []).append(t)
        return {k: totals(v) for k, v in sorted(groups.items())}

    return dict(total=totals(trials), by_kind=by(lambda t: t["kind"]),
                by_variant=by(lambda t: f"{t['kind']} {t['variant']}"))


def _at(killed: list[dict[str, Any]]) -> dict[str, int]:
    """Where the kills landed, coarsely (no/some/all of the work done; before/after the commit)."""
    out: dict[str, int] = {}
    for t in killed:
        at = str(t.get("at", "?"))
        words = at.split()
        if len(words) >= 4 and words[1] == "of" and words[0].isdigit() and words[2].isdigit():
            done, total = int(words[0]), int(words[2])
            at = "none done" if done == 0 else ("all done" if done == total else "part done")
        elif at.startswith("cut "):
            at = at.split(", ")[-1]
        out[at] = out.get(at, 0) + 1
    return dict(sorted(out.items()))


COLUMNS = ("trial", "kind", "variant", "nprocs", "victim", "u", "attempts", "delay", "started", "killed", "at",
           "rows", "bad", "rerun", "rows_after", "bad_after", "result", "read", "leftovers", "leftovers_after",
           "files_left", "orphan_objects", "seconds")


def compact(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The trials as a table (``columns``, ``rows``; bad-row lists as counts) plus the details of failed trials."""
    rows = []
    for t in trials:
        rows.append([len(t[c]) if c in ("bad", "bad_after") and c in t else t.get(c) for c in COLUMNS])
    details = [dict(trial=t["trial"], **{k: v for k, v in t.items() if k in (
                   "bad", "bad_after", "rerun_error", "result_detail", "harness_error", "error") and v})
               for t in trials if failed_trial(t) or t.get("error")]
    return dict(columns=list(COLUMNS), rows=rows, failures=details)


def markdown(data: dict[str, Any]) -> str:
    """``crash_ops.md``: totals, tables by kind and by variant, where the kills landed, failures."""
    m, s = data["meta"], data["summary"]
    cols = ("trials", "killed", "ended_before_kill", "rows", "bad_rows", "rerun_failures", "rows_after",
            "bad_rows_after", "wrong_results")
    head = ("trials", "killed", "ended before kill", "rows checked", "bad rows", "rerun failures",
            "rows checked after rerun", "bad rows after rerun", "wrong results")

    def table(title: str, part: dict[str, Any]) -> list[str]:
        out = [f"### {title}", "", "| | " + " | ".join(head) + " | kills landed |", "|---" * (len(head) + 2) + "|"]
        for k, v in part.items():
            landed = ", ".join(f"{a}: {n}" for a, n in v["at"].items()) or "-"
            out.append(f"| {k} | " + " | ".join(str(v[c]) for c in cols) + f" | {landed} |")
        return out + [""]

    t = s["total"]
    lines = [
        "# Crash harness: kill -9 during truncate, rebuild, export, migrate and purge",
        "",
        f"SDM {m['sdm_version']}, commit {m['git_commit'][:12]}{' (modified)' if m['git_dirty'] else ''}, "
        f"{m['date']}; {m['host']}: {m['cores']} cores, {m['platform']}, Python {m['python']}, numpy {m['numpy']}, "
        f"SQLite {m['sqlite']}, {m['mpi']}, S3 server versitygw; temporary directories on {m['fs']}; load "
        f"{m['load_before']:.2f} before, {m['load_after']:.2f} after; {m['seconds']:.0f} s.",
        "",
        f"Options: {data['options']}. " + (
            f"Uninterrupted durations (s), the kill delay being a uniform fraction of them: {data['durations']}."
            if data["durations"] else f"Kill delays uniform in [0, {data['options']['max_delay']}] s."),
        "",
        f"**{t['trials']} trials, {t['killed']} killed in the middle of their command; {t['bad_rows']} bad rows "
        f"after the kills; {t['rerun_failures']} reruns that did not complete; {t['bad_rows_after']} bad rows and "
        f"{t['wrong_results']} wrong results after the reruns.**",
        "",
        "A row is bad when a copy the catalog says holds it is missing or short, or holds other bytes than the "
        "writer wrote, or bytes whose recomputed checksum is not the row's; also counted as bad: a truncation "
        "half applied, a run half rebuilt, an export left incomplete under its name (see `benchmarks/README.md`).",
        "",
    ]
    lines += table("By kind", s["by_kind"]) + table("By kind and variant", s["by_variant"])
    lines += ["What the kills left behind after the reruns (information; nothing of it is referenced): "
              f"{t['partial_exports_left']} temporary exports beside their output (`.OUT.partial-PID`, never removed "
              f"by the rerun, which writes its own); {t['files_left']} data files of truncated runs that no row refers to "
              f"(files of erased steps a killed truncate had not yet deleted; `sdm gc` removes them); "
              f"{t['orphan_objects']} archive objects no copy names (uploads a kill cut off).", ""]
    failures = data["trials"]["failures"]
    if failures:
        lines += ["### Failed trials (first 20)", "", "| trial | what |", "|---|---|"]
        for f in failures[:20]:
            what = json.dumps({k: v for k, v in f.items() if k != "trial"}, default=str)
            lines.append(f"| {f['trial']} | {' '.join(what.split())[:400].replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)
