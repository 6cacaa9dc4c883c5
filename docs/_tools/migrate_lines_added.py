"""Lines `pmapkit migrate` adds per program of the migrate corpus (issue 57's
table in docs/migrate.md): ``migrate_source`` of the pmapkit in CHECKOUT (pure
Python) over each original ``tests/migrate_corpus/run.py`` rebuilds from the
mirrors (rows marked out skipped), the migrated lines less the original's.

    MIGRATE_CORPUS_CACHE=DIR python -P docs/_tools/migrate_lines_added.py CHECKOUT

Prints each row, then the median and worst over every row rebuilt and over
the 30 programs of the table's first rounds."""
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "..", "..", "tests", "migrate_corpus")
# the 30 programs the issue-57 table counted before the corpus grew
FIRST_30 = """aisummer_fundamentals alpa_matmul_pmap alpa_pjit_basic1d alpa_pjit_mlp
alpa_pjit_playground alpa_pmap_playground alpa_pmap_tuple_args bart_base_pjit flax_on_pjit
flax_on_pjit_2022 flax_rng_guide hpcpy_parallel_intro jax101_pjit jax101_pjit_2022 jax_demo
jax_lecture04_pmap jax_shard_map_notebook jax_tutorial_e5_pmap learning_jax_pmap
levanter_debug_pjit lorentz_ode_solver oodgen_pmap_psum pjit_examples_prefix
pjit_examples_tuple pmap_cookbook seistorch_multigpu symphony_pmap_normalize tpu_starter_pmap
zero_pod_test_2022 zero_pod_test_2023""".split()

_COUNT = r'''
import json, os, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
import run
from pmapkit.tools.migrate import migrate_source
out = {}
for row in run.programs():
    if row.get("out"):
        continue
    try:
        folder, _ = run.rebuild(row)
    except Exception as exc:        # a notebook that does not rebuild as a script
        print("not rebuilt", row["name"], exc, file=sys.stderr)
        continue
    path = os.path.join(folder, "original.py")
    text = open(path).read()
    new, report = migrate_source(text, path)
    out[row["name"]] = [len(text.splitlines()), len(new.splitlines()), report.helpers]
print(json.dumps(out))
'''


def main(checkout):
    env = dict(os.environ, PMAPKIT_PUREPYTHON="1", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-P", "-c", _COUNT, os.path.abspath(checkout),
                           os.path.abspath(RUNNER)], capture_output=True, text=True, env=env)
    if proc.returncode:
        sys.exit(proc.stderr[-3000:])
    sys.stderr.write("".join(line + "\n" for line in proc.stderr.splitlines()
                             if line.startswith("not rebuilt")))
    rows = json.loads(proc.stdout.splitlines()[-1])
    for name, (old, new, helpers) in sorted(rows.items(), key=lambda kv: kv[1][1] - kv[1][0]):
        print(f"{name:<32} {old:>5} -> {new:>5}  added {new - old:>4}  {','.join(helpers)}")
    every = [new - old for old, new, _ in rows.values()]
    first = [rows[n][1] - rows[n][0] for n in FIRST_30 if n in rows]
    print(f"{len(every)} programs: median {statistics.median(every)} worst {max(every)}")
    print(f"the first {len(first)}: median {statistics.median(first)} worst {max(first)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", ".."))
