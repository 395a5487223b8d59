"""Alias of :mod:`dense_cf.app` (the binaries' start-up) for ``dense_cf.main``, which imports it
by this name; everything else imports ``dense_cf.app``."""

from dense_cf.app import *  # noqa: F401,F403
