"""An agent with packages of its own beside it: `ownpkg.sub`, imported at module level as a dotted name,
and `lazypkg.mod` and `writable_mod` (on its PYTHONPATH), imported inside a function. Each module's
import writes the importing process's pid to IMPORT_MARKER, so a test sees whether any of them ran in a
warm interpreter instead of the agent's own process."""

import json
import os
import sys

import ownpkg.sub  # noqa: F401


def lazy_imports() -> list[str]:
    import lazypkg.mod  # noqa: F401

    try:
        import writable_mod  # noqa: F401
    except ImportError:
        pass
    return sorted(name for name in ("lazypkg", "lazypkg.mod", "writable_mod") if name in sys.modules)


print(json.dumps({"pid": os.getpid(), "lazy": lazy_imports()}))
