"""setup.py's install sets: one coherent set per machine (cpu | gpu | tpu), one FAISS build each.

Offline tests read setup.py's constants with ``ast`` (no setuptools run). The PyPI tests resolve
each set with ``pip install --dry-run`` (``--no-deps``: each requirement of the set, then a
metadata check of what those distributions require); they skip, with the reason, when PyPI is
unreachable. ``DENSE_CF_FULL_RESOLVE=1`` also runs pip's full dependency resolution of each set
(about 15-60 s each on 2 cores).
"""

import ast
import json
import os
import re
import socket
import subprocess
import sys

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Distributions that install the `faiss` module: two in one environment overwrite each other.
FAISS_DISTS = {"faiss-cpu", "faiss-gpu", "faiss-gpu-cu11", "faiss-gpu-cu12", "faiss-gpu-cu13"}
# The documented install commands (README "Install"): extras per machine.
INSTALL_SETS = {"cpu": ("cpu", "test"), "gpu": ("gpu",), "tpu": ("tpu",)}


def setup_constants() -> dict:
    """INSTALL_REQUIRES, EXTRAS_REQUIRE (and the names they use) from setup.py, by executing
    only its top-level constant assignments."""
    tree = ast.parse(open(os.path.join(ROOT, "setup.py"), encoding="utf-8").read())
    body = [n for n in tree.body if isinstance(n, ast.Assign)
            and all(isinstance(t, ast.Name) and t.id.isupper() for t in n.targets)]
    ns: dict = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), "setup.py", "exec"), {}, ns)  # noqa: S102
    return ns


def requirements(extras: tuple[str, ...]) -> list[Requirement]:
    c = setup_constants()
    reqs = list(c["INSTALL_REQUIRES"])
    for e in extras:
        reqs += c["EXTRAS_REQUIRE"][e]
    return [Requirement(r) for r in reqs]


def faiss_providers(names) -> set[str]:
    """The distributions among ``names`` that would provide the `faiss` module."""
    return {canonicalize_name(n) for n in names} & FAISS_DISTS


def test_faiss_providers_catches_two_builds():
    assert faiss_providers(["faiss-cpu", "numpy"]) == {"faiss-cpu"}
    assert len(faiss_providers(["faiss_cpu", "Faiss-GPU-cu12"])) == 2


@pytest.mark.parametrize("machine", sorted(INSTALL_SETS))
def test_each_install_set_has_exactly_one_faiss(machine):
    names = [r.name for r in requirements(INSTALL_SETS[machine])]
    assert len(faiss_providers(names)) == 1, (machine, faiss_providers(names))


def test_core_requirements_have_no_faiss_and_admit_jax_0_10_to_0_12():
    reqs = requirements(())
    assert not faiss_providers(r.name for r in reqs)
    by_name = {canonicalize_name(r.name): r for r in reqs}
    for name in ("jax", "jaxlib"):
        spec = by_name[name].specifier
        assert all(spec.contains(v) for v in ("0.10.2", "0.11.2", "0.12.0")), (name, spec)
        assert not spec.contains("0.13.0"), (name, spec)


def test_accelerator_extras_pick_one_jax_build():
    extras = setup_constants()["EXTRAS_REQUIRE"]
    gpu = [Requirement(r) for r in extras["gpu"]]
    tpu = [Requirement(r) for r in extras["tpu"]]
    assert [r.extras for r in gpu if r.name == "jax"] == [{"cuda12"}]
    assert [r.extras for r in tpu if r.name == "jax"] == [{"tpu"}]
    # CUDA 12 jax plugin and CUDA 12 FAISS: one CUDA runtime in the environment.
    assert {r.name for r in gpu} == {"jax", "faiss-gpu-cu12"}


def test_makefile_installs_the_cpu_extra():
    makefile = open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read()
    assert re.search(r'pip install [^\n]*-e "\.\[cpu,test\]"', makefile), "Makefile install line"


def _pypi_reachable() -> str | None:
    """None when pypi.org answers, else the reason to skip."""
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return None
    except OSError as e:
        return f"PyPI unreachable ({e})"


def _dry_run(args: list[str], timeout: float) -> dict:
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
           "--quiet", "--disable-pip-version-check", "--report", "-", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert p.returncode == 0, f"pip could not resolve {args}:\n{p.stderr[-3000:]}"
    return json.loads(p.stdout)


def _requires(item: dict) -> list[str]:
    """Names a resolved distribution requires, markers evaluated with its requested extras."""
    out = []
    extras = item.get("requested_extras") or [""]
    for r in item["metadata"].get("requires_dist") or []:
        req = Requirement(r)
        if req.marker is None or any(Marker(str(req.marker)).evaluate({"extra": e})
                                     for e in extras):
            out.append(req.name)
    return out


@pytest.mark.parametrize("machine", sorted(INSTALL_SETS))
def test_install_set_resolves_on_pypi_with_one_faiss(machine):
    reason = _pypi_reachable()
    if reason:
        pytest.skip(reason)
    reqs = [str(r) for r in requirements(INSTALL_SETS[machine])]
    report = _dry_run(["--no-deps", *reqs], timeout=240)
    items = report["install"]
    resolved = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in items}
    for r in requirements(INSTALL_SETS[machine]):
        assert canonicalize_name(r.name) in resolved, r
        assert SpecifierSet(str(r.specifier)).contains(resolved[canonicalize_name(r.name)]), r
    # What the resolved distributions pull in themselves must not add a second FAISS build.
    providers = faiss_providers(set(resolved) | {n for i in items for n in _requires(i)})
    assert len(providers) == 1, providers


@pytest.mark.skipif(os.environ.get("DENSE_CF_FULL_RESOLVE") != "1",
                    reason="full resolution is slow; set DENSE_CF_FULL_RESOLVE=1")
@pytest.mark.parametrize("machine", sorted(INSTALL_SETS))
def test_install_set_full_resolution(machine):
    reason = _pypi_reachable()
    if reason:
        pytest.skip(reason)
    report = _dry_run([f".[{','.join(INSTALL_SETS[machine])}]"], timeout=600)
    names = {canonicalize_name(i["metadata"]["name"]) for i in report["install"]}
    assert len(faiss_providers(names)) == 1, faiss_providers(names)
    assert "jax" in names and "jaxlib" in names
