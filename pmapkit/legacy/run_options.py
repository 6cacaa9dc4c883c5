"""The options of a ``pmapkit run`` as the environment gives them (standard
library only: read at interpreter start in every process of a run)."""
import os

__all__ = ["REPORT_FORMS", "report_form_from_environment"]

#: The named report forms besides the default table and a path.
REPORT_FORMS = ("wide", "json")


def report_form_from_environment():
    """The report ``PMAPKIT_REPORT`` asks for: False, True (the table),
    "wide", "json" or a path ending in .json."""
    value = os.environ.get("PMAPKIT_REPORT", "").strip()
    if value.lower() in ("", "0", "false", "no"):
        return False
    if value.lower() in REPORT_FORMS:
        return value.lower()
    if value.endswith(".json"):
        return value
    return True
