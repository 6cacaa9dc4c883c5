"""Deprecated path: ``pmapkit.placement`` moved to ``pmapkit.pmap.placement``."""
from pmapkit._moved import alias

alias(__name__)
