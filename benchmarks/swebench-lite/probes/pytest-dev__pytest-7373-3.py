"""Evaluating a skipif string must not depend on the printable form of every module global."""

import os
import subprocess
import sys
import tempfile

# A source checkout lacks the version module its build step writes; the probe needs only an importable tree.
version_module = os.path.join("src", "_pytest", "_version.py")
if not os.path.exists(version_module):
    with open(version_module, "w") as f:
        f.write('version = "0.0.0"\n')

with tempfile.TemporaryDirectory() as folder:
    with open(os.path.join(folder, "test_unprintable_global.py"), "w") as f:
        f.write(
            "import pytest\n\n"
            "class Unprintable:\n"
            "    def __repr__(self):\n"
            '        raise RuntimeError("no repr")\n\n'
            "handle = Unprintable()\n"
            "skip = False\n\n"
            '@pytest.mark.skipif("skip")\n'
            "def test_runs():\n"
            "    pass\n"
        )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--assert=plain", folder],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
print(run.stdout[-1500:])
assert run.returncode == 0 and "1 passed" in run.stdout, "the test did not simply run and pass"
