"""A method that exists only for the tests: registering it must be all it takes to appear everywhere.

Importing this module registers `throwaway` (the brightness of each pixel, a signed map); call
`unregister()` to take it out again.
"""
from __future__ import annotations

from iba_core.methods import Method, register_method, unregister_method

KEY = "throwaway"


class Brightness(Method):
    key = KEY
    name = "Throw-away brightness"
    signed = True
    description = "The input's value summed over colour channels: a method that needs no network."

    def _compute(self, network, x, target):
        return x[0].sum(dim=0)


def register() -> None:
    register_method(KEY, Brightness)


def unregister() -> None:
    unregister_method(KEY)
