"""Retrieval indexes over exported passage embeddings: faiss (``faiss_index``), JAX
(``jax_search``), re-ranking (``rerank``), each an ``Index`` (``base``), built and opened by kind
name through ``kinds`` (``kinds.build``, ``kinds.load``). Imports without faiss (docs/scale.md,
"Without faiss")."""

from dense_cf.index import kinds
from dense_cf.index.base import Index
from dense_cf.index.faiss_index import (
    FAISS_INSTALL,
    GPU_KINDS,
    KINDS,
    MANIFEST_NAME,
    DenseIndex,
    IndexSpec,
    ShardedIndex,
    auto_nlist,
    build_index,
    build_index_from_dir,
    bytes_per_vector,
    default_pq_m,
    faiss_available,
    is_saved_index,
    list_embedding_shards,
    merge_topk,
    require_faiss,
)
from dense_cf.index.rerank import (
    RERANK_NAME,
    RerankIndex,
    build_rerank_index,
    projected_bytes,
    rerank_topk,
    source_fingerprint,
)
from dense_cf.index.shards import ExportShards

__all__ = [
    "Index",
    "kinds",
    "FAISS_INSTALL",
    "GPU_KINDS",
    "KINDS",
    "MANIFEST_NAME",
    "DenseIndex",
    "IndexSpec",
    "ShardedIndex",
    "auto_nlist",
    "build_index",
    "build_index_from_dir",
    "bytes_per_vector",
    "default_pq_m",
    "faiss_available",
    "is_saved_index",
    "list_embedding_shards",
    "merge_topk",
    "require_faiss",
    "RERANK_NAME",
    "RerankIndex",
    "ExportShards",
    "build_rerank_index",
    "projected_bytes",
    "rerank_topk",
    "source_fingerprint",
]
