"""Fusion-in-Decoder base on NQ (docs/readers.md, "Fusion-in-Decoder"): T5-base, 100 passages
of 250 pieces, batch 64, constant learning rate 1e-4, 10k steps (Izacard & Grave 2021, §4).

Its training data is a retriever's results on the NQ train and dev questions, the files the
extractive reader reads; the T5 checkpoint is a local HF directory (safetensors, config.json,
tokenizer.json):

    python -m dense_cf.cli.reader_data --retriever runs/dpr_nq --split train
    python -m dense_cf.cli.reader_data --retriever runs/dpr_nq --split dev
    python -m dense_cf.main --config=configs/fid_nq.py --workdir=runs/fid_nq \\
        --config.model.name_or_path=/models/t5-base \\
        --config.reader.train_file=runs/dpr_nq/reader_data/step_N/train/retrieval.json \\
        --config.reader.dev_file=runs/dpr_nq/reader_data/step_N/dev/retrieval.json

(``--config.fid.n_passages=N`` reads fewer passages.) Then ``python -m dense_cf.eval.e2e
--retriever runs/dpr_nq --retriever runs/picl_nq --reader runs/fid_nq --k 1,5,20,100``.
"""

from dense_cf.configs.presets import fid_config


def get_config():
    return fid_config("nq")
