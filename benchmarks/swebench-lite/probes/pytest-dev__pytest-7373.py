import os
import subprocess
import sys
import tempfile

# A skipif condition that raises is reported with its own error, as before the fix.
src = os.path.abspath("src")
test = 'import pytest\n\n\n@pytest.mark.skipif("not_defined_anywhere")\ndef test_it():\n    pass\n'
with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "test_bad_condition.py"), "w") as handle:
        handle.write(test)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_bad_condition.py"],
        cwd=tmp,
        env={**os.environ, "PYTHONPATH": src},
        capture_output=True,
        text=True,
    )
output = done.stdout + done.stderr
assert "NameError" in output and "not_defined_anywhere" in output, output
assert "not callable" not in output, output
