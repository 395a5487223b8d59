"""The XLA flags adopted for a platform that this jaxlib accepts, for a launcher's XLA_FLAGS.

    XLA_FLAGS="$XLA_FLAGS $(python -m dense_cf.cli.xla_flags --platform=gpu)"

Prints the accepted flags on one line (stdout) and, on stderr, each adopted flag this jaxlib
rejects (XLA aborts on an unknown flag, so each is probed in a child process first) and why it
was adopted (``--explain``). Flags already named in ``XLA_FLAGS`` are left to that setting. The
table and its measurements: :data:`dense_cf.parallel.xla_flags.ADOPTED`.
"""

from __future__ import annotations

import sys
from typing import Sequence

from absl import flags

from dense_cf import app as _app
from dense_cf.parallel import xla_flags

FLAGS = flags.FlagValues()

flags.DEFINE_enum("platform", "gpu", ["cpu", "gpu", "tpu"], "the platform the job runs on",
                  flag_values=FLAGS)
flags.DEFINE_bool("explain", False, "also print each adopted flag's measurement (stderr)",
                  flag_values=FLAGS)


def main(argv: Sequence[str]) -> str:
    """Prints (and returns) the accepted adopted flags, space-separated."""
    _app.no_positional(argv)
    ok, bad = xla_flags.adopted(FLAGS.platform)
    why = dict(xla_flags.ADOPTED.get(FLAGS.platform, ()))
    for flag, reason in bad:
        sys.stderr.write(f"dense_cf.cli.xla_flags: not set, this jaxlib rejects {flag}: {reason}\n")
    if FLAGS.explain:
        for flag in ok:
            sys.stderr.write(f"dense_cf.cli.xla_flags: {flag}: {why[flag]}\n")
    line = " ".join(ok)
    print(line)
    return line


def run_cli(argv: Sequence[str]) -> str:
    """``main`` in-process on ``argv`` (flags, no program name)."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
