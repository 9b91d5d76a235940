"""The docs' yardstick table: every attribution method × every metric on the offline photos, regenerated.

    python scripts/make_yardstick_table.py                       # measure (resumes from --results) and print
    python scripts/make_yardstick_table.py --write-docs          # … and replace the table in DOCS_PAGE

For each of the four sample photos with a hand-drawn object box (assets/boxes/: chelsea, coffee, rocket, motorcycle)
and each method that runs on the offline network (efficientnet_lite0; Score-CAM left out for its cost), the map is made once and scored by every metric: the paper's degradation (14 × 14 tiles, 17
points, as the docs' degradation table), insertion and deletion (`--protocol`, default CoIBA's: 1,792 pixels a step;
RISE's 224 pixels a step costs 450 forward passes per image and method, 8× more), ROAD (9 percentages, noise 0.01)
the pointing game and energy-based pointing against the box, and every other per-map metric of the metric registry
(MoRF AOPC, …: the table loops over it, showing the columns the results hold). The
target is the network's top-1 class. Each (photo, method) is one JSON line of --results, written as soon as it is
measured, so an interrupted run resumes. The script then prints the table, where IBA ranks in each column, and
whether the paper's ranking (IBA first) holds.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The docs page that holds the table, and the markers around the generated block in it.
DOCS_PAGE = ROOT / "docs" / "science" / "yardsticks.md"
START, END = "<!-- yardstick-table:start -->", "<!-- yardstick-table:end -->"


def columns() -> tuple[tuple[str, str, bool], ...]:
    """The table's columns, (record field, header, higher is better): the paper's degradation (14 × 14 tiles, its
    direction the registry's degradation metric's), then every per-map column of the metric registry (a 0/1
    column's mean is a rate). A column no row has a value for is left out of the table."""
    from iba_core.metrics import registry

    higher = registry.get("degradation").higher_is_better
    out = [("degradation", f"degradation 14×14 {registry.UP if higher else registry.DOWN}", higher)]
    for c in registry.columns():
        header = f"{c.header} rate {c.arrow}" if c.words else c.titled
        out.append((c.name, header, c.higher_is_better))
    return tuple(out)


IBA_KEYS = ("iba_1", "iba_10", "iba_100")
#: Methods left out by default, with the reason the docs state.
SKIPPED = {"score_cam": "Score-CAM is left out: 1,280 forward passes per map on this network (285 s per photo here)"}
#: The photos with a hand-drawn box (assets/boxes): objects of ImageNet classes, so every metric scores all of them.
PHOTOS = ("chelsea", "coffee", "rocket", "motorcycle")


def measure(results: Path, protocol_name: str, methods: list[str] | None, photos: list[str] | None) -> None:
    """Append one line per (photo, method) not yet in `results`."""
    from iba_core.heads import head_of
    from iba_core.images import load_sample
    from iba_core.methods import get_method, method_keys
    from iba_core.metrics.bbox import boxes_on_crop, parse_voc
    from iba_core.metrics.common import scoring_model, stable_seed
    from iba_core.metrics.degradation import degradation_curves
    from iba_core.metrics.insertion_deletion import PROTOCOLS
    from iba_core.metrics.yardsticks import YARDSTICKS, YardstickOptions, yardstick_columns
    from iba_core.precision import machine_id
    from iba_core.networks import load_network

    network = load_network("efficientnet_lite0")
    pre, head = network.preprocess, head_of(network)
    model = scoring_model(network, "fp32")
    protocol = PROTOCOLS[protocol_name]
    done = set()
    if results.is_file():
        for line in results.read_text().splitlines():
            r = json.loads(line)
            done.add((r["photo"], r["method"], r["protocol"]))
    keys = methods or [k for k in method_keys() if k not in SKIPPED and get_method(k).available_for(network) is None]
    with results.open("a") as out:
        for photo in photos or PHOTOS:
            x = pre.normalise(pre.crop(load_sample(photo)))
            with torch.no_grad():
                target = int(network.model(x).argmax())
            box_file = ROOT / "assets" / "boxes" / f"{photo}.xml"
            mask = boxes_on_crop(parse_voc(box_file), pre)[0] if box_file.is_file() else None
            for key in keys:
                if (photo, key, protocol.name) in done:
                    continue
                start = time.perf_counter()
                method = get_method(key)
                amap = method.attribute(network, x, target)
                values, seed = amap.values, stable_seed(0, photo)
                row = {"photo": photo, "method": key, "name": method.name, "protocol": protocol.name,
                       "target": target, "map_seconds": amap.seconds,
                       "cpu": machine_id("cpu").split(" | ")[0]}  # rows of one table may come from several runs
                row["degradation"] = degradation_curves(model, x, values, target, 14, points=17,
                                                        head=head).to_record()
                # every per-map metric of the registry (a photo without a box has no pointing scores: left out)
                measured = yardstick_columns(model, x, values, target, YARDSTICKS, head=head, box_mask=mask,
                                             options=YardstickOptions(protocol=protocol, seed=seed))
                row.update({k: v for k, v in measured.items() if math.isfinite(v)})
                row["seconds"] = time.perf_counter() - start
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(f"{photo:>22} {method.name:<24} {row['seconds']:6.1f} s", flush=True)


def _fmt(value: float | None) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.3f}"


def table(results: Path, protocol_name: str) -> str:
    """The markdown block: the table (means over the photos), IBA's rank per column, and the verdict."""
    from iba_core.metrics.bbox import boxes_on_crop, parse_voc
    from iba_core.metrics.degradation import DegradationCurves, degradation_score, set_baselines
    from iba_core.metrics.insertion_deletion import PROTOCOLS
    from iba_core.networks import load_network

    rows = [json.loads(line) for line in results.read_text().splitlines()]
    rows = [r for r in rows if r["protocol"] == protocol_name]
    table_columns = tuple(c for c in columns() if any(r.get(c[0]) is not None for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    names = {r["method"]: r["name"] for r in rows}
    # degradation as the paper scales it: t₁ and b over the set of photos (the same for every method)
    per_photo = {r["photo"]: DegradationCurves.from_record(r["degradation"]) for r in rows}
    t1, b = set_baselines(list(per_photo.values()))
    means: dict[str, dict[str, float | None]] = {}
    for m in methods:
        mine = [r for r in rows if r["method"] == m]
        means[m] = {"degradation": degradation_score([DegradationCurves.from_record(r["degradation"]) for r in mine],
                                                     t1, b).area}
        for field, _, _ in table_columns[1:]:
            vals = [r[field] for r in mine if r.get(field) is not None and math.isfinite(r[field])]
            means[m][field] = float(np.mean(vals)) if vals else None
    photos = sorted({r["photo"] for r in rows})
    boxed = sorted({r["photo"] for r in rows if r.get("pointing_hit") is not None})
    lines = ["| Method | " + " | ".join(h for _, h, _ in table_columns) + " |",
             "|---|" + "---:|" * len(table_columns)]
    for m in methods:
        lines.append(f"| {names[m]} | " + " | ".join(_fmt(means[m][f]) for f, _, _ in table_columns) + " |")
    ranks, verdicts = [], []
    for field, header, higher in table_columns:
        scored = [(v, m) for m in methods if (v := means[m][field]) is not None]
        if not scored:
            continue
        def better(a: float, b: float) -> bool:
            return a > b if higher else a < b

        # competition ranking: tied methods share a rank (a hit rate of 1.000 is first however many reach it)
        position = {m: 1 + sum(better(w, v) for w, _ in scored) for v, m in scored}
        best_iba = min((position[k], k) for k in IBA_KEYS if k in position)
        firsts = [m for _, m in scored if position[m] == 1]
        shared = f" (shared by {len(firsts)})" if len(firsts) > 1 else ""
        leader = "" if best_iba[0] == 1 else f", first {', '.join(names[m] for m in firsts)}"
        ranks.append(f"{header}: {names[best_iba[1]]} {best_iba[0]} of {len(scored)}{shared}{leader}")
        verdicts.append((header, best_iba[0] == 1))
    held = [h for h, first in verdicts if first]
    pre = load_network("efficientnet_lite0").preprocess  # the boxes as the network's crop sees them
    shares = {p: float(boxes_on_crop(parse_voc(ROOT / "assets" / "boxes" / f"{p}.xml"), pre)[0].mean())
              for p in boxed}
    # the processors the rows were measured on (rows from before this was recorded: the AMD EPYC they ran on)
    cpus = {r.get("cpu", "AMD EPYC") for r in rows}
    cpu = " and ".join(f"{c} ({sum(r.get('cpu', 'AMD EPYC') == c for r in rows)} maps)" for c in sorted(cpus))
    text = [
        f"Offline network (efficientnet_lite0), the {len(photos)} sample photos ({', '.join(photos)}), target = "
        f"the top-1 class; means over the photos. Insertion/deletion: {PROTOCOLS[protocol_name].describe()} "
        f"ROAD: 10 … 90 % removed, noise 0.01. Pointing: {len(boxed)} photos with a hand-drawn box "
        f"(assets/boxes; the box covers {', '.join(f'{shares[p]:.0%} of {p}' for p in boxed)}'s crop, so a random map "
        f"often hits), 15 px. Degradation: 14 × 14 tiles, 17 points, scaled over the photos "
        f"(t₁ = {t1:.3f}, b = {b:.3f}). Regenerated by `python scripts/make_yardstick_table.py --write-docs` "
        f"({len(rows)} maps, {sum(r['seconds'] for r in rows) / 60:.0f} min of measuring on {cpu}, at varying load; "
        f"the time per image of each metric: `python benchmarks/bench_yardsticks.py`).",
        "",
        *lines,
        "",
        "Where the best Per-Sample IBA ranks (of the methods; ties share a rank): " + "; ".join(ranks) + ".",
        "",
        *([f"{'; '.join(SKIPPED.values())}."] if not any(r["method"] in SKIPPED for r in rows) else []),
        "",
        f"**The paper's ranking (IBA first) holds on {len(held)} of {len(verdicts)} columns here** "
        f"({', '.join(held) or 'none'}). "
        f"{len(photos)} photos are far too few for a conclusion: this shows the instrument, not a result.",
    ]
    return "\n".join(text)


def write_docs(block: str, path: Path = DOCS_PAGE) -> None:
    """Replace the block between the markers of `path` by `block`."""
    text = path.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{path} lacks the markers {START} … {END}.")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{START}\n{block}\n{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=ROOT / "docs" / "yardsticks.jsonl",
                        help="per (photo, method) results, appended and resumed (default: %(default)s)")
    parser.add_argument("--protocol", default="coiba", help="insertion/deletion protocol: coiba (default) or rise")
    parser.add_argument("--methods", nargs="+", default=None, help="method keys (default: all that run)")
    parser.add_argument("--photos", nargs="+", default=None, help="sample photo names (default: the four with a box)")
    parser.add_argument("--table-only", action="store_true", help="tabulate --results, measure nothing")
    parser.add_argument("--write-docs", action="store_true", help=f"replace the table in {DOCS_PAGE.relative_to(ROOT)}")
    args = parser.parse_args()
    from iba_core.precision import machine_id

    print(f"{machine_id('cpu')}, load average {os.getloadavg()[0]:.2f}", flush=True)
    if not args.table_only:
        measure(args.results, args.protocol, args.methods, args.photos)
    block = table(args.results, args.protocol)
    print(block)
    if args.write_docs:
        write_docs(block)
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
