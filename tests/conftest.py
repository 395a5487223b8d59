"""Test set-up: 8 simulated CPU devices (sharding tests), quiet TF, no network."""

import os
import shutil
import tempfile

# Must happen before jax is imported anywhere: sharded tests need 8 devices on the CPU.
# XLA's CPU backend emits fusions through its newer MLIR emitters by default; the older emitters
# compile the suite's small programs faster (measured: test_gradcache + test_sharding + test_fid,
# cold cache, user CPU 224 -> 172 s; the whole suite on a fresh clone, with the other changes of
# that commit, 34.7 -> 25.7 min). Same HLO, other code: float results differ in the last bits.
# Child processes get the flag through helpers.xla_flags; ``optimized`` tests run without it
# (below), as users compile.
SUITE_EMITTER_FLAG = "--xla_cpu_use_fusion_emitters=false"
os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count=8 {SUITE_EMITTER_FLAG}")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# No results cached across runs in the user's home (studies.harness.cache_root): a test that
# wants the cache points DENSE_CF_CACHE at its own tmp_path.
os.environ.setdefault("DENSE_CF_CACHE", "off")
# The suite compiles thousands of tiny programs and runs each a few times: LLVM's optimisation
# passes are most of its time (measured: 151 s -> 105 s on gradcache + a study over two seeds,
# cold cache). JAX reads this at import, here and in every child process. It sets XLA's
# backend optimisation level to 0 (codegen only; the HLO, hence what is computed, is the same).
# ``JAX_DISABLE_MOST_OPTIMIZATIONS=0 make test`` runs the suite as users compile.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import jax  # noqa: E402

if os.environ.get("DENSE_CF_TEST_AS_USERS_COMPILE"):
    # The child pytest of one ``optimized`` test (pytest_pyfunc_call, below): most are TF-free,
    # so the import (~4 s of CPU) is left to a test that needs it. TF reads its pool sizes from
    # these variables at import: the same one-thread pools as below.
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    tf = None
else:
    try:  # TF is only needed by the data tests; the TF-free core's tests run without it (GPU hosts).
        import tensorflow as tf  # noqa: E402
    except ImportError:
        tf = None

# Identical programs compiled by several tests (e.g. three train() runs of one config) are
# compiled once: XLA's persistent cache, keyed by the HLO fingerprint. One cache per pytest run,
# made by the first process (the xdist controller; workers, child binaries and child pytests
# inherit it) and removed when that process ends: an executable compiled with the suite's
# emitter flag (above) and read back from the cache by a later process can abort when it runs
# (jaxlib 0.10.2, SIGABRT, no XLA message: test_grad_cache_equals_plain_gradients aborted in 13
# of 21 runs over a warm cache, 0 of 10 over a cold one; with the default emitters 0 of 13 warm,
# 5 of them at the users' optimisation level). Within one run each test's
# programs are compiled by one process, as on CI's fresh clone, so a rerun in the same checkout
# runs as CI does.
_OWNS_CACHE = "DENSE_CF_TEST_JAX_CACHE" not in os.environ
if _OWNS_CACHE:
    _root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".jax_cache")
    os.makedirs(_root, exist_ok=True)
    os.environ["DENSE_CF_TEST_JAX_CACHE"] = tempfile.mkdtemp(prefix="run-", dir=_root)
_CACHE = os.environ["DENSE_CF_TEST_JAX_CACHE"]
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
# The same for the binaries tests run as child processes (dense_cf.main, the evaluation CLIs,
# the killed and multi-host trainers): JAX reads these at import. An entry cut short by a
# killed child is a cache miss (JAX warns and recompiles), not an error. Set, not defaulted:
# a JAX_COMPILATION_CACHE_DIR the developer exported would outlive the run (the abort above).
os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")

# tf.data runs beside JAX on the same 2 cores; keep its pools small.
if tf is not None:
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)


# ----------------------------------------------------------------------------- kinds of tests
# Every test gets one marker (pytest.ini): ``unit``, ``integration`` (trains a tiny model, runs
# a study that does, or compiles a full model: the measured list below) or ``e2e`` (runs
# binaries in child processes, kills them). A test that carries one already keeps it; otherwise
# its kind is read from its source, the fixtures it asks for and the functions of its module it
# calls: a child process makes it e2e, a training call integration, anything else unit.
# ``make test-unit`` runs ``-m unit`` (README, "Two commands").
import ast  # noqa: E402
import inspect  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

KINDS = ("unit", "integration", "e2e")
# A child process, but not a grep over the sources.
_E2E = re.compile(r"\bsubprocess\.\w+\((?!\s*\[\s*\"grep\")|\bsys\.executable\b|\bos\.kill\(|\bSIGKILL\b|"
                  r"\bmultiprocessing\b|\bPopen\(")
_INTEGRATION = re.compile(r"(?<![\w.])(train|train_and_evaluate|make_train_step|run_[a-z]\w*|main|"
                          r"study_over_seeds|mine_model)\s*\(|\b(bench|rep|replicate)\.run\w*\(")
# Tests whose cost the patterns miss: they compile a full model (BERT, T5, FiD, the search and
# loss kernels) or run real MiniLM / T5 weights. tests/compile_heavy.txt lists each test function
# (file::name, parameters dropped) measured over 3 s on 2 busy cores, then over 1.5 s in the
# remaining unit run (a --durations log); they run with the integration tests so that
# `make test-unit` stays a fast loop. Remeasure with `pytest -m unit --durations=0` and add
# what grows past 1.5 s.
_HEAVY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compile_heavy.txt")
OVERRIDES: dict[str, str] = {
    ln.strip(): "integration" for ln in open(_HEAVY) if ln.strip() and not ln.startswith("#")}


def _module_functions(module) -> dict[str, str]:
    """{top-level function name: its source} of a test module, parsed once per module (this
    ran per test and cost ~40 s of every worker's collection)."""
    if module.__name__ in _SOURCES:
        return _SOURCES[module.__name__]
    out = _SOURCES[module.__name__] = {}
    try:
        source = inspect.getsource(module)
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return out
    lines = source.splitlines(keepends=True)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = "".join(lines[node.lineno - 1:node.end_lineno])
    return out


_SOURCES: dict[str, dict[str, str]] = {}


def _source(item) -> str:
    """The test's source, its fixtures' and the module functions they reach."""
    module = item.module
    funcs = _module_functions(module)
    name = item.originalname or item.name
    seen, todo, text = set(), [name, *item.fixturenames], []
    while todo:  # the test, its fixtures and the module's functions they reach
        n = todo.pop()
        if n in seen or n not in funcs:
            continue
        seen.add(n)
        text.append(funcs[n])
        todo.extend(re.findall(r"\b(\w+)\b", funcs[n]))
    for fixture in item.fixturenames:  # conftest / helper fixtures outside the module
        defs = item._fixtureinfo.name2fixturedefs.get(fixture) or ()
        for d in defs:
            if fixture not in seen and getattr(d.func, "__module__", "") != module.__name__:
                try:
                    text.append(inspect.getsource(d.func))
                except (OSError, TypeError):
                    pass
    return "\n".join(text)


def _kind(src: str) -> str:
    if _E2E.search(src):
        return "e2e"
    if _INTEGRATION.search(src):
        return "integration"
    return "unit"


# The files that take longest (measured: their summed test durations in a --junitxml run of the
# whole suite, 27 Nov, heaviest first) go to the workers first. Under ``--dist loadfile`` a
# worker takes a whole file, so a two-minute file dealt last keeps one worker busy while the
# other idles; dealt first, the short files even the two out. Order only: every file runs.
# xdist reorders files by their number of tests unless told not to: the Makefile passes
# --no-loadscope-reorder (it put one-test files such as test_gpu_check.py last).
SLOW_FIRST = ("test_replicate.py", "test_faults_training.py", "test_train_loop.py",
              "test_bench_seeds.py", "test_gpu_check.py", "test_gradcache.py",
              "test_fid_method.py", "test_sharding.py", "test_fid.py", "test_multihost.py",
              "test_ablation.py", "test_kill9.py", "test_bench_scale.py", "test_grain.py",
              "test_multihop_reader.py", "test_accelerator.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable: in-file order kept
    for item in items:
        if any(item.get_closest_marker(k) for k in KINDS):
            continue
        key = f"{item.path.name}::{item.originalname or item.name}"
        kind = OVERRIDES.get(key) or (_kind(_source(item)) if isinstance(item, pytest.Function)
                                      else "unit")
        item.add_marker(getattr(pytest.mark, kind))


# Tests that run real MiniLM weights or train for hundreds of steps are compute-bound: they are
# marked ``optimized`` and compile with XLA's optimisations, as users do. At level 0 the FiD
# learning test ran 37 -> 86 s and the MiniLM evidence kill -9 test 18 -> 57 s, and the FiD
# tests fell short of their learning thresholds.
_AS_USERS = "DENSE_CF_TEST_AS_USERS_COMPILE"


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """An ``optimized`` test in a process with the suite's fusion-emitter flag (above) runs in a
    child pytest with the users' XLA flags: its numerics are the users' (the FiD learning test
    reached EM@4 1.0 at 1,500 steps with them, 0.59 with the older emitters; it is at the
    edge of learning). XLA reads its flags once per process, so this needs a process."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    if (pyfuncitem.get_closest_marker("optimized") is None or SUITE_EMITTER_FLAG not in flags
            or os.environ.get(_AS_USERS)):
        return None
    env = dict(os.environ, XLA_FLAGS=" ".join(f for f in flags if f != SUITE_EMITTER_FLAG))
    env[_AS_USERS] = "1"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist",
                        pyfuncitem.nodeid], cwd=str(pyfuncitem.config.rootpath), env=env,
                       capture_output=True, text=True)
    print(r.stdout[-3000:])
    if r.returncode != 0:
        pytest.fail(f"{pyfuncitem.nodeid} with the users' XLA flags (child pytest) failed:\n"
                    f"{r.stdout[-6000:]}\n{r.stderr[-3000:]}", pytrace=False)
    return True


@pytest.fixture(autouse=True)
def _optimized_compile(request, monkeypatch):
    """``@pytest.mark.optimized``: this test and its child processes compile with XLA's
    optimisations (the suite's default is level 0, above)."""
    if request.node.get_closest_marker("optimized") is None:
        yield
        return
    monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "0")
    before = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", False)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", before)


@pytest.fixture
def one_device(monkeypatch):
    """A config's ``mesh.data = -1`` ("every device") takes one device: for the study tests,
    whose subject is a study's runs and reports, not sharding. Eight simulated devices on two
    cores cost them ~30 % (marginalisation over two seeds: 75 s -> 54 s); a sharded run's
    equality to a one-device run has its own tests (test_sharding, test_multihost, ...)."""
    from dense_cf.parallel import mesh as mesh_lib
    make_mesh = mesh_lib.make_mesh

    def one(data=-1, model=1, devices=None):
        if data == -1 and devices is None:
            devices = jax.devices()[:model]
        return make_mesh(data, model, devices)

    monkeypatch.setattr(mesh_lib, "make_mesh", one)  # every caller reads it from mesh_lib


def pytest_unconfigure(config):
    """The run's compilation cache goes with the process that made it (above)."""
    if _OWNS_CACHE:
        shutil.rmtree(_CACHE, ignore_errors=True)
