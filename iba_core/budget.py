"""What a request costs before it runs, counted in network passes, and the budget a served app holds it to.

A pass of one image through the network counts 1, a backward pass 1 more (a gradient method's map costs 2, a
default Per-Sample Bottleneck 201: 10 steps × 10 noisy copies × 2, and the clean image). A request's cost is the
sum of its maps (`Method.forward_passes`) and of its measurements (`Metric.forward_passes`); feature statistics
are capped on their own (IBA_MAX_STATS_SAMPLES) and estimated once per layer, so they are not counted.

    cost = Cost.of_methods(methods, network, 224, 224) + Cost.part("insertion and deletion", 2 * 225)
    check_budget(cost, settings.max_request_passes(localhost), "These yardsticks")   # RequestTooLarge, or nothing
    cost.describe()                                   # "about 1,102 network passes (maps 202; insertion … 900)"

Every front end says a request's cost before it starts (the app beside its button when it is long, the command line
on stderr); a served app refuses one above its budget in one sentence, before the network is touched.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from .errors import UserError
from .settings import MAX_REQUEST_PASSES_ENV

#: Above this many passes a front end says the cost before it starts (below, a request takes seconds).
SAY_ABOVE = 1000


class RequestTooLarge(UserError):
    """A request whose estimated cost exceeds the served app's budget; it did not start."""


@dataclass(frozen=True)
class Cost:
    """A request's estimated network passes, by part ("maps", "insertion and deletion" …), in the order added."""

    parts: tuple[tuple[str, int], ...] = ()

    @classmethod
    def part(cls, what: str, passes: int) -> "Cost":
        """One part's passes."""
        return cls(((what, max(0, int(passes))),))

    @classmethod
    def of_methods(cls, methods: Iterable, network, height: int, width: int, *, what: str = "maps",
                   repeat: int = 1) -> "Cost":
        """The maps of `methods` (method objects) on a `height` × `width` input, `repeat` times each (targets,
        prompts or randomisation steps)."""
        return cls.part(what, repeat * sum(max(0, m.forward_passes(network, height, width)) for m in methods))

    @property
    def passes(self) -> int:
        """All parts' passes together."""
        return sum(n for _, n in self.parts)

    def __add__(self, other: "Cost") -> "Cost":
        merged: dict[str, int] = dict(self.parts)
        for what, n in other.parts:
            merged[what] = merged.get(what, 0) + n
        return Cost(tuple(merged.items()))

    def times(self, n: int) -> "Cost":
        """The cost of doing this `n` times (e.g. for every image of a batch)."""
        return Cost(tuple((what, n * p) for what, p in self.parts))

    def describe(self) -> str:
        """"about 1,102 network passes (maps 202; insertion and deletion 900)"; the parts only when several."""
        shown = [(w, n) for w, n in self.parts if n]
        text = f"about {self.passes:,} network pass{'' if self.passes == 1 else 'es'}"
        if len(shown) > 1:
            text += " (" + "; ".join(f"{w} {n:,}" for w, n in shown) + ")"
        return text


#: What brings a request within the budget, unless its front end says better.
FEWER = "choose fewer methods or a coarser setting"


def check_budget(cost: Cost, budget: int | None, what: str, fewer: str = FEWER) -> None:
    """Refuse `cost` above `budget` (None: no limit) in one sentence naming the request (`what`, e.g. "These
    yardsticks"), its cost and how to bring it within (`fewer`, e.g. "choose fewer steps or a smaller batch");
    nothing happens otherwise."""
    if budget is None or cost.passes <= budget:
        return
    raise RequestTooLarge(
        f"{what} would cost {cost.describe()}, above this shared app's limit of {budget:,} passes a request, so it "
        f"did not start: {fewer}.",
        app_hint=f"The app's owner sets the limit with {MAX_REQUEST_PASSES_ENV}.")


def cost_note(cost: Cost) -> str | None:
    """The sentence a front end shows before a long request (more than `SAY_ABOVE` passes), else None."""
    if cost.passes <= SAY_ABOVE:
        return None
    return f"This request costs {cost.describe()}: a long run on a CPU."


def methods_cost(method_keys: Sequence[str], network, height: int, width: int, *, what: str = "maps",
                 repeat: int = 1, settings: dict[str, dict] | None = None) -> Cost:
    """`Cost.of_methods` for registry keys (each with its `settings`); an unknown key costs nothing here (the run
    itself names it)."""
    from .methods import get_method

    methods = []
    for key in method_keys:
        try:
            methods.append(get_method(key, **(settings or {}).get(key, {})))
        except UserError:
            continue
    return Cost.of_methods(methods, network, height, width, what=what, repeat=repeat)
