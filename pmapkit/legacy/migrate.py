"""Deprecated path: ``pmapkit.legacy.migrate`` moved to ``pmapkit.tools.migrate``."""
from pmapkit._moved import alias

alias(__name__)
