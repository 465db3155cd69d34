"""A hostile user's long messages through the one redaction every youmu error takes
when printed: a message of megabytes (a state's worth of worker ids, a long listing)
redacts in linear time, and every secret in it is still blanked. The work per byte is
counted by the Rust unit test ``redaction_looks_at_each_byte_a_bounded_number_of_times``
(``rust/redact.rs``); here a 4 MB message of the worst shape — word boundaries with no
``=`` after them, which made the old scan quadratic (minutes for 4 MB) — must come back
at all, in a child process so a quadratic scan fails this test instead of hanging the
suite."""

from __future__ import annotations

import os
import subprocess
import sys

from youmu._internal.redaction import redact
from youmu.errors import StateError


def test_a_4mb_message_of_the_worst_shape_redacts_without_hanging() -> None:
    script = ("from youmu._internal.redaction import redact\n"
              "units = ['a ', 'x:', 'w&', '(é ', \"'token \"]\n"
              "for u in units:\n"
              "    text = u * (4_000_000 // len(u))\n"
              "    assert redact(text) == text, u\n"
              "print('ok')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, env=env, timeout=120)
    assert proc.stdout.decode().strip() == "ok", proc.stderr.decode()[-2000:]


def test_secrets_in_a_long_message_are_still_blanked() -> None:
    filler = "worker 1, worker 2; " * 50_000
    text = f"{filler} GET https://admin:hunter2@host/a.parquet?sig=abc {filler} token=deadbeefcafe {filler}"
    out = redact(text)
    assert "hunter2" not in out and "sig=abc" not in out and "deadbeefcafe" not in out
    assert "https://***@host/a.parquet?sig=***" in out and "token=***" in out
    assert len(out) < len(text)
    # an error carrying it prints redacted
    assert "hunter2" not in str(StateError(text))
