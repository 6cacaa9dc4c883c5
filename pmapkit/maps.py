"""Deprecated path: ``pmapkit.maps`` moved to ``pmapkit.pjit.maps``."""
from pmapkit._moved import alias

alias(__name__)
