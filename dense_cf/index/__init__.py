"""Retrieval index (FAISS) over exported passage embeddings; see ``faiss_index``."""

from dense_cf.index.faiss_index import (
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
    is_saved_index,
    list_embedding_shards,
    merge_topk,
)

__all__ = [
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
    "is_saved_index",
    "list_embedding_shards",
    "merge_topk",
]
