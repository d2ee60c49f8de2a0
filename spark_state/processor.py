"""Deprecated: ``spark_state.processor`` is :mod:`spark_state.state_data` (renamed so that it is
not confused with :mod:`spark_state.process`, the keyed functions' runtime); it goes in the next
release. Importing it, or any ``spark_state.processor.<module>``, warns and gives the renamed
module itself (:func:`spark_state.deprecation.alias_modules`), ``keys`` being ``key_columns``
and the modules moved into the package's rooms being where they are now
(:data:`spark_state.state_data.MOVED_MODULES`).
"""

from __future__ import annotations

import importlib
import sys
from typing import Optional

from .deprecation import alias_modules, warn_renamed

_OLD, _NEW = __name__, "spark_state.state_data"


def _new_name(fullname: str) -> Optional[str]:
    if not fullname.startswith(_OLD + "."):
        return None
    from .state_data import MOVED_MODULES

    sub = fullname[len(_OLD) + 1:]
    sub = "key_columns" if sub == "keys" else sub
    return f"{_NEW}.{MOVED_MODULES.get(sub, sub)}"


alias_modules(_new_name)
warn_renamed(_OLD, _NEW, stacklevel=3)
sys.modules[_OLD] = importlib.import_module(_NEW)
