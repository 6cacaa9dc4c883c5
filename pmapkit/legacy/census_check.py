"""``python -m pmapkit.legacy.census_check [--json] [--no-install]``: the
census (``pmapkit.legacy.census``) held against this JAX, after
``pmapkit.legacy.install()`` (``--no-install``: before). Prints the counts
per release: native, served by pmapkit, clear error, plain error
(``--json``: the counts and every pair not native, with its outcome and
error text).
"""
from __future__ import annotations

import json
import sys

from pmapkit.legacy.census import OUTCOMES, RELEASES, classify, counts, union

__all__ = ["main"]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    unknown = [a for a in argv if a not in ("--json", "--no-install")]
    if unknown:
        print(f"census: unknown option {unknown[0]!r} (use --json, --no-install)",
              file=sys.stderr)
        return 2
    install = None
    if "--no-install" not in argv:
        import pmapkit.legacy
        install = pmapkit.legacy.install
    outcomes = classify(union(), install=install)
    per_release = {r: counts(outcomes, r) for r in RELEASES}
    if "--json" in argv:
        json.dump({"releases": per_release,
                   "names": {".".join(p): list(v) for p, v in outcomes.items()
                             if v[0] != "native"}}, sys.stdout)
        print()
        return 0
    import jax
    print(f"census against jax {jax.__version__}"
          f"{'' if '--no-install' in argv else ' + pmapkit.legacy.install()'}")
    print(f"{'release':<10}{'pairs':>7}" + "".join(f"{o:>9}" for o in OUTCOMES))
    for release, tally in per_release.items():
        print(f"{release:<10}{sum(tally.values()):>7}"
              + "".join(f"{tally[o]:>9}" for o in OUTCOMES))
    tally = dict.fromkeys(OUTCOMES, 0)
    for outcome, _ in outcomes.values():
        tally[outcome] += 1
    print(f"{'union':<10}{len(outcomes):>7}" + "".join(f"{tally[o]:>9}" for o in OUTCOMES))
    return 0




if __name__ == "__main__":
    sys.exit(main())
