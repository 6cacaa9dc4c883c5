"""The harness checking itself: probes with a known outcome, batched so that
a crash and a hang happen in the middle of a worker's batch
(``python -m stress --sections selftest``: every probe's
outcome must be the one its name announces; ``check`` says which is not)."""
from __future__ import annotations

import ctypes
import os
import time

from stress.probes import Result, Wrong

SECTION = "selftest"


def _internal():
    nothing = None
    return nothing[0]


def register(reg):
    add = reg.section(SECTION, "selftest", timeout=5)
    add("clean: documented error", lambda: int("x"), expect=ValueError, names="literal")
    add("clean: correct result", lambda: 41 + 1, ref=lambda: 42)
    add("unclear: another type", lambda: {}["k"])
    add("unclear: internal message", _internal, expect=TypeError)
    add("unclear: names nothing", lambda: int("x"), expect=ValueError, names="base 16")
    add("wrong: another result", lambda: 41, ref=lambda: 42)
    add("wrong: accepted silently", lambda: 42)
    add("crash: segfault", lambda: ctypes.string_at(0))
    add("clean: after a crash", lambda: Result("the batch went on"))
    add("crash: abort", os.abort)
    add("hang: sleeps past its timeout", lambda: time.sleep(60))
    add("clean: after a hang", lambda: Result("the batch went on"))
    add("wrong: explicit", lambda: (_ for _ in ()).throw(Wrong("garbage")))


def check(records):
    """The self-test probes whose outcome is not the one their name announces."""
    return [r for r in records
            if r["outcome"] != r["name"].split("/", 1)[1].split(":", 1)[0]]
