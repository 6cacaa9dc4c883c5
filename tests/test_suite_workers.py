"""The suite's own spreading over cores (tests/_suite_workers.py)."""
import os
import subprocess
import sys

import pytest

import _suite_workers

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("args, environ, cores, workers", [
    ([HERE], {}, 2, 2),
    ([HERE], {}, 64, _suite_workers.MOST),
    ([HERE], {}, 1, 0),                                    # one core: one process
    ([], {}, 8, 0),                                        # nothing named that is a folder
    ([os.path.join(HERE, "test_suite_workers.py")], {}, 8, 0),   # one file
    ([os.path.join(HERE, "test_suite_workers.py") + "::t"], {}, 8, 0),
    ([HERE], {"PMAPKIT_TEST_WORKERS": "1"}, 8, 0),
    ([HERE], {"PMAPKIT_TEST_WORKERS": "3"}, 2, 3),
    ([HERE], {"PYTEST_XDIST_WORKER": "gw0"}, 8, 0),         # inside a worker
    ([HERE], {"PYTEST_XDIST_WORKER": "gw1", "PMAPKIT_TEST_WORKERS": "4"}, 8, 0),
])
def test_the_worker_count(args, environ, cores, workers):
    assert _suite_workers.count(args, environ, cores) == workers


def test_a_bad_worker_count_is_named():
    with pytest.raises(ValueError, match=r"PMAPKIT_TEST_WORKERS must be a whole number.*'two'"):
        _suite_workers.count([HERE], {"PMAPKIT_TEST_WORKERS": "two"}, 2)


def test_a_folder_run_is_spread_and_a_worker_does_not_spread_again(tmp_path):
    # A real pytest on a folder of two files, from this suite's conftest: the
    # run reports two workers, and each test sees itself inside a worker.
    pytest.importorskip("xdist")
    folder = tmp_path / "t"
    folder.mkdir()
    for name in ("a", "b"):
        (folder / f"test_{name}.py").write_text(
            "import os\n"
            "def test_in_a_worker():\n"
            "    assert os.environ.get('PYTEST_XDIST_WORKER', '').startswith('gw')\n")
    (folder / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {HERE!r})\n"
        f"exec(open({os.path.join(HERE, 'conftest.py')!r}).read())\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_XDIST_WORKER", "PMAPKIT_TEST_WORKERS")}
    env["PMAPKIT_TEST_WORKERS"] = "2"
    out = subprocess.run([sys.executable, "-P", "-m", "pytest", "-p", "no:cacheprovider",
                          str(folder)], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 workers [2 items]" in out.stdout, out.stdout
    assert "2 passed" in out.stdout
