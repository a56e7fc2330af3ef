"""The development install's import finder (scripts/dev-install.sh copies it into .venv).

It maps the three package roots to the checkout: `cgpu` to cgpu/, `cgpu.deviceplugin` to
deviceplugin/ and `cgpu.hooks` to hooks/, as pyproject.toml maps them in a wheel. Everything below
a root is found by Python's own path search, so a module that is added, moved or deleted takes
effect at once. `cgpu._native` (the built libraries) stays in site-packages, beside this file.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

CHECKOUT = "@CHECKOUT@"
SITE = os.path.dirname(os.path.abspath(__file__))
ROOTS = {
    "cgpu": [os.path.join(CHECKOUT, "cgpu"), os.path.join(SITE, "cgpu")],
    "cgpu.deviceplugin": [os.path.join(CHECKOUT, "deviceplugin")],
    "cgpu.hooks": [os.path.join(CHECKOUT, "hooks")],
}


class CheckoutFinder:
    """A meta path finder for the package roots only."""

    @staticmethod
    def find_spec(
        name: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        where = ROOTS.get(name)
        if where is None:
            return None
        init = os.path.join(where[0], "__init__.py")
        return importlib.util.spec_from_file_location(name, init, submodule_search_locations=where)


if not any(isinstance(f, CheckoutFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, CheckoutFinder())
