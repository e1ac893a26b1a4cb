"""A skipif condition naming an undefined variable: the error reported is the NameError itself."""

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
    with open(os.path.join(folder, "test_broken_condition.py"), "w") as f:
        f.write(
            'import pytest\n\n@pytest.mark.skipif("flag_that_was_never_defined")\ndef test_it():\n    pass\n'
        )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--assert=plain", folder],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
print(run.stdout[-1500:])
assert "Error evaluating 'skipif' expression" in run.stdout, "no evaluation error reported"
assert "NameError" in run.stdout, "the evaluation error is not the NameError"
