"""A bottleneck fit's steps as the Per-Sample page draws them: live while the bottleneck is fitted (`LiveView`), and
step by step in the replay (`step_slots`, `draw_step`)."""
from __future__ import annotations

import numpy as np
import streamlit as st
from PIL import Image
from streamlit.delta_generator import DeltaGenerator

from iba_core.per_sample import StepInfo
# Through the module, not its names: a step's pictures are looked up when drawn, as when the page imported them at
# each run (the page tests record what is drawn by patching `animation`).
from iba_core.render import animation
from iba_core.render.colours import live_scale, step_scale
from iba_core.render.text import format_target_score, target_score_name

#: Pictures in the live view and the replay: map side and text size (px, before the browser scales them).
PANEL_SIDE, PANEL_FONT = 224, 17
#: The loss curves beside λ: drawn about as wide as a map panel, so both shrink alike into their columns.
CURVES_SIZE = (420, 300)


def step_slots() -> tuple[DeltaGenerator, DeltaGenerator, DeltaGenerator, DeltaGenerator]:
    """Where a step is drawn, live and in the replay: the bits map beside the drain (total bits per step), then
    λ beside the loss curves."""
    top = st.columns(2, gap="small", vertical_alignment="center")
    bottom = st.columns(2, gap="small", vertical_alignment="center")
    return top[0].empty(), top[1].empty(), bottom[0].empty(), bottom[1].empty()


def draw_step(slots: tuple[DeltaGenerator, ...], history: list[StepInfo], steps: int, top: float, *,
              all_steps: list[StepInfo] | None = None, lambda_title: str | None = None,
              head: str = "softmax") -> None:
    """The last step of `history` in `slots` (`step_slots`): its bits map (0 – `top`), the drain (total bits per
    step), its λ and the curves so far. all_steps: the whole run's, in the drain with the step ringed (the
    replay); else the drain ends at this step (the live view). All pictures: each swaps in place, with no blank
    frame (a chart would be mounted anew at every step)."""
    heat, drain, lam, curves = slots
    info = history[-1]
    where = f"step {info.step} of {steps}"
    mark = info.step if all_steps else None  # the replay rings its step in the whole run's drain and curves
    bits = animation.bits_panel(info.bits_per_pixel, top, side=PANEL_SIDE, font_size=PANEL_FONT)
    heat.image(bits, width="stretch", alt=f"Bits per pixel at {where}")  # its top: written on its colour bar
    drain.image(animation.drain_image(all_steps or history, total_steps=steps, mark=mark, width=bits.width,
                                      height=bits.height, font_size=PANEL_FONT - 2),
                width="stretch", alt=f"Total bits per step, up to {where}" if not all_steps else
                f"Total bits per step, step {info.step} ringed")
    titled = {"title": lambda_title} if lambda_title else {}  # CoIBA's shared mask says so (`shared_lambda_title`)
    lam_panel = animation.lambda_panel(info.lambda_mean, side=PANEL_SIDE, font_size=PANEL_FONT, **titled)
    lam.image(animation.padded_to(lam_panel, bits.width),
              width="stretch", alt=f"λ at {where}")  # as wide as the bits panel: both maps at one size
    curves.image(animation.curves_image(history, total_steps=steps, mark=mark, width=CURVES_SIZE[0],
                                        height=CURVES_SIZE[1], font_size=PANEL_FONT - 2, head=head),
                 width="stretch", alt=f"Losses and {target_score_name(head)} up to {where}")


def _blank_like(picture: Image.Image) -> Image.Image:
    """A light-grey stand-in of the same size, so the live view does not jump when the first step arrives."""
    return Image.new("RGB", picture.size, (240, 242, 246))


def live_scale_caption(fixed: float | None, one_scale: bool) -> str:
    """The live view's line on its bits maps' colour scale: a typed top, the largest so far, or each step's own."""
    return (f"Bits maps: {live_scale([], fixed).describe()}." if fixed else
            "Bits maps: 0 up to the largest value so far (it grows only when a step exceeds it), as chosen "
            "under *Colour scale*." if one_scale else
            "Bits maps: each step from 0 to its own largest value, written at the top of its colour bar, "
            "so the map stays readable while the bits drain; the drain itself is the chart of total bits "
            "per step beside it.")


class LiveView:
    """A fit's live view in the current container: a progress bar over the steps, then the step's pictures
    (`step_slots`), each replaced in place at every step (an image swaps without a blank frame; a chart would be
    mounted anew), on the colour scale chosen (`fixed`: a typed top; `one_scale`: the largest value so far)."""

    def __init__(self, steps: int, head: str, fixed: float | None, one_scale: bool,
                 lambda_title: str | None = None):
        """The bar, grey stand-ins for the maps until the first step, and the line on the maps' colour scale."""
        self.head, self.fixed, self.one_scale, self.lambda_title = head, fixed, one_scale, lambda_title
        self.history: list[StepInfo] = []
        self.bar = st.progress(0.0, text=f"**Step 0 / {steps}** · preparing the network…")
        self.slots = step_slots()
        heat, _, lam, _ = self.slots
        blank = _blank_like(animation.bits_panel(np.zeros((1, 1)), 1.0, side=PANEL_SIDE, font_size=PANEL_FONT))
        heat.image(blank, width="stretch", alt="Bits per pixel: waiting for the first step")
        lam.image(blank, width="stretch", alt="λ: waiting for the first step")
        st.caption(live_scale_caption(fixed, one_scale))

    def on_step(self, info: StepInfo) -> None:
        """The fit's callback: the bar's line and the step's pictures."""
        self.history.append(info)
        score = target_score_name(self.head)
        self.bar.progress(info.step / info.steps, text=(
            f"**Step {info.step} / {info.steps}** · {animation.step_bits(info):,.0f} bits · {score} = "
            f"{format_target_score(info.p_target, self.head)} · {'−cos' if score == 'similarity' else 'L_CE'} = "
            f"{info.ce:.3f} · β·L_I = {info.beta_info:.3f} nats"
        ))
        # one scale: the largest so far (it only grows); else the step's own top (`step_scale`), which keeps a
        # draining map readable: on step 1's top (4.3 bits / pixel) the maps from step 5 on were nearly black
        top = (live_scale(self.history, self.fixed).top if self.one_scale
               else step_scale(info.bits_per_pixel).top)
        draw_step(self.slots, self.history, info.steps, top, head=self.head, lambda_title=self.lambda_title)
