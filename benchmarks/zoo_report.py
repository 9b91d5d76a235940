"""The zoo benchmark's results (benchmarks/bench_zoo.py's JSON lines) as a printed table and as the docs' page
(docs/operations/model-zoo.md): coverage per method, a row per family with seconds, every failure's reason."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from bench_zoo import METHODS

#: Statuses of a model that was built and loaded (its methods ran); the others are left out of the coverage.
RAN = ("run",)
#: How the table names a model that did not run its methods (its reason is listed below the table).
STATUS_WORDS = {"not_built": "not built", "load_says_why": "refused at load", "load_internal": "bug at load",
                "timed_out": "cut off", "crashed": "crashed"}
MARK = {"works": "✓", "says_why": "✗", "internal": "bug", "timed_out": "…"}


def read_results(path: Path) -> list[dict]:
    """The records of a results file: a header (the last run's, with when the first started and how many runs wrote
    the file), and the last line per family (a rerun or a resumed run replaces it)."""
    headers, records = [], {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            if record.get("header"):
                headers.append(record)
            else:
                records[record["family"]] = record
    header = dict(headers[-1]) if headers else {}
    if len(headers) > 1:
        header["started"] = f"{headers[0]['started']} (in {len(headers)} runs, the last {headers[-1]['started']})"
        header["load_before"] = f"{min(h['load_before'] for h in headers)}–{max(h['load_before'] for h in headers)}"
    return [header, *records.values()]


def _cell(record: dict, key: str) -> dict:
    """A method's result in a record; a model cut off by its time cap marks the methods it never reached."""
    found = record.get("methods", {}).get(key)
    if found is None and record.get("status") in ("timed_out", "crashed"):
        return {"status": "timed_out", "reason": record.get("reason", "")}
    return found or {}


def coverage(records: list[dict]) -> dict[str, dict]:
    """Per method: works, says why (cannot apply or refused), internal errors, cut off, of the models that ran."""
    ran = [r for r in records if r.get("status") in RAN + ("timed_out", "crashed") and "load_s" in r]
    out = {}
    for key in METHODS:
        cells = [_cell(r, key) for r in ran]
        counts = {s: sum(c.get("status") == s for c in cells) for s in ("works", "says_why", "internal", "timed_out")}
        unavailable = sum(c.get("where") == "available_for" for c in cells)
        out[key] = {**counts, "models": sum(bool(c) for c in cells), "applies": sum(bool(c) for c in cells) - unavailable}
    return out


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "–"


def medians(records: list[dict]) -> dict[str, float]:
    """Median seconds of loading, statistics, the first Per-Sample map and each method (the models where it
    worked)."""
    out = {}
    for name, pick in (("load_s", lambda r: r.get("load_s")), ("first_map_s", lambda r: r.get("first_map_s")),
                       ("stats_s", lambda r: r.get("methods", {}).get("iba", {}).get("stats_s")),
                       ("readout_train_s", lambda r: r.get("readout_train_s"))):
        values = [v for v in map(pick, records[1:]) if v is not None]
        if values:
            out[name] = statistics.median(values)
    for key in METHODS:
        values = [c["seconds"] for r in records[1:] if (c := _cell(r, key)).get("status") == "works"]
        if values:
            out[key] = statistics.median(values)
    return out


def failures(records: list[dict]) -> list[tuple[str, str, str, str]]:
    """(family, what, status, reason) of every model that did not run and every method that did not work."""
    rows = []
    for r in records[1:]:
        if r.get("status") not in RAN:
            rows.append((r["family"], "model", r.get("status", "?"), r.get("reason", "")))
        for key in METHODS:
            cell = _cell(r, key)
            if cell and cell.get("status") != "works" and r.get("status") in RAN:
                rows.append((r["family"], key, cell["status"], cell.get("reason", "")))
    return rows


def table(records: list[dict]) -> str:
    """The printed summary: coverage per method, medians, then every failure's reason."""
    header, cov = records[0], coverage(records)
    loaded = sum("load_s" in r for r in records[1:])
    cut = sum("load_s" in r and r.get("status") in ("timed_out", "crashed") for r in records[1:])
    lines = [f"{len(records) - 1} families, {loaded} built and loaded ({cut} of them cut off by the time cap)"
             f"{' (--fast)' if header.get('fast') else ''}", "",
             f"{'method':12s} {'works':>6s} {'says why':>9s} {'bugs':>5s} {'cut off':>8s} "
             f"{'of models':>10s} {'coverage':>9s} {'of those it applies to':>23s}"]
    for key, c in cov.items():
        lines.append(f"{key:12s} {c['works']:6d} {c['says_why']:9d} {c['internal']:5d} {c['timed_out']:8d} "
                     f"{c['models']:10d} {_percent(c['works'], c['models']):>9s} "
                     f"{_percent(c['works'], c['applies']):>23s}")
    lines.append("")
    lines.append("median seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in medians(records).items()))
    lines.append("")
    lines += [f"{family:36s} {what:12s} {status:9s} {reason}" for family, what, status, reason in failures(records)]
    return "\n".join(lines)


def _family_row(r: dict) -> str:
    cells = []
    for key in METHODS:
        c = _cell(r, key)
        mark = MARK.get(c.get("status"), "–")
        cells.append(f"{mark} {c['seconds']:.1f}" if c.get("status") == "works" and "seconds" in c else mark)
    seconds = [f"{r[k]:.1f}" if isinstance(r.get(k), (int, float)) else "–" for k in ("load_s", "first_map_s")]
    params = f"{r['params'] / 1e6:.2f} M" if r.get("params") else "–"
    layer = f"`{r['default_layer']}`" if r.get("default_layer") else STATUS_WORDS.get(r.get("status"), "–")
    return (f"| {r['family']} | {r.get('variant', '–')} | {params} | {layer} | "
            f"{' | '.join(seconds)} | {' | '.join(cells)} |")


def _reasons(records: list[dict]) -> list[str]:
    """Each failure's reason once, with the families it holds for, per method."""
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for family, what, status, reason in failures(records):
        grouped.setdefault((what, status, reason), []).append(family)
    lines = []
    for (what, status, reason), families in sorted(grouped.items()):
        kind = {"internal": "internal error (a bug)", "timed_out": "cut off", "says_why": "says why"}.get(status,
                                                                                                         status)
        lines.append(f"- **{what}** ({kind}, {len(families)}): {reason} — {', '.join(sorted(families))}")
    return lines


def _not_loaded(records: list[dict]) -> str:
    """How many families did not get to load, by why: "3 not built, 2 cut off", or "none"."""
    counts: dict[str, int] = {}
    for r in records[1:]:
        if "load_s" not in r:
            word = STATUS_WORDS.get(r.get("status"), r.get("status", "?"))
            counts[word] = counts.get(word, 0) + 1
    return ", ".join(f"{n} {word}" for word, n in sorted(counts.items())) or "none"


def _load_range(records: list[dict]) -> str:
    loads = [r["load_average"] for r in records[1:] if "load_average" in r]
    return f"load average {min(loads):.1f}–{max(loads):.1f} after each model" if loads else ""


def markdown(records: list[dict], source: str, missing: list[str]) -> str:
    """The generated part of the docs page."""
    header, cov = records[0], coverage(records)
    med = medians(records)
    loaded = sum("load_s" in r for r in records[1:])
    cut = sum("load_s" in r and r.get("status") in ("timed_out", "crashed") for r in records[1:])
    out = [f"{len(records) - 1} families tried: {loaded} built and loaded ({cut} of them cut off by the time cap "
           f"before every method ran); not loaded: {_not_loaded(records)} (reasons below).",
           "", f"Generated by `python benchmarks/bench_zoo.py --write-docs --results {source}` from a run started "
           f"{header.get('started', '?')} on {header.get('cpu', '?')} (torch {header.get('torch', '?')}, "
           f"{header.get('threads', '?')} threads, load average {header.get('load_before', '?')} before it; "
           f"{_load_range(records)}"
           f"{'; `--fast`: the bottlenecks at 2 steps × 2 copies (CoIBA in fp32), statistics from 16 samples' if header.get('fast') else ''}"
           f"; at most {header.get('timeout', 0):.0f} s per model).", ""]
    if missing:
        out += [f"**Not run** (the run ended before them): {', '.join(missing)}.", ""]
    out += ["| method | works | says why | internal errors | cut off | models | coverage | of those it applies to | "
            "median s |", "|---|---|---|---|---|---|---|---|---|"]
    for key, c in cov.items():
        out.append(f"| {key} | {c['works']} | {c['says_why']} | {c['internal']} | {c['timed_out']} | {c['models']} | "
                   f"{_percent(c['works'], c['models'])} | {_percent(c['works'], c['applies'])} | "
                   f"{med[key]:.2f} |" if key in med else f"| {key} | {c['works']} | {c['says_why']} | "
                   f"{c['internal']} | {c['timed_out']} | {c['models']} | – | – | – |")
    out += ["", "Median seconds per model: " + ", ".join(f"{k.replace('_s', '')} {v:.1f}" for k, v in med.items()
                                                        if k.endswith("_s")) + ".", ""]
    out += ["| family | variant | parameters | default layer | load s | first map s | "
            + " | ".join(METHODS) + " |", "|" + "---|" * (6 + len(METHODS))]
    out += [_family_row(r) for r in sorted(records[1:], key=lambda r: r["family"])]
    out += ["", "### Why each one that does not work does not", ""] + (_reasons(records) or ["None."])
    return "\n".join(out) + "\n"


BEGIN, END = "<!-- zoo table: generated, do not edit -->", "<!-- end of the zoo table -->"


def generated(records: list[dict], source: Path, root: Path) -> str:
    """The page's generated part for `records` read from `source` (named relative to the repository `root`), with
    the families of this timm and transformers that the run did not reach (a run of more than 20 families)."""
    from zoo_models import all_families

    ran = {r["family"] for r in records[1:]}
    missing = [f for f in all_families() if f not in ran] if len(ran) > 20 else []
    source = Path(source).resolve()
    shown = source.relative_to(root) if source.is_relative_to(root) else source
    return "\n" + markdown(records, str(shown), missing)


def page_part(text: str) -> str:
    """The generated part of the page's text."""
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)]


def write_docs(path: Path, records: list[dict], source: Path, root: Path) -> None:
    """Replace the generated part of the page (between BEGIN and END) with the table of `records`."""
    text = path.read_text()
    path.write_text(text.replace(page_part(text), generated(records, source, root), 1))
