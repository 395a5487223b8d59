"""Start-up shared by the binaries (``python -m dense_cf.eval.aar``, ``dense_cf.cli.*``...).

Every binary defines its flags on its own ``flags.FlagValues`` (``FLAGS = flags.FlagValues()``,
``flag_values=FLAGS``), not on absl's global one, so several binaries can be imported into one
process (the tests) although they share flag names (``--workdir``, ``--corpus``...). A binary
ends with ``if __name__ == "__main__": _app.run(main, FLAGS, __doc__)`` and offers
``run_cli(argv)`` (= ``main(_app.parse(FLAGS, argv))``) for in-process calls.

:func:`run` is ``absl.app.run`` with two differences: ``--help`` (``-h``, ``-?``,
``--helpshort``) prints the module docstring and the binary's own flags and exits 0 (absl exits
1), and ``--helpfull`` adds absl's global flags (``--verbosity``, ``--logtostderr``...), which
are parsed as usual.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any, Callable, Sequence

from absl import app, flags

from dense_cf.console import quiet_library_logs
from dense_cf.files import UserError

__all__ = ["HELP_ARGS", "HELPFULL_ARGS", "TRACEBACK_ENV", "USER_ERRORS", "Stopped", "flags_help", "usage",
           "parse", "run", "call", "no_positional", "report_user_error", "user_message",
           "resolve_config_arg", "say_written", "REPO_ROOT"]

# Errors that describe the user's situation, not a bug: one line, no traceback (unless
# DENSE_CF_TRACEBACK=1), exit status 1. Everything else keeps its traceback.
# UserError covers our own (DataFormatError: a malformed record; CheckpointError, ModelLayoutError:
# a checkpoint that does not fit). A missing path, a directory where a file belongs and an
# unreadable file are the user's situation too.
class Stopped(Exception):
    """A binary stopped on request after saving what it needs to resume (a SIGTERM to training,
    ``train.preemption.Preempted``): one ``preempted:`` line and ``exit_status`` (75,
    EX_TEMPFAIL), which tells a scheduler to run the same command again."""

    exit_status = 75


USER_ERRORS: tuple[type[BaseException], ...] = (UserError, FileNotFoundError, IsADirectoryError,
                                                NotADirectoryError, PermissionError)
TRACEBACK_ENV = "DENSE_CF_TRACEBACK"

HELP_ARGS = ("-h", "-?", "-help", "--help", "-helpshort", "--helpshort")
HELPFULL_ARGS = ("-helpfull", "--helpfull")


def flags_help(flag_values: flags.FlagValues) -> str:
    """The help lines of ``flag_values``' flags (absl's format, without module headings), sorted
    by flag name: absl orders by defining module and puts ``__main__``'s first, which would make
    ``python -m dense_cf.eval.aar --help`` and its alias ``dense_cf.cli.eval_aar`` differ."""
    text = flag_values.get_help(prefix="", include_special_flags=False)
    blocks: list[list[str]] = []
    for ln in text.splitlines():
        if ln.startswith("  --"):
            blocks.append([ln])
        elif ln.startswith("    ") and blocks:
            blocks[-1].append(ln)
    blocks.sort(key=lambda b: b[0].lstrip(" -").removeprefix("[no]"))
    return "\n".join(ln for b in blocks for ln in b)


def usage(doc: str | None, flag_values: flags.FlagValues, *, full: bool = False) -> str:
    """``doc`` (the binary's docstring), then its flags; with ``full`` absl's global ones too."""
    parts = [(doc or "").strip(), "flags:\n" + flags_help(flag_values)]
    if full:
        parts.append("absl flags:\n" + flags_help(flags.FLAGS))
    return "\n\n".join(p for p in parts if p) + "\n"


def say_written(out_dir: str, what: str = "reports") -> None:
    """Tells the user where a binary wrote (stderr, so stdout stays parseable JSON)."""
    print(f"{what} written to {os.path.abspath(out_dir)}", file=sys.stderr, flush=True)


def parse(flag_values: flags.FlagValues, argv: Sequence[str],
          prog: str = "dense_cf.cli") -> list[str]:
    """Parses ``argv`` (flags and arguments, no program name) into ``flag_values`` afresh.

    Flags left out get their defaults, whatever an earlier call set. Returns ``[prog, *args]``,
    the positional arguments, as ``absl.app.run`` passes them to ``main``. Bad flags raise
    ``flags.Error``.
    """
    flag_values.unparse_flags()
    return flag_values([prog, *argv])


def no_positional(argv: Sequence[str]) -> None:
    """Raises ``app.UsageError`` when ``main`` got arguments besides the program name."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")


def _status(result: Any) -> int | None:
    """``main``'s result as an exit status: an int is one, anything else (a summary) means 0."""
    return result if isinstance(result, int) and not isinstance(result, bool) else None


def user_message(e: BaseException) -> str:
    """The error as one message naming the path and what was expected, for the OS errors about
    a path; the exception's own message otherwise (ours name file, record and field)."""
    name = getattr(e, "filename", None)
    if isinstance(e, OSError) and name is not None:
        what = {FileNotFoundError: "no such file or directory",
                IsADirectoryError: "is a directory, expected a file",
                NotADirectoryError: "a part of the path is not a directory",
                PermissionError: "permission denied"}.get(type(e), e.strerror or str(e))
        if e.errno == errno.EROFS:
            what = "cannot write: read-only file system"
        return f"{name}: {what}"
    return str(e)


def report_user_error(e: BaseException) -> int:
    """Writes ``error: <message>`` (one line) and returns exit status 1; re-raises instead
    when ``DENSE_CF_TRACEBACK=1``."""
    if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
        raise e
    sys.stderr.write(f"error: {user_message(e)}\n(set {TRACEBACK_ENV}=1 for the traceback)\n")
    sys.stderr.flush()
    return 1


def run(main: Callable[[list[str]], Any], flag_values: flags.FlagValues,
        doc: str | None = None) -> None:
    """``absl.app.run(main)`` with ``flag_values`` holding the binary's flags (see above)."""
    args = sys.argv[1:]
    if any(a in HELP_ARGS + HELPFULL_ARGS for a in args):
        sys.stdout.write(usage(doc, flag_values, full=any(a in HELPFULL_ARGS for a in args)))
        sys.exit(0)

    def parser(argv: list[str]) -> list[str]:
        try:
            argv = [argv[0], *resolve_config_arg(argv[1:])]  # --config=configs/x.py from any cwd
            rest = flag_values(argv, known_only=True)   # this binary's flags
            return flags.FLAGS(rest)                    # absl's: --verbosity, --logtostderr...
        except flags.Error as e:
            sys.stderr.write(f"FATAL Flags parsing error: {e}\n"
                             "Pass --help to see the flags of this binary.\n")
            sys.exit(1)
        except USER_ERRORS as e:
            sys.exit(report_user_error(e))

    def body(argv: list[str]) -> int | None:
        quiet_library_logs()  # after flag parsing: --verbosity=1 keeps library INFO lines
        return _guarded(main, argv)

    app.run(body, flags_parser=parser)


def _guarded(main: Callable[[list[str]], Any], argv: list[str]) -> int | None:
    """``main(argv)``'s exit status; usage and user errors as one ``error:`` line and status 1."""
    try:
        return _status(main(argv))
    except app.UsageError as e:
        sys.stderr.write(f"error: {e}\nPass --help to see the flags of this binary.\n")
        return e.exitcode
    except Stopped as e:  # the state is saved: rerun to resume (studies, the demo, evaluations)
        sys.stderr.write(f"preempted: {e}\n")
        return e.exit_status
    except USER_ERRORS as e:
        return report_user_error(e)
    except OSError as e:  # a read-only file system: the user's situation, one line too
        if e.errno != errno.EROFS:
            raise
        return report_user_error(e)


def call(main: Callable[[list[str]], Any], flag_values: flags.FlagValues, argv: Sequence[str],
         prog: str = "dense_cf.cli") -> int:
    """Runs a binary in-process as ``python -m`` would, on ``argv`` (flags and arguments, no
    program name): bad flags, usage and user errors print their one line and give 1, success 0
    (or ``main``'s int); anything else propagates with its traceback."""
    try:
        args = parse(flag_values, argv, prog)
    except flags.Error as e:
        sys.stderr.write(f"FATAL Flags parsing error: {e}\n")
        return 1
    status = _guarded(main, args)
    return 0 if status is None else status


# The repository checkout this package runs from (where configs/ lives in a source install).
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def resolve_config_arg(argv: list[str], cwd: str | None = None) -> list[str]:
    """``argv`` with a relative ``--config`` file resolved: against ``cwd`` first, then the
    repository root (so ``--config=configs/picl_nq.py`` works from any directory of a source
    checkout). Raises :class:`~dense_cf.files.UserError` naming both places when it is in
    neither. A ``:args`` suffix (``configs/demo.py:picl``) is kept."""
    cwd = cwd or os.getcwd()
    out = list(argv)
    for i, arg in enumerate(out):
        if arg.startswith(("--config=", "-config=")):
            flag, spec = arg.split("=", 1)
        elif arg in ("--config", "-config") and i + 1 < len(out):
            flag, spec = None, out[i + 1]
        else:
            continue
        path, colon, rest = spec.partition(":")
        if not path.endswith(".py"):  # not a config file (prepare_tfds' --config=nq is a name)
            return out
        if os.path.isabs(path) or os.path.exists(os.path.join(cwd, path)):
            return out
        candidate = os.path.join(REPO_ROOT, path)
        if not os.path.isfile(candidate):
            raise UserError(f"config file {path} not found in {cwd} nor in the repository "
                            f"({REPO_ROOT}); pass an absolute path or one relative to either")
        resolved = candidate + colon + rest
        if flag is None:
            out[i + 1] = resolved
        else:
            out[i] = f"{flag}={resolved}"
        return out
    return out
