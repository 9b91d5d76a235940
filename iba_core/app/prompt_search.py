"""Searching a CLIP run for a text prompt on the Dataset page, with no Streamlit: the prompts a run holds, its
images ranked for one of them (most bits first), and, for a prompt it lacks, the sentences and the command line
that add it.

    found = search_prompt(run, "a dog on grass")        # a UserError saying how to add a prompt the run lacks
    found.rows                                           # the prompt's rows, ranked
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UserError
from ..trust import shown
from ..networks.clip_models import clean_prompt
from ..per_sample import BottleneckSettings
from ..runs.highlights import BITS_UNIT
from ..runs.tables import Run
from ..trust import Trust, visitor_path
from .dataset import is_missing, method_units, methods_bits_first, result_rows

if TYPE_CHECKING:
    import pandas as pd


#: Images a prompt search shows (the top of its ranking).
PROMPT_HITS = 12


def run_prompts(run: Run) -> list[str]:
    """The text prompts the run holds result rows for (a CLIP run's `--prompt`s), in run.json's order; [] for a run
    that explains classes."""
    rows = result_rows(run.table)
    held = {p for p in rows["prompt"].dropna().astype(str) if p} if "prompt" in rows else set()
    listed = [str(p) for p in run.info.get("prompts") or [] if str(p) in held]
    return listed + sorted(held - set(listed))


@dataclass
class PromptSearch:
    """The run's images ranked for one of its prompts: `rows` (the prompt's result rows of `method`), most bits
    first (`by` "total_bits"; for a method whose maps are not in bits, the highest similarity first: `by`
    "p_target"), ties by the higher similarity."""

    prompt: str
    method: str
    by: str
    rows: "pd.DataFrame"


def prompt_methods(run: Run, prompt: str) -> list[str]:
    """The methods with result rows for `prompt`, the bottlenecks first (`methods_bits_first`)."""
    rows = result_rows(run.table)
    have = set(rows.loc[rows["prompt"] == prompt, "method"].astype(str)) if "prompt" in rows else set()
    return [m for m in methods_bits_first(run) if m in have]


def held_prompt(run: Run, text: str) -> str | None:
    """The run's prompt that `text` names (spaces collapsed; exactly, else differing only in case), or None."""
    wanted = " ".join((text or "").split())
    prompts = run_prompts(run)
    return next((p for p in prompts if p == wanted), None) or next(
        (p for p in prompts if p.casefold() == wanted.casefold()), None)


def search_prompt(run: Run, text: str, method: str | None = None) -> PromptSearch:
    """The run's images ranked for the prompt `text` (exactly one of the run's prompts, or one that differs only in
    case) by `method`'s maps (default: the first bottleneck with rows for it): a UserError in one sentence for an
    empty prompt, for a run without prompts, and for a prompt the run does not hold (`missing_prompt_text`: how to
    add it)."""
    wanted = " ".join((text or "").split())
    if not wanted:
        raise UserError("Type a prompt to search the run for, or pick one of its prompts.")
    wanted = clean_prompt(wanted)  # longer than any prompt a run holds: one sentence, the text not echoed
    prompts = run_prompts(run)
    if not prompts:
        raise UserError("This run explains classes, not text prompts: searching for a prompt needs a folder run of a "
                        "CLIP model with text prompts.",
                        cli_hint="Run `python -m iba_core attribute FOLDER --model clip:DIR --prompt TEXT --out RUN`.",
                        app_hint="Start one under “Start a run on a folder of the server” with a CLIP model and its "
                        "prompts.")
    found = held_prompt(run, wanted)
    if found is None:
        raise UserError(missing_prompt_text(run, wanted))
    methods = prompt_methods(run, found)
    if method is None:
        method = methods[0] if methods else None
    if method not in methods:
        raise UserError(f"The run has no {shown(str(method), 40)} map for the prompt “{found}”.")
    rows = result_rows(run.table)
    rows = rows[(rows["prompt"] == found) & (rows["method"] == method)]
    by = "total_bits" if method_units(run).get(method) == BITS_UNIT else "p_target"
    keys = [by] if by == "p_target" else [by, "p_target"]
    return PromptSearch(found, method, by, rows.sort_values(keys, ascending=False, na_position="last", kind="stable"))


#: The command line's flag of each Per-Sample setting a run.json records (`cli/attribute.py`).
BOTTLENECK_FLAGS = {"steps": "--steps", "batch": "--batch", "lr": "--lr", "sigma": "--sigma", "seed": "--seed",
                    "read_point": "--read-point", "inactive_threshold": "--inactive-threshold",
                    "precision": "--precision", "stats_samples": "--n"}
#: In the command that adds a prompt, where the run's network has no key a command takes (a model folder).
MODEL_PLACEHOLDER = "clip:MODEL_FOLDER"


def add_prompt_command(run: Run, prompt: str, trust: Trust | None = None) -> str:
    """The command line that adds `prompt`'s rows to the run (a rerun into its folder with the run's network, layer
    and methods: only the new prompt's rows are made). A network keyed by a model folder's name is written
    MODEL_PLACEHOLDER (the folder's path is not in run.json). Its folders as `trust`'s person may see them
    (`visitor_path`: a served app's visitor sees them relative to the allowed folders; default: the local user)."""
    import shlex

    from ..networks import check_network_key

    trust = trust or Trust.local()
    info = run.info
    model = str(info.get("network"))
    try:
        check_network_key(model)
    except UserError:  # a model folder is keyed by its name ("folder:NAME"): its path is the user's
        model = MODEL_PLACEHOLDER
    parts = ["python", "-m", "iba_core", "attribute", visitor_path(run.source, trust), "--model", model]
    if info.get("layer"):
        parts += ["--layer", str(info["layer"])]
    methods = info.get("methods") or {}
    if methods:
        parts += ["--methods", *methods]
    # the bottleneck's settings where they are not the command's defaults: a rerun must match run.json's
    settings = next((m.get("settings") or {} for m in methods.values() if "steps" in (m.get("settings") or {})), {})
    defaults = BottleneckSettings()
    for name, flag in BOTTLENECK_FLAGS.items():
        value, default = settings.get(name), getattr(defaults, name, None)
        if value is not None and value != default:
            parts += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if (info.get("settings") or {}).get("stats_images"):
        parts += ["--stats-images", visitor_path(str(info["settings"]["stats_images"]), trust)]
    parts += ["--out", visitor_path(run.path, trust), "--prompt", prompt]
    return " ".join(shlex.quote(p) for p in parts)


def missing_prompt_text(run: Run, prompt: str, command: bool = True, trust: Trust | None = None) -> str:
    """A few sentences for a prompt the run holds no rows for: the prompts it holds, and how to add this one (the
    command line, left out with command=False where it is shown apart, or the Dataset page's folder-run form into
    the same run folder), its folders as `trust`'s person may see them (default: the local user). Plain text, no
    Markdown: the page shows it as text (`plain`), so emphasis would show as asterisks."""
    trust = trust or Trust.local()
    held = run_prompts(run)
    line = add_prompt_command(run, prompt, trust)
    how = f"with the command {line}, or" if command else "with the command below, or"
    methods = ", ".join(run.info.get("methods") or {}) or "none"
    return (f"The run holds no maps for the prompt “{prompt}” (its prompts: {', '.join(held) or 'none'}). Add it "
            f"{how} with “Start a run on a folder of the server” on the Dataset page: the run's image folder "
            f"({visitor_path(run.source, trust)}), this run folder ({visitor_path(run.path, trust)}), its methods "
            f"({methods}) and the prompt; only the new prompt's maps are made."
            + (f" In the command, {MODEL_PLACEHOLDER} stands for the run's model folder." if MODEL_PLACEHOLDER in
               line else ""))


def prompt_caption(row, rank: int, by: str) -> str:
    """A ranked thumbnail's numbers: its rank, image, total bits (a bottleneck) and the cosine similarity of the
    image with the prompt."""
    parts = [f"{rank}. {row['image']}"]
    if by == "total_bits" and not is_missing(row["total_bits"]):
        parts.append(f"{float(row['total_bits']):,.1f} bits")
    if not is_missing(row["p_target"]):
        parts.append(f"similarity {float(row['p_target']):.3f}")
    return " · ".join(parts)
